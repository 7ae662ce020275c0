"""`python -m mmrl_trainer.data check`: a dataset is read as the job's trainer reads it, before any GPU is scheduled;
the first problem is named with its row and the spec field, and the check runs without torch."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml
from PIL import Image

from mmrl_trainer import dataset_check

ROOT = Path(__file__).resolve().parents[3]


def png(colour: tuple[int, int, int], size: tuple[int, int] = (8, 8)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, colour).save(buf, format="PNG")
    return buf.getvalue()


def geometry_rows(n: int = 3) -> list[dict]:
    """Rows shaped like geometry3k on the hub: a `problem`, Hugging Face image structs, a numeric `answer`."""
    return [
        {"problem": f"<image>Find x in figure {i}.", "images": [{"bytes": png((i, 0, 0), (8 + i, 8)), "path": None}]}
        | {"answer": str(i + 1)}
        for i in range(n)
    ]


def job_file(tmp_path: Path, **dataset: object) -> Path:
    job = {
        "apiVersion": "mmrl.dev/v1alpha1",
        "kind": "MultimodalRLJob",
        "metadata": {"name": "geo"},
        "spec": {
            "model": {"name": "Qwen/Qwen3-VL-8B-Instruct"},
            "dataset": {"train": "pvc://fsx-claim/train.parquet", "promptField": "problem", **dataset},
        },
    }
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def write_parquet(path: Path, rows: list[dict]) -> Path:
    pq.write_table(pa.Table.from_pylist(rows), path)
    return path


def test_a_good_file_reports_rows_columns_and_images_and_passes(tmp_path: Path, capsys) -> None:
    train = write_parquet(tmp_path / "train.parquet", geometry_rows(3))
    code = dataset_check.main(["check", str(train), "--job", str(job_file(tmp_path, reward={"name": "numeric"}))])
    out = capsys.readouterr().out
    assert code == 0
    assert f"{train}: 3 rows; columns: problem, images, answer" in out
    assert "images from 'images': 3 decoded, at most 1 in a row, 0 rows without one; 8x8 to 10x8 pixels" in out
    assert "scored by the numeric reward" in out
    assert f"{train}: ok: the skyrl backend's rows built from all 3" in out


def test_an_unreadable_image_is_named_with_its_row_and_column(tmp_path: Path, capsys) -> None:
    rows = geometry_rows(4)
    rows[2]["images"] = [{"bytes": b"GIF00000 not really", "path": None}]
    train = write_parquet(tmp_path / "train.parquet", rows)
    code = dataset_check.main(["check", str(train), "--job", str(job_file(tmp_path))])
    err = capsys.readouterr().err
    assert code == 1
    assert f"{train}: row 2: column 'images' (named by dataset.imagesField), image 0: 19 bytes that Pillow" in err


def test_without_the_jobs_field_names_the_default_column_is_missing(tmp_path: Path, capsys) -> None:
    train = write_parquet(tmp_path / "train.parquet", geometry_rows(1))
    assert dataset_check.main(["check", str(train)]) == 1  # the defaults read `prompt`, which it has not
    assert "row 0: missing column 'prompt' (named by dataset.promptField)" in capsys.readouterr().err


def test_a_null_answer_is_a_problem_for_a_reward_not_silently_the_text_none(tmp_path: Path, capsys) -> None:
    rows = geometry_rows(3)
    rows[1]["answer"] = None
    train = write_parquet(tmp_path / "train.parquet", rows)
    assert dataset_check.main(["check", str(train), "--job", str(job_file(tmp_path))]) == 1
    assert "row 1: column 'answer' (named by dataset.answerField) is null" in capsys.readouterr().err


def test_a_prompt_that_is_neither_text_nor_chat_is_refused(tmp_path: Path, capsys) -> None:
    rows = [{"prompt": 7, "images": [], "answer": "7"}]
    train = tmp_path / "train.jsonl"
    train.write_text(json.dumps(rows[0]))
    assert dataset_check.main(["check", str(train)]) == 1
    assert "row 0: column 'prompt' (named by dataset.promptField) holds int" in capsys.readouterr().err


def test_a_column_of_mixed_types_fails_where_the_skyrl_backend_would(tmp_path: Path, capsys) -> None:
    # jsonl can hold what parquet cannot. For a SkyRL-Gym environment the SkyRL backend writes each extra column as a
    # parquet column of its own at start, which needs one type per column.
    rows = [{"prompt": "q", "images": [], "seed": s} for s in (1, "two")]
    train = tmp_path / "train.jsonl"
    train.write_text("\n".join(json.dumps(r) for r in rows))
    gym = {"name": "skyrl-gym", "class": "visgym_env:VisGymEnv"}
    job = job_file(tmp_path, promptField="prompt", format="jsonl", environment=gym)
    assert dataset_check.main(["check", str(train), "--job", str(job)]) == 1
    assert "a column holds values of different types in different rows" in capsys.readouterr().err


def test_a_job_file_without_one_job_is_a_usage_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "two.yaml"
    path.write_text("kind: ConfigMap\n---\nkind: ConfigMap\n")
    train = write_parquet(tmp_path / "train.parquet", geometry_rows(1))
    assert dataset_check.main(["check", str(train), "--job", str(path)]) == 2
    assert "holds 0 MultimodalRLJob objects" in capsys.readouterr().err


def test_a_bad_dataset_field_in_the_job_is_named(tmp_path: Path, capsys) -> None:
    train = write_parquet(tmp_path / "train.parquet", geometry_rows(1))
    assert dataset_check.main(["check", str(train), "--job", str(job_file(tmp_path, format="csv"))]) == 2
    assert "spec.dataset.format:" in capsys.readouterr().err


@pytest.mark.timeout(120)
def test_the_module_command_runs_without_torch_or_the_hub_libraries(tmp_path: Path) -> None:
    # What the `dataset` extra installs (pyarrow, Pillow) and the core (pydantic, PyYAML) suffice: the trainer's
    # heavy stack is made unimportable, and `python -m mmrl_trainer.data check` still reads the file.
    train = write_parquet(tmp_path / "train.parquet", geometry_rows(2))
    absent = ["torch", "torchvision", "transformers", "datasets", "trl", "peft", "ray", "huggingface_hub", "numpy"]
    code = (
        f"import runpy, sys\nfor m in {absent!r}: sys.modules[m] = None\n"
        f"sys.argv = ['mmrl_trainer.data', 'check', {str(train)!r}, '--job', {str(job_file(tmp_path))!r}]\n"
        "runpy.run_module('mmrl_trainer.data', run_name='__main__', alter_sys=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=100, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "2 rows; columns: problem, images, answer" in done.stdout
