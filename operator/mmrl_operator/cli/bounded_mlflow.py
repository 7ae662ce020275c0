"""MLflow client reads that cost their caller only so much time: a budget for the whole read, a bounded number of
tries per request, and the cause when it gives up.

MLflow's client reads its retry settings from the environment at every request (mlflow/environment_variables.py):
by default 7 retries with a backoff factor of 2 and a jitter of 1 s, 120 s per try, and it waits as long as a
Retry-After header asks. Against a tracking server that is gone, one request then takes minutes, and a reader that
makes several requests (one per metric) takes many. Here each request gets `RETRIES` retries, no jitter, a backoff
of 0 s then 2 s, no Retry-After waits, and a timeout per try sized so that the request, retries and waits included,
fits in what is left of the budget; the first request that fails ends the read (TrackingReadError, with MLflow's
own message: refused, timed out, not found). One try can take its timeout twice, once to connect and once to
read, so a request's worst case is `TRIES * 2 * timeout + BACKOFF`. Name resolution is the system resolver's and
not bounded here.

The settings are set in this process's environment for the duration of the read and put back afterwards (the
variables a user set included), so code that runs while a read is in flight in another thread would see them too.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

RETRIES = 2
TRIES = RETRIES + 1
BACKOFF = 2  # urllib3 waits 0 s before the first retry and factor * 2 s before the second; factor 1
MIN_TRY_TIMEOUT = 1  # MLflow takes whole seconds
SMALLEST_BUDGET = TRIES * 2 * MIN_TRY_TIMEOUT + BACKOFF
"""A budget below this cannot fit one request's worst case."""
DEFAULT_BUDGET = 30.0

T = TypeVar("T")


class TrackingReadError(LookupError):
    """The tracking server did not give the data within the read's budget; the message says why."""


def budget_seconds(text: str) -> float:
    """A budget given on a command line (argparse `type=`)."""
    try:
        seconds = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not seconds >= SMALLEST_BUDGET:
        raise argparse.ArgumentTypeError(f"{text}: at least {SMALLEST_BUDGET} seconds, one MLflow request's worst case")
    return seconds


def try_timeout(seconds_left: float) -> int:
    """The per-try timeout (whole seconds) that fits one request's worst case into `seconds_left`; 0 if none does."""
    return max(0, int((seconds_left - BACKOFF) // (TRIES * 2)))


def request_env(timeout: int) -> dict[str, str]:
    """The MLflow client settings for one request with tries of at most `timeout` seconds."""
    return {
        "MLFLOW_HTTP_REQUEST_MAX_RETRIES": str(RETRIES),
        "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
        "MLFLOW_HTTP_REQUEST_BACKOFF_JITTER": "0",
        "MLFLOW_HTTP_REQUEST_TIMEOUT": str(timeout),
        "MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER": "false",
    }


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    before = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


class Budget:
    """`seconds` for every request of one read against the server at `where` (named in the errors)."""

    def __init__(self, where: str, seconds: float) -> None:
        if seconds < SMALLEST_BUDGET:
            raise ValueError(f"a budget of {seconds:g}s is below the {SMALLEST_BUDGET}s one MLflow request can take")
        self.where, self.seconds = where, seconds
        self.started = time.monotonic()
        self.deadline = self.started + seconds

    def call(self, what: str, request: Callable[[], T]) -> T:
        """`request()` (one MLflow client call, `what` it reads) with tries that fit what is left of the budget."""
        from mlflow.exceptions import MlflowException

        timeout = try_timeout(self.deadline - time.monotonic())
        if timeout < MIN_TRY_TIMEOUT:
            raise TrackingReadError(
                f"{self.where}: {what} not read: the {self.seconds:g}s budget for reading it is spent"
            )
        try:
            with _environment(request_env(timeout)):
                return request()
        except (MlflowException, OSError) as exc:
            spent = time.monotonic() - self.started
            raise TrackingReadError(
                f"{self.where}: gave up reading {what} after {spent:.1f}s of a {self.seconds:g}s budget (at most "
                f"{TRIES} tries of {timeout}s): {exc}"
            ) from exc
