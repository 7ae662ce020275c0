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

from mmrl_api.locations import PATTERN_MESSAGES
from mmrl_api.suggest import did_you_mean, wire_names_at

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True)
class FieldError:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


# Fields whose wire name is not their Python name in camelCase (`class` is a Python keyword).
_WIRE_NAMES = {"class_path": "class"}


def _path(loc: tuple[int | str, ...], as_written: bool = False) -> str:
    """The dotted wire path of an error's location; `as_written`: its last part is a key the user wrote (an unknown
    field), kept as it is."""
    out = ""
    for index, part in enumerate(loc):
        if isinstance(part, int):
            out += f"[{part}]"
        elif part.startswith(("function-", "model-")):  # pydantic's validator markers: not a field
            continue
        else:
            # Defaults are reported by Python name.
            mine = as_written and index == len(loc) - 1
            name = part if mine else _WIRE_NAMES.get(part) or (to_camel(part) if "_" in part else part)
            out += f".{name}" if out else name
    return out


def _message(err: dict[str, Any], model: type[BaseModel]) -> str:
    msg = str(err["msg"])
    msg = msg.removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        *parent, name = err["loc"]
        return "unknown field" + did_you_mean(str(name), wire_names_at(model, parent))
    if err["type"] == "missing":
        return "required field is missing"
    if err["type"] == "string_pattern_mismatch":
        pattern = err["ctx"]["pattern"]
        explain = PATTERN_MESSAGES.get(pattern)
        if explain is not None and isinstance(err.get("input"), str):
            return explain(err["input"])
        return f"{err.get('input')!r} does not have the expected form (pattern {pattern})"
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
        # Wire names only: the apiserver knows no `learning_rate` (populate_by_name is for Python code building
        # models), so here it is an unknown field, with its camelCase name suggested.
        obj = model.model_validate(doc, by_alias=True, by_name=False)
    except ValidationError as exc:
        errors = [
            FieldError(_path(e["loc"], e["type"] == "extra_forbidden") or "(document)", _message(e, model))
            for e in exc.errors()
        ]
        meta = doc.get("metadata")
        if isinstance(meta, dict) and isinstance(meta.get("name"), str) and meta["name"]:
            errors += [FieldError("metadata.name", p) for p in name_problems(meta["name"])]
        return None, errors
    problems = [FieldError("metadata.name", p) for p in name_problems(obj.metadata.name)]  # type: ignore[attr-defined]
    return (None, problems) if problems else (obj, [])
