"""At the end of a run, the time each test group took (tests/unit, tests/cluster, ...), setup and teardown
included: where a slow suite spends its minutes, printed by every `make test` for docs/benchmarks.md."""

from __future__ import annotations

import json
import os
from collections import defaultdict

import pytest

_SECONDS: dict[str, float] = defaultdict(float)
_TESTS: dict[str, set[str]] = defaultdict(set)


def group_of(nodeid: str) -> str:
    """`tests/cluster/test_x.py::test_y` -> `tests/cluster`; a test module directly under tests/ is its own."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else path


def timeline_row(report: pytest.TestReport) -> dict:
    """One phase of one test as a line of the timeline: which worker ran it, from when to when (epoch seconds)."""
    node = getattr(report, "node", None)  # pytest-xdist's controller sets it to the worker that sent the report
    worker = node.gateway.id if node is not None else "main"
    return {
        "test": report.nodeid,
        "when": report.when,
        "worker": worker,
        "outcome": report.outcome,
        "start": report.start,
        "stop": report.stop,
    }


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    group = group_of(report.nodeid)
    _SECONDS[group] += report.duration
    _TESTS[group].add(report.nodeid)
    # MMRL_TEST_TIMELINE=<file>: every phase of every test, a JSON object per line, to see how the workers'
    # schedules line up (which chain is the critical path, where a worker sits idle).
    # Only the controller writes: pytest-xdist's workers see each report first, without the worker's name.
    if (path := os.environ.get("MMRL_TEST_TIMELINE")) and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a") as out:
            out.write(json.dumps(timeline_row(report)) + "\n")


def table(seconds: dict[str, float], tests: dict[str, set[str]]) -> list[str]:
    total = sum(seconds.values())
    rows = [f"{'group':<28} {'tests':>6} {'minutes':>8} {'share':>6}"]
    for group, spent in sorted(seconds.items(), key=lambda kv: -kv[1]):
        rows.append(f"{group:<28} {len(tests[group]):>6} {spent / 60:>8.1f} {spent / total if total else 0:>6.0%}")
    rows.append(f"{'all':<28} {sum(len(t) for t in tests.values()):>6} {total / 60:>8.1f}")
    return rows


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    if _SECONDS:
        workers = config.getoption("numprocesses", None)  # pytest-xdist's -n: the groups' times overlap
        where = f", summed over {workers} parallel workers" if workers else ""
        terminalreporter.write_sep("=", f"time per test group (setup, call and teardown{where})")
        for row in table(_SECONDS, _TESTS):
            terminalreporter.write_line(row)
