"""The work queue: bursts collapse, one pass per key at a time, failures retried with backoff, standby idles."""

from __future__ import annotations

import itertools
import threading
import time

from mmrl_operator.workqueue import WorkQueue
from tests.support.polling import wait_until


def wait_for(pred, timeout: float = 5.0) -> None:
    wait_until(pred, timeout, interval=0.01, what="work queue state")


def test_burst_of_adds_for_one_key_collapses_and_never_overlaps() -> None:
    running, overlaps, calls = set(), [], []
    gate = threading.Event()

    def handler(key):
        if key in running:
            overlaps.append(key)
        running.add(key)
        calls.append(key)
        gate.wait(1)
        running.discard(key)
        return None

    q = WorkQueue(handler, workers=4)
    q.start()
    for _ in range(50):
        q.add(("ns", "a"))
    wait_for(lambda: len(calls) >= 1)
    for _ in range(50):
        q.add(("ns", "a"))  # arrives while busy: exactly one more pass
    gate.set()
    wait_for(lambda: len(calls) >= 2)
    time.sleep(0.2)
    q.stop()
    assert overlaps == [] and len(calls) == 2


def test_failure_is_retried_with_backoff_then_succeeds() -> None:
    attempts = []

    def handler(key):
        attempts.append(time.monotonic())
        if len(attempts) < 3:
            raise RuntimeError("apiserver hiccup")
        return None

    q = WorkQueue(handler, workers=1)
    q.start()
    q.add(("ns", "a"))
    wait_for(lambda: len(attempts) >= 3)
    q.stop()
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps[1] > gaps[0] >= 0.9  # 1 s, then 2 s


def test_requeue_after_runs_the_key_again() -> None:
    calls = []
    q = WorkQueue(lambda key: (calls.append(key), 0.1 if len(calls) == 1 else None)[1], workers=1)
    q.start()
    q.add(("ns", "a"))
    wait_for(lambda: len(calls) == 2)
    q.stop()


def test_standby_replica_acts_on_nothing() -> None:
    calls = []
    q = WorkQueue(lambda key: calls.append(key), workers=1, active=lambda: False)
    q.start()
    q.add(("ns", "a"))
    time.sleep(0.2)
    q.stop()
    assert calls == []


def test_a_key_keeps_only_its_earliest_deadline_and_memory_stays_bounded() -> None:
    calls: list[float] = []
    q = WorkQueue(lambda key: calls.append(time.monotonic()), workers=1)  # not started: nothing fires
    week = 7 * 24 * 3600.0
    for i in range(10_000):
        q.add_after(("ns", f"job-{i % 10}"), week)  # a ttl requeue per pass
        q.add_after(("ns", f"job-{i % 10}"), 30.0 + i % 7)  # and a backoff, earlier
    pending = q.pending()
    assert len(pending) == 10 and all(29 <= left <= 37 for left in pending.values())
    assert len(q._delayed) <= 2 * len(pending) + 16


def test_an_earlier_deadline_fires_once_and_the_later_one_is_dropped() -> None:
    fired: list[float] = []
    start = time.monotonic()
    q = WorkQueue(lambda key: fired.append(time.monotonic() - start), workers=1)
    q.add_after(("ns", "a"), 0.6)
    q.add_after(("ns", "a"), 0.1)  # earlier: replaces
    q.add_after(("ns", "a"), 0.3)  # later than the pending one: ignored
    q.start()
    wait_for(lambda: len(fired) == 1)
    time.sleep(0.8)
    q.stop()
    assert len(fired) == 1 and fired[0] < 0.5


def test_resync_keys_wait_behind_event_driven_keys_and_an_event_promotes_one() -> None:
    order: list[str] = []
    gate = threading.Event()

    def handler(key):
        if key[1] == "blocker":
            gate.wait(2)
        order.append(key[1])
        return None

    q = WorkQueue(handler, workers=1)
    q.start()
    q.add(("ns", "blocker"))  # holds the only worker while the queue fills
    wait_for(lambda: ("ns", "blocker") in q._busy)
    for i in range(5):
        q.add(("ns", f"resync-{i}"), low=True)
    q.add(("ns", "fault"))  # a node fault's pass, queued after the resyncs
    q.add(("ns", "resync-3"))  # an event for a key that waits for its resync: promoted
    q.add(("ns", "resync-3"), low=True)  # and a later resync does not demote it
    gate.set()
    wait_for(lambda: len(order) == 7)
    q.stop()
    assert order[:3] == ["blocker", "fault", "resync-3"]
    assert order[3:] == ["resync-0", "resync-1", "resync-2", "resync-4"]  # each once, in resync order
