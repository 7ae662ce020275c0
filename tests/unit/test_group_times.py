"""The per-group time table make test prints."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tests.support.group_times import group_of, table, timeline_row


def test_a_test_belongs_to_the_folder_under_tests() -> None:
    assert group_of("tests/cluster/test_faults.py::test_x[a/b]") == "tests/cluster"
    assert group_of("tests/unit/operator/test_decide.py::test_y") == "tests/unit"
    assert group_of("tests/test_top.py::test_z") == "tests/test_top.py"


def test_the_table_sorts_by_time_and_adds_up() -> None:
    rows = table({"tests/unit": 60.0, "tests/cluster": 180.0}, {"tests/unit": {"a", "b"}, "tests/cluster": {"c"}})
    assert rows[1].split() == ["tests/cluster", "1", "3.0", "75%"]
    assert rows[2].split() == ["tests/unit", "2", "1.0", "25%"]
    assert rows[3].split() == ["all", "3", "4.0"]


def test_a_timeline_row_names_the_worker_and_the_phase_times() -> None:
    report = pytest.TestReport(
        "tests/cluster/test_x.py::test_y",
        ("tests/cluster/test_x.py", 1, "test_y"),
        {},
        "passed",
        None,
        "call",
        duration=2.5,
        start=100.0,
        stop=102.5,
    )
    assert timeline_row(report) == {
        "test": "tests/cluster/test_x.py::test_y",
        "when": "call",
        "worker": "main",
        "outcome": "passed",
        "start": 100.0,
        "stop": 102.5,
    }
    report.node = SimpleNamespace(gateway=SimpleNamespace(id="gw3"))  # as pytest-xdist's controller sets it
    assert timeline_row(report)["worker"] == "gw3"
