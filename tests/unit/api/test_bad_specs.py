"""Every case of the malformed-job corpus is rejected by the models and by `mmrl validate`, naming its field."""

from __future__ import annotations

import io

import pytest
import yaml

from mmrl_api import validate_manifest
from mmrl_operator.cli.main import validate_files
from tests.support.corpus import bad_cases, bad_manifest

CASES = bad_cases()


def test_corpus_is_large_enough_to_mean_something() -> None:
    assert len(CASES) >= 30
    assert len({c.case for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c.case for c in CASES])
def test_model_names_the_field(case) -> None:
    job, errors = validate_manifest(bad_manifest(case))
    assert job is None
    paths = [e.path for e in errors]
    assert case.expect in paths, f"{case.case}: expected an error at {case.expect}, got {errors}"


@pytest.mark.parametrize("case", CASES, ids=[c.case for c in CASES])
def test_validate_command_exits_1_and_prints_the_path(case, tmp_path) -> None:
    path = tmp_path / f"{case.case}.yaml"
    path.write_text(yaml.safe_dump(bad_manifest(case)))
    out, err = io.StringIO(), io.StringIO()
    assert validate_files([str(path)], out=out, err=err) == 1
    assert f"{path}: {case.expect}: " in err.getvalue()
    assert out.getvalue() == ""
