"""`python -m mmrl_trainer.data check FILE... [--job JOB.yaml]`: read a dataset the way a job's trainer will, before
the job does.

A dataset mistake (a misnamed column, an image the trainer cannot decode, a null answer) otherwise shows up only
after a GPU cluster was scheduled, as the first attempt failing with exit 3. This reads each row through the same
steps as the trainer's `load_examples` (`data.read_records`, then `data.to_example` per row), with the job's
DatasetSpec (`--job`) or the defaults, then builds the rows the job's backend builds from them (the SkyRL backend
writes them as one parquet file, which fails when a column holds different types in different rows). It reports
the rows, the columns, the images decoded and their sizes, or the first problem with its row number (rows count
from 0, as pyarrow and pandas count them), and exits 1 on a problem. It needs pydantic, PyYAML, pyarrow and
Pillow: the `dataset` extra (`pip install '.[dataset]'`), not torch.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mmrl_api.constants import KIND
from mmrl_api.spec import DatasetSpec
from mmrl_trainer import data
from mmrl_trainer.errors import InvalidInput

USAGE = "python -m mmrl_trainer.data check FILE... [--job JOB.yaml]"


class CheckError(Exception):
    """A problem with the command line or the job file (exit 2), not with the data."""


@dataclass
class Report:
    """What one file holds, as the trainer reads it."""

    rows: int = 0
    columns: list[str] = field(default_factory=list)
    images: int = 0
    rows_without_images: int = 0
    most_images: int = 0
    smallest: tuple[int, int] | None = None
    largest: tuple[int, int] | None = None
    chat_prompts: int = 0

    def add(self, record: dict[str, Any], example: data.Example) -> None:
        self.rows += 1
        self.columns += [k for k in record if k not in self.columns]
        self.images += len(example.images)
        self.rows_without_images += not example.images
        self.most_images = max(self.most_images, len(example.images))
        self.chat_prompts += not isinstance(example.prompt, str)
        for image in example.images:
            pixels = image.width * image.height
            if self.smallest is None or pixels < self.smallest[0] * self.smallest[1]:
                self.smallest = image.size
            if self.largest is None or pixels > self.largest[0] * self.largest[1]:
                self.largest = image.size

    def lines(self, spec: DatasetSpec) -> list[str]:
        prompts = f"{self.rows - self.chat_prompts:,} text, {self.chat_prompts:,} chat"
        out = [
            f"{self.rows:,} rows; columns: {', '.join(self.columns)}",
            f"prompts from {spec.prompt_field!r} ({prompts})",
        ]
        if self.images:
            sizes = f"{_size(self.smallest)} to {_size(self.largest)} pixels"
            out.append(
                f"images from {spec.images_field!r}: {self.images:,} decoded, at most {self.most_images} in a row, "
                f"{self.rows_without_images:,} rows without one; {sizes}"
            )
        else:
            out.append(f"images from {spec.images_field!r}: none in any row (is dataset.imagesField right?)")
        if spec.environment is None:
            out.append(f"answers from {spec.answer_field!r}, scored by the {spec.reward.name} reward")  # type: ignore[union-attr]
        return out


def _size(size: tuple[int, int] | None) -> str:
    return f"{size[0]}x{size[1]}" if size else "-"


def check_file(path: str, spec: DatasetSpec, backend: str) -> Report:
    """Read `path` as the job's trainer would; raises InvalidInput naming the first problem."""
    report = Report()
    examples = []
    try:
        rows, read = data.read_records(path, spec.format)
        for i, record in enumerate(rows):
            example = data.to_example(i, record, spec, read)
            report.add(record, example)
            examples.append(example)
    except (OSError, ValueError) as err:
        raise InvalidInput(str(err)) from err
    if not examples:
        raise InvalidInput("no rows")
    if backend == "skyrl":
        with tempfile.TemporaryDirectory() as tmp:
            data.write_skyrl_data(examples, spec, data_source=path, path=Path(tmp) / "rows.parquet")
    else:
        data.to_trl_rows(examples)
    return report


def job_dataset(path: Path) -> tuple[DatasetSpec, str]:
    """The DatasetSpec and trainer backend of the one MultimodalRLJob in a YAML file."""
    try:
        docs = [d for d in yaml.safe_load_all(path.read_text()) if isinstance(d, dict)]
    except (OSError, yaml.YAMLError) as err:
        raise CheckError(f"{path}: {err}") from err
    jobs = [d for d in docs if d.get("kind") == KIND]
    if len(jobs) != 1:
        raise CheckError(f"{path}: holds {len(jobs)} {KIND} objects; --job needs a file with exactly one")
    spec = jobs[0].get("spec") or {}
    try:
        dataset = DatasetSpec.model_validate(spec.get("dataset") or {})
    except ValidationError as err:
        problem = err.errors()[0]
        where = ".".join(str(p) for p in problem["loc"])
        raise CheckError(f"{path}: spec.dataset.{where}: {problem['msg']}" if where else f"{path}: {err}") from err
    return dataset, str((spec.get("trainer") or {}).get("backend", "skyrl"))


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m mmrl_trainer.data", description=(__doc__ or "").splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser("check", help="read dataset files as a job's trainer will, and report what they hold")
    check.add_argument("files", nargs="+", metavar="FILE", help="a parquet or jsonl file, or a directory of them")
    check.add_argument("--job", type=Path, help="the job whose spec.dataset (columns, format, reward) to read with")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        # Without --job: the columns, format and reward a job that does not set them gets (train is required by the
        # model and not read here: the files are the arguments).
        spec, backend = job_dataset(args.job) if args.job else (DatasetSpec(train="/unused"), "skyrl")
    except CheckError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    failed = False
    for path in args.files:
        try:
            report = check_file(path, spec, backend)
        except InvalidInput as err:
            print(f"{path}: {err}", file=sys.stderr)
            failed = True
            continue
        for line in report.lines(spec):
            print(f"{path}: {line}")
        print(f"{path}: ok: the {backend} backend's rows built from all {report.rows:,}")
    return 1 if failed else 0
