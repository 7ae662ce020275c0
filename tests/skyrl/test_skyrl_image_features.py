"""The Qwen3-VL image features SkyRL trains on, made by the real engine: SkyRL 0.3.0's VLM generator renders each
conversation through a real vLLM 0.23 (the rollout engines' version, in the SkyRL venv as in the trainer image)
serving the tiny Qwen3-VL. vLLM's multimodal processor turns the row's image into `pixel_values` and
`image_grid_thw` and serialises them (vllm.entrypoints.serve.disagg.mm_serde); SkyRL decodes them in the generator's
process and hands them to the trainer with the prompt's image placeholder tokens. They must be what the model's own
Hugging Face processor makes of that image, and the placeholders as many as the grid's merged patches.

Only generation stays scripted (one colour word, as in test_skyrl_generator.py): the policy asks for the synced LoRA
adapter `skyrl-lora`, which this engine does not hold, and scripted answers keep the rewards exact.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.data import to_skyrl_rows, write_parquet
from mmrl_trainer.synthetic import colour_examples
from mmrl_trainer.tiny import build_tiny_vlm
from tests.support.skyrl import SCRIPTED_ROLLOUT, last_json, run_skyrl
from tests.support.vllm_engine import vllm_engine
from tests.unit.trainer.test_skyrl_overrides import reference_overrides

ANSWER = "red"

_FEATURES = (
    r"""
import base64, io, json, sys
import skyrl_gym
import torch
from PIL import Image
from transformers import AutoProcessor, AutoTokenizer
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient
from mmrl_trainer.backends.skyrl import ENV_ENTRY_POINT
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
from mmrl_trainer.data import SKYRL_ENV_CLASS

parquet, model_dir, engine_url, answer, reward = sys.argv[1:6]
cfg = build_skyrl_config(json.load(sys.stdin))
tokenizer = AutoTokenizer.from_pretrained(model_dir)
rendered = []


class ScriptedVLLM(RemoteInferenceClient):
    # Renders go to the real engine as they are; only the generate endpoint answers a script.
    async def _post(self, url, json, headers=None):
        if url.endswith("/inference/v1/generate"):
            ids = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
            lp = json["sampling_params"].get("logprobs")
            logprobs = {"content": [{"logprob": -0.5} for _ in ids]} if lp is not None else None
            return {"choices": [{"token_ids": ids, "finish_reason": "stop", "logprobs": logprobs}]}
        reply = await super()._post(url, json, headers)
        rendered.append(url.removeprefix(engine_url))
        return reply

    async def finish_session(self, session_id):
        pass


skyrl_gym.envs.register(id=SKYRL_ENV_CLASS, entry_point=ENV_ENTRY_POINT, kwargs={"reward": json.loads(reward)})
"""
    + SCRIPTED_ROLLOUT
    + r"""
processor = AutoProcessor.from_pretrained(model_dir)
pad = tokenizer.convert_tokens_to_ids("<|image_pad|>")
merge = processor.image_processor.merge_size ** 2
rows = []
for i, prompt in enumerate(generator_input["prompts"]):
    url = next(p["image_url"]["url"] for m in prompt if isinstance(m["content"], list) for p in m["content"]
               if p["type"] == "image_url")
    image = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    want = processor.image_processor(images=[image], return_tensors="pt")
    got_pixels, got_grid = out["pixel_values"][i], out["image_grid_thw"][i]
    rows.append({
        "grid": got_grid.tolist(),
        "want_grid": want["image_grid_thw"].tolist(),
        "pixels_shape": list(got_pixels.shape),
        "want_pixels_shape": list(want["pixel_values"].shape),
        "pixels_max_diff": float((got_pixels.float() - want["pixel_values"].float()).abs().max()),
        "placeholders": out["prompt_token_ids"][i].count(pad),
        "want_placeholders": int(want["image_grid_thw"].prod(dim=-1).sum()) // merge,
    })
rewards = [sum(r) if isinstance(r, list) else r for r in out["rewards"]]
print(json.dumps({
    "generator": type(generator).__name__,
    "rendered": sorted(set(rendered)),
    "renders": len(rendered),
    "rows": rows,
    "truths": [e["reward_spec"]["ground_truth"] for e in generator_input["env_extras"]],
    "rewards": rewards,
}))
"""
)


@pytest.fixture(scope="module")
def tiny() -> Path:
    return build_tiny_vlm()


def test_skyrl_trains_on_the_image_features_vllm_renders_for_qwen3_vl(tiny: Path, tmp_path: Path) -> None:
    examples = colour_examples(3, 5)
    parquet = write_parquet(to_skyrl_rows(examples, data_source="synthetic://colors"), tmp_path / "train.parquet")
    _, cfg = reference_overrides()
    cfg = cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": str(tiny)})})
    overrides = skyrl_overrides(cfg, train_files=[str(parquet)], val_files=[])
    reward = json.dumps({"name": "exact_match"})

    with vllm_engine(tiny, tmp_path, "--max-model-len", "512") as engine_url:
        got = last_json(
            run_skyrl(_FEATURES, str(parquet), str(tiny), engine_url, ANSWER, reward, stdin=json.dumps(overrides))
        )

    n = overrides["generator.n_samples_per_prompt"]
    assert got["generator"] == "SkyRLVLMGymGenerator"
    # Every conversation was rendered by the engine, at its start and again after each turn.
    assert got["rendered"] == ["/v1/chat/completions/render"] and got["renders"] >= len(examples) * n
    assert len(got["rows"]) == len(examples) * n
    for row in got["rows"]:
        assert row["grid"] == row["want_grid"] and row["pixels_shape"] == row["want_pixels_shape"], row
        assert row["pixels_max_diff"] < 1e-2, row  # the same pixels, after vLLM's (de)serialisation
        assert row["placeholders"] == row["want_placeholders"] > 0, row
    truths = [e.answer for e in examples for _ in range(n)]
    assert got["truths"] == truths and got["rewards"] == [1.0 if t == ANSWER else 0.0 for t in truths]
