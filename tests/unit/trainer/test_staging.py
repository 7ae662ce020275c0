"""A hub model pinned by model.revision reaches SkyRL as that revision's snapshot, staged on the checkpoint volume
with huggingface_hub's own snapshot_download (offline here, from a hub cache laid out as the hub writes it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer.backends.skyrl_config import skyrl_overrides
from mmrl_trainer.errors import InvalidConfig
from mmrl_trainer.staging import HUB_CACHE, MODELS_DIR, model_path
from tests.unit.trainer.skyrl_job import skyrl_config

COMMITS = {"main": "a" * 40, "v1": "b" * 40}


def hub_cache(cache: Path, repo: str) -> None:
    """Two revisions of `repo` in huggingface_hub's cache layout (refs/<name> -> commit, snapshots/<commit>/)."""
    root = cache / f"models--{repo.replace('/', '--')}"
    for ref, commit in COMMITS.items():
        (root / "refs").mkdir(parents=True, exist_ok=True)
        (root / "refs" / ref).write_text(commit)
        snap = root / "snapshots" / commit
        snap.mkdir(parents=True)
        (snap / "config.json").write_text(json.dumps({"model_type": "qwen3_vl", "revision": ref}))


def config(job_dir: Path, **model: str) -> TrainerConfig:
    return TrainerConfig.model_validate(skyrl_config(str(job_dir), model=model))


def test_pinned_revision_is_the_snapshot_our_overrides_give_skyrl(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    job = tmp_path / "job"
    hub_cache(job / MODELS_DIR / HUB_CACHE, "Qwen/Qwen3-VL-8B-Instruct")
    cfg = config(job, name="hf://Qwen/Qwen3-VL-8B-Instruct", revision="v1")
    path = model_path(cfg)
    assert json.loads((Path(path) / "config.json").read_text())["revision"] == "v1"
    o = skyrl_overrides(cfg, train_files=["t.parquet"], val_files=[], model_path=path)
    assert o["trainer.policy.model.path"] == o["trainer.ref.model.path"] == path
    assert model_path(cfg) == path  # recorded: a resumed attempt reuses it
    main = model_path(config(job, name="hf://Qwen/Qwen3-VL-8B-Instruct", revision="main"))
    assert json.loads((Path(main) / "config.json").read_text())["revision"] == "main"


def test_unpinned_hub_ids_and_paths_pass_through(tmp_path: Path) -> None:
    assert model_path(config(tmp_path, name="hf://Qwen/Qwen3-VL-8B-Instruct")) == "Qwen/Qwen3-VL-8B-Instruct"
    assert model_path(config(tmp_path, name="/models/base", revision="v1")) == "/models/base"
    assert not (tmp_path / MODELS_DIR).exists()


def test_staging_needs_a_shared_volume(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match=r"spec\.model: 's3://models/base'.*spec\.checkpoint\.pvc"):
        model_path(TrainerConfig.model_validate(skyrl_config("s3://c/j", model={"name": "s3://models/base"})))
