"""The SkyRL backend's S3 paths against a real S3-compatible server (moto): an s3:// model staged once per job
and reused, the final adapter exported from S3 checkpoints, the parquet placed where the entry task's node reads
it, and the world-size record read from an S3 checkpoint."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from safetensors.numpy import save_file

from mmrl_api.trainer_config import TrainerConfig
from mmrl_trainer import storage
from mmrl_trainer.backends.skyrl import export_final_adapter, localise_data, shared_data
from mmrl_trainer.staging import MODELS_DIR, model_path
from mmrl_trainer.world_size import checkpoint_to_resume
from tests.support.s3_server import S3Server, running_s3
from tests.unit.trainer.skyrl_job import skyrl_config


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    with running_s3(["models", "ckpt"], tmp_path_factory.mktemp("s3")) as server:
        yield server


@pytest.fixture
def s3_env(s3: S3Server, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, str]]:
    s3.check()  # a test that finds the server gone says so, with its log, not as a client's connection error
    for key, value in s3.env.items():
        monkeypatch.setenv(key, value)
    yield s3.env
    s3.check()


def upload(tmp_path: Path, files: dict[str, bytes], uri: str) -> None:
    src = tmp_path / "upload"
    for rel, data in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    storage.upload_tree(src, uri)


def config(job_dir: str, **top: object) -> TrainerConfig:
    return TrainerConfig.model_validate(skyrl_config(job_dir, **top))


MODEL = {"config.json": b'{"model_type": "qwen3_vl"}', "model.safetensors": b"weights", "sub/tokenizer.json": b"{}"}


def test_s3_model_is_staged_once_on_the_checkpoint_volume_and_reused(s3_env: dict, tmp_path: Path) -> None:
    upload(tmp_path, MODEL, "s3://models/base-a")
    cfg = config(str(tmp_path / "job"), model={"name": "s3://models/base-a"})
    staged = Path(model_path(cfg))
    assert staged.parent == tmp_path / "job" / MODELS_DIR
    assert {p.relative_to(staged).as_posix(): p.read_bytes() for p in staged.rglob("*") if p.is_file()} == MODEL
    # The source is gone (as for a resumed attempt without S3 access): the staged copy is used as it is.
    storage.filesystem("s3://models/base-a")[0].delete_dir_contents("models/base-a")
    assert Path(model_path(cfg)) == staged


def test_a_half_staged_copy_is_staged_again(s3_env: dict, tmp_path: Path) -> None:
    upload(tmp_path, MODEL, "s3://models/base-b")
    cfg = config(str(tmp_path / "job"), model={"name": "s3://models/base-b"})
    staged = Path(model_path(cfg))
    marker = next((tmp_path / "job" / MODELS_DIR).glob("*.staged.json"))
    marker.unlink()  # a crash before the marker: the copy may be partial
    (staged / "model.safetensors").write_bytes(b"trunc")
    assert Path(model_path(cfg)) == staged and (staged / "model.safetensors").read_bytes() == b"weights"
    assert marker.is_file()


def test_a_missing_s3_model_is_invalid_input(s3_env: dict, tmp_path: Path) -> None:
    from mmrl_trainer.errors import InvalidInput

    with pytest.raises(InvalidInput, match=r"spec\.model\.name 's3://models/none'"):
        model_path(config(str(tmp_path / "job"), model={"name": "s3://models/none"}))


def skyrl_lora_step(step: int, rank: int) -> dict[str, bytes]:
    tmp = Path(f"/tmp/run-lora-{rank}.safetensors")
    save_file({"base_model.model.q_proj.lora_A.weight": np.zeros((rank, 4), dtype=np.float32)}, str(tmp))
    lora = f"global_step_{step}/policy/lora_adapter"
    cfg = {"peft_type": "LORA", "r": rank, "lora_alpha": rank, "target_modules": ["q_proj"]}
    return {
        f"{lora}/adapter_config.json": json.dumps({**cfg, "base_model_name_or_path": "/tmp/resolved"}).encode(),
        f"{lora}/adapter_model.safetensors": tmp.read_bytes(),
        f"global_step_{step}/policy/model_world_size_8_rank_0.pt": b"",
    }


def test_with_s3_checkpoints_the_newest_complete_adapter_is_exported_to_s3(s3_env: dict, tmp_path: Path) -> None:
    files = {**skyrl_lora_step(5, 16), **skyrl_lora_step(10, 32), **skyrl_lora_step(15, 64)}
    upload(tmp_path, {**files, "latest_ckpt_global_step.txt": b"10"}, "s3://ckpt/ns/job")  # 15: half-written
    cfg = config("s3://ckpt/ns/job", export_dir="s3://ckpt/ns/job/adapter", model={"name": "Qwen/Qwen3-VL-8B"})
    exported = export_final_adapter(cfg)
    assert exported.path == "s3://ckpt/ns/job/adapter"
    assert storage.file_names(exported.path) == ["adapter_config.json", "adapter_model.safetensors"]
    served = json.loads(storage.read_text("s3://ckpt/ns/job/adapter/adapter_config.json") or "{}")
    assert (served["r"], served["base_model_name_or_path"]) == (32, "Qwen/Qwen3-VL-8B")
    assert json.loads((exported.local / "adapter_config.json").read_text()) == served
    assert checkpoint_to_resume("s3://ckpt/ns/job").world_size == 8  # type: ignore[union-attr]


def test_with_s3_checkpoints_the_parquet_goes_to_s3_and_the_entry_task_reads_a_local_copy(
    s3_env: dict, tmp_path: Path
) -> None:
    import pyarrow.parquet as pq

    cfg = config("s3://ckpt/ns/data-job")
    cfg = cfg.model_copy(update={"dataset": cfg.dataset.model_copy(update={"validation": "synthetic://colors?n=2"})})
    train, val, images, train_rows = shared_data(cfg)
    assert images == 1 and train_rows > 0
    assert (train, val) == (
        ["s3://ckpt/ns/data-job/data/train.parquet"],
        ["s3://ckpt/ns/data-job/data/validation.parquet"],
    )
    skyrl_cfg = SimpleNamespace(data=SimpleNamespace(train_data=train, val_data=val))
    localise_data(skyrl_cfg, tmp_path / "node")  # in the entry task, on whichever node Ray placed it
    assert all(Path(f).is_relative_to(tmp_path / "node") for f in skyrl_cfg.data.train_data + skyrl_cfg.data.val_data)
    assert [pq.read_table(f).num_rows for f in skyrl_cfg.data.train_data + skyrl_cfg.data.val_data] == [4, 2]


def test_an_upload_the_server_refuses_raises_instead_of_leaving_the_file_out(s3_env: dict, tmp_path: Path) -> None:
    """The bucket exists when the filesystem is made, and is gone when the file is written: S3 refuses the PutObject,
    which pyarrow sends when the stream closes (allow_delayed_open)."""
    urllib.request.urlopen(urllib.request.Request(f"{s3_env['AWS_ENDPOINT_URL']}/doomed", method="PUT")).close()
    storage.filesystem("s3://doomed/x")  # made (and cached) while the bucket is there
    urllib.request.urlopen(urllib.request.Request(f"{s3_env['AWS_ENDPOINT_URL']}/doomed", method="DELETE")).close()
    with pytest.raises(OSError, match="doomed"):
        upload(tmp_path, {"adapter/adapter_model.safetensors": b"weights"}, "s3://doomed/ns/job")
