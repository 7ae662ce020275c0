"""How far a server the local kubelet runs has got: what its containers logged and the CPU their processes used, for
`polling.wait_while_progressing`. A container of the server that exited with an error (its pod not being deleted)
fails the wait at once, with what the container said last."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from kubernetes import client

from mmrl_local.node.kubelet import Kubelet

TICKS = os.sysconf("SC_CLK_TCK")


class ServerExited(AssertionError):
    """A container of the server ended with an error."""


def cpu_seconds(pid: int) -> float:
    """CPU seconds used by `pid` and every process under it (vLLM's API server runs its engine in a child)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of stat)
            for task in Path(f"/proc/{current}/task").iterdir():
                todo += [int(c) for c in (task / "children").read_text().split()]
    return total / TICKS


class ServerProgress:
    """Callable: (bytes logged, CPU seconds) of the containers of the pods `selector` picks in `namespace`."""

    def __init__(self, core: client.CoreV1Api, kubelet: Kubelet, namespace: str, selector: str) -> None:
        self.core, self.kubelet, self.ns, self.selector = core, kubelet, namespace, selector

    def __call__(self) -> tuple[int, float]:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=self.selector).items
        for pod in pods:
            if pod.metadata.deletion_timestamp:
                continue
            for status in (pod.status and pod.status.container_statuses) or []:
                ended = (status.state and status.state.terminated) or (
                    status.last_state and status.last_state.terminated
                )
                if ended and ended.exit_code:
                    said = (ended.message or "")[-2000:]
                    raise ServerExited(f"{pod.metadata.name}/{status.name} exited {ended.exit_code}:\n{said}")
        names = tuple(f"{self.ns}/{pod.metadata.name}/" for pod in pods)
        logged, cpu = 0, 0.0
        for container in self.kubelet.container_logs():
            if not container.name.startswith(names):
                continue
            with contextlib.suppress(OSError):
                logged += container.path.stat().st_size
            if container.pid is not None:
                cpu += cpu_seconds(container.pid)
        return logged, cpu
