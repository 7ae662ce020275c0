"""The suite's CI rule, run for real in an inner pytest with the suite's own plugins (tests/conftest.py's list, so
the rule must be installed there): with CI=true each kind of skip fails the run, and says why, in one process and
in parallel workers (pytest-xdist, as `make test` runs); without it, a skip stays a skip."""

from __future__ import annotations

import pytest

INNER = """
import pytest

pytest.importorskip("a_package_that_is_not_installed_anywhere") if {module_skip} else None

def test_skips_at_run_time():
    pytest.skip("no pod network here")

@pytest.fixture
def network():
    pytest.skip("no pod network in the fixture")

def test_skips_in_a_fixture(network):
    pass

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_to_fail():
    assert False

def test_passes():
    pass
"""


# The inner run's plugins are the suite's: a rule that tests/conftest.py does not install fails these tests.
SUITE_CONFTEST = "from tests.conftest import pytest_plugins  # noqa: F401\n"


def run(
    pytester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    ci: str | None,
    module_skip: bool = False,
    workers: list[str] | None = None,
):
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    pytester.makeconftest(SUITE_CONFTEST)
    pytester.makepyfile(test_inner=INNER.format(module_skip=module_skip))
    return pytester.runpytest_subprocess("-rA", "-p", "no:cacheprovider", *(workers or []))


@pytest.mark.parametrize("workers", [[], ["-n", "2"]], ids=["one process", "two xdist workers"])
def test_in_ci_every_skip_is_a_failure_with_its_reason(pytester, monkeypatch, workers) -> None:
    result = run(pytester, monkeypatch, "true", workers=workers)
    if workers:
        result.stdout.fnmatch_lines(["*created: 2/2 workers*"])
    # A skip in a fixture fails the test's setup, which pytest reports as an error.
    result.assert_outcomes(passed=1, failed=1, errors=1, xfailed=1)
    result.stdout.fnmatch_lines(["*every skip a failure: Skipped: no pod network here*"])
    result.stdout.fnmatch_lines(["*every skip a failure: Skipped: no pod network in the fixture*"])


def test_in_ci_a_module_level_importorskip_fails_collection(pytester, monkeypatch) -> None:
    result = run(pytester, monkeypatch, "true", module_skip=True)
    assert result.ret != 0
    result.stdout.fnmatch_lines(["*every skip a failure*a_package_that_is_not_installed_anywhere*"])


def test_outside_ci_a_skip_stays_a_skip(pytester, monkeypatch) -> None:
    result = run(pytester, monkeypatch, None)
    result.assert_outcomes(passed=1, skipped=2, xfailed=1)
    assert result.ret == 0
