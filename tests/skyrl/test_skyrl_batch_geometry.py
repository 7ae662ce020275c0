"""Admission's batch rules (api/mmrl_api/batch_geometry.py) refuse exactly the batch geometries SkyRL's own
validate_batch_sizes refuses: a fixed sample of batch sizes, group sizes, micro-batches and worker shapes, each judged
by both, in one SkyRL process. A geometry mmrl accepts and SkyRL refuses would fail at the first attempt, after the
cluster was scheduled; one mmrl refuses and SkyRL accepts would turn away a job that trains."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from mmrl_api import batch_geometry
from mmrl_api.cluster import WorkerGroup
from mmrl_api.spec import AlgorithmSpec
from tests.skyrl.test_skyrl_validates_every_example import JOBS
from tests.support.skyrl import last_json, run_skyrl

_JUDGE_ALL = r"""
import json, sys
from skyrl.train.utils.utils import validate_batch_sizes
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
out = {}
for case, overrides in json.load(sys.stdin).items():
    try:
        validate_batch_sizes(build_skyrl_config(overrides))
        out[case] = "accepted"
    except AssertionError as err:
        out[case] = f"refused: {err}"
print(json.dumps(out))
"""


def _geometries(count: int = 160, seed: int = 0) -> dict[str, dict[str, int]]:
    rng = random.Random(seed)
    found: dict[str, dict[str, int]] = {}
    while len(found) < count:
        mini = rng.choice([1, 2, 3, 4, 6, 8, 16, 32, 48, 56, 64])
        g = {
            "mini": mini,
            "train": mini * rng.choice([1, 2, 3, 4]),
            "micro": rng.choice([1, 2, 3, 4, 8]),
            "n": rng.choice([2, 4, 5, 8]),
            "replicas": rng.choice([1, 2, 3, 7]),
            "gpus": rng.choice([0, 1, 4, 8]),
            "kl": rng.choice([0, 1]),
        }
        found["-".join(f"{k}{v}" for k, v in g.items())] = g
    return found


GEOMETRIES = _geometries()


def _mmrl_refuses(g: dict[str, int]) -> bool:
    algorithm = AlgorithmSpec(
        train_batch_size=g["train"],
        mini_batch_size=g["mini"],
        micro_batch_size_per_gpu=g["micro"],
        samples_per_prompt=g["n"],
    )
    dp = batch_geometry.data_parallel_size([WorkerGroup(name="w", replicas=g["replicas"], gpus_per_node=g["gpus"])])
    return bool(batch_geometry.problems(algorithm, dp))


def _skyrl_overrides(g: dict[str, int]) -> dict[str, Any]:
    base = dict(JOBS["examples/job.yaml"])
    gpus = max(1, g["gpus"])
    return base | {
        "trainer.train_batch_size": g["train"],
        "trainer.policy_mini_batch_size": g["mini"],
        "trainer.micro_train_batch_size_per_gpu": g["micro"],
        "trainer.micro_forward_batch_size_per_gpu": g["micro"],
        "generator.n_samples_per_prompt": g["n"],
        "trainer.placement.policy_num_nodes": g["replicas"],
        "trainer.placement.policy_num_gpus_per_node": gpus,
        "trainer.placement.ref_num_nodes": g["replicas"],
        "trainer.placement.ref_num_gpus_per_node": gpus,
        "trainer.algorithm.use_kl_loss": bool(g["kl"]),
    }


@pytest.fixture(scope="module")
def skyrl_verdicts() -> dict[str, str]:
    return last_json(run_skyrl(_JUDGE_ALL, stdin=json.dumps({k: _skyrl_overrides(g) for k, g in GEOMETRIES.items()})))


def test_the_sample_has_both_verdicts() -> None:
    refused = sum(_mmrl_refuses(g) for g in GEOMETRIES.values())
    assert 20 <= refused <= len(GEOMETRIES) - 20, refused


@pytest.mark.parametrize("case", sorted(GEOMETRIES))
def test_mmrl_and_skyrl_agree_on(case: str, skyrl_verdicts: dict[str, str]) -> None:
    ours = "refused" if _mmrl_refuses(GEOMETRIES[case]) else "accepted"
    assert skyrl_verdicts[case].split(":")[0] == ours, skyrl_verdicts[case]
