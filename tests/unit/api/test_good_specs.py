"""Valid jobs near the edges of the admission rules (tests/good_specs.yaml) are accepted by the models, so that no
rule is stricter than Kubernetes or the trainer need; tests/cluster/test_admission.py checks the apiserver."""

from __future__ import annotations

import pytest

from mmrl_api import validate_manifest
from tests.support.corpus import bad_manifest, good_cases

CASES = good_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.case for c in CASES])
def test_model_accepts(case) -> None:
    job, errors = validate_manifest(bad_manifest(case))
    assert errors == []
    assert job is not None
