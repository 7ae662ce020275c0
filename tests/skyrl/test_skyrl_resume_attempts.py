"""Two attempts of one SkyRL job, each through the driver's real path (`skyrl.prepare`: marker repair, progress,
world-size check, data, SkyRL's checked config) and then SkyRL's own `RayPPOTrainer.train` up to its training loop:
SkyRL's `load_checkpoints` reads the marker, and SkyRL decides whether to run the before-train evaluation.

Attempt 1 starts from nothing: SkyRL evaluates the base model once, at step 0, and our progress callback records
that point. SkyRL then saves steps 2 and 4 with its own `save_checkpoints`, and the node is lost while the marker of
step 4 is being written: SkyRL's plain open-and-write has truncated the file and written nothing. Attempt 2 must
resume, from step 2 (the newest step a finished save sealed; step 4's save was cut short), and must not evaluate
again. What stands in: the GPU work only (policy weights to and from the workers, weight sync to the engines, the
held-out rollouts), as the `Engines` dispatch and the patched `eval` below.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.tiny import build_tokenizer
from tests.support.skyrl import last_json, run_skyrl
from tests.unit.trainer.skyrl_job import skyrl_config

_ATTEMPT = r"""
import asyncio, json, os, sys
from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.backends import skyrl
from mmrl_trainer.backends.skyrl_progress import SkyRLProgress, experiment_class
from transformers import AutoTokenizer
from skyrl.train.dataset import PromptDataset

cfg = TrainerConfig.model_validate_json(sys.stdin.read())
attempt, tokenizer_dir, save_steps = int(sys.argv[1]), sys.argv[2], [int(s) for s in sys.argv[3:]]
skyrl_cfg = skyrl.prepare(cfg, attempt=attempt)
# No engines to put to sleep, and no Ray cluster whose nodes' vLLM metrics to scrape.
skyrl_cfg.trainer.placement.colocate_all = False
skyrl_cfg.generator.inference_engine.enable_ray_prometheus_stats = False


class Engines:
    # The GPU side of SkyRL's WorkerDispatch: FSDP shards are saved and loaded on the policy workers.
    loaded = []

    def save_checkpoint(self, model, ckpt_dir, tokenizer):
        os.makedirs(ckpt_dir, exist_ok=True)
        with open(os.path.join(ckpt_dir, "model_world_size_8_rank_0.pt"), "wb") as f:
            f.write(b"shard")

    def load_checkpoint(self, model, ckpt_dir, **kwargs):
        self.loaded.append(ckpt_dir)

    async def save_weights_for_sampler(self):
        pass


class ReachedTheLoop(Exception):
    pass


def reached_the_loop():
    raise ReachedTheLoop


evals = []


async def held_out_rollouts(**kwargs):
    evals.append(trainer.global_step)
    return {"eval/all/avg_score": 0.25}


tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
train = PromptDataset(skyrl_cfg.data.train_data, tokenizer, max_prompt_length=skyrl_cfg.trainer.max_prompt_length,
                      num_workers=1)
Exp = experiment_class(SkyRLProgress.from_config(cfg, attempt=attempt))
exp = Exp.__new__(Exp)  # __init__ starts Ray and the engines
exp.cfg = skyrl_cfg
trainer = exp.get_trainer(skyrl_cfg, exp.get_tracker(), tokenizer, train, None, None, None, None)
trainer.dispatch = Engines()
trainer.init_weight_sync_state = lambda: None
trainer.eval = held_out_rollouts
trainer._profiler_start = reached_the_loop  # the first call after the before-train evaluation
try:
    asyncio.run(trainer.train())
except ReachedTheLoop:
    pass
first_step = trainer.global_step  # the step the loop trains first: the resumed one + 1
trainer._cleanup_old_checkpoints = lambda: None  # rotation runs on every Ray node
for step in save_steps:  # as the training loop saves, with SkyRL's own save_checkpoints
    trainer.global_step = step
    trainer.save_checkpoints()
print(json.dumps({"eval_before_train": skyrl_cfg.trainer.eval_before_train, "evals": evals,
                  "first_step": first_step, "loaded": Engines.loaded}))
"""


def attempt(cfg: dict[str, Any], number: int, tokenizer: Path, *save_steps: int) -> dict[str, Any]:
    run = run_skyrl(_ATTEMPT, str(number), str(tokenizer), *map(str, save_steps), stdin=json.dumps(cfg))
    return last_json(run)


def test_a_torn_marker_resumes_the_sealed_step_and_the_base_model_is_evaluated_once(tmp_path: Path) -> None:
    job = tmp_path / "job"
    build_tokenizer().save_pretrained(tmp_path / "tok")
    cfg = skyrl_config(
        str(job),
        dataset={"train": "synthetic://colors?n=8", "validation": "synthetic://colors?n=4"},
        checkpoint={"dir": str(job), "interval_steps": 2, "keep": 3},
    )

    first = attempt(cfg, 1, tmp_path / "tok", 2, 4)
    assert first == {"eval_before_train": True, "evals": [0], "first_step": 1, "loaded": []}
    assert (job / ckpt.MARKER).read_text() == "4"  # SkyRL's own marker, as it writes it
    (job / ckpt.MARKER).write_text("")  # the node is lost between SkyRL's truncate and its write of step 4

    second = attempt(cfg, 2, tmp_path / "tok")
    assert second == {
        "eval_before_train": False,
        "evals": [],
        "first_step": 3,
        "loaded": [str(job / "global_step_2" / "policy")],
    }
    assert (job / ckpt.MARKER).read_text().strip() == "2"
    assert sorted(ckpt.step_dirs(job)) == [2, 4]  # nothing deleted: step 4 is rewritten when SkyRL saves it again

    records = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    assert [(r["attempt"], r["step"]) for r in records if "eval_reward" in r] == [(1, 0)]
    started = [r for r in records if r.get("event") == "started"]
    assert [(r["attempt"], r["resumed_from_step"]) for r in started] == [(1, None), (2, 2)]
