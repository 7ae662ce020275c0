"""In CI (``CI=true``) a skip is a failure.

A skipped test proves nothing, and in CI it hides what a fresh machine lacks (a pod network, a locked package that
does not import, a linter the lock installs) behind a green run. Developers keep their skips where a machine
cannot run a test (no root for pod namespaces); CI, which always can, reports each one as a failed test, with the
skip's own reason. Collection skips (a module-level ``pytest.skip``) are failed the same way. ``xfail`` is left
alone: it states an expected failure, not a missing part.
"""

from __future__ import annotations

import os

import pytest

PREFIX = "skipped in CI, where CI=true makes every skip a failure"


def in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _reason(longrepr: object) -> str:
    # A skip's longrepr is (path, line, "Skipped: <reason>").
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2])
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped and not hasattr(report, "wasxfail"):
        report.outcome = "failed"
        report.longrepr = f"{PREFIX}: {_reason(report.longrepr)}"


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> object:
    outcome = yield
    report = outcome.get_result()
    if in_ci() and report.skipped:
        report.outcome = "failed"
        report.longrepr = f"{PREFIX}: {_reason(report.longrepr)}"
