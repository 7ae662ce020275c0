"""A failed test's report carries the tail of its fixtures' process logs and of the containers its kubelets ran; a
passing one does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.failure_logs import POD_TAIL_LINES, TAIL_LINES, process_logs, tail

INNER = """
from pathlib import Path
import pytest

class Proc:
    alive = False

    def __init__(self, path):
        self.log_path = path

@pytest.fixture
def operator(tmp_path):
    path = tmp_path / "operator.log"
    path.write_text("".join(f"line {i}\\n" for i in range(500)) + "the last pass: Provisioning\\n")
    return Proc(path)

def test_fails(operator):
    assert False, "waiting for geo"

def test_passes(operator):
    pass
"""


def test_a_failed_report_ends_with_the_operator_log_tail(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.support.failure_logs"]')
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"*operator log, last {TAIL_LINES} lines*EXITED*", "the last pass: Provisioning"])
    out = result.stdout.str()
    assert "line 499" in out and "line 100\n" not in out
    assert out.count("operator log, last") == 1  # the passing test adds nothing


def test_tail_and_the_logs_a_fixture_names(tmp_path: Path) -> None:
    log = tmp_path / "a.log"
    log.write_text("a\nb\nc\n")
    assert tail(log, 2) == "b\nc"
    assert tail(tmp_path / "missing.log").startswith("(no log:")
    assert process_logs({"operator": type("P", (), {"log_path": log})(), "n": 3, "s": "x"}) == {"operator": log}


INNER_PODS = """
from pathlib import Path
from mmrl_local.node.kubelet import RUNNING, ContainerLog

class Kubelet:  # what failure_logs reads of a kubelet (tests/cluster/test_failure_report.py runs the real one)
    def __init__(self, logs):
        self.logs = logs

    def container_logs(self):
        return self.logs

def test_fails_while_a_server_loads(tmp_path):
    served = tmp_path / "vllm.log"
    served.write_text("".join(f"engine line {i}\\n" for i in range(100)) + "waiting for the worker\\n")
    done = tmp_path / "check.log"
    done.write_text("sha256 mismatch\\n")
    kubelet = Kubelet([ContainerLog("ns/server-0/vllm", served, True), ContainerLog("ns/check/main", done, False)])
    RUNNING.add(kubelet)
    assert False, "alpha served"
"""


def test_a_failed_report_ends_with_every_container_log_its_kubelets_ran(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["tests.support.failure_logs"]')
    pytester.makepyfile(test_inner=INNER_PODS)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*pod ns/server-0/vllm log, last {POD_TAIL_LINES} lines*running*"])
    result.stdout.fnmatch_lines(["*pod ns/check/main log*EXITED*", "sha256 mismatch"])
    out = result.stdout.str()
    assert "waiting for the worker" in out and "engine line 99" in out and "engine line 60\n" not in out
