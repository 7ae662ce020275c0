"""Network namespaces for the pods that local/ runs for real, the way a CNI plugin gives a node's pods theirs.

kwok only writes a pod IP into ``status.podIP``. For a pod whose processes really run here (the inference pod's
vLLM, the Ray head that runs a RayJob's driver) ``PodNetwork.sandbox(pod)`` creates what a node's runtime and CNI
would: a network namespace with ``lo`` up and an ``eth0`` that carries the pod's IP (and only there), joined by a
veth pair to one bridge per run. The host's end of that bridge has ``GATEWAY``, outside the range kwok hands out,
and the host routes each running pod's /32 to the bridge, so the apiserver's service proxy reaches the pod through
the real Service and EndpointSlice. Pods get no default route.

Nothing leaves the machine: from control-plane start the pod range, the service range and kwok's node addresses
are blackholed on the host (``install_routes``), so a dial to a pod that nothing runs fails at once instead of
going out through the default route. Pods reach the apiserver the way they reach the ``kubernetes`` Service on a
cluster: ``KUBERNETES_SERVICE_HOST``/``PORT`` name a relay on ``GATEWAY`` (``tcpforward``, a one-Service
kube-proxy) that forwards to the apiserver on loopback; the serving certificate carries ``GATEWAY``.

Teardown is the kubelet's: a sandbox goes (its processes are stopped, then its namespace, veth and route) when its
pod is deleted or terminating, when its node is deleted, and when the run stops; a release that fails is logged and
retried by the reaper's next pass, and the run's ``close()`` removes whatever is still named after it. Every run
registers itself under ``REGISTRY`` with its owner's pid and start time before it creates anything, and names
everything it creates after its run id, so ``remove_leftovers()`` (called by every control-plane start and by
``mmrl_local up``/``down``) removes what a SIGKILLed run left behind and never touches a live run's. Needs root
(CAP_NET_ADMIN and CAP_SYS_ADMIN) and iproute2; ``unavailable_reason()`` says why not otherwise.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from kubernetes import client
from kubernetes.client.rest import ApiException

from mmrl_local.common import loops, procs

log = logging.getLogger("mmrl_local.network.podnet")

# -- addressing of the local cluster ------------------------------------------------------------------------
POD_CIDR = "10.244.0.0/16"  # the cluster's pod network; each pod's eth0 carries its IP with this prefix
KWOK_POD_CIDR = "10.244.0.0/17"  # what kwok hands out (it starts at .0.1 and reuses freed addresses)
# Runs on one machine at the same time (parallel test workers) each take their own part of kwok's range and of the
# local kubelet's, so two runs never hand out the same pod IP: MMRL_POD_SLICE=<0..7> picks the part (slice_of).
SLICE_ENV = "MMRL_POD_SLICE"
SLICES = 8
GATEWAY = "10.244.255.254"  # the host's address on every run's bridge: in POD_CIDR, outside KWOK_POD_CIDR
SERVICE_CIDR = "10.0.0.0/24"
NODE_IP = "10.1.0.1"  # kwok's --node-ip: the InternalIP of every fake node
NODE_CIDR = "10.1.0.0/24"
BLACKHOLES = (POD_CIDR, SERVICE_CIDR, NODE_CIDR)

NETNS_DIR = Path("/run/netns")  # where `ip netns add` pins a namespace
REGISTRY = Path(os.environ.get("MMRL_PODNET_REGISTRY", "/run/mmrl-local/podnet"))
IFNAMSIZ = 15  # the kernel's limit on interface names (16 bytes with the NUL)
_LINK = re.compile(r"^(?:mmrlbr(?P<bridge>[0-9a-f]{6})|mm(?P<veth>[0-9a-f]{6})v\d+)$")
_NETNS = re.compile(r"^mmrl-(?P<run>[0-9a-f]{6})-")
_PROBE = re.compile(r"^mmrl-probe-(?P<pid>\d+)-")


class PodNetError(RuntimeError):
    """A pod's network cannot be set up (no root, an address another run uses, an `ip` command failed)."""


# -- names ----------------------------------------------------------------------------------------------------


def bridge_name(run: str) -> str:
    return f"mmrlbr{run}"


