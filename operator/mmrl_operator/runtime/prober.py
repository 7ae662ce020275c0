"""The operator's `/v1/models` probes of serving jobs, on a few threads of their own, so that no reconcile worker ever
waits for a tenant's inference server.

A pass that sees an Available inference Deployment calls `seen`: it gets the latest answer for that Deployment at
once (None before the first), and a fresh probe is queued behind it unless the latest answer is younger than
`fresh` seconds. When a probe's outcome differs from the one before (another listing, another error), the job is
woken for a pass that decides on it; an unchanged outcome wakes nobody. Together these keep probing at the pace of
the passes (events, and serving's periodic requeue): the pass a fresh answer wakes does not ask again, so probing
never feeds itself. Each job has at most one probe queued or running, so memory and threads stay bounded however
many jobs serve and however slow their servers are: N servers that never answer cost N deadlines of the prober's
time, none of the reconcile workers'.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from mmrl_operator.runtime.workqueue import Key, WorkQueue

log = logging.getLogger("mmrl.prober")


@dataclass(frozen=True)
class Target:
    """What to ask: a job's inference Service, for one incarnation of its Deployment (an answer from before the
    Deployment was replaced says nothing about the new one)."""

    namespace: str
    service: str
    port: int
    deployment_uid: str


@dataclass(frozen=True)
class Probe:
    target: Target
    models: list[dict[str, Any]] | None
    """`data` of GET /v1/models; None when it did not answer in full."""
    error: str | None = None
    """Why `models` is None, in a few words."""


class Prober:
    """Probes on a `WorkQueue` of their own: it already gives one probe per job at a time, deduplicated requests, and
    a second run when a job asks again while its probe runs. This class adds what to ask and the answers."""

    def __init__(
        self, ask: Callable[[Target], Probe], wake: Callable[[Key], None], workers: int = 4, fresh: float = 5.0
    ) -> None:
        self._ask, self._wake, self._fresh = ask, wake, fresh
        self._lock = threading.Lock()
        self._latest: dict[Key, tuple[Probe, float]] = {}  # the answer, and when it came (monotonic)
        self._wanted: dict[Key, Target] = {}  # asked for, not yet taken by a probe; one per job
        self._taken: dict[Key, Target] = {}  # probes running now; forgetting a job drops its entry (and answer)
        self._queue = WorkQueue(self._probe, workers=workers)

    def start(self) -> None:
        self._queue.start()

    def stop(self) -> None:
        self._queue.stop()

    def idle(self) -> bool:
        """No probe is asked for or running."""
        with self._lock:
            return not self._wanted and not self._taken

    def seen(self, key: Key, target: Target) -> Probe | None:
        """The latest answer for `target` without waiting for one; a fresh probe is queued unless it is recent."""
        with self._lock:
            latest, at = self._latest.get(key, (None, 0.0))
            current = latest if latest is not None and latest.target == target else None
            recent = current is not None and time.monotonic() - at < self._fresh
            ask = not recent and key not in self._wanted
            if ask:
                self._wanted[key] = target
        if ask:
            self._queue.add(key)
        return current

    def forget(self, key: Key) -> None:
        """The job no longer serves (or is gone): drop its answer, and its probe if not yet started."""
        with self._lock:
            self._latest.pop(key, None)
            self._wanted.pop(key, None)  # its queued run finds nothing to ask
            self._taken.pop(key, None)  # a running probe's answer is not kept

    def _probe(self, key: Key) -> None:
        with self._lock:
            target = self._wanted.pop(key, None)
            if target is None:
                return None
            self._taken[key] = target
        try:
            probe = self._ask(target)
        except Exception as exc:  # `ask` reports failures as a Probe; anything else is a bug worth a line
            log.exception("probe of %s/%s failed", *key)
            probe = Probe(target, None, type(exc).__name__)
        with self._lock:
            if self._taken.get(key) is not target:
                return None  # forgotten while it ran
            del self._taken[key]
            before = self._latest.get(key, (None, 0.0))[0]
            self._latest[key] = (probe, time.monotonic())
        if news(before, probe):
            self._wake(key)
        return None


def news(before: Probe | None, after: Probe) -> bool:
    """Whether a pass could decide or report differently on `after` than on `before`."""
    return before is None or (before.target, before.models, before.error) != (after.target, after.models, after.error)
