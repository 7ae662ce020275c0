"""A failed test's report carries the tail of its fixtures' process logs; a passing one does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.failure_logs import TAIL_LINES, process_logs, tail

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
