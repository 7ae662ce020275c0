"""The suite's end-state check, run for real in an inner pytest: a session that leaves a network namespace, an
``mm*`` link or a pod process behind fails, naming each, even though every test passed; a session that cleans up
passes; what was there before the session is not its doing."""

from __future__ import annotations

import os
import secrets
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from mmrl_local.common import procs
from mmrl_local.network import podnet

# Both files add unregistered namespaces and links that the other's snapshots would count: in a parallel run
# (pytest-xdist) they share one worker, so they never run at the same time (tests/conftest.py, _SHARE_A_WORKER).

LEAKS = """
import os, subprocess
from mmrl_local.network import podnet

def test_leaks():
    podnet.ip("netns", "add", os.environ["LEAK_NETNS"])
    podnet.ip("link", "add", os.environ["LEAK_LINK"], "type", "bridge")
    pod = subprocess.Popen(["unshare", "--mount", "sleep", "60"], start_new_session=True)
    with open(os.environ["LEAK_PID_FILE"], "w") as out:
        out.write(str(pod.pid))

def test_cleans_up():
    pass
"""

CLEAN = """
import os, subprocess
from mmrl_local.network import podnet

def test_cleans_up():
    podnet.ip("netns", "add", os.environ["LEAK_NETNS"])
    podnet.ip("netns", "del", os.environ["LEAK_NETNS"])
    subprocess.run(["unshare", "--mount", "true"], check=True)
"""


@pytest.fixture
def names(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[dict[str, str]]:
    reason = podnet.unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    tag = secrets.token_hex(3)
    # The probe name of this (live) process: no other run's cleanup on the machine removes it meanwhile.
    found = {
        "LEAK_NETNS": f"mmrl-probe-{os.getpid()}-leak{tag}",
        "LEAK_LINK": f"mmt{tag}",
        "LEAK_PID_FILE": str(tmp_path / "pod.pid"),
    }
    for key, value in found.items():
        monkeypatch.setenv(key, value)
    yield found
    podnet.ip("netns", "del", found["LEAK_NETNS"], check=False)
    podnet.ip("link", "del", found["LEAK_LINK"], check=False)


def run(pytester: pytest.Pytester, source: str) -> pytest.RunResult:
    pytester.makeconftest('pytest_plugins = ["tests.support.leftovers"]')
    pytester.makepyfile(test_inner=source)
    return pytester.runpytest_subprocess("-p", "no:cacheprovider")


def test_a_session_that_leaves_things_behind_fails_and_names_them(pytester, names) -> None:
    result = run(pytester, LEAKS)
    pid = int(Path(names["LEAK_PID_FILE"]).read_text())
    try:
        result.assert_outcomes(passed=2)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        result.stdout.fnmatch_lines(
            [
                "*left behind*",
                f"*network namespace {names['LEAK_NETNS']}*",
                f"*link {names['LEAK_LINK']}*",
                f"*pod process {pid}: sleep 60*",
            ]
        )
    finally:
        os.kill(pid, signal.SIGKILL)
        assert procs.wait_gone([pid]) == []


def test_a_session_that_cleans_up_passes(pytester, names) -> None:
    result = run(pytester, CLEAN)
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.OK
    assert "left behind" not in result.stdout.str()


def test_what_was_there_before_the_session_is_not_its_doing(pytester, names) -> None:
    podnet.ip("netns", "add", names["LEAK_NETNS"])
    result = run(pytester, "def test_nothing():\n    pass\n")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
