"""Property tests in an inner pytest run: in CI the same seed draws the same examples on every run and the header
names it; MMRL_HYPOTHESIS_SEED picks another."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

INNER = """
import json, os
from hypothesis import given, settings, strategies as st

DRAWN = []

@settings(max_examples=20)
@given(st.integers(0, 10**12))
def test_draws(n):
    DRAWN.append(n)

def test_zz_write():
    with open(os.environ["DRAWN_OUT"], "w") as f:
        json.dump(DRAWN, f)
"""


def drawn(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, out: Path, seed: str | None) -> list[int]:
    monkeypatch.setenv("CI", "true")
    monkeypatch.setenv("DRAWN_OUT", str(out))
    if seed is None:
        monkeypatch.delenv("MMRL_HYPOTHESIS_SEED", raising=False)
    else:
        monkeypatch.setenv("MMRL_HYPOTHESIS_SEED", seed)
    pytester.makeconftest('pytest_plugins = ["tests.support.ci_strict", "tests.support.property_seed"]')
    pytester.makepyfile(test_inner=INNER)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"property tests: hypothesis seed {seed or 0} *"])
    return json.loads(out.read_text())


def test_ci_runs_property_tests_from_one_printed_seed(pytester, monkeypatch, tmp_path) -> None:
    first = drawn(pytester, monkeypatch, tmp_path / "a.json", None)
    again = drawn(pytester, monkeypatch, tmp_path / "b.json", None)
    other = drawn(pytester, monkeypatch, tmp_path / "c.json", "12345")
    assert len(first) == 20
    assert first == again
    assert other != first
