"""A worker group's hardware (issue #48): gpusPerNode comes from the instance type's row of mmrl_api/gpus.py unless
set, more GPUs than the type has is refused naming the field, and a name that is not a HyperPod instance type, or a
size mmrl does not know in a family it knows, is refused with a "did you mean". tests/bad_specs.yaml and
tests/good_specs.yaml hold the same cases for the apiserver (tests/cluster/test_admission.py)."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml

from mmrl_api import validate_manifest
from mmrl_api.gpus import INSTANCE_TYPES
from mmrl_api.hardware import closest
from mmrl_api.memory_plan import spec_plan
from mmrl_operator.cli.main import validate_files
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.trainer_config import build_trainer_config
from mmrl_operator.core.jsonmerge import merge_patch
from tests.support.corpus import ROOT, example


def with_groups(*groups: dict, hyperpod: bool = True) -> dict:
    return merge_patch(example(), {"spec": {"cluster": {"hyperpod": hyperpod, "workerGroups": list(groups)}}})


def errors_of(doc: dict) -> list[str]:
    return [str(e) for e in validate_manifest(doc)[1]]


def test_gpus_per_node_comes_from_the_instance_type_everywhere_it_is_read(tmp_path: Path) -> None:
    doc = with_groups({"name": "g6e", "instanceType": "ml.g6e.12xlarge", "replicas": 2})
    job, errors = validate_manifest(doc)
    assert errors == [] and job is not None
    group = job.spec.cluster.worker_groups[0]
    assert (group.gpus_per_node, group.gpus) == (None, 4)
    worker = build_raycluster(job)["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    assert worker["resources"]["limits"]["nvidia.com/gpu"] == "4"
    placement = build_trainer_config(job).placement
    assert (placement.num_nodes, placement.gpus_per_node, placement.world_size) == (2, 4, 8)
    plan = spec_plan(job.spec)
    assert plan is not None and plan.inputs.world_size == 8 and plan.inputs.gpu == INSTANCE_TYPES["ml.g6e.12xlarge"].gpu
    # The job the issue found: `mmrl validate` counted 16 GPUs on two 4-GPU nodes.
    path = tmp_path / "job.yaml"
    path.write_text(yaml.safe_dump(doc))
    out = io.StringIO()
    validate_files([str(path)], out=out, err=io.StringIO())
    assert "8 GPUs" in out.getvalue() and "16 GPUs" not in out.getvalue()


@pytest.mark.parametrize(
    ("instance_type", "gpus"), [("ml.g6e.12xlarge", 4), ("ml.g5.12xlarge", 4), ("ml.g7e.12xlarge", 2)]
)
def test_more_gpus_than_the_instance_type_has_is_refused_naming_the_field(instance_type: str, gpus: int) -> None:
    doc = with_groups({"name": "p5"}, {"name": "w", "instanceType": instance_type, "gpusPerNode": 8})
    assert errors_of(doc) == [
        f"spec.cluster.workerGroups[1].gpusPerNode: 8 is more than {instance_type} has ({gpus} GPUs per node): a "
        f"worker pod asking for 8 is never scheduled; leave gpusPerNode unset to use all {gpus}"
    ]


def test_fewer_gpus_than_the_node_has_are_allowed_and_pods_share_it() -> None:
    job, errors = validate_manifest(with_groups({"name": "p5", "instanceType": "ml.p5.48xlarge", "gpusPerNode": 1}))
    assert errors == [] and job is not None and job.spec.cluster.worker_groups[0].gpus == 1


def test_a_name_without_hyperpods_prefix_is_refused_with_a_did_you_mean() -> None:
    (error,) = errors_of(with_groups({"name": "p5", "instanceType": "p5.48xlarge"}))
    assert error.startswith("spec.cluster.workerGroups: workerGroups[0].instanceType: 'p5.48xlarge' is not a ")
    assert "did you mean ml.p5.48xlarge?" in error and "cluster.hyperpod: false" in error


def test_plain_eks_names_the_instance_type_as_ec2_does() -> None:
    job, errors = validate_manifest(with_groups({"name": "p5", "instanceType": "p5.48xlarge"}, hyperpod=False))
    assert errors == [] and job is not None
    assert job.spec.cluster.worker_groups[0].gpus == 8
    plan = spec_plan(job.spec)
    assert plan is not None and plan.inputs.gpu == INSTANCE_TYPES["ml.p5.48xlarge"].gpu


@pytest.mark.parametrize(
    ("instance_type", "hyperpod", "meant"),
    [
        ("ml.p5.48xlarg", True, "ml.p5.48xlarge"),
        ("ml.g6e.12xl", True, "ml.g6e.12xlarge"),
        ("g6e.12xl", False, "g6e.12xlarge"),
    ],
)
def test_a_size_mmrl_does_not_know_in_a_family_it_knows_is_a_typo(
    instance_type: str, hyperpod: bool, meant: str
) -> None:
    doc = with_groups({"name": "w", "instanceType": instance_type, "gpusPerNode": 4}, hyperpod=hyperpod)
    (error,) = errors_of(doc)
    assert error.startswith(f"spec.cluster.workerGroups[0].instanceType: {instance_type!r} is not a size mmrl knows")
    assert error.endswith(f"; did you mean {meant}?")


def test_an_instance_type_mmrl_does_not_know_needs_gpus_per_node() -> None:
    (error,) = errors_of(with_groups({"name": "gb200", "instanceType": "ml.p6e-gb200.36xlarge"}))
    assert error.startswith(
        "spec.cluster.workerGroups[0].gpusPerNode: required: ml.p6e-gb200.36xlarge is not in mmrl's table of GPU "
        "instance types"
    )
    assert errors_of(with_groups({"name": "gb200", "instanceType": "ml.p6e-gb200.36xlarge", "gpusPerNode": 4})) == []
    assert errors_of(with_groups({"name": "cpu", "instanceType": "ml.m5.12xlarge", "gpusPerNode": 0})) == []


@pytest.mark.parametrize(
    ("name", "meant"),
    [
        ("p5.48xlarge", "p5.48xlarge"),
        ("ML.P5.48XLARGE", "ml.p5.48xlarge"),
        ("ml.p5n.48xlarge", "ml.p5en.48xlarge"),
        ("ml.g6e.12xlarg", "ml.g6e.12xlarge"),
        ("ml.trn1.32xlarge", None),
    ],
)
def test_closest_keeps_the_form_it_was_given(name: str, meant: str | None) -> None:
    assert closest(name) == meant


def test_the_docs_list_every_instance_type_mmrl_knows() -> None:
    text = (ROOT / "docs" / "memory-plan.md").read_text()
    assert [name for name, t in INSTANCE_TYPES.items() if f"`{name}` ({t.gpus})" not in text] == []
