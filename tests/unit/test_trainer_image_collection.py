"""tests/trainer_image (which builds the 7 GB CPU trainer image) runs only when named: `make test` (`pytest tests`)
must not collect it, neither as a pass nor as a skip (a skip fails under CI=true), and `make test-trainer-image`
must."""

from __future__ import annotations

from pathlib import Path

import pytest

CONFTEST = Path(__file__).resolve().parents[1] / "trainer_image" / "conftest.py"


@pytest.fixture
def tree(pytester: pytest.Pytester) -> pytest.Pytester:
    images = pytester.mkdir("tests").joinpath("trainer_image")
    images.mkdir()
    images.joinpath("conftest.py").write_text(CONFTEST.read_text())
    images.joinpath("test_image.py").write_text("def test_image():\n    pass\n")
    pytester.path.joinpath("tests", "test_other.py").write_text("def test_other():\n    pass\n")
    return pytester


def test_the_whole_suite_leaves_the_image_tests_out(tree: pytest.Pytester) -> None:
    result = tree.runpytest("tests", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "test_image" not in result.stdout.str()


@pytest.mark.parametrize("arg", ["tests/trainer_image", "tests/trainer_image/test_image.py::test_image"])
def test_naming_the_image_tests_runs_them(tree: pytest.Pytester, arg: str) -> None:
    tree.runpytest(arg, "-p", "no:cacheprovider").assert_outcomes(passed=1)
