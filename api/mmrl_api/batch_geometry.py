"""How a SkyRL step splits its batch over the GPUs: the checks SkyRL runs when it starts, applied at apply time.

SkyRL 0.3.0 (`skyrl/train/utils/utils.py: validate_batch_sizes`) refuses to start a run whose batch does not divide
over its data-parallel workers: every GPU of every worker node trains (FSDP, no sequence parallelism), so the data-
parallel size is the world size (`trainer_config.Placement.world_size`: the worker replicas summed, times the first
group's GPUs per node, at least one; its gpusPerNode, else its instance type's GPUs). With `n = samplesPerPrompt`
completions per prompt, SkyRL computes each GPU's share with integer division, as here:

- per-GPU mini-batch `miniBatchSize x n // dp` must be at least 1 and a multiple of `microBatchSizePerGpu`;
- per-GPU step `trainBatchSize x n // dp` must be a multiple of the per-GPU mini-batch.

(`trainBatchSize % miniBatchSize == 0` and `miniBatchSize <= trainBatchSize`, SkyRL's other two batch checks, are
AlgorithmSpec's own rules.) A job that breaks one would reach its first attempt and fail there, after the RayCluster
was scheduled and the model downloaded; admission and `mmrl validate` refuse it instead, naming the field. The local
backend trains in one process and has none of these constraints.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from mmrl_api import hardware

if TYPE_CHECKING:
    from mmrl_api.cluster import WorkerGroup
    from mmrl_api.spec import AlgorithmSpec

SKYRL_REFUSES = "SkyRL refuses it at start"
TOO_FEW = (
    "miniBatchSize x samplesPerPrompt must be at least the data-parallel size (the GPUs of cluster.workerGroups: "
    f"their replicas summed x the first group's gpusPerNode), so every GPU trains on each update; {SKYRL_REFUSES}"
)
MICRO_SPLIT = (
    "must divide each GPU's share of a mini-batch, miniBatchSize x samplesPerPrompt / data-parallel size "
    f"(rounded down; the data-parallel size is the GPUs of cluster.workerGroups); {SKYRL_REFUSES}"
)
STEP_SPLIT = (
    "each GPU's share of a step, trainBatchSize x samplesPerPrompt / data-parallel size (rounded down), must be a "
    "multiple of its share of a mini-batch, miniBatchSize x samplesPerPrompt / data-parallel size (the data-parallel "
    f"size is the GPUs of cluster.workerGroups); {SKYRL_REFUSES}"
)


def data_parallel_size(groups: Sequence[WorkerGroup]) -> int:
    """SkyRL's policy data-parallel size for these worker groups: the world size one attempt trains on."""
    return sum(g.replicas for g in groups) * max(1, groups[0].gpus)


def problems(algorithm: AlgorithmSpec, dp: int) -> list[tuple[str, str]]:
    """(field of spec.algorithm, message) for each check SkyRL would fail, in the order SkyRL checks them. The
    messages give this job's numbers and a value that passes; the CRD's CEL rules say the same in general terms."""
    n, mb = algorithm.samples_per_prompt, algorithm.mini_batch_size
    mini = mb * n // dp
    share = f"miniBatchSize {mb} x samplesPerPrompt {n} / {dp} GPUs"
    if mini < 1:
        least = -(-dp // n)  # ceil: the smallest mini-batch that gives every GPU a sample
        return [
            (
                "mini_batch_size",
                f"{mb} x samplesPerPrompt {n} = {mb * n} samples per update, fewer than the {dp} data-parallel GPUs "
                f"of cluster.workerGroups, so a GPU would train on none; use miniBatchSize {least} or more (or fewer "
                f"GPUs); {SKYRL_REFUSES}",
            )
        ]
    found = []
    micro = algorithm.micro_batch_size_per_gpu
    if mini % micro:
        fits = max(d for d in range(1, min(micro, mini) + 1) if mini % d == 0)
        found.append(
            (
                "micro_batch_size_per_gpu",
                f"{micro} does not divide each GPU's share of a mini-batch, {share} = {mini} (rounded down); use a "
                f"divisor of {mini} such as {fits}; {SKYRL_REFUSES}",
            )
        )
    step = algorithm.train_batch_size * n // dp
    if step % mini:
        found.append(
            (
                "train_batch_size",
                f"each GPU's share of a step, trainBatchSize {algorithm.train_batch_size} x samplesPerPrompt {n} / "
                f"{dp} GPUs = {step} (rounded down), is not a multiple of its share of a mini-batch, {share} = {mini}; "
                f"make miniBatchSize x samplesPerPrompt a multiple of {dp}; {SKYRL_REFUSES}",
            )
        )
    return found


def _cel_terms(spec: str) -> tuple[str, str, str]:
    """The data-parallel size, per-GPU mini-batch and per-GPU step as CEL over a JobSpec (defaults applied: the
    apiserver fills the cluster's worker groups and the algorithm before rules run)."""
    groups = f"{spec}.cluster.workerGroups"
    dp = f"({groups}.map(g, g.replicas).sum() * {hardware.cel_gpus_at_least_one(f'{groups}[0]')})"
    a = f"{spec}.algorithm"
    mini = f"({a}.miniBatchSize * {a}.samplesPerPrompt / {dp})"
    step = f"({a}.trainBatchSize * {a}.samplesPerPrompt / {dp})"
    return dp, mini, step


def _unless_local(spec: str, rule: str) -> str:
    local = f"(has({spec}.trainer) && has({spec}.trainer.backend) && {spec}.trainer.backend == 'local')"
    return f"{local} || ({rule})"


def cel_rules(spec: str = "self") -> list[tuple[str, str, str]]:
    """(expression, message, fieldPath) of the three checks, for the JobSpec's CEL rules."""
    _, mini, step = _cel_terms(spec)
    a = f"{spec}.algorithm"
    return [
        (_unless_local(spec, f"{mini} >= 1"), TOO_FEW, ".algorithm.miniBatchSize"),
        (
            _unless_local(spec, f"{mini} < 1 || {mini} % {a}.microBatchSizePerGpu == 0"),
            MICRO_SPLIT,
            ".algorithm.microBatchSizePerGpu",
        ),
        (_unless_local(spec, f"{mini} < 1 || {step} % {mini} == 0"), STEP_SPLIT, ".algorithm.trainBatchSize"),
    ]
