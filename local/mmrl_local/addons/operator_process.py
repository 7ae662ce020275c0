"""Run the real operator (`mmrl operator`) as a subprocess against a control plane, as its Deployment would.

A subprocess (not an in-process runner) so callers can SIGKILL it at any moment, run two replicas and read their
Prometheus metrics. Used by `make demo`, the tests and the benchmarks.

Where ``MMRL_OPERATOR_FORKSERVER`` names the socket of a fork server that imported the operator (the test session
starts one: forkserver.py), the process is forked from it instead of started from scratch: the same program, argv
and environment, without paying its imports again. The demo and the benchmarks never set it, so what they measure
includes the imports, as a restarted pod would.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from mmrl_api.gateway_contract import OPERATOR_IMAGE_ENV
from mmrl_local.cluster.controlplane import free_port
from mmrl_local.common import forkserver, procs
from mmrl_local.common.promtext import metric_sum

MODULE = "mmrl_operator.cli"
CRASHING_MODULE = "mmrl_local.addons.crashing"
CRASH_AFTER_WRITES = (
    "MMRL_CRASH_AFTER_WRITES"  # mmrl_local.addons.crashing's setting (not imported here: it imports kopf)
)
# What the fork server imports ahead: the command line and everything `mmrl operator` runs.
PREIMPORT = ["mmrl_operator.cli.main", "mmrl_operator.runtime.run", "mmrl_operator.runtime.handlers"]
FORKSERVER_ENV = "MMRL_OPERATOR_FORKSERVER"
# The image a ModelServer replica's gateway runs (the operator's own; the chart passes its Deployment's image). For an
# operator run from this checkout, an image name the local kubelet does not build or pull: it runs such an image as
# this checkout's Python environment (node/images.py), so the gateway is this checkout's, as the operator is.
CHECKOUT_IMAGE = "ghcr.io/mmrl-dev/mmrl-operator:checkout"


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
        self.proc: subprocess.Popen[bytes] | forkserver.ForkedProcess | None = None

    def start(self) -> OperatorProcess:
        args = [
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
        # The operator's production timings (resync 30 s): a test or demo that needed a faster resync to pass would
        # be hiding a broken watch. Callers that measure something else may still pass MMRL_RESYNC_SECONDS.
        inherited = {k: v for k, v in os.environ.items() if k != "MMRL_RESYNC_SECONDS"}
        env = {**inherited, "KUBECONFIG": str(self.kubeconfig), OPERATOR_IMAGE_ENV: CHECKOUT_IMAGE, **self.extra_env}
        if self.identity:
            env["POD_NAME"] = self.identity
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        # A fault-injected operator (``crashing``) when asked for one, else the operator's own entry point.
        module = CRASHING_MODULE if CRASH_AFTER_WRITES in self.extra_env else MODULE
        server = env.get(FORKSERVER_ENV)
        if server:
            self.proc = forkserver.spawn(Path(server), module, args, env, self.log_path)
            return self
        # Like every process mmrl_local starts: its own process group, and killed with us (procs.spawn).
        self.proc = procs.spawn([sys.executable, "-m", module, *args], self.log_path, env=env)
        return self

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._forget()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.kill()
        self._forget()

    def _forget(self) -> None:
        """A started process is reaped and dropped from procs' list, so nothing signals its pid group later."""
        if isinstance(self.proc, subprocess.Popen):
            procs.stop(self.proc)

    def serving(self) -> bool:
        """Whether the process is up to the point of answering on its metrics port (imports done, flags parsed)."""
        try:
            self.metric("process_start_time_seconds")
        except OSError:
            return False
        return True

    def metric(self, name: str) -> float:
        """Sum of a Prometheus metric's samples (0 when absent)."""
        return metric_sum(f"http://127.0.0.1:{self.metrics_port}/metrics", name)

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
