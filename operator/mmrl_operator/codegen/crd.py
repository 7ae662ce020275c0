"""Generate the MultimodalRLJob CustomResourceDefinition from the pydantic models (the only schema source).

Pydantic's JSON Schema is turned into a *structural* OpenAPI v3 schema as Kubernetes requires: `$ref`s are
inlined, `Optional[X]` becomes X (absent means unset), numeric bounds use OpenAPI 3.0's boolean exclusive form,
titles are dropped, field docstrings become descriptions (what `kubectl explain` prints), and CEL rules attached
with `cel(...)` are kept. `python -m mmrl_operator.codegen.crd --out crds/` writes it; `--check crds/` fails on drift.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, TypeAdapter

from mmrl_api import constants as c
from mmrl_api.base import CEL_KEY
from mmrl_api.job import ROOT_RULES, JobSpec
from mmrl_api.status import JobStatus
from mmrl_operator.codegen.generated import generator_main

KEEP = {
    "type",
    "description",
    "default",
    "enum",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "items",
    "properties",
    "required",
    "additionalProperties",
    "format",
    "nullable",
    "x-kubernetes-validations",
    "x-kubernetes-int-or-string",
    "x-kubernetes-preserve-unknown-fields",
}
ALLOWED_FORMATS = {"date-time", "int32", "int64", "float", "double"}

PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Step", "type": "integer", "jsonPath": ".status.progress.step"},
    {"name": "Total", "type": "integer", "jsonPath": ".status.progress.totalSteps", "priority": 1},
    {"name": "Reward", "type": "number", "jsonPath": ".status.progress.rewardMean"},
    {"name": "Attempt", "type": "integer", "jsonPath": ".status.attempt"},
    {"name": "Success", "type": "number", "jsonPath": ".status.progress.episodes.successRate", "priority": 1},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


def _resolve(node: Any, defs: dict[str, Any]) -> Any:
    if isinstance(node, list):
        return [_resolve(n, defs) for n in node]
    if not isinstance(node, dict):
        return node
    if "$ref" in node:
        target = copy.deepcopy(defs[node["$ref"].rsplit("/", 1)[-1]])
        extra = {k: v for k, v in node.items() if k != "$ref"}
        merged = {**target, **extra}
        # A field's own rules (immutability) add to the rules of its type; they never replace them.
        rules = target.get(CEL_KEY, []) + extra.get(CEL_KEY, [])
        if rules:
            merged[CEL_KEY] = rules
        return _resolve(merged, defs)
    return {k: _resolve(v, defs) for k, v in node.items()}


def _structural(node: dict[str, Any]) -> dict[str, Any]:
    """Rewrite one resolved JSON Schema node into the structural OpenAPI subset Kubernetes accepts."""
    node = dict(node)
    # Optional[X] -> X: absence means unset; we never send explicit nulls (exclude_none on the wire).
    for key in ("anyOf", "oneOf"):
        if key in node:
            variants = [v for v in node.pop(key) if v.get("type") != "null"]
            if node.get("x-kubernetes-int-or-string"):
                variants = []
            elif len(variants) != 1:
                raise ValueError(f"cannot express a union of {variants} structurally")
            if variants:
                merged = {**variants[0], **node}
                node = merged
    if node.get("default") is None:
        node.pop("default", None)
    if "const" in node:
        node["enum"] = [node.pop("const")]
    for bound, flag in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if isinstance(node.get(bound), int | float) and not isinstance(node.get(bound), bool):
            node[flag] = node.pop(bound)
            node[bound] = True
    if "enum" in node and "type" not in node:
        node["type"] = "string" if all(isinstance(v, str) for v in node["enum"]) else "integer"
    if node.get("x-kubernetes-int-or-string"):
        node.pop("type", None)
    if node.get("format") and node["format"] not in ALLOWED_FORMATS:
        node.pop("format")
    if node.get("type") == "object" and "properties" not in node and "additionalProperties" not in node:
        node["x-kubernetes-preserve-unknown-fields"] = True
    if "properties" in node:
        node["properties"] = {k: _structural(v) for k, v in node["properties"].items()}
        # Object-valued defaults collapse to {}: the apiserver then applies the nested field defaults itself,
        # which keeps the schema small and the defaults in one place.
        if isinstance(node.get("default"), dict):
            node["default"] = {}
    if isinstance(node.get("items"), dict):
        node["items"] = _structural(node["items"])
    if isinstance(node.get("additionalProperties"), dict):
        node["additionalProperties"] = _structural(node["additionalProperties"])
    elif isinstance(node.get("additionalProperties"), bool):
        node.pop("additionalProperties")  # structural schemas express "anything" with preserve-unknown-fields
    if isinstance(node.get("description"), str):
        node["description"] = " ".join(node["description"].split())
    return {k: v for k, v in node.items() if k in KEEP}


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    """The model class inside X, X | None or list[X], if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _factory_defaults(model: type[BaseModel], schema: dict[str, Any]) -> None:
    """Pydantic leaves `default_factory` values out of JSON Schema; the apiserver must apply them too."""
    props = schema.get("properties", {})
    for name, field in model.model_fields.items():
        prop = props.get(field.alias or name)
        if prop is None:
            continue
        if field.default_factory is not None:
            value = field.default_factory()  # type: ignore[call-arg]
            if value in ([], {}):
                pass  # empty collections stay absent, as Kubernetes objects usually leave them
            else:
                # The full object, not {}: the apiserver checks a default against the CEL rules as written,
                # before nested defaults apply, so {} would fail rules such as miniBatchSize <= trainBatchSize.
                prop["default"] = TypeAdapter(field.annotation).dump_python(
                    value, by_alias=True, exclude_none=True, mode="json"
                )
        nested = _nested_model(field.annotation)
        if nested is not None:
            target = prop.get("items", prop) if prop.get("type") == "array" else prop
            _factory_defaults(nested, target)