def veth_name(run: str, index: int) -> str:
    """The host end of a pod's veth pair; the pod end is `eth0` inside the namespace."""
    name = f"mm{run}v{index}"
    if len(name) > IFNAMSIZ:
        raise PodNetError(f"interface name {name} is longer than {IFNAMSIZ} characters")
    return name


def netns_name(run: str, index: int, pod: str) -> str:
    """`mmrl-<run>-<index>-<namespace>_<pod>`: unique per sandbox, readable in `ip netns list`."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", f"mmrl-{run}-{index}-{pod.replace('/', '_')}")[:200]


def run_of(name: str) -> str | None:
    """The run id in one of our interface or namespace names; None for anything that is not ours."""
    link = _LINK.match(name)
    if link:
        return link["bridge"] or link["veth"]
    ns = _NETNS.match(name)
    return ns["run"] if ns else None


def slice_of(network: str) -> ipaddress.IPv4Network | ipaddress.IPv6Network:
    """``network``, or the eighth of it that ``MMRL_POD_SLICE`` names when it is set."""
    whole = ipaddress.ip_network(network)
    raw = os.environ.get(SLICE_ENV, "")
    if not raw:
        return whole
    if not raw.isdigit() or int(raw) >= SLICES:
        raise PodNetError(f"{SLICE_ENV}={raw!r}: must be a number from 0 to {SLICES - 1}")
    return list(whole.subnets(prefixlen_diff=SLICES.bit_length() - 1))[int(raw)]


# -- the `ip` command -----------------------------------------------------------------------------------------


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and done.returncode != 0:
        raise PodNetError(f"ip {' '.join(args)}: {done.stderr.strip() or done.returncode}")
    return done


def ip_json(*args: str) -> list[dict]:
    done = ip("-j", *args, check=False)
    if done.returncode != 0 or not done.stdout.strip():
        return []
    return json.loads(done.stdout)


def route_get(address: str) -> dict | None:
    """What the host's routing does with ``address``: `ip route get` as a dict, or None when no route sends it
    anywhere (a blackhole or an unreachable route)."""
    found = ip_json("route", "get", address)
    return found[0] if found else None


@cache
def unavailable_reason() -> str | None:
    """None when this machine lets a run create network namespaces and veth pairs; otherwise why not, in a line."""
    if os.geteuid() != 0:
        return "not root (network namespaces and veth pairs need CAP_NET_ADMIN and CAP_SYS_ADMIN)"
    if shutil.which("ip") is None:
        return "no `ip` command (install iproute2)"
    probe = f"mmrl-probe-{os.getpid()}-{secrets.token_hex(2)}"
    done = ip("netns", "add", probe, check=False)
    ip("netns", "del", probe, check=False)
    if done.returncode != 0:
        return f"`ip netns add` failed: {done.stderr.strip()}"
    return None


def install_routes() -> str | None:
    """Blackhole the pod, service and node ranges on the host (idempotent; harmless to leave in place): more
    specific routes (a running pod's /32 to its run's bridge) win, and nothing else in them leaves the machine.
    Returns why the routes could not be installed, or None."""
    if os.geteuid() != 0:
        return "not root: cannot blackhole the cluster's address ranges on this host"
    if shutil.which("ip") is None:
        return "no `ip` command (install iproute2): cannot blackhole the cluster's address ranges on this host"
    for cidr in BLACKHOLES:
        done = ip("route", "replace", "blackhole", cidr, check=False)
        if done.returncode != 0:
            return f"ip route replace blackhole {cidr}: {done.stderr.strip()}"
    return None


# -- runs and their leftovers ---------------------------------------------------------------------------------


def _start_time(pid: int) -> str | None:
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return None


def _owner_alive(record: dict) -> bool:
    pid = record.get("pid")
    return isinstance(pid, int) and procs.pid_alive(pid) and _start_time(pid) == record.get("start")


def _read_record(path: Path) -> dict | None:
    with contextlib.suppress(OSError, ValueError):
        record = json.loads(path.read_text())
        return record if isinstance(record, dict) else None
    return None


def run_record(run: str) -> dict | None:
    """What the run registered (owner ``pid``, its ``start`` time, the ``mark`` of the run it belongs to), or None."""
    return _read_record(REGISTRY / f"{run}.json")


def _record_is_live(path: Path) -> bool:
    record = _read_record(path)
    return record is not None and _owner_alive(record)


def live_runs() -> set[str]:
    """Run ids whose owning process is still the one that registered them."""
    return {path.stem for path in REGISTRY.glob("*.json") if _record_is_live(path)}


def _stop_pids(pids: list[int], grace: float) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    left = procs.wait_gone(pids, timeout=grace)
    for pid in left:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    procs.wait_gone(left, timeout=5.0)


def netns_pids(name: str) -> list[int]:
    done = ip("netns", "pids", name, check=False)
    return [int(p) for p in done.stdout.split()] if done.returncode == 0 else []


def _delete_netns(name: str, grace: float) -> None:
    """Stop every process in the namespace, then unpin it: its veth (and so the host end) goes with it."""
    _stop_pids(netns_pids(name), grace)
    ip("netns", "del", name, check=False)


def _remove(things: list[tuple[str, str]], grace: float) -> list[str]:
    """Remove ``(kind, name)`` namespaces and links: namespaces first (with their processes), then the bridge."""
    removed = []
    for kind, name in sorted(things, key=lambda t: t[0] != "netns"):
        if kind == "netns":
            _delete_netns(name, grace)
        else:
            ip("link", "del", name, check=False)
        removed.append(name)
    return removed


def ours() -> dict[str, list[tuple[str, str]]]:
    """Every namespace and link on this machine named by a run: run id -> [(kind, name)]."""
    found: dict[str, list[tuple[str, str]]] = {}
    for entry in ip_json("netns", "list"):
        run = run_of(entry.get("name", ""))
        if run and entry["name"].startswith("mmrl-"):
            found.setdefault(run, []).append(("netns", entry["name"]))
    for link in ip_json("link", "show"):
        run = run_of(link.get("ifname", "").split("@")[0])
        if run and not link["ifname"].startswith("mmrl-"):
            found.setdefault(run, []).append(("link", link["ifname"].split("@")[0]))
    return found


def remove_leftovers() -> list[str]:
    """Remove the namespaces, veths, bridges (with their routes) and registry entries of runs whose owner is
    gone. Returns the names removed. Nothing of a live run is touched."""
    if unavailable_reason() is not None:
        return []
    # Names first, owners second: a run registers before it creates anything, so whatever is named here already
    # has its record when the owners are read. The other order removes a run that starts in between (another
    # control plane starting, a parallel test worker): its fresh record missed, its fresh namespace seen.
    named = ours()
    live = live_runs()
    removed: list[str] = []
    for run, things in sorted(named.items()):
        if run not in live:
            removed += _remove(things, grace=1.0)
    for entry in ip_json("netns", "list"):  # a probe of `unavailable_reason` whose process was killed mid-way
        probe = _PROBE.match(entry.get("name", ""))
        if probe and not procs.pid_alive(int(probe["pid"])):
            ip("netns", "del", entry["name"], check=False)
            removed.append(entry["name"])
    # Records, and records staged by a run killed before it renamed them into place (its owner is gone too).
    for path in [*REGISTRY.glob("*.json"), *REGISTRY.glob("*.tmp")]:
        if path.stem not in live and not _record_is_live(path):  # read again: it may be newer than `live`
            path.unlink(missing_ok=True)
    return removed


# -- one run ---------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    """One pod's network namespace and how its processes reach the apiserver."""

    uid: str
    pod: str  # namespace/name
    node: str
    ip: str
    netns: str
    host_veth: str
    service_env: dict[str, str] = field(default_factory=dict)

    @property
    def netns_path(self) -> str:
        return str(NETNS_DIR / self.netns)


