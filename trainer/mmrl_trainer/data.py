"""Datasets with images: load parquet/jsonl (or the synthetic demo task) and convert rows for each backend.

Every source is read into `Example`s (prompt, PIL images, answer, extra). Images may be PIL objects, Hugging Face
`{"bytes", "path"}` structs, file paths (relative paths resolve against the data file), file:// URIs, `data:` URIs
or bare base64. The TRL rows put `{"type": "image"}` placeholders in the chat and the images in an `images` column;
the SkyRL rows follow SkyRL's VLM dataset contract: a chat `prompt` whose image parts are `image_url` base64 data
URIs, plus `env_class`, `reward_spec{method, ground_truth}`, `data_source` and `extra_info`.
"""

from __future__ import annotations

import base64
import io
import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from PIL import Image

from mmrl_operator.api.spec import DatasetSpec
from mmrl_trainer.synthetic import Example, synthetic_examples

SKYRL_ENV_CLASS = "mmrl_reward"


def resolve_uri(uri: str) -> str:
    """pvc://claim/path → its mount (the operator normally rewrites these; `MMRL_PVC_ROOT` covers the rest)."""
    if uri.startswith("pvc://"):
        claim, _, rest = uri.removeprefix("pvc://").partition("/")
        return str(Path(os.environ.get("MMRL_PVC_ROOT", "/mnt/pvc")) / claim / rest)
    return uri.removeprefix("file://")


def decode_image(value: Any, base_dir: Path | None = None) -> Image.Image:
    if isinstance(value, Image.Image):
        return value.convert("RGB")
    if isinstance(value, dict):
        if value.get("bytes"):
            return decode_image(value["bytes"], base_dir)
        return decode_image(value.get("path") or value.get("url") or "", base_dir)
    if isinstance(value, bytes | bytearray):
        return Image.open(io.BytesIO(value)).convert("RGB")
    if not isinstance(value, str) or not value:
        raise ValueError(f"cannot read an image from {type(value).__name__} {str(value)[:40]!r}")
    if value.startswith("data:"):
        return decode_image(base64.b64decode(value.split(",", 1)[1]), base_dir)
    path = Path(value.removeprefix("file://"))
    if not path.is_absolute() and base_dir is not None and (base_dir / path).exists():
        path = base_dir / path
    if path.exists():
        return Image.open(path).convert("RGB")
    try:
        return decode_image(base64.b64decode(value, validate=True), base_dir)
    except ValueError as err:
        raise ValueError(f"image {value[:60]!r} is neither an existing file nor base64") from err


def image_data_uri(image: Image.Image) -> str:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _read_records(path: Path, fmt: str) -> Iterable[dict[str, Any]]:
    files = sorted(path.glob(f"*.{fmt}")) if path.is_dir() else [path]
    if not files:
        raise ValueError(f"{path}: no *.{fmt} files")
    for file in files:
        if fmt == "jsonl":
            with open(file) as fh:
                yield from (json.loads(line) for line in fh if line.strip())
        else:
            import pyarrow.parquet as pq

            yield from pq.read_table(file).to_pylist()


def load_examples(uri: str, spec: DatasetSpec, *, seed: int = 0) -> list[Example]:
    """Read a dataset URI into Examples; field names come from the DatasetSpec."""
    if uri.startswith("synthetic://"):
        return synthetic_examples(uri, default_seed=seed)
    if uri.startswith(("s3://", "hf://")):
        raise ValueError(
            f"dataset {uri!r}: the local backend reads local or mounted files; stage the data on the PVC, "
            "or use backend=skyrl, whose image can read remote sources"
        )
    path = Path(resolve_uri(uri))
    if not path.exists():
        raise ValueError(f"dataset {uri!r}: {path} does not exist")
    fmt = path.suffix.lstrip(".") if path.is_file() and path.suffix in (".jsonl", ".parquet") else spec.format
    base_dir = path if path.is_dir() else path.parent
    out = []
    for i, rec in enumerate(_read_records(path, fmt)):
        for name in (spec.prompt_field, spec.answer_field):
            if name not in rec:
                raise ValueError(f"{uri} row {i}: missing field {name!r} (dataset.{name} names the column)")
        raw = rec.get(spec.images_field) or []
        raw = raw if isinstance(raw, list) else [raw]
        extra = {k: v for k, v in rec.items() if k not in (spec.prompt_field, spec.answer_field, spec.images_field)}
        out.append(
            Example(
                prompt=rec[spec.prompt_field],
                images=[decode_image(v, base_dir) for v in raw],
                answer=str(rec[spec.answer_field]),
                extra={"index": i, **_jsonable(extra)},
            )
        )
    return out


def _jsonable(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if isinstance(v, str | int | float | bool) or v is None}


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


def to_skyrl_rows(examples: list[Example], *, data_source: str, method: str = "rule") -> list[dict[str, Any]]:
    """SkyRL VLM rows; the reward itself is computed by our env (env_class) from reward_spec.ground_truth."""
    return [
        {
            "prompt": chat_messages(e, lambda i, img: {"type": "image_url", "image_url": {"url": image_data_uri(img)}}),
            "env_class": SKYRL_ENV_CLASS,
            "reward_spec": {"method": method, "ground_truth": e.answer},
            "data_source": data_source,
            "extra_info": {"split_index": e.extra.get("index", i), **e.extra},
        }
        for i, e in enumerate(examples)
    ]


def write_parquet(rows: list[dict[str, Any]], path: str | Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    # extra_info is stored as JSON text: arrow needs one schema for all rows and user extras vary per row.
    table = pa.Table.from_pylist([{**r, "extra_info": json.dumps(r["extra_info"])} for r in rows])
    pq.write_table(table, target)
    return target
