"""The generated CRD: committed copy is fresh, schema is structural, small, and carries the rules."""

from __future__ import annotations

from typing import Any

import yaml

from mmrl_api.base import CEL_KEY
from mmrl_operator.codegen import crd
from tests.support.corpus import ROOT

CRD_FILE = crd.crd_path(ROOT / "crds")


def _walk(node: Any, path: str = ""):
    if isinstance(node, dict):
        yield path, node
        for key in ("properties",):
            for name, child in node.get(key, {}).items():
                yield from _walk(child, f"{path}.{name}")
        if isinstance(node.get("items"), dict):
            yield from _walk(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from _walk(node["additionalProperties"], f"{path}{{}}")


def schema() -> dict[str, Any]:
    return crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def test_committed_crd_is_what_the_models_generate() -> None:
    assert CRD_FILE.read_text() == crd.render(), "crds/ is stale: run `make crds`"
    assert crd.main(["--check", str(ROOT / "crds")]) == 0


def test_check_fails_on_drift(tmp_path) -> None:
    (tmp_path / CRD_FILE.name).write_text(crd.render().replace("grpo", "ppo"))
    assert crd.main(["--check", str(tmp_path)]) == 1


def test_crd_is_small_enough_for_client_side_apply_and_argocd() -> None:
    # Client-side apply (kubectl apply, Argo CD without ServerSideApply) stores the object as compact JSON in the
    # last-applied-configuration annotation, and all annotations together may hold 262144 bytes (docs/argocd.md).
    # Half of that is the budget, so the API can still grow without a switch to server-side apply.
    import json

    applied = json.dumps(yaml.safe_load(crd.render()), separators=(",", ":"))
    assert len(applied.encode()) < 262_144 // 2


def test_schema_is_structural() -> None:
    forbidden = {"$ref", "anyOf", "oneOf", "allOf", "title", "const", "$defs"}
    for path, node in _walk(schema()):
        assert not forbidden & node.keys(), f"{path}: {forbidden & node.keys()}"
        if node.get("x-kubernetes-int-or-string") or node.get("x-kubernetes-preserve-unknown-fields"):
            continue  # the two markers structural schemas allow in place of a type
        assert node.get("type") in {"object", "array", "string", "integer", "number", "boolean"}, path
        if "format" in node:
            assert node["format"] in crd.ALLOWED_FORMATS, path
        if node["type"] == "array":
            assert isinstance(node.get("items"), dict), path
        if node["type"] == "object" and "properties" in node:
            assert "additionalProperties" not in node, path


def test_every_spec_field_is_documented() -> None:
    spec = schema()["properties"]["spec"]
    undocumented = [p for p, n in _walk(spec, "spec") if "properties" in n and not n.get("description")]
    assert undocumented == []


def test_cross_field_rules_are_in_the_crd() -> None:
    rules = {r["rule"]: r for _, n in _walk(schema()) for r in n.get(CEL_KEY, [])}
    rules.update({r["rule"]: r for r in schema().get(CEL_KEY, [])})
    assert "has(self.pvc) != has(self.s3)" in rules
    assert "self.miniBatchSize <= self.trainBatchSize" in rules
    assert "size(self.metadata.name) <= 40" in rules
    immutable = [p for p, n in _walk(schema()) for r in n.get(CEL_KEY, []) if r["rule"] == "self == oldSelf"]
    assert sorted(immutable) == [
        ".spec.algorithm",
        ".spec.checkpoint",
        ".spec.dataset",
        ".spec.lora",
        ".spec.model",
        ".spec.trainer.backend",
    ]


def test_defaults_reach_nested_objects() -> None:
    props = schema()["properties"]["spec"]["properties"]
    assert props["lora"]["default"]["rank"] == 32
    assert props["lora"]["properties"]["rank"]["default"] == 32
    assert props["cluster"]["properties"]["workerGroups"]["default"][0]["name"] == "gpu"
    assert "default" not in str(schema()["properties"]["status"])


def test_printer_columns_and_names() -> None:
    doc = yaml.safe_load(CRD_FILE.read_text())
    version = doc["spec"]["versions"][0]
    assert [c["name"] for c in version["additionalPrinterColumns"] if "priority" not in c] == [
        "Phase",
        "Step",
        "Reward",
        "Attempt",
        "Age",
    ]
    assert version["subresources"] == {"status": {}}
    assert doc["spec"]["names"]["shortNames"] == ["mmrl", "rljob"]


def test_every_string_list_and_map_has_a_size_limit() -> None:
    """Unbounded values make the apiserver's CEL cost estimate assume megabytes, and let one tenant store
    megabytes per job; every string needs maxLength, every list maxItems and every map maxProperties."""
    unbounded = []
    for path, node in _walk(schema()):
        if node.get("type") == "string" and "maxLength" not in node and "enum" not in node:
            unbounded.append(f"{path}: string without maxLength")
        if node.get("x-kubernetes-int-or-string") and "maxLength" not in node:
            unbounded.append(f"{path}: int-or-string without maxLength")
        if node.get("type") == "array" and "maxItems" not in node:
            unbounded.append(f"{path}: array without maxItems")
        if isinstance(node.get("additionalProperties"), dict) and "maxProperties" not in node:
            unbounded.append(f"{path}: map without maxProperties")
    assert unbounded == []


def test_only_free_form_objects_are_unchecked() -> None:
    """Objects with preserve-unknown-fields and no properties are opaque to the schema: only these two."""
    opaque = [p for p, n in _walk(schema()) if n.get("x-kubernetes-preserve-unknown-fields") and "properties" not in n]
    assert opaque == [".spec.cluster.podTemplate.specPatch", ".status.adapter.config"]


def test_pod_annotations_can_never_exceed_kubernetes_total() -> None:
    from mmrl_api.kube_syntax import ANNOTATIONS_TOTAL_MAX, QUALIFIED_NAME_MAX

    node = schema()["properties"]["spec"]["properties"]["cluster"]["properties"]["podTemplate"]["properties"]
    annotations = node["annotations"]
    worst = annotations["maxProperties"] * (QUALIFIED_NAME_MAX + annotations["additionalProperties"]["maxLength"])
    assert worst <= ANNOTATIONS_TOTAL_MAX
