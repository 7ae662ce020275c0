"""Make every test, and every process a test starts (operator, trainer, stand-in entrypoints), import this
checkout's sources — not whichever checkout last ran `pip install -e .` into the shared cached venv."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [str(ROOT / d) for d in ("api", "operator", "trainer", "local")]
os.environ["PYTHONPATH"] = os.pathsep.join([*SOURCES, str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
# Nothing a test starts phones home (Ray, vLLM, the HF hub, anything honouring DO_NOT_TRACK), in this process or its
# children.
for _name, _value in {
    "RAY_USAGE_STATS_ENABLED": "0",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
}.items():
    os.environ[_name] = _value
# Parallel workers (pytest-xdist's gw0, gw1, ...) each run a control plane of their own; each takes its own part of
# the pod IP ranges, so the pods two workers run for real never get the same address (podnet.slice_of). Slice 0 is
# left out: a run without a slice (a developer's `make up`, a one-process test run) hands out addresses from there.
if os.environ.get("PYTEST_XDIST_WORKER", "").removeprefix("gw").isdigit():
    os.environ["MMRL_POD_SLICE"] = str(1 + int(os.environ["PYTEST_XDIST_WORKER"].removeprefix("gw")) % 7)

# Control plane, namespace, nodes, stand-in and operator fixtures for tests/cluster and tests/e2e (lazy: unit tests
# never start anything); in CI a skip is a failure (ci_strict) and property tests run from a fixed, printed seed
# (property_seed); pytester runs the suite's own plugins in a test.
pytest_plugins = [
    "tests.support.cluster_fixtures",
    "tests.support.ci_strict",
    "tests.support.property_seed",
    "tests.support.leftovers",  # a namespace, link or process the session left behind fails the run
    "tests.support.group_times",  # the time each test group took, at the end of the run
    "tests.support.failure_logs",  # a failed test's report ends with its operator's (and KubeRay's) log
    "tests.support.parallel",  # TEST_WORKERS=N: which tests share a worker, and in what order workers take them
    "pytester",
]


def pytest_collection_finish(session) -> None:
    """When SkyRL tests were collected, their worker imports SkyRL while the tests before them run. A parallel
    worker (pytest-xdist) does not know which tests it will get: it imports SkyRL at its first SkyRL test."""
    from tests.support import skyrl

    if hasattr(session.config, "workerinput"):
        return

    if any(getattr(getattr(item, "module", None), "run_skyrl", None) is skyrl.run_skyrl for item in session.items):
        # No SkyRL venv: each SkyRL test fails on its own, saying how to build it.
        with contextlib.suppress(pytest.fail.Exception):
            skyrl.start_worker()
