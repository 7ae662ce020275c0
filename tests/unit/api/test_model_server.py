"""The ModelServer API: what `mmrl validate` and the operator accept, with the field named in each refusal, and the
CRD generated from the same models."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from mmrl_api.constants import VLLM_LORA_RANKS
from mmrl_api.model_server import validate_server_manifest
from mmrl_operator.codegen import crd

ROOT = Path(__file__).resolve().parents[3]
EXAMPLE = ROOT / "examples" / "model-server.yaml"


def server(**spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load(EXAMPLE.read_text())
    doc["spec"].update(spec)
    return doc


def errors(doc: dict[str, Any]) -> dict[str, str]:
    found, problems = validate_server_manifest(doc)
    assert (found is None) == bool(problems)
    return {e.path: e.message for e in problems}


def test_the_example_is_valid_and_defaults_what_it_leaves_out() -> None:
    found, problems = validate_server_manifest(yaml.safe_load(EXAMPLE.read_text()))
    assert not problems and found is not None
    assert found.spec.max_lora_rank == 32 and found.spec.adapter_volumes[0].claim_name == "fsx-claim"
    assert found.spec.image.startswith("vllm/vllm-openai:") and found.spec.hyperpod is True


@pytest.mark.parametrize("rank", [2, 33, 1024])
def test_a_rank_vllm_does_not_accept_is_refused_by_name(rank: int) -> None:
    assert rank not in VLLM_LORA_RANKS
    assert (
        "must be one of [1, 8, 16, 32, 64, 128, 256, 320, 512]" in errors(server(maxLoraRank=rank))["spec.maxLoraRank"]
    )


@pytest.mark.parametrize(
    ("spec", "path", "says"),
    [
        ({"maxLoras": 8, "maxAdapters": 4}, "spec.maxAdapters", "at least maxLoras"),
        ({"gpus": 1, "tensorParallelSize": 2}, "spec.gpus", "at least tensorParallelSize"),
        (
            {"adapterVolumes": [{"claimName": "a", "mountPath": "/fsx"}, {"claimName": "a", "mountPath": "/data"}]},
            "spec.adapterVolumes",
            "claimName must be unique",
        ),
        (
            {"adapterVolumes": [{"claimName": "a", "mountPath": "/fsx"}, {"claimName": "b", "mountPath": "/fsx"}]},
            "spec.adapterVolumes",
            "cannot share a mountPath",
        ),
        ({"adapterVolumes": [{"claimName": "a", "mountPath": "/dev/shm"}]}, "spec.adapterVolumes[0].mountPath", "shm"),
        ({"maxImagePixels": 100}, "spec.maxImagePixels", "greater than or equal to 3136"),
        ({"replicas": -1}, "spec.replicas", "greater than or equal to 0"),
        ({"unknown": 1}, "spec.unknown", "unknown field"),
        ({"aliases": [{"name": "a", "jobSelector": {}}, {"name": "a", "jobSelector": {}}]}, "spec.aliases", "unique"),
        ({"aliasPins": [{"alias": "geo-next", "job": "geo-v1"}]}, "spec.aliasPins", "an alias the server declares"),
        (
            {
                "aliases": [
                    {
                        "name": "a",
                        "jobSelector": {"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["x"]}]},
                    }
                ]
            },
            "spec.aliases[0].jobSelector.matchExpressions[0]",
            "empty for Exists",
        ),
        ({"aliases": [{"name": "a"}]}, "spec.aliases[0].jobSelector", "required"),
        (
            {"aliases": [{"name": "a", "jobSelector": {"matchLabels": {"team": "a b"}}}]},
            "spec.aliases[0].jobSelector.matchLabels",
            "label value",
        ),
    ],
)
def test_a_bad_field_is_named(spec: dict[str, Any], path: str, says: str) -> None:
    found = errors(server(**spec))
    assert says in found.get(path, ""), found


def test_a_name_too_long_for_its_service_is_refused() -> None:
    doc = server()
    doc["metadata"]["name"] = "s" * 59
    assert "at most 58" in errors(doc)["metadata.name"]


def test_the_crd_is_generated_from_the_models_and_committed() -> None:
    generated = crd.render(crd.SERVER)
    assert (ROOT / "crds" / "modelservers.mmrl.dev.yaml").read_text() == generated
    schema = crd.build_crd(crd.SERVER)["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["model"]
    assert any("self == oldSelf" in r["rule"] for r in spec["properties"]["model"]["x-kubernetes-validations"])
    rules = [r["rule"] for r in spec["x-kubernetes-validations"]]
    assert any("maxAdapters >= self.maxLoras" in r for r in rules)
