"""A shared-serving job's adapter check (`builders.adapter_check`, `serving.adapter_checked`): the pod that checks
the files before a ModelServer may load them, and how a job's pass reads it. Pure, no cluster; the e2e test
(tests/e2e/test_shared_serving.py) runs the real check pod on the local kubelet."""

from __future__ import annotations

from typing import Any

from mmrl_api.contract import ERROR_PREFIX, EXIT_BAD_INPUT
from mmrl_operator.core.builders.adapter_check import CHECKED_SHA_ANNOTATION, build_check_pod
from mmrl_operator.core.names import TRAINER_IDENTITY, job_dir
from mmrl_operator.core.observed import ServingObserved
from mmrl_operator.core.serving import adapter_of, decide_serving
from mmrl_operator.core.shared_serving import Candidate, candidate
from tests.unit.operator.test_shared_serving import job, server, trained

SERVER_STATUS = {"status": {"service": "qwen3vl-8b-vllm", "readyReplicas": 1, "adapters": []}}


def check_pod(j: Any, phase: str, sha: str = "ab" * 32, **status: Any) -> dict[str, Any]:
    adapter, _ = adapter_of(j, trained(j, checked=False))
    pod = build_check_pod(j, adapter)
    pod["metadata"]["annotations"][CHECKED_SHA_ANNOTATION] = sha
    pod["status"] = {"phase": phase, **status}
    return pod


def test_the_check_pod_runs_the_adapter_rules_and_digest_as_the_job_with_its_claims_read_only() -> None:
    j = job(servedModelName="geo-lora")
    adapter, _ = adapter_of(j, trained(j, checked=False))
    pod = build_check_pod(j, adapter)
    spec = pod["spec"]
    (box,) = spec["containers"]
    assert box["command"][:3] == ["python", "-m", "mmrl_trainer.adapter"]
    assert box["command"][box["command"].index("--adapter") + 1] == f"{job_dir(j)}/adapter"
    assert box["command"][box["command"].index("--sha256") + 1] == "ab" * 32
    assert box["image"] == j.spec.trainer.image
    assert spec["serviceAccountName"] == TRAINER_IDENTITY and spec["automountServiceAccountToken"] is False
    assert spec["restartPolicy"] == "Never" and spec["activeDeadlineSeconds"] > 0
    assert all(m["readOnly"] for m in box["volumeMounts"])
    assert all(v["persistentVolumeClaim"]["readOnly"] for v in spec["volumes"])
    assert pod["metadata"]["ownerReferences"][0]["uid"] == "geo-0000-0000-0000-000000000000"


def test_an_unchecked_adapter_is_no_candidate_and_its_pass_creates_the_check_pod() -> None:
    j = job(servedModelName="geo-lora")
    status = trained(j, checked=False)
    assert candidate(j, status, server()) is None
    d = decide_serving(j, status, ServingObserved(server=SERVER_STATUS))
    assert [o["kind"] for o in d.apply] == ["Pod"] and d.apply[0]["metadata"]["name"] == "geo-adapter-check"
    assert d.phase == "Serving" and d.ready is not None and d.ready[:2] == (False, "CheckingAdapter")
    assert d.inference is not None and "adapterCheck" not in d.inference


def test_a_passed_check_is_recorded_then_its_pod_is_deleted_and_the_server_may_load_the_adapter() -> None:
    j = job(servedModelName="geo-lora")
    status = trained(j, checked=False)
    passed = decide_serving(j, status, ServingObserved(server=SERVER_STATUS, check_pod=check_pod(j, "Succeeded")))
    assert passed.apply == [] and passed.delete == []
    assert passed.inference is not None
    assert passed.inference["adapterCheck"] == {"path": f"{job_dir(j)}/adapter", "sha256": "ab" * 32}
    recorded = trained(j)
    again = decide_serving(j, recorded, ServingObserved(server=SERVER_STATUS, check_pod=check_pod(j, "Succeeded")))
    assert again.delete == [("v1", "Pod", "geo-adapter-check")] and again.apply == []
    assert isinstance(candidate(j, recorded, server()), Candidate)


def test_a_refused_check_fails_the_job_with_the_broken_rule() -> None:
    j = job(servedModelName="geo-lora")
    term = {"exitCode": EXIT_BAD_INPUT, "message": f"{ERROR_PREFIX} adapter_model.safetensors: sha256 differs"}
    pod = check_pod(j, "Failed", containerStatuses=[{"name": "check-adapter", "state": {"terminated": term}}])
    d = decide_serving(j, trained(j, checked=False), ServingObserved(server=SERVER_STATUS, check_pod=pod))
    assert (d.phase, d.reason) == ("Failed", "InvalidAdapter")
    assert "sha256 differs" in d.message and d.ready is not None and d.ready[1] == "InvalidAdapter"


def test_a_check_of_other_files_or_one_that_died_is_deleted_to_be_made_again() -> None:
    j = job(servedModelName="geo-lora")
    status = trained(j, checked=False)
    for pod in (
        check_pod(j, "Succeeded", sha="cd" * 32),  # the trainer reported a new adapter since
        check_pod(j, "Failed", reason="DeadlineExceeded"),  # not a refusal: the node went, or the deadline
    ):
        d = decide_serving(j, status, ServingObserved(server=SERVER_STATUS, check_pod=pod))
        assert d.delete == [("v1", "Pod", "geo-adapter-check")] and d.apply == [], pod["status"]
        assert d.ready is not None and d.ready[1] == "CheckingAdapter"


def test_a_check_recorded_for_other_files_counts_for_nothing() -> None:
    j = job(servedModelName="geo-lora")
    moved = trained(j, sha256="cd" * 32)  # recorded for "ab" * 32, reported "cd" * 32: never loaded unchecked
    assert moved.inference is not None and moved.inference.adapter_check is not None
    moved.inference.adapter_check.sha256 = "ab" * 32
    assert candidate(j, moved, server()) is None
    d = decide_serving(j, moved, ServingObserved(server=SERVER_STATUS))
    assert [o["kind"] for o in d.apply] == ["Pod"]
