"""The REAL KubeRay operator (ray-operator v1.5.1, built by ``build.build_kuberay``) on a local control plane.

Flags are ray-operator's own (main.go): leader election off (one replica), webhooks off (``ENABLE_WEBHOOKS`` unset),
metrics and health probe on free loopback ports, ``--watch-namespace`` to keep it out of other tests' namespaces,
``--log-stdout-encoder=console``. Reconcile concurrency, QPS (100) and burst (200) stay at KubeRay's defaults so
benchmarks compare against what a cluster gets out of the box. It reaches the apiserver through the admin
kubeconfig. Its manager also starts the RayService controller, whose watch needs the RayService CRD: that CRD is
installed here (the control plane skips it by default to save start-up time).

Under kwok KubeRay does everything that is Kubernetes (pods, head Service, submitter Job, status from pod
readiness) but no call to a Ray dashboard can succeed: the head pod's IP is a kwok-made address nothing listens
on. See docs/benchmarks.md for what a RayJob does then.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.request
from pathlib import Path

from kubernetes import client

from mmrl_local.cluster import crds
from mmrl_local.cluster.controlplane import free_port
from mmrl_local.common import procs
from mmrl_local.common.promtext import metric_sum
from mmrl_local.toolchain import build

RAYSERVICE_CRD = "ray.io_rayservices.yaml"


def install_rayservice_crd(api: client.ApiClient) -> None:
    crds.install(api, [build.kuberay_crd_dir() / RAYSERVICE_CRD], build.cache_root() / "crds")


class KubeRayOperator:
    """Start with ``start()`` or as a context manager; ``metric(name)`` sums a Prometheus metric it exports."""

    def __init__(
        self,
        api_client: client.ApiClient,
        kubeconfig: Path,
        log_path: Path,
        *,
        namespaces: list[str] | None = None,
        binary: Path | None = None,
        extra_args: list[str] | None = None,
    ) -> None:
        self.api, self.kubeconfig, self.log_path = api_client, kubeconfig, log_path
        self.namespaces, self.binary, self.extra_args = namespaces or [], binary, extra_args or []
        self.metrics_port, self.probe_port = free_port(), free_port()
        self.proc: subprocess.Popen | None = None

    def args(self) -> list[str]:
        args = [
            "--enable-leader-election=false",
            f"--metrics-addr=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            "--log-stdout-encoder=console",
            *self.extra_args,
        ]
        if self.namespaces:
            args.append(f"--watch-namespace={','.join(self.namespaces)}")
        return args

    def start(self, timeout: float = 60.0) -> KubeRayOperator:
        binary = self.binary or build.build_kuberay()
        install_rayservice_crd(self.api)
        env = {k: v for k, v in os.environ.items() if k != "ENABLE_WEBHOOKS"}
        env["KUBECONFIG"] = str(self.kubeconfig)
        self.proc = procs.spawn([str(binary), *self.args()], self.log_path, env=env)
        self._wait_ready(timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            assert self.proc is not None
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"kuberay-operator exited with {self.proc.returncode}; last log lines:\n{tail}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://127.0.0.1:{self.probe_port}/readyz", timeout=2) as resp,
            ):
                if resp.status == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"kuberay-operator not ready after {timeout}s; see {self.log_path}")
            time.sleep(0.2)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc)

    def metric(self, name: str) -> float:
        """Sum of a Prometheus metric's samples (0 when absent)."""
        return metric_sum(f"http://127.0.0.1:{self.metrics_port}/metrics", name)

    def __enter__(self) -> KubeRayOperator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
