"""The one polling loop the tests use: wait until a predicate returns something truthy, and return it."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    pred: Callable[[], Any],
    timeout: float = 30.0,
    interval: float = 0.2,
    what: str | Callable[[], str] = "",
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Poll `pred`; exceptions in `retry_on` count as "not yet". Fails with the last value seen, and `what` (a
    callable `what` is asked only then, so it can describe the state the wait ran out in)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = pred()
        except retry_on:
            last = None
        if last:
            return last
        if time.monotonic() > deadline:
            said = what() if callable(what) else what
            raise AssertionError(f"timed out after {timeout}s waiting for {said or pred}; last value {last!r}")
        time.sleep(interval)


def wait_while_progressing(
    pred: Callable[[], Any],
    progress: Callable[[], tuple[int, float]],
    *,
    stalled: float,
    what: str | Callable[[], str],
    ceiling: float = 1800.0,
    busy: float = 0.1,
    interval: float = 0.5,
    retry_on: tuple[type[BaseException], ...] = (),
) -> Any:
    """Wait for `pred` as long as what it waits on moves: a server loading a model on a loaded machine may take ten
    minutes or two, and one wall-clock number is either too short for the first or hides a hang for the second.

    `progress()` returns (bytes logged, CPU seconds used) so far by what the wait is on (its processes); it raises
    (an AssertionError, say) to fail the wait at once, as when the server's process exited. The wait fails when,
    over the last `stalled` seconds, nothing was logged and less than `busy` of a core was used (a server that is up
    and idle while nobody gives it work), or after `ceiling` seconds in all (a server that never stops working)."""
    start = time.monotonic()
    samples: list[tuple[float, int, float]] = []  # (when, logged, cpu)
    last: Any = None
    while True:
        try:
            last = pred()
        except retry_on:
            last = None
        if last:
            return last
        now = time.monotonic()
        try:
            logged, cpu = progress()
        except retry_on:
            logged, cpu = (samples[-1][1], samples[-1][2]) if samples else (0, 0.0)
        samples.append((now, logged, cpu))
        old = [s for s in samples if s[0] <= now - stalled]
        if old:
            since, was_logged, was_cpu = old[-1]
            samples = samples[len(old) - 1 :]
            if logged == was_logged and cpu - was_cpu < busy * (now - since):
                said = what() if callable(what) else what
                raise AssertionError(
                    f"no progress for {stalled:.0f}s (nothing logged, {cpu - was_cpu:.1f} CPU seconds) waiting for "
                    f"{said}, {now - start:.0f}s in; last value {last!r}"
                )
        if now - start > ceiling:
            said = what() if callable(what) else what
            raise AssertionError(f"still working after {ceiling:.0f}s waiting for {said}; last value {last!r}")
        time.sleep(interval)
