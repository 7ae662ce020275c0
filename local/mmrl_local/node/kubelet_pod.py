"""One pod run for real by the local kubelet (``kubelet``): its sandbox, containers, probes and status.

The lifecycle is the kubelet's. The pod gets its network namespace (``podnet``) with the IP the kubelet gave it;
init containers run one after the other to completion; then every container starts with its own ``command`` and
``args`` exactly as the pod spec has them, through ``mountns``: the pod's volumes at their mount paths (an emptyDir
on disk is the pod's, shared by its containers and kept across their restarts; a memory-backed one is each
container's own tmpfs), a private
``/tmp``, the pod's ``/etc/hosts`` (``etchosts``), a UTS namespace whose hostname is the pod's name and a PID
namespace of its own, so a container that exits takes every process it started with it. "The image" is this
machine: ``image_env(image)`` gives the environment an image would set. Readiness probes decide Ready; a container
that exits is restarted as ``restartPolicy`` says (with a short back-off), and a pod whose containers have all
finished for good ends Succeeded or Failed with their exit codes. On deletion the containers get SIGTERM, then
SIGKILL once the grace period is over, the sandbox goes, and the kubelet removes the pod object (grace 0), as a
kubelet finishes a graceful delete. Liveness probes are not acted on.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client
from kubernetes.client.rest import ApiException

from mmrl_local.common import procs
from mmrl_local.common.clock import now_iso
from mmrl_local.network import etchosts, podnet
from mmrl_local.node import image_run, images, oci_spec, podrun
from mmrl_local.node.images import POD_HOME
from mmrl_local.node.mountns import Mount
from mmrl_local.node.probes import ProbeState

log = logging.getLogger("mmrl_local.node.kubelet")
BACKOFF_MAX = 10.0
CHECKOUT = Path(__file__).resolve().parents[3]


def finish_delete(core: client.CoreV1Api, namespace: str, name: str, uid: str) -> None:
    """The kubelet's last word on a graceful delete: remove the pod object (grace 0), only if it is still this pod.
    Both go in the body: with a body, the apiserver reads the delete options from it and ignores the query's
    gracePeriodSeconds, so the pod would stay Terminating."""
    try:
        options = client.V1DeleteOptions(grace_period_seconds=0, preconditions=client.V1Preconditions(uid=uid))
        core.delete_namespaced_pod(name, namespace, body=options)
    except ApiException as err:
        if err.status not in (404, 409):  # gone already, or a new pod under the name: nothing of ours to remove
            log.warning("pod %s/%s: cannot remove the pod object: %s %s", namespace, name, err.status, err.reason)


# What a kubelet keeps of a failed container's log as its termination message (FallbackToLogsOnError): the last
# 80 lines or 2,048 bytes, whichever is less.
TERMINATION_LOG_LINES, TERMINATION_LOG_BYTES = 80, 2048


def log_tail(path: Path) -> str:
    try:
        data = path.read_bytes()[-TERMINATION_LOG_BYTES:]
    except OSError:
        return ""
    return "\n".join(data.decode(errors="replace").splitlines()[-TERMINATION_LOG_LINES:])


@dataclass
class Container:
    spec: dict[str, Any]
    view: podrun.PodView | None = None
    proc: subprocess.Popen | None = None
    restarts: int = 0
    started_at: str = ""
    terminated: dict[str, Any] | None = None  # the last termination (exitCode, reason, times)
    done: bool = False  # finished for good (restartPolicy says no restart)
    next_start: float = 0.0
    readiness: ProbeState | None = None
    ports: dict[str, int] = field(default_factory=dict)
    oci: image_run.ImageContainer | None = None  # when it runs from an image `make images` built
    waiting: tuple[str, str] | None = None  # (reason, message) while it cannot be created

    @property
    def name(self) -> str:
        return self.spec["name"]

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pid_one(self) -> int | None:
        """The container's PID 1 as this machine sees it: the launcher's only child."""
        if not self.running():
            return None
        assert self.proc is not None
        if self.oci is not None:
            return self.oci.pid()
        with contextlib.suppress(OSError):
            children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children").read_text().split()
            return int(children[0]) if children else None
        return None

    def ready(self) -> bool:
        if not self.running():
            return False
        return self.readiness is None or self.readiness.verdict is True

    def status(self) -> dict[str, Any]:
        state: dict[str, Any]
        if self.running():
            state = {"running": {"startedAt": self.started_at}}
        elif self.waiting is not None:
            state = {"waiting": {"reason": self.waiting[0], "message": self.waiting[1]}}
        elif self.terminated is not None and (self.done or self.next_start == 0.0):
            state = {"terminated": self.terminated}
        elif self.terminated is not None:
            state = {"waiting": {"reason": "CrashLoopBackOff"}}
        else:
            state = {"waiting": {"reason": "ContainerCreating"}}
        out = {
            "name": self.name,
            "image": self.spec.get("image", ""),
            "imageID": "",
            "ready": self.ready(),
            "started": self.running(),
            "restartCount": self.restarts,
            "state": state,
        }
        if self.terminated is not None and self.running():
            out["lastState"] = {"terminated": self.terminated}
        return out


def image_paths(env: dict[str, str]) -> list[Path]:
    """Where "the image" lives on this machine: the Python environment, this checkout, the PYTHONPATH entries the
    image's environment names, and each virtualenv its PATH puts a bin directory of (MLflow's and vLLM's images are
    venvs of their own, under $MMRL_CACHE, which may lie under /tmp)."""
    venvs = [Path(p).parent for p in env.get("PATH", "").split(os.pathsep) if p and Path(p).name == "bin"]
    paths = [Path(sys.prefix), CHECKOUT, *(Path(p) for p in env.get("PYTHONPATH", "").split(os.pathsep) if p)]
    paths += [v for v in venvs if (v / "pyvenv.cfg").is_file()]
    return [p.resolve() for p in dict.fromkeys(paths) if p.is_absolute() and p.exists()]


class PodWorker:
    """Runs one pod until it is deleted, its node goes, or ``stop()``. A thread per pod."""

    def __init__(
        self,
        api: client.ApiClient,
        pod: dict[str, Any],
        network: podnet.PodNetwork,
        workdir: Path,
        image_env: Callable[[str], dict[str, str]],
        node_ip: str,
    ) -> None:
        self.api, self.core = api, client.CoreV1Api(api)
        self.pod, self.network, self.workdir, self.image_env, self.node_ip = pod, network, workdir, image_env, node_ip
        meta = pod["metadata"]
        self.ns, self.name, self.uid = meta["namespace"], meta["name"], meta["uid"]
        self.ip = pod["status"]["podIP"]
        self.sandbox: podnet.Sandbox | None = None
        self.init = [Container(c) for c in pod["spec"].get("initContainers") or []]
        self.containers = [Container(c) for c in pod["spec"]["containers"]]
        self.policy = pod["spec"].get("restartPolicy") or "Always"
        self.hosts = workdir / "etc-hosts"
        self.pod_volumes = workdir / "volumes"  # the pod's emptyDirs: its containers share them
        self._hosts_text: str | None = None  # what the hosts file holds
        self.started_at = now_iso()
        self.phase, self.message = "Pending", ""
        self.initialized = False
        self._stop = threading.Event()
        self._deleting: float | None = None  # monotonic deadline of a graceful delete
        self._thread = threading.Thread(target=self._run, name=f"kubelet-{self.ns}/{self.name}", daemon=True)
        self._last_status: dict[str, Any] = {}
        self._gated: bool | None = None  # the readiness gates' verdict the last status was written with

    # -- control from the kubelet loop ------------------------------------------------------------------------

    def start(self) -> PodWorker:
        self._thread.start()
        return self

    def update(self, pod: dict[str, Any]) -> None:
        """The pod as the API has it now: a deletionTimestamp starts the graceful stop."""
        self.pod = pod
        meta = pod["metadata"]
        if meta.get("deletionTimestamp") and self._deleting is None:
            grace = meta.get("deletionGracePeriodSeconds")
            self._deleting = time.monotonic() + float(30 if grace is None else grace)

    def refresh_hosts(self, services: list[dict[str, Any]], slices: list[dict[str, Any]]) -> None:
        text = etchosts.render(self.pod, services, slices)
        if text == self._hosts_text:
            return
        if self._hosts_text is None:
            self.hosts.parent.mkdir(parents=True, exist_ok=True)
            self.hosts.write_text(text)
        else:
            with open(self.hosts, "r+") as f:  # in place: the pods' bind mounts keep this inode
                f.write(text)
                f.truncate()
        self._hosts_text = text

    def stop(self, *, wait: bool = True) -> None:
        """Kill the pod's processes at once (its node is gone, or the kubelet stops)."""
        self._stop.set()
        if wait and self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout=30)

    def alive(self) -> bool:
        return self._thread.is_alive()

    # -- the pod's life -------------------------------------------------------------------------------------

    def _run(self) -> None:
        try:
            self._write_status()
            self.sandbox = self._sandbox()
            if self.sandbox is not None and self._run_init_containers():
                self.initialized = True
                self._supervise()
        except Exception as err:  # the pod fails; the kubelet goes on with the others
            log.exception("pod %s/%s failed", self.ns, self.name)
            self.phase, self.message = "Failed", f"mmrl-local kubelet: {err}"
            with contextlib.suppress(Exception):
                self._write_status()
        finally:
            try:
                self._teardown()
            except Exception:  # logged, not lost with the thread; the pod network removes what is left by name
                log.exception("pod %s/%s: teardown failed", self.ns, self.name)

    def _sandbox(self) -> podnet.Sandbox | None:
        """The pod's network namespace; while a gone pod's namespace with the same IP is still being removed, wait
        for it (as a CNI plugin would not hand out an address still in use)."""
        deadline = time.monotonic() + 60
        while True:
            try:
                return self.network.sandbox(self.pod)
            except podnet.PodNetError:
                if time.monotonic() > deadline or self._stopping():
                    raise
            time.sleep(0.5)

    def _spawn(self, c: Container, kind: str) -> bool:
        """Start the container; False when it cannot be created (its status says why; tried again later)."""
        try:
            built = images.built_image(c.spec["image"])
            if built is not None:
                self._spawn_from_image(c, kind, built)
            else:
                self._spawn_here(c, kind)
        except images.ImageNotPresent as err:
            return self._cannot_create(c, "ErrImageNeverPull", str(err))
        except oci_spec.CreateContainerConfigError as err:
            return self._cannot_create(c, "CreateContainerConfigError", str(err))
        c.waiting = None
        c.ports = {p["name"]: int(p["containerPort"]) for p in c.spec.get("ports") or [] if p.get("name")}
        c.started_at = now_iso()
        probe = c.spec.get("readinessProbe")
        c.readiness = ProbeState(probe) if probe and kind == "containers" else None
        return True

    def _cannot_create(self, c: Container, reason: str, message: str) -> bool:
        if c.waiting != (reason, message):
            log.warning("pod %s/%s: container %s: %s: %s", self.ns, self.name, c.name, reason, message)
        c.waiting = (reason, message)
        c.next_start = time.monotonic() + BACKOFF_MAX
        return False

    def _spawn_from_image(self, c: Container, kind: str, image: str) -> None:
        """Run the container from its image's root filesystem through runc: the image's config under the pod's
        command, args, env, workingDir and securityContext (``oci_spec``), in the pod's network namespace."""
        assert self.sandbox is not None
        if c.oci is None or c.oci.image != image:
            bundle = self.workdir / kind / c.name / "bundle"
            c.oci = image_run.ImageContainer(images.storage(), image, bundle, f"mmrl-{self.uid[:8]}-{c.name}")
        oci = c.oci
        materialiser = podrun.PodMaterialiser(self.api, self.workdir / kind / c.name, oci.env, self.pod_volumes)
        view = materialiser.view(self.pod, c.name)
        security = oci_spec.merged_security(self.pod["spec"], c.spec)
        argv = oci_spec.process_args(oci.config, c.spec.get("command"), c.spec.get("args"))
        root = oci.prepare()
        spec = oci_spec.runtime_spec(
            root=root,
            argv=argv,
            env={**view.env, **self.sandbox.service_env},
            cwd=c.spec.get("workingDir") or oci.config.get("WorkingDir") or "/",
            who=oci.identity(root, security),
            security=security,
            mounts=[*view.mounts, Mount("/etc/hosts", str(self.hosts), read_only=True)],
            hostname=self.name,
            netns=self.sandbox.netns_path,
        )
        c.view = view
        c.proc = oci.spawn(spec, self.workdir / "logs" / f"{c.name}.log")

    def _spawn_here(self, c: Container, kind: str) -> None:
        """Run the container on this machine's files, with the environment its image stands for (``image_env``)."""
        materialiser = podrun.PodMaterialiser(
            self.api, self.workdir / kind / c.name, self.image_env(c.spec["image"]), self.pod_volumes
        )
        view = materialiser.view(self.pod, c.name)
        # What a container's own filesystem gives it and this machine's does not: a private /tmp (Ray keeps
        # /tmp/ray/ray_current_cluster there) and a private, empty home (Ray reads ~/.ray/auth_token).
        home = view.env.setdefault("HOME", POD_HOME)
        own = [Mount("/etc/hosts", str(self.hosts))]
        image = image_paths(view.env)
        shadows_image = any(path.is_relative_to(home) for path in image)  # a home that holds the image stays
        privates = ("/tmp",) if shadows_image else ("/tmp", home)
        for target in privates:
            private = self.workdir / "private" / c.name / target.strip("/").replace("/", "_")
            private.mkdir(parents=True, exist_ok=True)
            os.chmod(private, 0o1777)
            own.append(Mount(target, str(private)))
        # The image's own files stay visible through a private /tmp (a checkout cloned under /tmp, as CI's is).
        own += [Mount(str(path), str(path), read_only=True) for path in image if path.is_relative_to("/tmp")]
        taken = {m.target for m in view.mounts}
        view.mounts += [m for m in own if m.target not in taken]
        c.view = view
        log_file = self.workdir / "logs" / f"{c.name}.log"
        root = self.workdir / "roots" / c.name
        c.proc = podrun.spawn_in_pod(
            view, view.command, log_file, root, self.sandbox, hostname=self.name, own_pids=True
        )

    def _reap(self, c: Container) -> bool:
        """Record an exited container; True when it exited."""
        if c.proc is None or c.proc.poll() is None:
            return False
        code = c.proc.returncode
        procs.stop(c.proc, timeout=1.0)
        if c.oci is not None:
            c.oci.stop_runtime()
        c.proc = None
        c.terminated = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": c.started_at,
            "finishedAt": now_iso(),
        }
        if code != 0 and c.spec.get("terminationMessagePolicy") == "FallbackToLogsOnError":
            c.terminated["message"] = log_tail(self.workdir / "logs" / f"{c.name}.log")
        restart = self.policy == "Always" or (self.policy == "OnFailure" and code != 0)
        if restart:
            c.restarts += 1
            c.next_start = time.monotonic() + min(BACKOFF_MAX, float(2 ** min(c.restarts, 4)) / 2)
        else:
            c.done = True
        log.info("pod %s/%s: container %s exited %s", self.ns, self.name, c.name, code)
        return True

    def _run_init_containers(self) -> bool:
        for c in self.init:
            while not self._stopping():
                if c.proc is None and time.monotonic() >= c.next_start:
                    self._spawn(c, "init")
                    self._write_status()
                if self._reap(c):
                    self._write_status()
                    if c.terminated and c.terminated["exitCode"] == 0:
                        c.done = True
                        break
                    if self.policy == "Never":
                        self.phase, self.message = "Failed", f"init container {c.name} failed"
                        self._write_status()
                        return False
                time.sleep(0.2)
            if self._stopping():
                return False
        return True

    def _supervise(self) -> None:
        while not self._stopping():
            now = time.monotonic()
            changed = False
            for c in self.containers:
                if c.proc is None and not c.done and now >= c.next_start:
                    if self._spawn(c, "containers"):
                        c.next_start = 0.0
                        self.phase = "Running"  # a pod runs once a container has started (Pending before)
                    changed = True
                changed |= self._reap(c)
                if c.readiness is not None and c.running() and c.readiness.due(now):
                    assert c.view is not None
                    before = c.readiness.verdict
                    ok = c.readiness.check(self.ip, c.pid_one(), c.view.env, c.ports)
                    changed |= c.readiness.record(ok, time.monotonic()) != before
            if (gated := self._gates_open()) != self._gated:  # a controller flipped a readiness gate
                self._gated, changed = gated, True
            if all(c.done for c in self.containers):
                failed = [c for c in self.containers if (c.terminated or {}).get("exitCode") != 0]
                self.phase = "Failed" if failed else "Succeeded"
                self._write_status()
                return
            if changed:
                self._write_status()
            time.sleep(0.2)

    def _stopping(self) -> bool:
        return self._stop.is_set() or self._deleting is not None

    def _teardown(self) -> None:
        running = [c for c in [*self.init, *self.containers] if c.running()]
        if self._deleting is not None and not self._stop.is_set():
            for c in running:  # SIGTERM to each container (its launcher passes it to PID 1), then wait
                assert c.proc is not None
                with contextlib.suppress(ProcessLookupError):
                    os.kill(c.proc.pid, signal.SIGTERM)
            while any(c.running() for c in running) and time.monotonic() < self._deleting and not self._stop.is_set():
                time.sleep(0.2)
        if self.sandbox is not None:
            self.network.release(self.uid)  # SIGKILLs whatever is left in the pod's network namespace
        for c in running:
            if c.proc is not None:
                procs.stop(c.proc, timeout=1.0)
        for c in [*self.init, *self.containers]:
            if c.oci is not None:
                c.oci.remove()
        if self._deleting is not None and not self._stop.is_set():
            finish_delete(self.core, self.ns, self.name, self.uid)

    # -- status -----------------------------------------------------------------------------------------------

    def _conditions(self) -> list[dict[str, Any]]:
        ts = now_iso()
        ready = self.phase == "Running" and all(c.ready() for c in self.containers)
        finished = self.phase in ("Succeeded", "Failed")
        old = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        values = {
            "PodScheduled": True,
            "Initialized": self.initialized or finished,
            "ContainersReady": ready,
            "Ready": ready and self._gates_open(),
        }
        out = []
        for kind, value in values.items():
            status = "True" if value else "False"
            prev = old.get(kind)
            since = prev["lastTransitionTime"] if prev and prev.get("status") == status else ts
            entry = {"type": kind, "status": status, "lastTransitionTime": since}
            if finished and kind in ("Ready", "ContainersReady"):
                entry["reason"] = "PodCompleted"
            out.append(entry)
        return out

    def _gates_open(self) -> bool:
        """As the kubelet does: Ready also waits for every readiness gate's condition, which someone else (a
        controller) sets in the pod's status; the loop's `update` brings the pod as the API has it."""
        old = {c["type"]: c for c in (self.pod.get("status") or {}).get("conditions") or []}
        gates = [g.get("conditionType") for g in (self.pod.get("spec") or {}).get("readinessGates") or []]
        return all((old.get(t) or {}).get("status") == "True" for t in gates)

    def _write_status(self) -> None:
        status = {
            "phase": self.phase,
            "podIP": self.ip,
            "podIPs": [{"ip": self.ip}],
            "hostIP": self.node_ip,
            "hostIPs": [{"ip": self.node_ip}],
            "startTime": self.started_at,
            "conditions": self._conditions(),
            "initContainerStatuses": [c.status() for c in self.init],
            "containerStatuses": [c.status() for c in self.containers],
        }
        if self.message:
            status["message"] = self.message
        comparable = {k: v for k, v in status.items() if k != "conditions"}
        comparable["ready"] = [c["status"] for c in status["conditions"]]
        if comparable == self._last_status:
            return
        try:
            written = self.core.patch_namespaced_pod_status(self.name, self.ns, {"status": status})
            self.pod["status"] = self.api.sanitize_for_serialization(written.status)
            self._last_status = comparable
        except ApiException as err:
            if err.status == 404:
                self._stop.set()
            else:
                log.warning("pod %s/%s: status not written: %s", self.ns, self.name, err.reason)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            # The apiserver is restarting or the connection dropped: the pod runs on, and since the last status is
            # not marked written, the next pass writes it again.
            log.warning("pod %s/%s: status not written, will retry: %r", self.ns, self.name, err)