class PodNetwork:
    """The pod network of one run: a bridge, the apiserver relay, and one sandbox per pod that runs for real.
    ``start()`` it, ``watch(api)`` to tear sandboxes down with their pods and nodes, ``close()`` at the end."""

    def __init__(self, apiserver: tuple[str, int], workdir: Path, *, poll: float = 1.0, grace: float = 3.0) -> None:
        self.apiserver = apiserver
        self.workdir = workdir
        self.poll, self.grace = poll, grace
        self.run = secrets.token_hex(3)
        self.bridge = bridge_name(self.run)
        self.service_port = 0
        self._sandboxes: dict[str, Sandbox] = {}
        self._retiring: dict[str, Sandbox] = {}  # pod IP -> a sandbox being torn down (its route still exists)
        self._next = 0
        self._lock = threading.RLock()
        self._forwarder: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    @property
    def registry_file(self) -> Path:
        return REGISTRY / f"{self.run}.json"

    def service_env(self) -> dict[str, str]:
        """What the kubelet sets for the `kubernetes` Service, as pods in this run reach it."""
        return {"KUBERNETES_SERVICE_HOST": GATEWAY, "KUBERNETES_SERVICE_PORT": str(self.service_port)}

    def start(self) -> PodNetwork:
        reason = unavailable_reason()
        if reason is not None:
            raise PodNetError(f"pods cannot get network namespaces here: {reason}")
        REGISTRY.mkdir(parents=True, exist_ok=True)
        owner = {"pid": os.getpid(), "start": _start_time(os.getpid()), "mark": os.environ.get(procs.RUN_MARK)}
        staged = self.registry_file.with_suffix(".tmp")  # whole or absent: a half-written record reads as dead
        staged.write_text(json.dumps(owner))
        staged.replace(self.registry_file)
        try:
            ip("link", "add", self.bridge, "type", "bridge")
            ip("addr", "add", f"{GATEWAY}/32", "dev", self.bridge)
            ip("link", "set", self.bridge, "up")
            self._start_forwarder()
        except BaseException:
            self.close()
            raise
        return self

    def _start_forwarder(self) -> None:
        listener = socket.create_server((GATEWAY, 0), backlog=128)
        try:
            self.service_port = listener.getsockname()[1]
            host, port = self.apiserver
            argv = [sys.executable, "-m", "mmrl_local.network.tcpforward", str(listener.fileno()), host, str(port)]
            env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
            self._forwarder = procs.spawn(
                argv, self.workdir / "logs" / "apiserver-relay.log", env=env, pass_fds=(listener.fileno(),)
            )
        finally:
            listener.close()

    # -- sandboxes -------------------------------------------------------------------------------------------

    def sandbox(self, pod: dict) -> Sandbox:
        """The pod's network namespace, created on first use (idempotent per pod UID)."""
        meta, status = pod["metadata"], pod.get("status") or {}
        uid, pod_ip = meta["uid"], status.get("podIP") or ""
        name = f"{meta['namespace']}/{meta['name']}"
        if not pod_ip:
            raise PodNetError(f"pod {name} has no IP yet")
        with self._lock:
            if self._stop.is_set():
                raise PodNetError("the pod network of this run is closed")
            if uid in self._sandboxes:
                return self._sandboxes[uid]
            for old in [s for s in self._sandboxes.values() if s.ip == pod_ip]:
                self.release(old.uid)  # an old namespace is gone before its IP is reused
            if pod_ip in self._retiring:  # another thread is removing it: its `ip route del` would take ours
                raise PodNetError(f"pod {name}: {pod_ip} is still being released by a pod that is gone; retry")
            self._check_free(pod_ip, name)
            index, self._next = self._next, self._next + 1
            box = Sandbox(
                uid=uid,
                pod=name,
                node=(pod.get("spec") or {}).get("nodeName") or "",
                ip=pod_ip,
                netns=netns_name(self.run, index, name),
                host_veth=veth_name(self.run, index),
                service_env=self.service_env(),
            )
            try:
                self._plumb(box)
            except BaseException:
                self._unplumb(box)
                raise
            self._sandboxes[uid] = box
            log.info("pod %s: network namespace %s, %s on %s", name, box.netns, pod_ip, self.bridge)
            return box

    def _check_free(self, pod_ip: str, name: str) -> None:
        if ipaddress.ip_address(pod_ip) not in ipaddress.ip_network(POD_CIDR):
            raise PodNetError(f"pod {name}: IP {pod_ip} is outside the pod network {POD_CIDR}")
        for route in ip_json("route", "show", f"{pod_ip}/32"):
            if route.get("dev") != self.bridge:
                raise PodNetError(f"pod {name}: {pod_ip} is already routed to {route.get('dev')} by another run")

    def _plumb(self, box: Sandbox) -> None:
        ns = box.netns
        ip("netns", "add", ns)
        ip("link", "add", box.host_veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
        ip("link", "set", box.host_veth, "master", self.bridge, "up")
        prefix = ipaddress.ip_network(POD_CIDR).prefixlen
        ip("-n", ns, "addr", "add", f"{box.ip}/{prefix}", "dev", "eth0")
        ip("-n", ns, "link", "set", "lo", "up")
        ip("-n", ns, "link", "set", "eth0", "up")
        ip("route", "replace", f"{box.ip}/32", "dev", self.bridge, "src", GATEWAY)

    def _unplumb(self, box: Sandbox) -> None:
        _delete_netns(box.netns, self.grace)
        ip("link", "del", box.host_veth, check=False)  # gone with the namespace already, unless setup failed early
        ip("route", "del", f"{box.ip}/32", "dev", self.bridge, check=False)

    def release(self, uid: str) -> bool:
        """Stop the pod's processes and remove its namespace, veth and route. False when there was none."""
        with self._lock:
            box = self._sandboxes.pop(uid, None)
            if box is None:
                return False
            self._retiring[box.ip] = box
        try:
            self._unplumb(box)
        except BaseException:
            with self._lock:  # still there: the reaper's next pass, or close(), tries again
                self._sandboxes.setdefault(uid, box)
            raise
        finally:
            with self._lock:
                self._retiring.pop(box.ip, None)
        log.info("pod %s: network namespace %s removed", box.pod, box.netns)
        return True

    def sandboxes(self) -> list[Sandbox]:
        with self._lock:
            return list(self._sandboxes.values())

    # -- the kubelet's side of deletion -------------------------------------------------------------------------

    def watch(self, api: client.ApiClient) -> PodNetwork:
        """Release each sandbox once its pod is deleted or terminating, or its node is gone (polled)."""
        core = client.CoreV1Api(api)
        self._reaper = threading.Thread(target=self._reap_loop, args=(core,), name="podnet-reaper", daemon=True)
        self._reaper.start()
        return self

    def _reap_loop(self, core: client.CoreV1Api) -> None:
        loops.run_passes("pod-network reaper", lambda: self.reap_once(core), self._stop, interval=self.poll)

    def reap_once(self, core: client.CoreV1Api) -> None:
        """One pass of the reaper: release every sandbox whose pod or node is gone."""
        for box in self.sandboxes():
            try:
                why = self._gone(core, box)
            except Exception as err:  # an apiserver hiccup: look again next round
                log.debug("cannot check pod %s: %s", box.pod, err)
                continue
            if why:
                log.info("pod %s: %s", box.pod, why)
                self.release(box.uid)

    @staticmethod
    def _gone(core: client.CoreV1Api, box: Sandbox) -> str:
        namespace, name = box.pod.split("/", 1)
        try:
            pod = core.read_namespaced_pod(name, namespace)
        except ApiException as err:
            if err.status == 404:
                return "deleted"
            raise
        if pod.metadata.uid != box.uid:
            return "deleted (a new pod has its name)"
        if pod.metadata.deletion_timestamp:
            return "terminating"
        if box.node:
            try:
                core.read_node(box.node)
            except ApiException as err:
                if err.status == 404:
                    return f"node {box.node} deleted"
                raise
        return ""

    def close(self) -> None:
        """Remove every sandbox, the relay and the bridge, then whatever else is still named after this run (what a
        release that failed left), then the run's registry entry."""
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(timeout=10)
        for box in self.sandboxes():
            try:
                self.release(box.uid)
            except Exception:
                log.exception("pod %s: its sandbox could not be released; removing it by name", box.pod)
        if self._forwarder is not None:
            procs.stop(self._forwarder, timeout=2.0)
        gone = ip("link", "del", self.bridge, check=False)  # takes the pods' /32 routes with it
        if gone.returncode != 0 and "Cannot find device" not in gone.stderr:
            log.warning("run %s: bridge %s not removed: %s", self.run, self.bridge, gone.stderr.strip())
        left = ours().get(self.run, [])
        if left:
            log.warning("run %s: removing what its sandboxes left behind: %s", self.run, [n for _, n in left])
            _remove(left, self.grace)
        self.registry_file.unlink(missing_ok=True)
