"""Progress: JSONL on every step, rate-limited status patches, and training never fails on API errors."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from mmrl_trainer.checkpoint import Checkpoint
from mmrl_trainer.progress import ProgressReporter, kube_patcher


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_every_step_goes_to_jsonl_but_patches_are_rate_limited(tmp_path: Path) -> None:
    sent: list[dict] = []
    clock = FakeClock()
    rep = ProgressReporter(tmp_path / "m.jsonl", sent.append, min_interval=10, clock=clock)
    assert rep.report(1, 20, {"reward": 0.25}) is True
    clock.now += 3
    assert rep.report(2, 20, {"reward": 0.5}) is False
    clock.now += 8
    assert rep.report(3, 20, {"reward": 0.75}) is True
    lines = [json.loads(x) for x in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert [r["step"] for r in lines] == [1, 2, 3]
    assert [r["reward"] for r in lines] == [0.25, 0.5, 0.75]
    assert len(sent) == 2
    progress = sent[-1]["status"]["progress"]
    assert (progress["step"], progress["totalSteps"], progress["rewardMean"]) == (3, 20, 0.75)
    assert progress["heartbeat"].endswith("Z")


def test_checkpoint_reports_are_forced_and_remembered(tmp_path: Path) -> None:
    sent: list[dict] = []
    clock = FakeClock()
    rep = ProgressReporter(None, sent.append, min_interval=60, clock=clock)
    rep.report(1, 4, {"reward": 0.5})
    cp = Checkpoint(2, tmp_path / "global_step_2", "2026-01-01T00:00:00Z")
    assert rep.report(2, 4, {}, checkpoint=cp, force=True) is True
    clock.now += 61
    rep.report(3, 4, {"reward": 1.0})
    last = sent[-1]["status"]["progress"]
    assert last["lastCheckpoint"] == {"step": 2, "path": str(cp.path), "time": "2026-01-01T00:00:00Z"}
    assert last["rewardMean"] == 1.0


def test_patch_errors_are_counted_never_raised(tmp_path: Path) -> None:
    def broken(body: dict) -> None:
        raise ConnectionError("apiserver down")

    rep = ProgressReporter(tmp_path / "m.jsonl", broken, min_interval=0)
    assert rep.report(1, 2, {"reward": 0.1}) is False
    assert rep.report(2, 2, {"reward": 0.2}) is False
    assert (rep.patch_failures, rep.patches_sent) == (2, 0)
    assert len((tmp_path / "m.jsonl").read_text().splitlines()) == 2


def test_unreachable_apiserver_does_not_fail_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": f"https://127.0.0.1:{port}"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig))
    rep = ProgressReporter(tmp_path / "m.jsonl", kube_patcher("ns", "job", timeout=1), min_interval=0)
    assert rep.report(1, 1, {"reward": 1.0}) is False
    assert rep.patch_failures == 1


def test_no_incluster_credentials_does_not_fail_training(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    rep = ProgressReporter(None, kube_patcher("ns", "job"), min_interval=0)
    assert rep.report(1, 1, {}) is False and rep.patch_failures == 1


def test_multi_turn_steps_report_their_episodes_and_a_new_attempt_clears_them(tmp_path: Path) -> None:
    from mmrl_api.status import Progress

    sent: list[dict] = []
    rep = ProgressReporter(tmp_path / "m.jsonl", sent.append, min_interval=0, clock=FakeClock(), attempt=2)
    rep.report(1, 10, {"reward": 0.5, "episode_success": 1 / 3, "episode_turns": 4.333333, "completion_length": 61.0})
    progress = sent[-1]["status"]["progress"]
    assert progress["episodes"] == {"successRate": 0.3333, "turns": 4.3333, "tokens": 61.0}
    Progress.model_validate(progress)  # what the trainer writes is what the status schema accepts
    rep.report(2, 10, {"reward": 0.5, "completion_length": 12.0})  # a step without episodes keeps the last ones
    assert sent[-1]["status"]["progress"]["episodes"]["turns"] == 4.3333
    single = ProgressReporter(None, sent.append, min_interval=0, clock=FakeClock())
    single.report(1, 10, {"reward": 0.5, "completion_length": 12.0})
    assert "episodes" not in sent[-1]["status"]["progress"]  # single-turn jobs have no episodes
    rep.started(None)
    assert sent[-1]["status"]["progress"]["episodes"] is None  # a merge patch null: the last attempt's go
