"""Children are the job's by controller reference, not by name: what the decision adopts, ignores and reports."""

from __future__ import annotations

import pytest

from mmrl_operator.core.decide import decide
from mmrl_operator.core.names import attempt_of
from mmrl_operator.core.observed import Observed
from mmrl_operator.core.ownership import controlled_by, describe, ray_pod_of
from tests.support.factories import T0, job, rayjob
from tests.unit.operator.test_reconcile import advance, ready_cluster

UID = "0f1e2d3c-aaaa-bbbb-cccc-000000000000"  # the factories' job


def owned_by(uid: str, kind: str = "MultimodalRLJob", name: str = "geo", controller: bool = True) -> dict:
    return {"metadata": {"ownerReferences": [{"kind": kind, "name": name, "uid": uid, "controller": controller}]}}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("geo-a1", 1),
        ("geo-a999999", 999999),
        ("geo-a1000000", None),  # seven digits: not an attempt number
        ("geo-a" + "9" * 200, None),
        ("geo-a01", None),
        ("geo-a٣", None),  # a non-ASCII digit
        ("geo-a", None),
        ("geox-a1", None),
    ],
)
def test_attempt_numbers_are_parsed_with_a_bound(name: str, expected: int | None) -> None:
    assert attempt_of(name, "geo") == expected


def test_only_the_controller_reference_with_the_job_uid_makes_an_object_the_jobs() -> None:
    assert controlled_by(owned_by(UID), UID)
    assert not controlled_by(owned_by(UID, controller=False), UID)
    assert not controlled_by(owned_by("another-uid"), UID)
    assert not controlled_by({"metadata": {}}, UID)
    assert not controlled_by(owned_by(""), "")  # a job read without a uid owns nothing
    assert "controlled by MultimodalRLJob other" in describe("Service", "geo-inference", owned_by("x", name="other"))
    assert "not controlled by any object" in describe("ConfigMap", "geo-trainer-config", {"metadata": {}})


def test_ray_pods_belong_through_the_jobs_raycluster() -> None:
    pod = owned_by("rc-uid", kind="RayCluster", name="geo")
    assert ray_pod_of(pod, "geo", "rc-uid")
    assert not ray_pod_of(pod, "geo", "another-rc-uid")
    assert not ray_pod_of(owned_by("rc-uid", kind="RayCluster", name="other"), "geo", "rc-uid")
    assert not ray_pod_of({"metadata": {"labels": {"mmrl.dev/job": "geo"}}}, "geo", "rc-uid")
    # A pod of the previous RayCluster of the same name, still terminating: the next attempt must wait for it.
    old = owned_by("old-rc-uid", kind="RayCluster", name="geo")
    old["metadata"]["deletionTimestamp"] = "2026-12-01T12:00:00Z"
    assert ray_pod_of(old, "geo", "rc-uid") and ray_pod_of(old, "geo", None)


def test_a_rayjob_beyond_the_next_attempt_is_never_adopted_and_warned_about_once() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    far = Observed(raycluster=ready_cluster(j), rayjobs={600000: rayjob()})
    plan = decide(j, 1, far, T0)
    assert plan.status["attempt"] == 1 and len(plan.status["attempts"]) == 1  # attempt 1 started, nothing adopted
    assert [o["metadata"]["name"] for o in plan.apply if o["kind"] == "RayJob"] == ["geo-a1"]
    assert plan.status["foreignObjects"] == ["RayJob geo-a600000"]
    assert [e.reason for e in plan.events if e.type == "Warning"] == ["NotAdopted"]
    again = decide(advance(j, plan), 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob(), 600000: {}}), T0)
    assert again.status["attempt"] == 1 and not [e for e in again.events if e.reason == "NotAdopted"]
    # Gone again: the status forgets it.
    gone = decide(advance(j, again), 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)
    assert "foreignObjects" not in gone.status or gone.status["foreignObjects"] == []


def test_the_next_attempt_is_adopted_after_a_crash_between_create_and_status_write() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), rayjobs={1: rayjob()}), T0)
    assert plan.status["attempt"] == 1 and plan.status["attempts"][0]["rayJob"] == "geo-a1"
    assert not [o for o in plan.apply if o["kind"] == "RayJob"]  # recorded, not created again


def test_foreign_objects_seen_by_the_controller_are_reported_not_adopted() -> None:
    j = job()
    plan = decide(j, 1, Observed(foreign=("RayCluster geo",)), T0)
    assert plan.status["foreignObjects"] == ["RayCluster geo"]
    assert [e.message for e in plan.events if e.reason == "NotAdopted"] == [
        "RayCluster geo is not controlled by this job: it is ignored and never adopted"
    ]


def test_a_name_conflict_stalls_the_job_records_nothing_and_is_announced_once() -> None:
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    taken = "ConfigMap geo-trainer-config already exists and is not controlled by any object, not by this job"
    plan = decide(j, 1, Observed(raycluster=ready_cluster(j), name_conflict=taken), T0)
    assert plan.status.get("attempt", 0) == 0 and not plan.status.get("attempts")
    stalled = next(c for c in plan.status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "NameConflict")
    assert stalled["message"].startswith(taken) and "rename" in stalled["message"]
    assert [e.reason for e in plan.events] == ["NameConflict"] and plan.requeue_after == 30
    again = decide(advance(j, plan), 1, Observed(raycluster=ready_cluster(j), name_conflict=taken), T0)
    assert again.events == []
    cleared = decide(advance(j, again), 1, Observed(raycluster=ready_cluster(j)), T0)
    assert next(c for c in cleared.status["conditions"] if c["type"] == "Stalled")["status"] == "False"
    assert cleared.status["attempt"] == 1
