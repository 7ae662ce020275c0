"""Rollouts cut off at maxResponseLength: the trainer's truncatedFraction becomes one Warning per attempt."""

from __future__ import annotations

from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed
from mmrl_operator.core.status import TRUNCATION_WARNING_FRACTION
from tests.support.factories import T0, job, rayjob
from tests.unit.operator.test_reconcile import advance, ready_cluster


def running_with(fraction: float | None, attempt: int = 1):  # type: ignore[no-untyped-def]
    """A job in its first attempt, then the trainer's progress report as the next pass reads it."""
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0))
    status = j.status.model_copy(deep=True)
    status.progress = status.progress.model_copy(update={"attempt": attempt, "step": 7, "truncated_fraction": fraction})
    return j.model_copy(update={"status": status})


def warnings(plan) -> list[str]:  # type: ignore[no-untyped-def]
    return [e.message for e in plan.events if e.type == "Warning" and e.reason == "RolloutsTruncated"]


def observe(j):  # type: ignore[no-untyped-def]
    return decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)


def test_a_high_truncated_fraction_warns_once_per_attempt_naming_the_field() -> None:
    j = running_with(0.6)
    plan = observe(j)
    (message,) = warnings(plan)
    assert "60%" in message and "spec.algorithm.maxResponseLength (2048 tokens)" in message and "step 7" in message
    assert plan.status["truncationWarnedAttempt"] == 1
    assert warnings(observe(advance(j, plan))) == []  # the next pass remembers it


def test_a_fraction_at_or_below_the_threshold_is_not_warned() -> None:
    for fraction in (None, 0.0, TRUNCATION_WARNING_FRACTION):
        plan = observe(running_with(fraction))
        assert warnings(plan) == [] and "truncationWarnedAttempt" not in plan.status
