"""A container's probes, run the way the kubelet runs them: ``exec`` inside the container's namespaces (``nsenter``
into its PID 1: mount, UTS, network, PID, root and working directory, with the container's environment), and
``httpGet`` / ``tcpSocket`` from the node to the pod's IP. ``ProbeState`` applies the probe's period and its
success and failure thresholds."""

from __future__ import annotations

import http.client
import logging
import socket
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from typing import Any

log = logging.getLogger("mmrl_local.node.probes")


def run_exec(command: list[str], pid_one: int, env: dict[str, str], timeout: float) -> bool:
    argv = ["nsenter", f"--target={pid_one}", "--mount", "--uts", "--net", "--pid", "--root", "--wd", "--", *command]
    try:
        return subprocess.run(argv, env=env, capture_output=True, timeout=timeout).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def port_number(port: int | str | None, ports: dict[str, int]) -> int:
    """A probe's port: a number, or the name of one of the container's ports."""
    return ports.get(port, 0) if isinstance(port, str) and not port.isdigit() else int(port or 0)


def run_http(get: dict[str, Any], pod_ip: str, ports: dict[str, int], timeout: float) -> bool:
    host, number = get.get("host") or pod_ip, port_number(get.get("port"), ports)
    url = f"{(get.get('scheme') or 'HTTP').lower()}://{host}:{number}{get.get('path') or '/'}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return 200 <= resp.status < 400
    except http.client.InvalidURL:
        raise  # the probe's path or host is wrong, not the server: ProbeState.check logs it
    except (OSError, http.client.HTTPException):  # refused, timed out, or not HTTP that answered
        return False


def run_tcp(tcp: dict[str, Any], pod_ip: str, ports: dict[str, int], timeout: float) -> bool:
    try:
        address = (tcp.get("host") or pod_ip, port_number(tcp.get("port"), ports))
        with socket.create_connection(address, timeout=timeout):
            return True
    except OSError:
        return False


@dataclass
class ProbeState:
    """One probe of one container. ``due()`` says whether its period has passed; ``record()`` applies the
    thresholds and returns the probe's current verdict (None until it has one)."""

    spec: dict[str, Any]
    started: float = field(default_factory=time.monotonic)
    last: float = 0.0
    successes: int = 0
    failures: int = 0
    verdict: bool | None = None

    def due(self, now: float) -> bool:
        if now - self.started < float(self.spec.get("initialDelaySeconds") or 0):
            return False
        return now - self.last >= float(self.spec.get("periodSeconds") or 10)

    def record(self, ok: bool, now: float) -> bool | None:
        self.last = now
        if ok:
            self.successes, self.failures = self.successes + 1, 0
            if self.successes >= int(self.spec.get("successThreshold") or 1):
                self.verdict = True
        else:
            self.successes, self.failures = 0, self.failures + 1
            if self.failures >= int(self.spec.get("failureThreshold") or 3):
                self.verdict = False
        return self.verdict

    def check(self, pod_ip: str, pid_one: int | None, env: dict[str, str], ports: dict[str, int]) -> bool:
        """Run the probe once; a probe that cannot even be run (a path or port the URL or socket refuses) fails,
        as the kubelet counts it, and is logged: the pod's supervision goes on."""
        try:
            return self._run(pod_ip, pid_one, env, ports)
        except Exception:
            log.exception("probe %s could not be run; counted as a failure", self.spec)
            return False

    def _run(self, pod_ip: str, pid_one: int | None, env: dict[str, str], ports: dict[str, int]) -> bool:
        timeout = float(self.spec.get("timeoutSeconds") or 1)
        if "exec" in self.spec:
            return pid_one is not None and run_exec(self.spec["exec"]["command"], pid_one, env, timeout)
        if "httpGet" in self.spec:
            return run_http(self.spec["httpGet"], pod_ip, ports, timeout)
        if "tcpSocket" in self.spec:
            return run_tcp(self.spec["tcpSocket"], pod_ip, ports, timeout)
        return True  # gRPC probes are not run here: counted as passing
