"""A failed test's report ends with the tail of the log of each process its fixtures ran (the operator, KubeRay):
what a CI run on another machine prints is then enough to tell a wedged operator from a slow one."""

from __future__ import annotations

from pathlib import Path

import pytest

TAIL_LINES = 60


def tail(path: Path, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of `path`, or why there are none."""
    try:
        text = path.read_bytes().decode(errors="replace")
    except OSError as err:
        return f"(no log: {err})"
    return "\n".join(text.splitlines()[-lines:]) or "(empty)"


def process_logs(funcargs: dict[str, object]) -> dict[str, Path]:
    """The fixtures' process logs, by fixture name: every fixture value that has a `log_path`."""
    found = {}
    for name, value in funcargs.items():
        path = getattr(value, "log_path", None)
        if isinstance(path, Path):
            found[name] = path
    return found


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    for name, path in process_logs(funcargs).items():
        alive = getattr(funcargs[name], "alive", None)  # OperatorProcess says whether its process still runs
        state = "" if alive is None else (", running" if alive else ", EXITED")
        report.sections.append((f"{name} log, last {TAIL_LINES} lines ({path}{state})", tail(path)))
