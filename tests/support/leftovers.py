"""The suite checks its own end state: when the session ends (its fixtures torn down), a network namespace, an
``mm*`` link, a pod process or a control-plane process that this session started and left behind fails the run,
listed by name (``mmrl_local.leftovers``). The session marks itself when pytest is configured, before anything is
started; what other runs on the machine own is never counted. Under pytest-xdist the controller marks the run and
checks it once every worker is done: its workers (and all they start) inherit its mark, and a worker that ended early
must not blame what a busy one has running."""

from __future__ import annotations

import os
import sys

import pytest

from mmrl_local import leftovers
from mmrl_local.common import procs

_RUN = pytest.StashKey[tuple[str, str | None, leftovers.Snapshot]]()
SETTLE_SECONDS = 10.0  # processes SIGKILLed by the last teardown may still be exiting


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if _is_worker(config):
        return
    previous = os.environ.get(procs.RUN_MARK)
    config.stash[_RUN] = (leftovers.mark(), previous, leftovers.snapshot())


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    if _is_worker(session.config):
        return
    token, _, before = session.config.stash[_RUN]
    found = leftovers.find_leftovers(token, before, settle=SETTLE_SECONDS)
    if not found:
        return
    text = leftovers.report(found, "this test run")
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write_sep("=", "left behind", red=True)
        reporter.write_line(text)
    else:
        print(text, file=sys.stderr)
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_unconfigure(config: pytest.Config) -> None:
    """Give the mark back (a session pytester runs in-process must not keep its own mark on the outer one)."""
    if _is_worker(config):
        return
    _, previous, _ = config.stash[_RUN]
    if previous is None:
        os.environ.pop(procs.RUN_MARK, None)
    else:
        os.environ[procs.RUN_MARK] = previous
