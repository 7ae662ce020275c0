"""The one way local/'s background threads loop: a pass that raises is logged (with its traceback) and the loop goes
on, so a thread never dies silently and takes its duty with it (the pod-network reaper did, and the namespaces
it should have removed outlived the run)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("mmrl_local.common.loops")


def run_passes(
    name: str,
    one_pass: Callable[[], object],
    stop: threading.Event,
    *,
    interval: float,
    backoff: float = 1.0,
    pause: Callable[[float], object] | None = None,
    on_error: Callable[[Exception], object] | None = None,
) -> None:
    """Call ``one_pass`` until ``stop`` is set, pausing ``interval`` seconds after a pass that returned and at least
    ``backoff`` after one that raised (so a pass that fails at once cannot spin). ``pause(seconds)`` waits; by
    default ``stop.wait``, so ``stop`` ends a pause at once. ``on_error`` sees each error after it is logged."""
    wait = pause or stop.wait
    while not stop.is_set():
        try:
            one_pass()
        except Exception as err:
            log.exception("%s: a pass failed; the loop goes on", name)
            if on_error is not None:
                on_error(err)
            wait(max(interval, backoff))
            continue
        wait(interval)
