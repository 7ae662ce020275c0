"""A small controller work queue: deduplicated keys, delayed requeues, one worker per key at a time.

kopf event handlers only enqueue `(namespace, name)`; workers call the reconcile. Deduplication collapses a
burst of child events into one pass, and the per-key exclusivity means two passes of the same job never race on
its status. Failures are retried with capped exponential backoff — never an endless fixed-interval loop. A key
has at most one pending deadline, the earliest asked for: every pass recomputes when it next needs to run, so an
earlier wake-up loses nothing, and memory stays bounded however often a job asks (a week-long ttl and a 30 s
backoff do not pile up entries).

Keys added with `low=True` (the periodic resync) wait behind every other key: with a thousand jobs the resync
asks for dozens of passes a second, and a node fault's pass must not queue behind them. An event for a key that
waits at low priority promotes it.

While `active()` says False (a standby replica) a key that comes due runs no pass: it is kept, and `resume()` (the
replica gained the lease) queues every kept key at once, so failover does not wait for the next event or resync.

Time comes from `clock` (monotonic seconds). A test passes a clock it moves by hand and calls `wake()` after each
move, since the workers' waits time out on the real clock; `idle()` then says when the queue has acted on the move.
"""

from __future__ import annotations

import heapq
import logging
import threading
import time
from collections.abc import Callable

from mmrl_operator.runtime import metrics

log = logging.getLogger("mmrl.queue")
Key = tuple[str, str]


