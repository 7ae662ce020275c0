"""A failed test's report ends with the tail of every log its fixtures' processes wrote: each process a fixture ran
(the operator, KubeRay) and every container the local kubelets of this process started, deleted pods' included, with
whether each still runs. What a CI run on another machine prints is then enough to tell a wedged operator from a slow
one, or a vLLM server still loading from one that exited."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

TAIL_LINES = 60
POD_TAIL_LINES = 30  # a test may run a dozen pods (Ray heads, workers, submitters, servers)


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


def container_logs() -> list[tuple[str, Path, bool]]:
    """(namespace/pod/container, log file, still running) for every container of every kubelet open in this process."""
    from mmrl_local.node import kubelet  # only a cluster test has one; a unit test imports nothing of local/

    return [(c.name, c.path, c.running) for k in list(kubelet.RUNNING) for c in k.container_logs()]


def _state(alive: object) -> str:
    return "" if alive is None else (", running" if alive else ", EXITED")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> object:
    outcome = yield
    report = outcome.get_result()
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    for name, path in process_logs(funcargs).items():
        alive = getattr(funcargs[name], "alive", None)  # OperatorProcess says whether its process still runs
        report.sections.append((f"{name} log, last {TAIL_LINES} lines ({path}{_state(alive)})", tail(path)))
    if "mmrl_local.node.kubelet" not in sys.modules:  # no kubelet ever started here
        return
    for name, path, running in container_logs():
        section = f"pod {name} log, last {POD_TAIL_LINES} lines ({path}{_state(running)})"
        report.sections.append((section, tail(path, POD_TAIL_LINES)))
