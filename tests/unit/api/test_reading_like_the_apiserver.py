"""`validate_manifest` reads a document the way the apiserver does before validating it, so that `mmrl validate`
accepts what `kubectl apply` accepts (found by tests/cluster/test_validation_agreement.py)."""

from __future__ import annotations

from mmrl_api import validate_manifest
from mmrl_api.manifest import as_apiserver_reads
from mmrl_operator.codegen import crd
from tests.support.corpus import example


def test_a_field_set_to_null_takes_its_default() -> None:
    doc = example()
    doc["spec"]["algorithm"]["samplesPerPrompt"] = None
    doc["spec"]["checkpoint"]["pvc"]["subPath"] = None
    job, errors = validate_manifest(doc)
    assert errors == []
    assert job is not None
    assert (job.spec.algorithm.samples_per_prompt, job.spec.checkpoint.pvc.sub_path) == (4, "mmrl")


def test_a_required_field_set_to_null_is_missing() -> None:
    doc = example()
    doc["spec"]["model"] = None
    _, errors = validate_manifest(doc)
    assert [e.path for e in errors] == ["spec.model"]


def test_nulls_in_the_spec_patch_are_kept_because_they_delete_fields() -> None:
    doc = {"spec": {"cluster": {"podTemplate": {"specPatch": {"hostNetwork": None}}, "kueue": None}}}
    assert as_apiserver_reads(doc) == {"spec": {"cluster": {"podTemplate": {"specPatch": {"hostNetwork": None}}}}}


def test_an_empty_name_is_an_error_not_a_crash() -> None:
    doc = example()
    doc["metadata"]["name"] = ""
    _, errors = validate_manifest(doc)
    assert "metadata.name" in [e.path for e in errors]


def test_every_spec_integer_refuses_floats_in_the_crd_as_the_models_do() -> None:
    spec = crd.build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    integers = []

    def walk(node: dict) -> None:
        if node.get("type") == "integer":
            integers.append(node)
        for child in (node.get("properties") or {}).values():
            walk(child)
        for key in ("items", "additionalProperties"):
            if isinstance(node.get(key), dict):
                walk(node[key])

    walk(spec)
    assert len(integers) > 20
    assert all(crd.INTEGER_RULE in n["x-kubernetes-validations"] for n in integers)
