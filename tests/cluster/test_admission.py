"""The same malformed-job corpus that `mmrl validate` rejects is rejected by the real kube-apiserver with the
generated CRD installed (schema + CEL), and the error names the same field."""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_api import validate_manifest
from mmrl_operator.core.jsonmerge import merge_patch
from tests.support.corpus import bad_cases, bad_manifest, example, good_cases

pytestmark = pytest.mark.cluster
CASES = [case for case in bad_cases() if case.by_apiserver]
OPERATOR_CASES = [case for case in bad_cases() if not case.by_apiserver]
GOOD = good_cases()


def create(api: client.ApiClient, namespace: str, body: dict) -> None:
    body = {**body, "metadata": {**body["metadata"], "namespace": namespace}}
    # Strict field validation, as `kubectl apply` does by default: unknown fields are errors, not warnings.
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, body, field_validation="Strict"
    )


def test_the_examples_are_accepted(api_client, namespace, mmrl_crd) -> None:
    for name in ("job.yaml", "local.yaml"):
        create(api_client, namespace, example(name))


@pytest.mark.parametrize("case", GOOD, ids=[case.case for case in GOOD])
def test_apiserver_accepts_valid_edge_cases(api_client, namespace, mmrl_crd, case) -> None:
    create(api_client, namespace, bad_manifest(case))


@pytest.mark.parametrize("case", CASES, ids=[case.case for case in CASES])
def test_apiserver_rejects_and_names_the_field(api_client, namespace, mmrl_crd, case) -> None:
    with pytest.raises(client.exceptions.ApiException) as err:
        create(api_client, namespace, bad_manifest(case))
    assert err.value.status in (400, 422), err.value.body
    message = json.loads(err.value.body)["message"]
    # kube-apiserver prints list indices as [0], like mmrl validate.
    assert case.expect in message, f"{case.case}: {case.expect!r} not in {message!r}"


def test_apiserver_quotes_the_instance_types_gpus_as_mmrl_validate_does(api_client, namespace, mmrl_crd) -> None:
    """The rule's messageExpression reads the same table as the model's validator, so both print the same sentence."""
    case = next(case for case in CASES if case.case == "gpus-above-the-instance-type")
    _, errors = validate_manifest(bad_manifest(case))
    assert [e.path for e in errors] == [case.expect] and "has (4 GPUs per node)" in errors[0].message
    with pytest.raises(client.exceptions.ApiException) as err:
        create(api_client, namespace, bad_manifest(case))
    message = json.loads(err.value.body)["message"]
    assert f"{case.expect}: Invalid value: " in message and message.endswith(errors[0].message), message


@pytest.mark.parametrize("case", OPERATOR_CASES, ids=[case.case for case in OPERATOR_CASES])
def test_apiserver_accepts_what_only_the_operator_can_refuse(api_client, namespace, mmrl_crd, case) -> None:
    """No CEL rule can compute the GPU memory plan: such a job is applied, and the operator refuses it before its
    first child (tests/cluster/test_memory_plan_refusal.py)."""
    create(api_client, namespace, bad_manifest(case))


@pytest.mark.parametrize("field", ["model", "lora", "algorithm", "dataset", "checkpoint", "trainer.backend"])
def test_training_inputs_are_immutable(api_client, namespace, mmrl_crd, field) -> None:
    create(api_client, namespace, example())
    patch = {
        "model": {"model": {"name": "Qwen/Qwen2.5-VL-7B-Instruct"}},
        "lora": {"lora": {"rank": 64}},
        "algorithm": {"algorithm": {"learningRate": 1e-4}},
        "dataset": {"dataset": {"train": "s3://other/train.parquet"}},
        "checkpoint": {"checkpoint": {"intervalSteps": 50}},
        "trainer.backend": {"trainer": {"backend": "local"}},
    }[field]
    api = client.CustomObjectsApi(api_client)
    with pytest.raises(client.exceptions.ApiException) as err:
        api.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, "qwen3vl-geo3k-lora", {"spec": patch}
        )
    assert err.value.status == 422 and f"{field} is immutable" in err.value.body
    # Mutable settings still change.
    api.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, "qwen3vl-geo3k-lora", {"spec": {"suspend": True}}
    )


WITHOUT_KUEUE = {"cluster": {"kueue": None}}
WITHOUT_PRIORITY = {"cluster": {"kueue": {"priorityClass": None}}}


@pytest.mark.parametrize(
    ("before", "change", "field"),
    [
        ({}, {"cluster": {"kueue": {"queueName": "other-queue"}}}, "queueName"),
        ({}, WITHOUT_KUEUE, "queueName"),
        (WITHOUT_KUEUE, {"cluster": {"kueue": {"queueName": "team-queue"}}}, "queueName"),
        ({}, WITHOUT_PRIORITY, "priorityClass"),
        (WITHOUT_PRIORITY, {"cluster": {"kueue": {"priorityClass": "urgent"}}}, "priorityClass"),
    ],
    ids=["queue-changed", "kueue-removed", "kueue-added", "priority-removed", "priority-added"],
)
def test_kueue_labels_change_only_while_suspended(api_client, namespace, mmrl_crd, before, change, field) -> None:
    """Kueue refuses these label changes on a RayCluster it runs (jobframework.ValidateJobOnUpdate); a suspended
    job has no RayCluster, so the same change is accepted together with suspend."""
    job = merge_patch(example(), {"spec": before})
    create(api_client, namespace, job)
    api = client.CustomObjectsApi(api_client)
    name = job["metadata"]["name"]

    def patch(spec: dict) -> dict:
        return api.patch_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name, {"spec": spec})

    with pytest.raises(client.exceptions.ApiException) as err:
        patch(change)
    assert err.value.status == 422, err.value.body
    assert f"spec.cluster.kueue.{field}" in json.loads(err.value.body)["message"]
    stored = patch({**change, "suspend": True})["spec"]["cluster"]
    assert stored.get("kueue") == merge_patch(job["spec"]["cluster"], change["cluster"]).get("kueue")


def test_kueue_priority_class_and_workers_change_while_running(api_client, namespace, mmrl_crd) -> None:
    job = example()
    create(api_client, namespace, job)
    api = client.CustomObjectsApi(api_client)
    groups = [{**job["spec"]["cluster"]["workerGroups"][0], "replicas": 2}]
    change = {"cluster": {"kueue": {"priorityClass": "urgent"}, "workerGroups": groups}}
    stored = api.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, job["metadata"]["name"], {"spec": change}
    )["spec"]
    assert stored["cluster"]["kueue"]["priorityClass"] == "urgent" and stored["suspend"] is False
    assert stored["cluster"]["workerGroups"][0]["replicas"] == 2
