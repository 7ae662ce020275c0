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
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("mmrl.prober")
Key = tuple[str, str]  # (namespace, job name): the work queue's key


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
    def __init__(
        self, ask: Callable[[Target], Probe], wake: Callable[[Key], None], workers: int = 4, fresh: float = 5.0
    ) -> None:
        self._ask, self._wake, self._fresh = ask, wake, fresh
        self._cv = threading.Condition()
        self._latest: dict[Key, tuple[Probe, float]] = {}  # the answer, and when it came (monotonic)
        self._wanted: dict[Key, Target] = {}  # queued or running, one per job
        self._order: deque[Key] = deque()  # queued jobs, oldest first
        self._running: set[Key] = set()
        self._dropped: set[Key] = set()  # forgotten while their probe ran: its answer is not kept
        self._stop = False
        self._threads = [
            threading.Thread(target=self._work, name=f"mmrl-prober-{i}", daemon=True) for i in range(workers)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()

    def seen(self, key: Key, target: Target) -> Probe | None:
        """The latest answer for `target` without waiting for one; a fresh probe is queued unless it is recent."""
        with self._cv:
            latest, at = self._latest.get(key, (None, 0.0))
            current = latest if latest is not None and latest.target == target else None
            self._dropped.discard(key)
            recent = current is not None and time.monotonic() - at < self._fresh
            if not recent and key not in self._wanted:
                if key not in self._running:
                    self._order.append(key)
                    self._cv.notify()
                self._wanted[key] = target
            return current

    def forget(self, key: Key) -> None:
        """The job no longer serves (or is gone): drop its answer, and its probe if not yet started."""
        with self._cv:
            self._latest.pop(key, None)
            self._wanted.pop(key, None)  # its entry in _order is skipped when reached
            if key in self._running:
                self._dropped.add(key)

    def _next(self) -> tuple[Key, Target] | None:
        with self._cv:
            while not self._stop:
                while self._order:
                    key = self._order.popleft()
                    target = self._wanted.pop(key, None)
                    if target is not None:
                        self._running.add(key)
                        return key, target
                self._cv.wait()
            return None

    def _work(self) -> None:
        while (job := self._next()) is not None:
            key, target = job
            try:
                probe = self._ask(target)
            except Exception as exc:  # `ask` reports failures as a Probe; anything else is a bug worth a line
                log.exception("probe of %s/%s failed", *key)
                probe = Probe(target, None, type(exc).__name__)
            with self._cv:
                self._running.discard(key)
                if key in self._wanted:  # asked again while it ran: queue the newer request
                    self._order.append(key)
                    self._cv.notify()
                if key in self._dropped:
                    self._dropped.discard(key)
                    continue
                before = self._latest.get(key, (None, 0.0))[0]
                self._latest[key] = (probe, time.monotonic())
            if news(before, probe):
                self._wake(key)


def news(before: Probe | None, after: Probe) -> bool:
    """Whether a pass could decide or report differently on `after` than on `before`."""
    return before is None or (before.target, before.models, before.error) != (after.target, after.models, after.error)
