"""`mmrl plot`'s MLflow reader (and the demo's summary, which uses it) gives up within its budget, after a bounded
number of tries, and says why: against a port that accepts and never answers, a closed port, and a server that
asks to be retried in an hour. Without the bounds MLflow's client retries each of these for minutes per request.
The time asserts are the budget the reader promises, not a speed goal."""

from __future__ import annotations

import argparse
import os
import time

import pytest

from mmrl_local.cluster.controlplane import free_port
from mmrl_operator.cli.bounded_mlflow import SMALLEST_BUDGET, TRIES, TrackingReadError, budget_seconds, request_env
from mmrl_operator.cli.main import main as mmrl
from mmrl_operator.cli.plot import find_curves, from_mlflow
from tests.support.misbehaving_server import start

pytest.importorskip("mlflow")

BUDGET = 10.0  # tries of 1 s: (10 - 2) // 6


def timed_failure(url: str, budget: float = BUDGET) -> tuple[str, float]:
    started = time.monotonic()
    with pytest.raises(TrackingReadError) as caught:
        from_mlflow(url, "0123abcd", timeout=budget)
    return str(caught.value), time.monotonic() - started


def test_a_server_that_accepts_and_never_answers_is_tried_three_times_within_the_budget() -> None:
    server, record = start("hold")
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        message, took = timed_failure(url)
    finally:
        record.release.set()
        server.shutdown()
    assert took < BUDGET, took
    assert record.held == TRIES  # the first request's tries; the other metrics are not asked once one failed
    assert f"MLflow run 0123abcd at {url}: gave up reading metric 'reward'" in message
    assert "Read timed out" in message, message


def test_a_closed_port_is_refused_and_the_reader_says_so() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    message, took = timed_failure(url)
    assert took < BUDGET, took
    assert "Connection refused" in message or "NewConnectionError" in message, message


def test_a_retry_after_of_an_hour_is_not_waited_for() -> None:
    server, record = start("retry-after")
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        message, took = timed_failure(url)
    finally:
        server.shutdown()
    assert took < BUDGET, took
    assert len(record.sent) == TRIES
    assert "come back later" in message, message  # the server's own answer, from its last try


def test_the_client_settings_are_the_callers_again_after_the_read(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "77")
    monkeypatch.delenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", raising=False)
    timed_failure(f"http://127.0.0.1:{free_port()}")
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "77"
    assert "MLFLOW_HTTP_REQUEST_MAX_RETRIES" not in os.environ
    assert set(request_env(1)) >= {"MLFLOW_HTTP_REQUEST_MAX_RETRIES", "MLFLOW_HTTP_RESPECT_RETRY_AFTER_HEADER"}


def test_mmrl_plot_takes_a_timeout_that_fits_at_least_one_request(capsys: pytest.CaptureFixture[str]) -> None:
    assert budget_seconds("45") == 45.0
    with pytest.raises(argparse.ArgumentTypeError, match=f"at least {SMALLEST_BUDGET} seconds"):
        budget_seconds(str(SMALLEST_BUDGET - 1))
    with pytest.raises(SystemExit):
        mmrl(["plot", "geo", "--timeout", "3"])
    assert f"--timeout: 3: at least {SMALLEST_BUDGET} seconds" in capsys.readouterr().err


def test_the_budget_reaches_the_mlflow_read_when_the_curve_comes_from_the_jobs_run() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    job = {"spec": {"tracking": {"mlflow": {"trackingUri": url}}}, "status": {"tracking": {"mlflow": {"runId": "r9"}}}}
    with pytest.raises(
        LookupError, match=rf"MLflow run r9 at {url}: gave up reading metric 'reward' after .* 9s budget"
    ):
        find_curves(job, None, timeout=9)
