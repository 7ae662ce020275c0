"""The work queue: bursts collapse, one pass per key at a time, failures retried with backoff, standby idles.

Time is a clock the tests move by hand: a deadline is shown not to fire a hundredth of a second before it is due
and to fire when it is, and "nothing else ran" is read once the queue is idle at that time, never after a sleep."""

from __future__ import annotations

import threading
from collections.abc import Callable

from mmrl_operator.runtime.workqueue import Key, WorkQueue
from tests.support.fake_clock import FakeClock
from tests.support.polling import wait_until

KEY = ("ns", "a")


def wait_for(pred: Callable[[], object], timeout: float = 10.0) -> None:
    wait_until(pred, timeout, interval=0.01, what="work queue state")


def on_clock(
    handler: Callable[[Key], float | None], clock: FakeClock, workers: int, active: Callable[[], bool] = lambda: True
) -> WorkQueue:
    """A queue whose time is `clock`; moving the clock wakes its workers."""
    q = WorkQueue(handler, workers=workers, active=active, clock=clock)
    clock.on_move(q.wake)
    return q


def test_burst_of_adds_for_one_key_collapses_and_never_overlaps() -> None:
    running: set[Key] = set()
    overlaps: list[Key] = []
    calls: list[Key] = []
    gate = threading.Event()

    def handler(key: Key) -> None:
        if key in running:
            overlaps.append(key)
        running.add(key)
        calls.append(key)
        gate.wait(30)
        running.discard(key)
        return None

    q = on_clock(handler, FakeClock(), workers=4)
    q.start()
    for _ in range(50):
        q.add(KEY)
    wait_for(lambda: len(calls) >= 1)
    for _ in range(50):
        q.add(KEY)  # arrives while busy: exactly one more pass
    gate.set()
    wait_for(q.idle)  # every worker waits with nothing queued: no further pass is coming
    q.stop()
    assert overlaps == [] and len(calls) == 2


def test_failure_is_retried_with_backoff_then_succeeds() -> None:
    clock = FakeClock()
    attempts: list[float] = []

    def handler(key: Key) -> None:
        attempts.append(clock())
        if len(attempts) < 3:
            raise RuntimeError("apiserver hiccup")
        return None

    q = on_clock(handler, clock, workers=1)
    q.start()
    t0 = clock()
    q.add(KEY)
    wait_for(q.idle)
    assert attempts == [t0] and q.pending() == {KEY: 1.0}
    clock.set(t0 + 0.99)
    wait_for(q.idle)
    assert attempts == [t0]  # not due yet
    t1 = t0 + 1.0
    clock.set(t1)
    wait_for(q.idle)
    assert attempts == [t0, t1] and q.pending() == {KEY: 2.0}  # the second failure doubles the backoff
    clock.set(t1 + 1.99)
    wait_for(q.idle)
    assert attempts == [t0, t1]
    clock.set(t1 + 2.0)
    wait_for(q.idle)
    q.stop()
    assert attempts == [t0, t1, t1 + 2.0] and q.pending() == {}  # succeeded: nothing more is asked for


def test_requeue_after_runs_the_key_again() -> None:
    clock = FakeClock()
    calls: list[float] = []

    def handler(key: Key) -> float | None:
        calls.append(clock())
        return 0.25 if len(calls) == 1 else None

    q = on_clock(handler, clock, workers=1)
    q.start()
    t0 = clock()
    q.add(KEY)
    wait_for(q.idle)
    assert calls == [t0] and q.pending() == {KEY: 0.25}
    clock.set(t0 + 0.25)
    wait_for(q.idle)
    q.stop()
    assert calls == [t0, t0 + 0.25] and q.pending() == {}


def test_standby_replica_acts_on_nothing_and_runs_every_kept_key_once_it_leads() -> None:
    calls: list[Key] = []
    leading = threading.Event()
    q = on_clock(lambda key: calls.append(key), FakeClock(), workers=2, active=leading.is_set)
    q.start()
    keys = [("ns", f"job-{i}") for i in range(5)]
    for key in [*keys, keys[0]]:
        q.add(key)
    wait_for(q.idle)  # the workers took every key (nothing is queued) and are waiting again
    assert calls == [] and q.pending() == {} and q.standing_by() == len(keys)
    leading.set()  # the lease is won: the elector calls resume
    q.resume()
    wait_for(q.idle)
    q.stop()
    assert sorted(calls) == keys and q.standing_by() == 0  # each kept key ran once, with no event or resync


def test_stop_then_join_waits_for_the_pass_in_flight() -> None:
    entered, release = threading.Event(), threading.Event()
    finished: list[Key] = []

    def slow(key: Key) -> None:
        entered.set()
        release.wait(10)
        finished.append(key)

    q = WorkQueue(slow, workers=1)
    q.start()
    q.add(KEY)
    wait_for(entered.is_set)
    q.stop()
    assert not q.join(timeout=0.05) and finished == []  # still in its pass: a lease must not be handed over yet
    release.set()
    assert q.join(timeout=10) and finished == [KEY]


def test_a_key_keeps_only_its_earliest_deadline_and_memory_stays_bounded() -> None:
    q = WorkQueue(lambda key: None, workers=1, clock=FakeClock())  # not started: nothing fires
    week = 7 * 24 * 3600.0
    for i in range(10_000):
        q.add_after(("ns", f"job-{i % 10}"), week)  # a ttl requeue per pass
        q.add_after(("ns", f"job-{i % 10}"), 30.0 + i % 7)  # and a backoff, earlier
    pending = q.pending()
    assert pending == {("ns", f"job-{j}"): 30.0 for j in range(10)}  # each key's earliest ask, and only that
    assert len(q._delayed) <= 2 * len(pending) + 16


def test_an_earlier_deadline_fires_once_and_the_later_one_is_dropped() -> None:
    clock = FakeClock()
    fired: list[float] = []
    q = on_clock(lambda key: fired.append(clock()), clock, workers=1)
    t0 = clock()
    q.add_after(KEY, 0.5)
    q.add_after(KEY, 0.25)  # earlier: replaces
    q.add_after(KEY, 0.375)  # later than the pending one: ignored
    q.start()
    wait_for(q.idle)
    assert fired == [] and q.pending() == {KEY: 0.25}
    clock.set(t0 + 0.25)
    wait_for(q.idle)
    assert fired == [t0 + 0.25] and q.pending() == {}
    for later in (0.375, 0.5, 3600.0):  # the dropped deadlines' times come and go
        clock.set(t0 + later)
        wait_for(q.idle)
    q.stop()
    assert fired == [t0 + 0.25]


def test_resync_keys_wait_behind_event_driven_keys_and_an_event_promotes_one() -> None:
    order: list[str] = []
    gate = threading.Event()

    def handler(key: Key) -> None:
        if key[1] == "blocker":
            gate.wait(30)
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
