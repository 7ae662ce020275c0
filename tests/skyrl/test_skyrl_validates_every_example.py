"""Every job we ship or promise to accept that trains with SkyRL (examples/*.yaml, tests/good_specs.yaml) reaches
SkyRL as a config SkyRL itself accepts: the operator's build_trainer_config, then our skyrl_overrides and
build_skyrl_config, then SkyRL's SkyRLTrainConfig (unknown keys rejected) and validate_cfg (its cross-field asserts:
batch divisibility, placement, LoRA with the VLM generator). All cases run in one SkyRL process."""

from __future__ import annotations

import json
from typing import Any

import pytest

from mmrl_api import MultimodalRLJob
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from tests.support.corpus import bad_manifest, example, good_cases, job_examples
from tests.support.skyrl import last_json, run_skyrl

_VALIDATE_ALL = r"""
import json, sys
from skyrl.train.utils.utils import validate_cfg
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
out = {}
for case, overrides in json.load(sys.stdin).items():
    try:
        c = build_skyrl_config(overrides)
        validate_cfg(c)
    except BaseException as err:  # SkyRL's messages, per case, so one broken spec does not hide the others
        out[case] = {"error": f"{type(err).__name__}: {err}"}
        continue
    m = c.trainer.policy.model
    out[case] = {"model": m.path, "rank": m.lora.rank, "vlm": c.generator.vision_language_generator,
                 "nodes": c.trainer.placement.policy_num_nodes, "gpus": c.trainer.placement.policy_num_gpus_per_node}
print(json.dumps(out))
"""


def skyrl_jobs() -> dict[str, dict[str, Any]]:
    manifests = {f"examples/{name}": example(name) for name in job_examples()}
    manifests |= {f"good_specs/{c.case}": bad_manifest(c) for c in good_cases()}
    configs = {case: build_trainer_config(MultimodalRLJob.model_validate(m)) for case, m in manifests.items()}
    return {
        case: skyrl_overrides(cfg, train_files=[f"{cfg.checkpoint.dir}/data/train.parquet"], val_files=[])
        for case, cfg in configs.items()
        if cfg.backend == "skyrl"
    }


JOBS = skyrl_jobs()


@pytest.fixture(scope="module")
def skyrl_verdicts() -> dict[str, Any]:
    return last_json(run_skyrl(_VALIDATE_ALL, stdin=json.dumps(JOBS)))


def test_the_reference_example_and_the_good_specs_are_all_checked() -> None:
    assert "examples/job.yaml" in JOBS
    skyrl_cases = [c for c in good_cases() if bad_manifest(c)["spec"]["trainer"].get("backend", "skyrl") == "skyrl"]
    assert len(skyrl_cases) >= len(good_cases()) - 3  # only the three cases about the local backend are left out
    assert sum(case.startswith("good_specs/") for case in JOBS) == len(skyrl_cases)


@pytest.mark.parametrize("case", sorted(JOBS))
def test_skyrl_accepts_the_overrides(case: str, skyrl_verdicts: dict[str, Any]) -> None:
    got, sent = skyrl_verdicts[case], JOBS[case]
    assert "error" not in got, got.get("error")
    assert got == {
        "model": sent["trainer.policy.model.path"],
        "rank": sent["trainer.policy.model.lora.rank"],
        "vlm": True,
        "nodes": sent["trainer.placement.policy_num_nodes"],
        "gpus": sent["trainer.placement.policy_num_gpus_per_node"],
    }
