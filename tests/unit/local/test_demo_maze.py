"""`make demo MAZE=1` (`--maze`): the second job it applies is examples/local.yaml turned into the maze job that
bench/maze_learning.py measured learning with, and it is a valid job the local backend runs as an episode loop.
(The demo itself is not run here: it needs the local control plane.)"""

from __future__ import annotations

from mmrl_api import MultimodalRLJob
from mmrl_local.demo import EXAMPLE, MAZE_JOB, PROMOTION_GATE, job_document, maze_success_line
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_trainer.backends.local_episodes import loop_arguments
from mmrl_trainer.envs import make_episode


def test_the_maze_job_is_the_local_example_with_an_environment_and_no_serving() -> None:
    doc = job_document(MAZE_JOB, gate=False)
    job = MultimodalRLJob.model_validate(doc)
    assert job.metadata.name == "tiny-maze" and not job.spec.inference.enabled
    assert job.spec.dataset.reward is None
    cfg = build_trainer_config(job)
    assert cfg.backend == "local"
    env = cfg.dataset.environment
    assert env is not None and env.max_turns == 8
    assert dict(env.params) == {"size": "3", "walls": "0.2", "ends": "corners", "reward": "shaped"}
    make_episode(env)  # the params are ones the maze accepts
    loop = loop_arguments(cfg)
    assert (loop["episodes_per_step"], loop["group_size"], loop["learning_rate"]) == (32, 8, 2e-2)
    # The colour job keeps its promotion gate; the maze job, which serves nothing, has none.
    assert job_document()["spec"]["inference"]["promoteWhen"] == PROMOTION_GATE["spec"]["inference"]["promoteWhen"]
    assert "promoteWhen" not in doc["spec"]["inference"]
    assert job_document()["metadata"]["name"] != doc["metadata"]["name"] and EXAMPLE.exists()


def test_the_maze_line_reports_held_out_success_before_and_after() -> None:
    records = [
        {"event": "baseline", "eval_success": 0.0625},
        {"event": "checkpoint"},
        {"event": "finished", "eval_success": 0.5},
    ]
    line = maze_success_line("tiny-maze", "Succeeded", records)
    assert line.startswith("job tiny-maze: Succeeded; held-out maze success 0.062 -> 0.500")
    assert "- -> -" in maze_success_line("tiny-maze", "Failed", [])
