"""Datasets with images: load parquet/jsonl (or the synthetic demo task) and convert rows for each backend.

Every source (a local or mounted path, pvc://, s3:// through pyarrow's filesystem, hf:// through `datasets`, or
synthetic://) is read into `Example`s (prompt, PIL images, answer, extra). Images may be PIL objects, Hugging Face
`{"bytes", "path"}` structs, file paths (relative ones resolve against the data file's directory, on the same
filesystem), s3:// or file:// URIs, `data:` URIs or bare base64. The TRL rows put `{"type": "image"}` placeholders
in the chat and the images in an `images` column; the SkyRL rows follow SkyRL's VLM dataset contract: a chat
`prompt` whose image parts are `image_url` base64 data URIs, plus `env_class`, `reward_spec{method, ground_truth}`,
`data_source` and `extra_info`. Rows for a SkyRL-Gym environment class (`environment.name: skyrl-gym`) carry the
dataset's own extra columns as columns of their own too: SkyRL hands every column but `prompt` and `env_class` to
the environment as its `extras` (skyrl/train/dataset/dataset.py:PromptDataset.__getitem__), so such a class reads
`extras["seed"]` or `extras["visgym_env_id"]` exactly as it would from SkyRL's own parquet.
"""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

from PIL import Image, UnidentifiedImageError

from mmrl_api.spec import DatasetSpec
from mmrl_trainer.errors import InvalidInput
from mmrl_trainer.synthetic import Example, synthetic_examples

SKYRL_ENV_CLASS = "mmrl_reward"
# The skyrl-gym id of a multi-turn environment's episodes (backends/skyrl_episode_env.py wraps any of them).
SKYRL_EPISODE_ENV_CLASS = "mmrl_episode"
# The skyrl-gym id a job's own SkyRL-Gym environment class is registered under (`environment.name: skyrl-gym`).
SKYRL_GYM_ENV_CLASS = "mmrl_skyrl_gym"
# Columns SkyRL's dataset reads itself: a row's own column of these names cannot also reach the environment.
SKYRL_ROW_KEYS = ("prompt", "env_class")


def is_skyrl_gym(dataset: DatasetSpec) -> bool:
    """The dataset's environment is a SkyRL-Gym class that SkyRL runs as it is."""
    return dataset.environment is not None and dataset.environment.name == "skyrl-gym"


def skyrl_env_class(dataset: DatasetSpec) -> str:
    """The skyrl-gym environment that plays this dataset's rows: our rewards, episodes of its environment, or the
    job's own SkyRL-Gym class."""
    if is_skyrl_gym(dataset):
        return SKYRL_GYM_ENV_CLASS
    return SKYRL_EPISODE_ENV_CLASS if dataset.environment is not None else SKYRL_ENV_CLASS


def resolve_uri(uri: str) -> str:
    """pvc://claim/path → its mount (the operator normally rewrites these; `MMRL_PVC_ROOT` covers the rest)."""
    if uri.startswith("pvc://"):
        claim, _, rest = uri.removeprefix("pvc://").partition("/")
        return str(Path(os.environ.get("MMRL_PVC_ROOT", "/mnt/pvc")) / claim / rest)
    return uri.removeprefix("file://")


def decode_image(value: Any, read: Callable[[str], bytes | None] | None = None) -> Image.Image:
    """An image from PIL, HF `{"bytes", "path"}`, raw bytes, a data: URI, a path/URI `read` can fetch, or base64."""
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict):
        if value.get("bytes"):
            return decode_image(value["bytes"], read)
        return decode_image(value.get("path") or value.get("url") or "", read)
    if isinstance(value, bytes | bytearray):
        try:
            return Image.open(io.BytesIO(value)).convert("RGB")
        except UnidentifiedImageError as err:
            start = bytes(value[:8])
            raise ValueError(f"{len(value)} bytes that Pillow cannot read as an image (starting {start!r})") from err
    if not isinstance(value, str) or not value:
        raise ValueError(f"cannot read an image from {type(value).__name__} {str(value)[:40]!r}")
    if value.startswith("data:"):
        return decode_image(base64.b64decode(value.split(",", 1)[1]))
    content = (read or _read_local(None))(value)
    if content is not None:
        return decode_image(content)
    try:
        return decode_image(base64.b64decode(value, validate=True))
    except ValueError as err:
        raise ValueError(f"image {value[:60]!r} is neither a readable file nor base64") from err


def _read_local(base_dir: Path | None) -> Callable[[str], bytes | None]:
    def read(ref: str) -> bytes | None:
        path = Path(ref.removeprefix("file://"))
        if not path.is_absolute() and base_dir is not None:
            path = base_dir / path
        try:
            return path.read_bytes() if len(ref) < 4096 and path.is_file() else None
        except OSError:
            return None

    return read


