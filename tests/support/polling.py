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
