"""`mmrl validate` and the real apiserver (generated CRD: schema + CEL) accept and refuse the same job specs.

A few hundred generated specs (tests/support/validation_agreement.py); bench/validation_agreement.py runs
thousands. A disagreement means a rule is missing on one side or differs: fix the model or the CEL.
"""

from __future__ import annotations

import pytest

from tests.support import validation_agreement as agreement

pytestmark = pytest.mark.cluster
SPECS = 300


def test_mmrl_validate_and_the_apiserver_agree_on_generated_specs(api_client, namespace, mmrl_crd) -> None:
    specs = agreement.generate(SPECS, start_seed=0)
    result = agreement.compare(api_client, namespace, specs)
    accepted = sum(agreement.local_verdict(s).accepted for s in specs)
    print(f"{len(specs)} specs, {accepted} accepted, {len(result.disagreements)} disagreements")
    # Both verdicts occur, so agreement is not the trivial "everything refused".
    assert 0 < accepted < len(specs)
    assert result.disagreements == [], "\n\n".join(str(d) for d in result.disagreements[:5])
