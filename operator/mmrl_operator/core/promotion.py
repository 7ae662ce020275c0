"""The promotion gate (spec.inference.promoteWhen): whether a trained adapter is served, from the held-out evaluation
the trainer reported in status.adapter.evaluation. Pure; `serving.decide_serving` applies it before anything is
created, on every pass, so a change to the gate in the spec re-evaluates it (and may start or remove serving)."""

from __future__ import annotations

from mmrl_api import MultimodalRLJob
from mmrl_api.lifecycle import PromotionGate
from mmrl_api.status import JobStatus


def _score(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.4g}"


def gate_verdict(job: MultimodalRLJob, status: JobStatus) -> tuple[bool, str] | None:
    """None without a gate; else (passed, a sentence with the scores and, when it failed, every test it missed)."""
    gate = job.spec.inference.promote_when
    return None if gate is None else judge(gate, status, "spec.inference.promoteWhen")


def judge(gate: PromotionGate, status: JobStatus, where: str) -> tuple[bool, str]:
    """(passed, a sentence with the scores and, when it failed, every test it missed) for `gate`, which `where`
    names: the job's own, or a ModelServer alias's."""
    evaluation = status.adapter.evaluation if status.adapter else None
    held = evaluation.held_out_reward if evaluation else None
    base = evaluation.baseline_reward if evaluation else None
    scores = f"held-out reward {_score(held)}, base model {_score(base)}"
    missed = []
    if gate.held_out_reward_at_least is not None:
        if held is None:
            missed.append("no held-out reward was measured")
        elif held < gate.held_out_reward_at_least:
            missed.append(f"held-out reward below heldOutRewardAtLeast {gate.held_out_reward_at_least:g}")
    if gate.beats_baseline:
        if held is None or base is None:
            missed.append("beatsBaseline needs the adapter's and the base model's held-out reward")
        elif held <= base:
            missed.append("held-out reward does not beat the base model's")
    if missed:
        return False, f"not promoted ({scores}): {'; '.join(missed)} ({where})"
    return True, f"promoted ({scores}): passes {where}"
