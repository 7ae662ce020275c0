"""Killing training after a checkpoint and restarting resumes at the next step with identical state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mmrl_trainer import checkpoint as ckpt
from mmrl_trainer.backends import local
from tests.trainer.conftest import make_config

pytestmark = pytest.mark.trainer
STEPS, INTERVAL = 6, 2
HELD_OUT_FEW = "synthetic://colors?n=4&seed=2"  # a small held-out set: what is checked is when it is evaluated
ROOT = Path(__file__).resolve().parents[2]


def lora_weights(step_dir: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(step_dir / "policy" / "adapter_model.safetensors")


def optimizer_state(step_dir: Path) -> dict:
    import torch

    return torch.load(step_dir / "policy" / "optimizer.pt", weights_only=False)["state"]


def assert_same_tensors(a: dict, b: dict) -> None:
    import torch

    assert a.keys() == b.keys()
    for k in a:
        if isinstance(a[k], dict):
            assert_same_tensors(a[k], b[k])
        else:
            assert torch.equal(torch.as_tensor(a[k]), torch.as_tensor(b[k])), k


def train_until_killed(cfg_file: Path, job_dir: Path, timeout: float = 240) -> int:
    """Run the real entrypoint in a subprocess and SIGKILL it as soon as the first checkpoint is committed."""
    # This checkout's packages first, whatever checkout the venv's editable install points at.
    paths = [ROOT / "api", ROOT / "operator", ROOT / "trainer", ROOT, os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(str(p) for p in paths)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "mmrl_trainer", "--config", str(cfg_file)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if ckpt.read_marker(job_dir) is not None:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.02)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the trainer finished or failed before it could be killed"
    marker = ckpt.read_marker(job_dir)
    assert marker is not None and marker < STEPS
    return marker


def test_kill_after_checkpoint_then_resume_continues_with_identical_state(tiny_model: Path, tmp_path: Path) -> None:
    reference = make_config(tmp_path / "straight", tiny_model, maxSteps=STEPS, interval=INTERVAL)
    # The uninterrupted run also evaluates the untrained policy (step 0) and every checkpoint: that must not shift its
    # training RNG stream.
    straight = local.run(reference, evaluate=True)
    assert straight.final_step == STEPS and straight.resumed_from is None
    evals = [json.loads(x) for x in (tmp_path / "straight" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in evals if "eval_reward" in r] == [0, 2, 4, 6]

    job_dir = tmp_path / "killed"
    cfg = make_config(job_dir, tiny_model, maxSteps=STEPS, interval=INTERVAL)
    cfg_file = tmp_path / "trainer.json"
    cfg_file.write_text(cfg.to_json())
    killed_at = train_until_killed(cfg_file, job_dir)

    resumed = local.run(cfg, evaluate=False)
    assert resumed.resumed_from == killed_at
    assert resumed.final_step == STEPS

    # The restarted attempt logged steps killed_at+1 .. STEPS, continuing the step count.
    records = [json.loads(line) for line in (job_dir / "metrics.jsonl").read_text().splitlines()]
    trained = [r["step"] for r in records if "reward" in r]
    assert trained[-(STEPS - killed_at) :] == list(range(killed_at + 1, STEPS + 1))

    # Identical state: LoRA weights and optimizer moments at the final step match the uninterrupted run bit for bit.
    a, b = ckpt.step_dir(tmp_path / "straight", STEPS), ckpt.step_dir(job_dir, STEPS)
    assert_same_tensors(lora_weights(a), lora_weights(b))
    assert_same_tensors(optimizer_state(a), optimizer_state(b))
    state_a = json.loads((a / "policy" / "trainer_state.json").read_text())
    state_b = json.loads((b / "policy" / "trainer_state.json").read_text())
    assert [h.get("reward") for h in state_a["log_history"]] == [h.get("reward") for h in state_b["log_history"]]


def test_half_written_checkpoint_is_skipped_on_resume(tiny_model: Path, tmp_path: Path) -> None:
    first = make_config(tmp_path, tiny_model, maxSteps=2, interval=2)
    assert local.run(first, evaluate=False).final_step == 2
    # A save of step 4 that died mid-write: files present, marker never advanced.
    half = ckpt.begin_step(tmp_path, 4)
    (half / "policy").mkdir()
    (half / "policy" / "adapter_model.safetensors").write_bytes(b"\0" * 10)
    assert ckpt.latest_complete(tmp_path).step == 2

    result = local.run(make_config(tmp_path, tiny_model, maxSteps=4, interval=2), evaluate=False)
    assert (result.resumed_from, result.final_step) == (2, 4)
    done = ckpt.latest_complete(tmp_path)
    assert done.step == 4 and ckpt.manifest_ok(done.path)
    assert len(lora_weights(done.path)) > 0  # the junk file was replaced by a real adapter


def test_a_sealed_checkpoint_with_a_changed_byte_is_passed_over_and_said(tiny_model: Path, tmp_path: Path) -> None:
    assert local.run(make_config(tmp_path, tiny_model, maxSteps=4, interval=2), evaluate=False).final_step == 4
    moments = ckpt.step_dir(tmp_path, 4) / "policy" / "optimizer.pt"
    data = bytearray(moments.read_bytes())
    data[len(data) // 2] ^= 0xFF  # a bit flip of the same size: only the sha256 tells
    moments.write_bytes(bytes(data))

    result = local.run(make_config(tmp_path, tiny_model, maxSteps=6, interval=2), evaluate=False)
    assert (result.resumed_from, result.final_step) == (2, 6)
    started = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    (said,) = [r["passed_over"] for r in started if r.get("event") == "started" and r.get("passed_over")]
    assert said == ["global_step_4/policy/optimizer.pt does not have the sha256 its manifest records"]


def test_the_base_model_is_evaluated_by_the_fresh_attempt_only(tiny_model: Path, tmp_path: Path) -> None:
    def config(steps: int):
        cfg = make_config(tmp_path, tiny_model, maxSteps=steps, interval=2)
        return cfg.model_copy(update={"dataset": cfg.dataset.model_copy(update={"validation": HELD_OUT_FEW})})

    assert local.run(config(2), attempt=1).resumed_from is None
    assert local.run(config(4), attempt=2).resumed_from == 2

    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    points = [(r["attempt"], r["step"]) for r in records if "eval_reward" in r]
    assert [p for p in points if p[1] == 0] == [(1, 0)]  # one baseline, from the attempt that started fresh
    assert len(set(points)) == len(points) and [step for _, step in points] == sorted(step for _, step in points)
    assert next(r.get("event") for r in records if r["attempt"] == 2) == "started"


def test_an_attempt_that_resumes_from_the_final_step_trains_no_further(tiny_model: Path, tmp_path: Path) -> None:
    """An attempt can start after the previous one sealed its last step (it was stopped, or its RayJob was replaced,
    between the final checkpoint and its end). It exports and evaluates that step; it trains nothing and writes no
    checkpoint. TRL would run one more step: its resumed loop checks max_steps only after a step."""
    cfg = make_config(tmp_path, tiny_model, maxSteps=3, interval=3)
    assert local.run(cfg, evaluate=False, attempt=1).final_step == 3
    sealed = lora_weights(ckpt.step_dir(tmp_path, 3))

    again = local.run(cfg, evaluate=False, attempt=2)
    assert (again.resumed_from, again.final_step) == (3, 3)
    assert sorted(ckpt.step_dirs(tmp_path)) == [3] and ckpt.read_marker(tmp_path) == 3
    from safetensors.torch import load_file

    assert_same_tensors(sealed, load_file(again.adapter_dir / "adapter_model.safetensors"))
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r["attempt"] == 2 and "reward" in r] == []
    assert [r.get("event") for r in records if r["attempt"] == 2][-1] == "finished"