def model_schema(model: type[BaseModel], *, with_defaults: bool = True) -> dict[str, Any]:
    raw = model.model_json_schema(by_alias=True, mode="validation")
    resolved = _resolve({k: v for k, v in raw.items() if k != "$defs"}, raw.get("$defs", {}))
    schema = _structural(resolved)
    if with_defaults:
        _factory_defaults(model, schema)
    else:
        _strip(schema, "default")
    return schema


def _strip(node: Any, key: str) -> None:
    if isinstance(node, dict):
        node.pop(key, None)
        for v in node.values():
            _strip(v, key)
    elif isinstance(node, list):
        for v in node:
            _strip(v, key)


INTEGER_RULE = {"rule": "type(self) == int", "message": "must be an integer (5, not 5.0)"}


def _integers_are_integers(node: Any) -> None:
    """The apiserver's schema check lets a whole float (5.0) through as an integer, but a CEL rule that reads it
    fails ("expected int, got float64"), so 5.0 would be accepted or refused depending on whether some rule reads
    the field. A rule on every integer field refuses it everywhere, like the models (strict ints) do."""
    if not isinstance(node, dict):
        return
    if node.get("type") == "integer":
        node[CEL_KEY] = [*node.get(CEL_KEY, []), dict(INTEGER_RULE)]
    for child in (node.get("properties") or {}).values():
        _integers_are_integers(child)
    for key in ("items", "additionalProperties"):
        _integers_are_integers(node.get(key))


def build_crd() -> dict[str, Any]:
    spec = model_schema(JobSpec)
    _integers_are_integers(spec)
    spec["description"] = "Desired state: a GRPO + LoRA post-training run of a vision-language model."
    # Status is written by the operator and the trainer; no defaults so an empty status stays empty.
    status = model_schema(JobStatus, with_defaults=False)
    status["description"] = "Observed state, written by the operator and (progress) by the trainer."
    root = {
        "type": "object",
        "description": "MultimodalRLJob post-trains a vision-language model with GRPO + LoRA on a Ray cluster "
        "(KubeRay) and serves the result with vLLM.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "maxLength": 64},
            "kind": {"type": "string", "maxLength": 64},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        **ROOT_RULES,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": c.CRD_NAME,
            "labels": {"app.kubernetes.io/name": "mmrl", "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": c.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": c.KIND,
                "listKind": f"{c.KIND}List",
                "plural": c.PLURAL,
                "singular": c.SINGULAR,
                "shortNames": list(c.SHORT_NAMES),
                "categories": ["mmrl", "ml"],
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),  # callers may edit their copy
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


HEADER = "# Generated by `make crds` from api/mmrl_api (the pydantic models). Do not edit.\n"


def render() -> str:
    return HEADER + yaml.safe_dump(build_crd(), sort_keys=False, width=120)


def crd_path(directory: Path) -> Path:
    return directory / f"{c.CRD_NAME}.yaml"


def main(argv: list[str] | None = None) -> int:
    return generator_main(__doc__.splitlines()[0], lambda: {crd_path(Path()).name: render()}, argv)


if __name__ == "__main__":
    sys.exit(main())
