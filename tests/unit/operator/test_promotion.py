"""The promotion gate: a trained adapter is served only if its held-out evaluation passes spec.inference.promoteWhen;
otherwise the job stays Succeeded with Promoted=False, the scores in its message, and an Event; a change to the gate
re-evaluates it."""

from __future__ import annotations

from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed, ServingObserved
from mmrl_operator.core.promotion import gate_verdict
from tests.support.factories import T0, job
from tests.unit.operator.test_serving import ADAPTER, trained


def scored(held: float | None, base: float | None) -> dict:
    return {**ADAPTER, "evaluation": {"heldOutReward": held, "baselineReward": base, "step": 40}}


def gate(**when) -> dict:
    return {"spec": {"inference": {"promoteWhen": when}}}


def cond(plan, ctype: str) -> dict | None:
    return next((c for c in plan.status["conditions"] if c["type"] == ctype), None)


def test_the_verdict_names_the_scores_and_every_test_missed() -> None:
    assert gate_verdict(trained(adapter=scored(0.7, 0.3)), trained().status) is None  # no gate
    j = trained(gate(heldOutRewardAtLeast=0.6, beatsBaseline=True), adapter=scored(0.5, 0.55))
    passed, message = gate_verdict(j, j.status)
    assert not passed
    assert "held-out reward 0.5, base model 0.55" in message
    assert "below heldOutRewardAtLeast 0.6" in message and "does not beat the base model" in message
    j = trained(gate(heldOutRewardAtLeast=0.6, beatsBaseline=True), adapter=scored(0.7, 0.3))
    assert gate_verdict(j, j.status) == (
        True,
        "promoted (held-out reward 0.7, base model 0.3): passes spec.inference.promoteWhen",
    )
    j = trained(gate(beatsBaseline=True), adapter=scored(0.7, None))
    passed, message = gate_verdict(j, j.status)
    assert not passed and "base model not measured" in message


def test_a_missed_gate_serves_nothing_ends_succeeded_and_says_why_once() -> None:
    j = trained(gate(heldOutRewardAtLeast=0.6), adapter=scored(0.4, 0.3))
    plan = decide(j, 1, Observed(serving=ServingObserved()), T0)
    assert plan.status["phase"] == "Succeeded" and plan.apply == []
    promoted = cond(plan, "Promoted")
    assert promoted["status"] == "False" and promoted["reason"] == "GateMissed"
    assert "held-out reward 0.4" in promoted["message"]
    assert cond(plan, "InferenceReady")["reason"] == "NotPromoted"
    assert [e.reason for e in plan.events if e.reason == "NotPromoted"] == ["NotPromoted"]
    again = decide(job(gate(heldOutRewardAtLeast=0.6), status=plan.status), 1, Observed(), T0)
    assert not [e for e in again.events if e.reason == "NotPromoted"]  # said once, not every pass


def test_lowering_the_gate_re_evaluates_it_and_serves_and_raising_it_removes_serving() -> None:
    missed = decide(trained(gate(heldOutRewardAtLeast=0.6), adapter=scored(0.4, 0.3)), 1, Observed(), T0)
    lowered = job(gate(heldOutRewardAtLeast=0.35), status=missed.status)
    plan = decide(lowered, 2, Observed(serving=ServingObserved()), T0)
    assert plan.status["phase"] == "Serving" and {o["kind"] for o in plan.apply} == {"Deployment", "Service"}
    assert cond(plan, "Promoted")["status"] == "True" and any(e.reason == "Promoted" for e in plan.events)
    deployed = next(o for o in plan.apply if o["kind"] == "Deployment")
    service = next(o for o in plan.apply if o["kind"] == "Service")
    raised = job(gate(heldOutRewardAtLeast=0.9), status=plan.status)
    plan = decide(raised, 3, Observed(serving=ServingObserved(deployment=deployed, service=service)), T0)
    assert plan.status["phase"] == "Succeeded"
    assert sorted((d.kind, d.name) for d in plan.delete) == [
        ("Deployment", "geo-inference"),
        ("Service", "geo-inference"),
    ]
    assert cond(plan, "Promoted")["status"] == "False"


def test_an_adapter_without_evaluation_misses_any_gate() -> None:
    plan = decide(trained(gate(beatsBaseline=True)), 1, Observed(), T0)
    assert plan.status["phase"] == "Succeeded" and cond(plan, "Promoted")["status"] == "False"
    assert "not measured" in cond(plan, "Promoted")["message"]
