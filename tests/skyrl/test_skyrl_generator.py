"""SkyRL's own data path on CPU: its PromptDataset reads the parquet our trainer writes, its collation and
prepare_generator_input build the batch as RayPPOTrainer.train does, BasePPOExp.get_generator picks the VLM generator
our overrides ask for, and the rollouts' rewards come from our registered environment.

The inference engine is the one piece that is not SkyRL's and not vLLM: a RemoteInferenceClient (SkyRL's real HTTP
client, so its request building and response parsing run) whose `_post` answers as vLLM's render and token-in/out
generate endpoints would. The engine renders with the tokenizer's chat template and returns no image features, and
answers every prompt with the same colour word: which rollouts earn a reward then depends only on each row's ground
truth and our reward. The image features themselves, rendered by a real vLLM 0.23 and decoded by SkyRL, are
test_skyrl_image_features.py's.
"""

from __future__ import annotations

import json
from pathlib import Path

from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.data import SKYRL_ENV_CLASS, to_skyrl_rows, write_parquet
from mmrl_trainer.synthetic import colour_examples
from mmrl_trainer.tiny import build_tokenizer
from tests.support.skyrl import SCRIPTED_ROLLOUT, last_json, run_skyrl
from tests.unit.trainer.test_skyrl_overrides import reference_overrides

ANSWER = "red"

_GENERATE = (
    r"""
import json, sys
import skyrl_gym
from transformers import AutoTokenizer
from skyrl.backends.skyrl_train.inference_servers.remote_inference_client import RemoteInferenceClient
from mmrl_trainer.backends.skyrl import ENV_ENTRY_POINT
from mmrl_trainer.backends.skyrl_config import build_skyrl_config
from mmrl_trainer.data import SKYRL_ENV_CLASS

parquet, tokenizer_dir, answer, reward = sys.argv[1:5]
cfg = build_skyrl_config(json.load(sys.stdin))
tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
asked = []


class ScriptedVLLM(RemoteInferenceClient):
    # The HTTP layer only: every endpoint SkyRL's VLM generator calls, answered as vLLM would.
    async def _post(self, url, json, headers=None):
        asked.append([url.removeprefix(self.proxy_url), json.get("model")])
        if url.endswith("/v1/chat/completions/render"):
            ids = tokenizer.apply_chat_template(json["messages"], add_generation_prompt=True, tokenize=True,
                                                return_dict=False)
            return {"token_ids": list(ids), "features": None}
        if url.endswith("/inference/v1/generate"):
            ids = tokenizer.encode(answer, add_special_tokens=False) + [tokenizer.eos_token_id]
            lp = json["sampling_params"].get("logprobs")
            logprobs = {"content": [{"logprob": -0.5} for _ in ids]} if lp is not None else None
            return {"choices": [{"token_ids": ids, "finish_reason": "stop", "logprobs": logprobs}]}
        raise AssertionError(f"unexpected call {url}")

    async def finish_session(self, session_id):
        asked.append(["/finish_session", None])


# As our SkyRL entry task does, in the process that builds the generator.
skyrl_gym.envs.register(id=SKYRL_ENV_CLASS, entry_point=ENV_ENTRY_POINT, kwargs={"reward": json.loads(reward)})
"""
    + SCRIPTED_ROLLOUT
    + r"""
rewards = [sum(r) if isinstance(r, list) else r for r in out["rewards"]]
print(json.dumps({
    "generator": type(generator).__name__,
    "truths": [e["reward_spec"]["ground_truth"] for e in generator_input["env_extras"]],
    "envs": generator_input["env_classes"],
    "rewards": rewards,
    "stop_reasons": out["stop_reasons"],
    "responses": [tokenizer.decode(ids, skip_special_tokens=True) for ids in out["response_ids"]],
    "masks": [sum(m) == len(m) for m in out["loss_masks"]],
    "prompt_has_image": [tokenizer.decode(p).count("<|image_pad|>") for p in out["prompt_token_ids"]],
    "models": sorted({m for u, m in asked if u.endswith("generate")}),
    "finished": sum(1 for u, _ in asked if u == "/finish_session"),
}))
"""
)


def test_skyrl_vlm_generator_rolls_out_our_rows_and_scores_them_with_our_environment(tmp_path: Path) -> None:
    examples = colour_examples(8, 3)
    assert {e.answer for e in examples} - {ANSWER} and ANSWER in {e.answer for e in examples}  # both outcomes occur
    parquet = write_parquet(to_skyrl_rows(examples, data_source="synthetic://colors"), tmp_path / "train.parquet")
    build_tokenizer().save_pretrained(tmp_path / "tok")
    _, cfg = reference_overrides()
    overrides = skyrl_overrides(
        cfg.model_copy(update={"model": cfg.model.model_copy(update={"name": str(tmp_path / "tok")})}),
        train_files=[str(parquet)],
        val_files=[],
    )
    reward = json.dumps({"name": "exact_match"})  # the colour questions' reward
    got = last_json(
        run_skyrl(_GENERATE, str(parquet), str(tmp_path / "tok"), ANSWER, reward, stdin=json.dumps(overrides))
    )
    n = overrides["generator.n_samples_per_prompt"]
    truths = [e.answer for e in examples for _ in range(n)]
    assert got["generator"] == "SkyRLVLMGymGenerator"  # what generator.vision_language_generator selects
    assert got["truths"] == truths and got["envs"] == [SKYRL_ENV_CLASS] * len(truths)
    assert got["rewards"] == [1.0 if t == ANSWER else 0.0 for t in truths]  # our exact-match reward, row by row
    assert got["stop_reasons"] == ["stop"] * len(truths)
    assert got["responses"] == [ANSWER] * len(truths) and all(got["masks"])
    assert all(count >= 1 for count in got["prompt_has_image"])  # the row's image reached the rendered prompt
    assert got["models"] == ["skyrl-lora"]  # FSDP + LoRA: SkyRL asks for the synced adapter, not the base model
    assert got["finished"] == len(truths)
