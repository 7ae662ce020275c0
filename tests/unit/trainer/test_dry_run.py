"""`python -m mmrl_trainer --config FILE --dry-run` on the configs the operator builds for the examples: it prints
exactly the settings the run would hand its backend, the paths, world size and footprint, and starts nothing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mmrl_api import MultimodalRLJob
from mmrl_api.contract import EXIT_BAD_CONFIG
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_trainer.__main__ import main
from mmrl_trainer.backends import local
from mmrl_trainer.backends.local import grpo_kwargs
from mmrl_trainer.backends.skyrl_config import skyrl_overrides, skyrl_paths
from mmrl_trainer.errors import InvalidConfig, exit_code_for
from tests.support.corpus import example

ROOT = Path(__file__).resolve().parents[3]


def config_file(tmp_path: Path, name: str, patch: dict | None = None):
    cfg = build_trainer_config(MultimodalRLJob.model_validate(merge_patch(example(name), patch or {})))
    path = tmp_path / f"{name}.json"
    path.write_text(cfg.to_json())
    return cfg, path


def section(out: str, header: str) -> dict[str, str]:
    """The `key=value` lines under a header line that starts with `header`, up to the next header."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header)) + 1
    body = []
    for line in lines[start:]:
        if line.endswith(":") or "=" not in line:
            break
        body.append(line)
    assert body == sorted(body)
    return dict(line.split("=", 1) for line in body)


def shown(value: object) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def test_dry_run_of_the_reference_job_prints_exactly_our_skyrl_overrides(tmp_path: Path, capsys) -> None:
    cfg, path = config_file(tmp_path, "job.yaml")
    assert main(["--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    paths = skyrl_paths(cfg)
    expected = skyrl_overrides(
        cfg, train_files=[f"{paths.data}/train.parquet"], val_files=[f"{paths.data}/validation.parquet"]
    )
    printed = section(out, "skyrl overrides")
    assert printed == {k: shown(v) for k, v in expected.items()}
    assert json.loads(printed["generator.inference_engine.engine_init_kwargs"])["max_lora_rank"] == 32
    assert section(out, "environment") == {"SKYRL_RAY_PG_TIMEOUT_IN_S": "1800"}
    lines = out.splitlines()
    assert lines[0] == "backend: skyrl"
    assert "world size: 8 GPUs (1 node(s) x 8)" in lines
    for label, value in [
        ("checkpoint dir", paths.checkpoint),
        ("export dir", paths.export),
        ("data dir", paths.data),
        ("lora sync path", paths.lora_sync),
        ("log dir", paths.logs),
    ]:
        assert f"{label}: {value}" in lines
    assert any(line.startswith("expected checkpoint footprint: 145.9 GB (4 checkpoints") for line in lines)


def test_dry_run_of_the_local_example_prints_its_trl_arguments(tmp_path: Path, capsys) -> None:
    cfg, path = config_file(tmp_path, "local.yaml")
    assert main(["--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    expected = grpo_kwargs(cfg, f"{cfg.checkpoint.dir}/.trl-staging", use_cpu=True)
    assert section(out, "trl arguments") == {k: shown(v) for k, v in expected.items()}
    assert section(out, "lora arguments")["r"] == "8"
    assert out.splitlines()[0] == "backend: local"
    assert f"checkpoint dir: {cfg.checkpoint.dir}" in out.splitlines()


MAZE_JOB = {
    "spec": {
        "dataset": {
            "train": "synthetic://maze?n=64",
            "validation": "synthetic://maze?n=16&seed=1",
            "reward": None,
            "environment": {"name": "maze", "maxTurns": 5},
        },
        # As the demo's maze job: 5 turns do not fit the tiny model's 512 positions, so nothing is served.
        "inference": {"enabled": False},
    }
}


def test_dry_run_of_a_local_environment_job_prints_the_episode_loop_not_trl(tmp_path: Path, capsys) -> None:
    cfg, path = config_file(tmp_path, "local.yaml", MAZE_JOB)
    assert main(["--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    loop = section(out, "episode loop arguments")
    assert loop["environment"] == "maze" and loop["max_turns"] == "5"
    algo = cfg.algorithm
    assert loop["episodes_per_step"] == str(algo.train_batch_size * algo.samples_per_prompt)
    assert "trl arguments:" not in out


def test_dry_run_refuses_what_the_run_would_refuse_with_the_field(tmp_path: Path, capsys) -> None:
    # Admission refuses this job (spec.checkpoint); a trainer config written by hand still gets the trainer's answer.
    cfg, path = config_file(tmp_path, "job.yaml", {"spec": {"checkpoint": {"pvc": None, "s3": {"uri": "s3://bkt/p"}}}})
    cfg = cfg.model_copy(update={"placement": cfg.placement.model_copy(update={"num_nodes": 2})})
    path.write_text(cfg.to_json())
    assert main(["--config", str(path), "--dry-run"]) == 2
    assert "spec.checkpoint.s3" in capsys.readouterr().err


_PROBE = """
import json, sys
from mmrl_trainer.__main__ import main
rc = main(["--config", sys.argv[1], "--dry-run"])
heavy = sorted(m for m in ("ray", "skyrl", "torch", "trl", "vllm", "transformers", "kubernetes") if m in sys.modules)
print(json.dumps([rc, heavy]))
"""


@pytest.mark.parametrize(("name", "patch"), [("job.yaml", None), ("local.yaml", None), ("local.yaml", MAZE_JOB)])
def test_dry_run_starts_nothing(tmp_path: Path, name: str, patch: dict | None) -> None:
    _, path = config_file(tmp_path, name, patch)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(ROOT / p) for p in ("api", "operator", "trainer"))}
    run = subprocess.run(
        [sys.executable, "-c", _PROBE, str(path)], capture_output=True, text=True, timeout=120, env=env
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads(run.stdout.strip().splitlines()[-1]) == [0, []]  # no Ray, SkyRL, torch, TRL, vLLM, API client


def test_dry_run_says_where_a_pinned_model_is_staged(tmp_path: Path, capsys) -> None:
    cfg, path = config_file(tmp_path, "job.yaml", {"spec": {"model": {"revision": "0123abc"}}})
    assert main(["--config", str(path), "--dry-run"]) == 0
    out = capsys.readouterr().out
    where = f"{cfg.checkpoint.dir}/models/"
    assert f"model staging: Qwen/Qwen3-VL-8B-Instruct@0123abc -> {where} (once per job)" in out
    _, plain = config_file(tmp_path, "job.yaml")
    assert main(["--config", str(plain), "--dry-run"]) == 0
    assert "model staging" not in capsys.readouterr().out


def test_a_skyrl_gym_environment_on_the_local_backend_is_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    # Admission refuses the pair (spec.trainer.backend); `--backend local` still reaches the local backend's refusal.
    gym = {"name": "skyrl-gym", "class": "examples.train.visgym.env:VisGymEnv"}
    cfg, path = config_file(tmp_path, "job.yaml", {"spec": {"dataset": {"reward": None, "environment": gym}}})
    assert main(["--config", str(path), "--backend", "local", "--dry-run"]) == 2
    assert "spec.trainer.backend: local cannot run a skyrl-gym environment" in capsys.readouterr().err
    # The run itself refuses before it reads data or loads a model, and the refusal exits 2 (not retried).
    with pytest.raises(InvalidConfig, match=r"^spec\.trainer\.backend: local cannot run a skyrl-gym") as refused:
        local.run(cfg.model_copy(update={"backend": "local"}))
    assert exit_code_for(refused.value) == EXIT_BAD_CONFIG