def _read_s3(fs, base: str) -> Callable[[str], bytes | None]:
    def read(ref: str) -> bytes | None:
        if len(ref) >= 4096 or ref.startswith(("data:", "/")):
            return None
        path = ref.removeprefix("s3://") if ref.startswith("s3://") else f"{base.rstrip('/')}/{ref}"
        try:
            with fs.open_input_stream(path) as fh:
                return fh.read()
        except OSError:
            return None

    return read


def image_data_uri(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _fs_records(fs, path: str, fmt: str) -> tuple[Iterable[dict[str, Any]], str]:
    """Rows of one parquet/jsonl file or of every such file in a directory, on a pyarrow filesystem."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    info = fs.get_file_info(path)
    if info.type == pafs.FileType.NotFound:
        raise ValueError(f"{path} does not exist")
    if info.type == pafs.FileType.Directory:
        selector = pafs.FileSelector(path, recursive=False)
        files = sorted(f.path for f in fs.get_file_info(selector) if f.path.endswith(f".{fmt}"))
        base = path
    else:
        files, base = [path], path.rsplit("/", 1)[0]
        fmt = "jsonl" if path.endswith(".jsonl") else "parquet" if path.endswith(".parquet") else fmt
    if not files:
        raise ValueError(f"{path}: no *.{fmt} files")

    def rows() -> Iterable[dict[str, Any]]:
        for file in files:
            if fmt == "jsonl":
                with fs.open_input_stream(file) as fh:
                    yield from (json.loads(line) for line in fh.read().decode().splitlines() if line.strip())
            else:
                yield from pq.read_table(file, filesystem=fs).to_pylist()

    return rows(), base


def _hf_records(uri: str) -> Iterable[dict[str, Any]]:
    """hf://org/name?split=train&config=default through `datasets` (honours HF_HUB_OFFLINE and the cache)."""
    import datasets

    parsed = urlparse(uri)
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    name = f"{parsed.netloc}{parsed.path}".strip("/")
    return datasets.load_dataset(name, query.get("config"), split=query.get("split", "train"))


def read_records(uri: str, fmt: str) -> tuple[Iterable[dict[str, Any]], Callable[[str], bytes | None]]:
    """The rows of a dataset location (not synthetic://) as dicts, and how to read the files its images name."""
    if uri.startswith("hf://"):
        return _hf_records(uri), _read_local(None)
    if uri.startswith("s3://"):
        import pyarrow.fs as pafs

        fs, path = pafs.FileSystem.from_uri(uri)  # credentials from the pod's environment (IRSA on EKS)
        rows, base = _fs_records(fs, path, fmt)
        return rows, _read_s3(fs, base)
    import pyarrow.fs as pafs

    path = Path(resolve_uri(uri))
    rows, base = _fs_records(pafs.LocalFileSystem(), str(path), fmt)
    return rows, _read_local(Path(base))


def to_example(index: int, rec: dict[str, Any], spec: DatasetSpec, read: Callable[[str], bytes | None]) -> Example:
    """Row `index` of a dataset as an Example; a ValueError names the row, the column and the spec field."""
    # An environment scores its own episodes: its rows need no answer (SkyRL's VisGym rows have none).
    required = [("promptField", spec.prompt_field)]
    if spec.environment is None:
        required.append(("answerField", spec.answer_field))
    for field, column in required:
        if column not in rec:
            raise ValueError(f"row {index}: missing column {column!r} (named by dataset.{field})")
        if rec[column] is None:
            raise ValueError(f"row {index}: column {column!r} (named by dataset.{field}) is null")
    prompt = rec[spec.prompt_field]
    if not (isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(m, dict) for m in prompt))):
        raise ValueError(
            f"row {index}: column {spec.prompt_field!r} (named by dataset.promptField) holds "
            f"{type(prompt).__name__}; a prompt is text or a list of chat messages ({{role, content}})"
        )
    raw = rec.get(spec.images_field) or []
    raw = raw if isinstance(raw, list) else [raw]
    images = []
    for k, value in enumerate(raw):
        try:
            images.append(decode_image(value, read))
        except (OSError, ValueError) as err:
            raise ValueError(
                f"row {index}: column {spec.images_field!r} (named by dataset.imagesField), image {k}: {err}"
            ) from err
    skip = (spec.prompt_field, spec.answer_field, spec.images_field)
    extra = {k: v for k, v in rec.items() if k not in skip}
    return Example(
        prompt=prompt,
        images=images,
        answer=str(rec.get(spec.answer_field, "")),
        extra={"index": index, **_jsonable(extra)},
    )


