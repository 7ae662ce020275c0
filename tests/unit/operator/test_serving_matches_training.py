"""The serving Deployment sees what training saw (issue #31 item 3): a `--max-model-len` that holds the longest
conversation the adapter was trained on, and, for a SkyRL-trained adapter, the rollout engines' pixel cap."""

from __future__ import annotations

import json

from mmrl_api import MultimodalRLJob
from mmrl_api.image_budget import image_budget
from mmrl_operator.core.builders.inference import build_deployment, default_adapter
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from tests.support.corpus import example


def flags(name: str, patch: dict | None = None) -> dict[str, str]:
    job = MultimodalRLJob.model_validate(merge_patch(example(name), patch or {}))
    (server,) = build_deployment(job, default_adapter(job))["spec"]["template"]["spec"]["containers"]
    args = server["args"]
    return {a: args[i + 1] for i, a in enumerate(args) if a.startswith("--") and i + 1 < len(args)}


def engine_kwargs(name: str) -> dict:
    cfg = build_trainer_config(MultimodalRLJob.model_validate(example(name)))
    o = skyrl_overrides(cfg, train_files=["/shared/train.parquet"], val_files=[])
    return o["generator.inference_engine.engine_init_kwargs"]


def test_the_maze_is_served_with_the_pixel_cap_its_engines_trained_with() -> None:
    served = flags("visgym-maze.yaml")
    cap = json.loads(served["--mm-processor-kwargs"])
    assert cap == engine_kwargs("visgym-maze.yaml")["mm_processor_kwargs"]
    assert cap == {"size": {"longest_edge": 522_240, "shortest_edge": 65_536}}
    assert served["--max-model-len"] == "32768"  # the example asks for more than its 19,200 trained tokens


def test_without_a_max_model_len_serving_holds_exactly_the_trained_conversation() -> None:
    maze = flags("visgym-maze.yaml", {"spec": {"inference": {"maxModelLen": None}}})
    assert maze["--max-model-len"] == str(engine_kwargs("visgym-maze.yaml")["max_model_len"]) == "19200"
    single = flags("job.yaml", {"spec": {"inference": {"maxModelLen": None}}})
    assert single["--max-model-len"] == str(engine_kwargs("job.yaml")["max_model_len"]) == "3072"


def test_the_pixel_cap_follows_the_prompt_budget() -> None:
    served = flags("job.yaml", {"spec": {"algorithm": {"maxPromptLength": 4096}}})
    assert json.loads(served["--mm-processor-kwargs"]) == image_budget(4096).processor_kwargs()
    assert image_budget(4096).max_pixels > image_budget(1024).max_pixels


def test_a_locally_trained_adapter_keeps_the_models_own_image_size() -> None:
    # The local backend resizes with the model's own processor settings; the demo's vLLM must do the same.
    served = flags("local.yaml")
    assert "--mm-processor-kwargs" not in served
    assert served["--max-model-len"] == "512"
