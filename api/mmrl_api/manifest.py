"""Validating a manifest of any mmrl kind the way the apiserver will, with every error named by its field path.

`validate_document` is the one path `mmrl validate`, the operator's second line of defence and the tests use for
each kind (`job.validate_manifest`, `model_server.validate_server_manifest`): it returns every problem as
`FieldError(path, message)` with the same dotted path `kubectl` prints for an admission error
(`spec.algorithm.miniBatchSize`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError
from pydantic.alias_generators import to_camel

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# Fields whose wire name is not their Python name in camelCase (`class` is a Python keyword).
_WIRE_NAMES = {"class_path": "class"}


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "model-")):  # pydantic's validator markers: not a field
            continue
        else:
            # Defaults are reported by Python name.
            name = _WIRE_NAMES.get(part) or (to_camel(part) if "_" in part else part)
            out += f".{name}" if out else name
    return out


def _message(err: dict[str, Any]) -> str:
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        return "unknown field"
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "string_pattern_mismatch":
        return f"{err.get('input')!r} does not have the expected form (pattern {err['ctx']['pattern']})"
    if err["type"] in ("literal_error", "enum"):
        return f"{err.get('input')!r} is not one of the allowed values ({msg.removeprefix('Input should be ')})"
    return msg


# Opaque to the schema, so the apiserver keeps it exactly as written (a null in a merge patch deletes a field).
OPAQUE_FIELDS = ("specPatch",)


def as_apiserver_reads(value: Any) -> Any:
    """The document as the apiserver validates it: a field set to null is absent (Kubernetes prunes nulls of
    non-nullable fields before defaulting, and no field of this API is nullable). Without this, `mmrl validate`
    would refuse `samplesPerPrompt: null`, which `kubectl apply` accepts as "use the default"."""
    if isinstance(value, dict):
        return {k: (v if k in OPAQUE_FIELDS else as_apiserver_reads(v)) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [as_apiserver_reads(v) for v in value]
    return value


def validate_document(
    doc: Any, model: type[M], name_problems: Callable[[str], list[str]]
) -> tuple[M | None, list[FieldError]]:
    """Validate one parsed YAML document as `model`; return the model (when valid) and every error with its path.
    `name_problems` says what is wrong with metadata.name, which a CRD rule checks beside the schema: it is reported
    with the schema's errors, so one run names everything."""
    if not isinstance(doc, dict):
        return None, [FieldError("(document)", "must be a mapping with apiVersion, kind, metadata and spec")]
    doc = as_apiserver_reads(doc)
    try:
        obj = model.model_validate(doc)
    except ValidationError as exc:
        errors = [FieldError(_path(e["loc"]) or "(document)", _message(e)) for e in exc.errors()]
        meta = doc.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"]:
            errors += [FieldError("metadata.name", p) for p in name_problems(meta["name"])]
        return None, errors
    problems = [FieldError("metadata.name", p) for p in name_problems(obj.metadata.name)]  # type: ignore[attr-defined]
    return (None, problems) if problems else (obj, [])