def load_examples(uri: str, spec: DatasetSpec, *, seed: int = 0) -> list[Example]:
    """Read a dataset URI into Examples; field names come from the DatasetSpec. `python -m mmrl_trainer.data check`
    reads a file through the same two steps (dataset_check.py)."""
    if uri.startswith("synthetic://"):
        return synthetic_examples(uri, default_seed=seed, environment=spec.environment)
    try:
        rows, read = read_records(uri, spec.format)
        return [to_example(i, rec, spec, read) for i, rec in enumerate(rows)]
    except (OSError, ValueError) as err:
        raise InvalidInput(f"dataset {uri!r}: {err}") from err


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    """The values JSON can carry (scalars, and lists and maps of them); bytes, images and the like are left out."""
    out = {}
    for key, value in d.items():
        try:
            json.dumps(value)
        except (TypeError, ValueError):
            continue
        out[key] = value
    return out


def chat_messages(example: Example, image_part) -> list[dict[str, Any]]:
    """The prompt as a chat; images become parts built by `image_part(i, image)`, first user turn if unplaced."""
    parts = [image_part(i, img) for i, img in enumerate(example.images)]
    if isinstance(example.prompt, str):
        return [{"role": "user", "content": [*parts, {"type": "text", "text": example.prompt}]}]
    messages = [dict(m) for m in example.prompt]
    slots = iter(parts)
    placed = False
    for m in messages:
        if isinstance(m.get("content"), list):
            m["content"] = [next(slots, p) if p.get("type") in ("image", "image_url") else p for p in m["content"]]
            placed = placed or any(p.get("type") in ("image", "image_url") for p in m["content"])
    if parts and not placed:
        user = next(m for m in messages if m["role"] == "user")
        text = user["content"] if isinstance(user["content"], str) else None
        user["content"] = [*parts, {"type": "text", "text": text}] if text is not None else [*parts, *user["content"]]
    return messages


def to_trl_rows(examples: list[Example]) -> list[dict[str, Any]]:
    """TRL GRPOTrainer rows: chat prompt with image placeholders, images column, ground truth as `answer`."""
    return [
        {
            "prompt": chat_messages(e, lambda i, img: {"type": "image"}),
            "images": e.images,
            "answer": e.answer,
        }
        for e in examples
    ]


def skyrl_image_part(index: int, image: Image.Image) -> dict[str, Any]:
    """An image as SkyRL's VLM chat carries it: an `image_url` part with a base64 PNG data URI."""
    return {"type": "image_url", "image_url": {"url": image_data_uri(image)}}


def to_skyrl_rows(
    examples: list[Example],
    *,
    data_source: str,
    method: str = "rule",
    env_class: str = SKYRL_ENV_CLASS,
    extra_columns: bool = False,
) -> list[dict[str, Any]]:
    """SkyRL VLM rows; the reward itself is computed by our env (env_class) from reward_spec.ground_truth, or by
    the episode an environment plays from the row's extra_info.seed. With `extra_columns` (a SkyRL-Gym class), the
    row's extra dataset columns are columns of their own instead of extra_info, which SkyRL hands the environment
    as its extras as they are; a row's own `data_source` or `reward_spec` column wins over ours."""
    rows = []
    for i, e in enumerate(examples):
        row: dict[str, Any] = {
            "prompt": chat_messages(e, skyrl_image_part),
            "env_class": env_class,
            "reward_spec": {"method": method, "ground_truth": e.answer},
            "data_source": data_source,
        }
        if extra_columns:
            row.update((k, v) for k, v in e.extra.items() if k not in SKYRL_ROW_KEYS)
        else:
            row["extra_info"] = {"split_index": e.extra.get("index", i), **e.extra}
        rows.append(row)
    return rows


def write_parquet(
    rows: list[dict[str, Any]], path: str | Path, *, json_text: tuple[str, ...] = ("extra_info",)
) -> Path:
    """The rows as one parquet file; the `json_text` columns are stored as JSON text (mmrl's extra_info: arrow
    needs one schema for all rows and user extras vary per row). A column missing from some rows (jsonl) is null
    there: arrow would take the columns from the first row alone."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    columns = list(dict.fromkeys(key for r in rows for key in r))
    records = [{k: json.dumps(r.get(k)) if k in json_text else r.get(k) for k in columns} for r in rows]
    try:
        table = pa.Table.from_pylist(records)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise InvalidInput(
            f"dataset rows for SkyRL: a column holds values of different types in different rows: {err}"
        ) from err
    pq.write_table(table, target)
    return target


def write_skyrl_data(
    examples: list[Example], dataset: DatasetSpec, *, data_source: str, path: str | Path
) -> list[dict[str, Any]]:
    """The dataset's rows as SkyRL's parquet at `path`, in the form its environment reads them; returns the rows."""
    gym = is_skyrl_gym(dataset)
    rows = to_skyrl_rows(examples, data_source=data_source, env_class=skyrl_env_class(dataset), extra_columns=gym)
    write_parquet(rows, path, json_text=() if gym else ("extra_info",))
    return rows


if __name__ == "__main__":
    # `python -m mmrl_trainer.data check FILE [--job JOB.yaml]` (dataset_check.py).
    import sys

    from mmrl_trainer.dataset_check import main

    sys.exit(main(sys.argv[1:]))