class WorkQueue:
    def __init__(
        self,
        handler: Callable[[Key], float | None],
        workers: int = 4,
        max_backoff: float = 300.0,
        active: Callable[[], bool] = lambda: True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._handler, self._active, self._max_backoff, self._clock = handler, active, max_backoff, clock
        self._cv = threading.Condition()
        self._ready: list[Key] = []
        self._low: list[Key] = []  # resync keys; entries no longer in _queued_low were promoted or taken
        self._queued: set[Key] = set()
        self._queued_low: set[Key] = set()
        self._busy: set[Key] = set()
        self._dirty: set[Key] = set()
        self._delayed: list[tuple[float, Key]] = []  # heap; entries whose time is not _deadline[key] are stale
        self._deadline: dict[Key, float] = {}
        self._failures: dict[Key, int] = {}
        self._standing_by: set[Key] = set()  # keys that came due while this replica did not act (not the leader)
        self._stop = False
        self._parked = 0  # workers waiting on the condition
        self._looked_at: float | None = None  # the clock when a worker last moved due deadlines; None: a new one
        self._threads = [
            threading.Thread(target=self._work, name=f"mmrl-worker-{i}", daemon=True) for i in range(workers)
        ]

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        with self._cv:
            self._stop = True
            self._cv.notify_all()

    def join(self, timeout: float) -> bool:
        """After `stop`: wait until every worker has finished its pass in flight. False if one is still running."""
        deadline = time.monotonic() + timeout
        for t in self._threads:
            if t.is_alive():
                t.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def resume(self) -> None:
        """This replica acts again (it gained the lease): every key that came due while it stood by is queued now,
        instead of waiting for the next event or resync. Call it once `active()` says True."""
        with self._cv:
            keys, self._standing_by = self._standing_by, set()
            metrics.STANDING_BY.set(0)
            for key in sorted(keys):
                self._add(key)

    def standing_by(self) -> int:
        """How many keys wait for this replica to act again."""
        with self._cv:
            return len(self._standing_by)

    def wake(self) -> None:
        """Have the waiting workers read the clock again (after a clock that jumps has moved)."""
        with self._cv:
            self._cv.notify_all()

    def idle(self) -> bool:
        """Every worker waits, nothing is queued or running, and a worker has looked for due deadlines since the
        clock last moved and since the last deadline was set: nothing runs until the clock moves or a key is added.
        With the real clock this is never true for long; it is for tests that move a clock by hand."""
        with self._cv:
            looked = self._looked_at is not None and self._looked_at >= self._clock()
            return looked and self._parked == len(self._threads) and not (self._queued or self._busy or self._dirty)

    def add(self, key: Key, low: bool = False) -> None:
        with self._cv:
            self._add(key, low)

    def _add(self, key: Key, low: bool = False) -> None:
        """Queue a key, or mark it to run again once its current pass ends (the lock is held)."""
        if key in self._busy:
            self._dirty.add(key)
        else:
            self._push(key, low)

    def _push(self, key: Key, low: bool = False) -> None:
        """Queue a key that is not busy (the lock is held)."""
        if key not in self._queued:
            self._queued.add(key)
            if low:
                self._queued_low.add(key)
                self._low.append(key)
            else:
                self._ready.append(key)
            self._cv.notify()
        elif not low and key in self._queued_low:
            self._queued_low.discard(key)  # promoted: its entry in _low is skipped when reached
            self._ready.append(key)
            self._cv.notify()

    def add_after(self, key: Key, delay: float) -> None:
        with self._cv:
            when = self._clock() + delay
            current = self._deadline.get(key)
            if current is not None and current <= when:
                return  # an earlier pass is already due; it will ask again for whatever comes next
            self._deadline[key] = when
            heapq.heappush(self._delayed, (when, key))
            if len(self._delayed) > 2 * len(self._deadline) + 16:
                # Drop stale entries (superseded deadlines) so the heap stays proportional to the number of jobs.
                self._delayed = [(t, k) for k, t in self._deadline.items()]
                heapq.heapify(self._delayed)
            self._looked_at = None
            self._cv.notify()

    def pending(self) -> dict[Key, float]:
        """Seconds until each key's pending deadline (for tests and metrics)."""
        with self._cv:
            now = self._clock()
            return {k: t - now for k, t in self._deadline.items()}

    def _next(self) -> Key | None:
        with self._cv:
            while not self._stop:
                now = self._looked_at = self._clock()
                while self._delayed and self._delayed[0][0] <= now:
                    when, key = heapq.heappop(self._delayed)
                    if self._deadline.get(key) != when:
                        continue  # superseded by an earlier deadline that already fired
                    del self._deadline[key]
                    self._add(key)
                for i, key in enumerate(self._ready):
                    if key not in self._busy:
                        del self._ready[i]
                        self._queued.discard(key)
                        self._busy.add(key)
                        return key
                while self._low and self._low[0] not in self._queued_low:
                    self._low.pop(0)  # promoted to _ready (or already taken from there)
                for i, key in enumerate(self._low):
                    if key in self._queued_low and key not in self._busy:
                        del self._low[i]
                        self._queued_low.discard(key)
                        self._queued.discard(key)
                        self._busy.add(key)
                        return key
                timeout = self._delayed[0][0] - now if self._delayed else None
                self._parked += 1
                self._cv.wait(timeout)
                self._parked -= 1
            return None

    def _done(self, key: Key) -> None:
        with self._cv:
            self._busy.discard(key)
            if key in self._dirty:
                self._dirty.discard(key)
                self._push(key)
            self._cv.notify_all()

    def _work(self) -> None:
        while (key := self._next()) is not None:
            try:
                with self._cv:  # checked and kept under the lock `resume` takes: no key slips between the two
                    if not self._active():
                        self._standing_by.add(key)  # a standby keeps its caches warm and its keys, acts on nothing
                        metrics.STANDING_BY.set(len(self._standing_by))
                        continue
                delay = self._handler(key)
                self._failures.pop(key, None)
                if delay is not None:
                    self.add_after(key, delay)
            except Exception:
                metrics.RECONCILE_ERRORS.inc()
                n = self._failures.get(key, 0) + 1
                self._failures[key] = n
                backoff = min(self._max_backoff, 0.5 * 2**n)
                log.exception("reconcile of %s/%s failed (%d in a row); retrying in %.1fs", *key, n, backoff)
                self.add_after(key, backoff)
            finally:
                self._done(key)
