"""Waiting on a server by its progress (tests/support/polling.py): the wait lasts while the server logs or works, fails
soon after it does neither, fails at once when the server says it exited, and has a ceiling."""

from __future__ import annotations

import time

import pytest

from tests.support.polling import wait_while_progressing


class Server:
    """A stand-in for a server's progress: logs a line every `log_every` polls, uses `cpu_per_poll` CPU seconds."""

    def __init__(self, log_every: int = 0, cpu_per_poll: float = 0.0, ready_after: float = 1e9) -> None:
        self.polls, self.log_every, self.cpu_per_poll = 0, log_every, cpu_per_poll
        self.started, self.ready_after = time.monotonic(), ready_after

    def ready(self) -> bool:
        return time.monotonic() - self.started >= self.ready_after

    def progress(self) -> tuple[int, float]:
        self.polls += 1
        logged = self.polls // self.log_every if self.log_every else 0
        return logged, self.polls * self.cpu_per_poll


def test_a_server_that_keeps_logging_is_waited_for_past_the_stall_window() -> None:
    server = Server(log_every=1, ready_after=1.0)
    assert wait_while_progressing(server.ready, server.progress, stalled=0.3, what="ready", interval=0.02)
    assert time.monotonic() - server.started >= 1.0


def test_a_server_that_only_works_silently_is_waited_for_too() -> None:
    server = Server(cpu_per_poll=0.05, ready_after=1.0)  # 0.05 CPU s per 0.02 s poll: busier than `busy`
    assert wait_while_progressing(server.ready, server.progress, stalled=0.3, what="ready", interval=0.02)


def test_a_server_that_neither_logs_nor_works_fails_after_the_stall_window() -> None:
    server = Server(cpu_per_poll=0.0001)
    with pytest.raises(AssertionError, match=r"no progress for 0s .*waiting for alpha served"):
        wait_while_progressing(server.ready, server.progress, stalled=0.3, what="alpha served", interval=0.02)
    assert time.monotonic() - server.started < 5


def test_a_server_that_exits_fails_the_wait_at_once() -> None:
    def exited() -> tuple[int, float]:
        raise AssertionError("shared-vllm-0/vllm exited 1: no module named vllm")

    started = time.monotonic()
    with pytest.raises(AssertionError, match="exited 1: no module named vllm"):
        wait_while_progressing(lambda: False, exited, stalled=60, what="alpha served")
    assert time.monotonic() - started < 5


def test_a_server_that_works_forever_meets_the_ceiling() -> None:
    server = Server(log_every=1)
    with pytest.raises(AssertionError, match="still working after 1s waiting for ready"):
        wait_while_progressing(server.ready, server.progress, stalled=0.3, what="ready", ceiling=1.0, interval=0.02)
