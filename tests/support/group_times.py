"""At the end of a run, the time each test group took (tests/unit, tests/cluster, ...), setup and teardown
included: where a slow suite spends its minutes, printed by every `make test` for docs/benchmarks.md."""

from __future__ import annotations

from collections import defaultdict

import pytest

_SECONDS: dict[str, float] = defaultdict(float)
_TESTS: dict[str, set[str]] = defaultdict(set)


def group_of(nodeid: str) -> str:
    """`tests/cluster/test_x.py::test_y` -> `tests/cluster`; a test module directly under tests/ is its own."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    return "/".join(parts[:2]) if len(parts) > 2 else path


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    group = group_of(report.nodeid)
    _SECONDS[group] += report.duration
    _TESTS[group].add(report.nodeid)


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
