"""The newest copy of each job the operator has seen: from kopf's watch events and from its own status writes.

A pass reads the job here instead of GETting it, so a pass with nothing to do makes no request. It is never older
than the operator's own last write (newer resourceVersion wins, and that write's answer goes in), so a pass never
decides on a status older than the previous pass's write. Someone else's write (a spec edit, the trainer's
progress) may still be on its way: its watch event wakes the job again, and a status write decided on the older
copy is refused by its resourceVersion precondition (`kube.StatusConflict`), after which the key is read fresh
(`invalidate`). Decisions that start or stop an attempt read the job fresh anyway (runtime.reconcile.reconcile).
"""

from __future__ import annotations

import threading
from typing import Any

from mmrl_operator.runtime.informer import older

Key = tuple[str, str]


def _slim(body: Any) -> dict[str, Any]:
    """A plain dict of the job without managedFields (most of its metadata, read by nothing here)."""
    raw = dict(body)
    raw["metadata"] = {k: v for k, v in dict(raw.get("metadata") or {}).items() if k != "managedFields"}
    return raw


class JobStore:
    def __init__(self) -> None:
        self._jobs: dict[Key, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def seen(self, body: Any) -> None:
        """A job as a watch event or our own write's answer carried it; an older one than held is ignored."""
        job = _slim(body)
        key = (job["metadata"].get("namespace") or "", job["metadata"]["name"])
        with self._lock:
            if not older(job, self._jobs.get(key)):
                self._jobs[key] = job

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The newest copy, or None when there is none (never seen, deleted, or invalidated): then GET it."""
        with self._lock:
            job = self._jobs.get((namespace, name))
        return None if job is None else {**job, "metadata": dict(job["metadata"])}

    def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        """Every job held of one namespace (a ModelServer's pass looks for the jobs that name it)."""
        with self._lock:
            return [job for (ns, _), job in self._jobs.items() if ns == namespace]

    def invalidate(self, key: Key) -> None:
        """A write decided on this copy was refused as stale: the next pass reads the job from the apiserver."""
        with self._lock:
            self._jobs.pop(key, None)

    forget = invalidate  # the job was deleted

    def __len__(self) -> int:
        return len(self._jobs)
