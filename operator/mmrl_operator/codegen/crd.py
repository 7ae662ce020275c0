"""Generate the CustomResourceDefinitions of the mmrl.dev API (MultimodalRLJob, ModelServer) from the pydantic
models (the only schema source).

Pydantic's JSON Schema is turned into a *structural* OpenAPI v3 schema as Kubernetes requires: `$ref`s are
inlined, `Optional[X]` becomes X (absent means unset), numeric bounds use OpenAPI 3.0's boolean exclusive form,
titles are dropped, field docstrings become descriptions (what `kubectl explain` prints), and CEL rules attached
with `cel(...)` are kept. `python -m mmrl_operator.codegen.crd --out crds/` writes them; `--check crds/` fails on drift.
"""

from __future__ import annotations

import copy
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, get_args

import yaml
from pydantic import BaseModel, TypeAdapter

from mmrl_api import constants as c
from mmrl_api.base import CEL_KEY
from mmrl_api.job import ROOT_RULES, JobSpec
from mmrl_api.model_server import SERVER_ROOT_RULES, ModelServerSpec, ModelServerStatus
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


SERVER_PRINTER_COLUMNS = [
    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name"},
    {"name": "Ready", "type": "integer", "jsonPath": ".status.readyReplicas"},
    {"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas", "priority": 1},
    {"name": "Adapters", "type": "integer", "jsonPath": ".status.adapterCount"},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]


@dataclass(frozen=True)
class KindSpec:
    """One kind of the mmrl.dev API: its names, models, root rules and what `kubectl get` prints."""

    kind: str
    plural: str
    singular: str
    short_names: tuple[str, ...]
    spec: type[BaseModel]
    status: type[BaseModel]
    root_rules: dict[str, Any]
    printer_columns: list[dict[str, Any]]
    description: str
    spec_description: str
    # `kubectl get <category>` lists every kind in it. "mmrl" is also the job's short name, so only the job is in
    # that category: `kubectl get mmrl` keeps printing jobs with their columns.
    categories: tuple[str, ...] = ("ml",)

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{c.GROUP}"


JOB = KindSpec(
    c.KIND,
    c.PLURAL,
    c.SINGULAR,
    tuple(c.SHORT_NAMES),
    JobSpec,
    JobStatus,
    ROOT_RULES,
    PRINTER_COLUMNS,
    "MultimodalRLJob post-trains a vision-language model with GRPO + LoRA on a Ray cluster (KubeRay) and serves "
    "the result with vLLM.",
    "Desired state: a GRPO + LoRA post-training run of a vision-language model.",
    ("mmrl", "ml"),
)
SERVER = KindSpec(
    c.SERVER_KIND,
    c.SERVER_PLURAL,
    c.SERVER_SINGULAR,
    tuple(c.SERVER_SHORT_NAMES),
    ModelServerSpec,
    ModelServerStatus,
    SERVER_ROOT_RULES,
    SERVER_PRINTER_COLUMNS,
    "ModelServer runs one vLLM server for one base model, into which the operator loads the LoRA adapters of the "
    "MultimodalRLJobs that name it.",
    "Desired state: the vLLM server, its base model and the adapters' limits.",
)
KINDS = (JOB, SERVER)


def build_crd(kind: KindSpec = JOB) -> dict[str, Any]:
    spec = model_schema(kind.spec)
    _integers_are_integers(spec)
    spec["description"] = kind.spec_description
    # Status is written by the operator (and, for jobs, by the trainer); no defaults so an empty status stays empty.
    status = model_schema(kind.status, with_defaults=False)
    status["description"] = "Observed state, written by the operator" + (
        " and (progress) by the trainer." if kind is JOB else "."
    )
    root = {
        "type": "object",
        "description": kind.description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "maxLength": 64},
            "kind": {"type": "string", "maxLength": 64},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        **kind.root_rules,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": kind.crd_name,
            "labels": {"app.kubernetes.io/name": "mmrl", "app.kubernetes.io/component": "crd"},
        },
        "spec": {
            "group": c.GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind.kind,
                "listKind": f"{kind.kind}List",
                "plural": kind.plural,
                "singular": kind.singular,
                "shortNames": list(kind.short_names),
                "categories": list(kind.categories),
            },
            "versions": [
                {
                    "name": c.VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(kind.printer_columns),  # callers may edit their copy
                    "schema": {"openAPIV3Schema": root},
                }
            ],
        },
    }


HEADER = "# Generated by `make crds` from api/mmrl_api (the pydantic models). Do not edit.\n"


def render(kind: KindSpec = JOB) -> str:
    return HEADER + yaml.safe_dump(build_crd(kind), sort_keys=False, width=120)


def crd_path(directory: Path, kind: KindSpec = JOB) -> Path:
    return directory / f"{kind.crd_name}.yaml"


def main(argv: list[str] | None = None) -> int:
    return generator_main(__doc__.splitlines()[0], lambda: {crd_path(Path(), k).name: render(k) for k in KINDS}, argv)


if __name__ == "__main__":
    sys.exit(main())
