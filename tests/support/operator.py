"""Run the real operator (`mmrl operator`) as a subprocess against the local control plane, and read jobs back.

A subprocess (not an in-process runner) so tests can SIGKILL it at any moment, run two replicas, and read
their Prometheus metrics, exactly as a platform team's deployment would behave.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from mmrl_local.controlplane import free_port
from mmrl_operator import constants as c
from tests.support import polling


class OperatorProcess:
    def __init__(
        self,
        kubeconfig: Path,
        log_path: Path,
        *,
        standalone: bool = True,
        namespaces: list[str] | None = None,
        env: dict[str, str] | None = None,
        identity: str | None = None,
    ) -> None:
        self.kubeconfig, self.log_path, self.standalone = kubeconfig, log_path, standalone
        self.namespaces, self.extra_env, self.identity = namespaces or [], env or {}, identity
        self.metrics_port = free_port()
        self.liveness_port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> OperatorProcess:
        args = [
            sys.executable,
            "-m",
            "mmrl_operator.cli",
            "operator",
            "--liveness",
            f"http://127.0.0.1:{self.liveness_port}/healthz",
            "--metrics-port",
            str(self.metrics_port),
        ]
        if self.standalone:
            args.append("--standalone")
        for ns in self.namespaces:
            args += ["--namespace", ns]
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), "MMRL_RESYNC_SECONDS": "2", **self.extra_env}
        if self.identity:
            env["POD_NAME"] = self.identity
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()

    def metric(self, name: str) -> float:
        """Sum of a Prometheus metric's samples (0 when absent)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        return sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith(name + " ") or line.startswith(name + "{")
        )

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def wait_until(pred: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2, what: str = "") -> Any:
    """Poll through transient API refusals (an object just created or being deleted) as well."""
    return polling.wait_until(pred, timeout, interval, what, retry_on=(client.exceptions.ApiException,))


class Jobs:
    """Thin helpers over the CustomObjects API for MultimodalRLJobs and their KubeRay children."""

    def __init__(self, api_client: client.ApiClient, namespace: str) -> None:
        self.custom = client.CustomObjectsApi(api_client)
        self.core = client.CoreV1Api(api_client)
        self.ns = namespace

    def create(self, body: dict[str, Any]) -> dict[str, Any]:
        body = {**body, "metadata": {**body["metadata"], "namespace": self.ns}}
        return self.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, body)

    def get(self, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, name)

    def patch(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, name, patch)

    def patch_status(self, name: str, status: dict[str, Any]) -> dict[str, Any]:
        return self.custom.patch_namespaced_custom_object_status(
            c.GROUP, c.VERSION, self.ns, c.PLURAL, name, {"status": status}
        )

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, name)

    def status(self, name: str) -> dict[str, Any]:
        return self.get(name).get("status") or {}

    def ray(self, plural: str) -> list[dict[str, Any]]:
        return self.custom.list_namespaced_custom_object(c.RAY_GROUP, c.RAY_VERSION, self.ns, plural)["items"]

    def ray_names(self, plural: str) -> list[str]:
        return sorted(o["metadata"]["name"] for o in self.ray(plural))

    def events(self, name: str) -> list[str]:
        """Reasons in the order the events were created. Event timestamps have one-second resolution, so several
        events of one pass tie; on this test apiserver resourceVersion is etcd's revision, which orders them."""
        items = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={name}").items
        return [e.reason for e in sorted(items, key=lambda e: int(e.metadata.resource_version))]

    def condition(self, name: str, ctype: str) -> str | None:
        for cond in self.status(name).get("conditions") or []:
            if cond["type"] == ctype:
                return cond["status"]
        return None


def phases_until_done(jobs: Jobs, name: str, timeout: float = 90) -> list[str]:
    seen: list[str] = []

    def done() -> bool:
        phase = jobs.status(name).get("phase")
        if phase and (not seen or seen[-1] != phase):
            seen.append(phase)
        return phase in ("Succeeded", "Failed")

    wait_until(done, timeout, interval=0.05, what=f"{name} to finish")
    return seen
