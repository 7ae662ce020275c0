"""``loops.run_passes``: a pass that raises is logged with its traceback and the loop goes on; a pass that keeps
failing cannot spin; ``stop`` ends the loop at once, even mid-pause."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from mmrl_local.common.loops import run_passes


def start(target, *args, **kwargs) -> threading.Thread:
    thread = threading.Thread(target=target, args=args, kwargs=kwargs, daemon=True)
    thread.start()
    return thread


def test_a_pass_that_raises_is_logged_and_the_loop_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="mmrl_local.common.loops")
    stop, later = threading.Event(), threading.Event()
    passes: list[int] = []
    errors: list[Exception] = []

    def one_pass() -> None:
        passes.append(len(passes))
        if len(passes) == 2:
            raise ValueError("the second pass breaks")
        if len(passes) == 4:
            later.set()

    thread = start(run_passes, "test-loop", one_pass, stop, interval=0.0, backoff=0.0, on_error=errors.append)
    try:
        assert later.wait(10), f"no pass after the failing one; passes: {passes}"
    finally:
        stop.set()
        thread.join(10)
    assert not thread.is_alive()
    assert [str(e) for e in errors] == ["the second pass breaks"]
    [record] = [r for r in caplog.records if r.name == "mmrl_local.common.loops"]
    assert record.levelno == logging.ERROR and "test-loop" in record.getMessage()
    assert record.exc_info is not None and record.exc_info[0] is ValueError  # the traceback is in the log


def test_a_pass_that_keeps_failing_waits_the_backoff_between_tries() -> None:
    stop = threading.Event()
    times: list[float] = []

    def failing() -> None:
        times.append(time.monotonic())
        if len(times) == 3:
            stop.set()
        raise RuntimeError("always")

    run_passes("failing", failing, stop, interval=0.0, backoff=0.2)
    assert len(times) == 3
    assert times[2] - times[0] >= 0.35  # two backoffs of 0.2 s, not a spin


def test_stop_ends_the_loop_during_its_pause() -> None:
    stop, ran = threading.Event(), threading.Event()
    thread = start(run_passes, "slow", ran.set, stop, interval=3600.0)
    assert ran.wait(10)
    began = time.monotonic()
    stop.set()
    thread.join(10)
    assert not thread.is_alive() and time.monotonic() - began < 5


def test_an_exception_that_is_not_an_error_still_ends_the_thread() -> None:
    """Only ``Exception`` is survived: KeyboardInterrupt and SystemExit still end it."""
    stop = threading.Event()

    def leave() -> None:
        raise SystemExit(0)

    with pytest.raises(SystemExit):
        run_passes("leaving", leave, stop, interval=0.0)
