"""Faulty-node memory: a node whose fault ended an attempt is avoided by the job's next attempts, bounded, and
forgotten once the node is replaced by a new instance."""

from __future__ import annotations

from datetime import timedelta

from mmrl_api import JobStatus
from mmrl_api import constants as c
from mmrl_api.status import MAX_AVOIDED_NODES
from mmrl_operator.core.builders.raycluster import SPEC_HASH_ANNOTATION, build_raycluster
from mmrl_operator.core.decide import Plan, decide
from mmrl_operator.core.observed import AVOIDED_NODES_ANNOTATION, Observed, PodInfo
from tests.support.factories import T0, job, node, raycluster, rayjob, verdicts

HEAD = PodInfo("geo-head", "ray-head", "hyperpod-i-0", T0 - timedelta(minutes=5), "Running")
WORKER = PodInfo("geo-worker-1", "ray-worker", "hyperpod-i-1", T0 - timedelta(minutes=5), "Running")


def advance(j, plan: Plan):
    return j.model_copy(update={"status": JobStatus.model_validate(plan.status)})


def cluster_of(j) -> dict:
    built = build_raycluster(j)
    cluster = raycluster(ready=True, spec_hash=built["metadata"]["annotations"][SPEC_HASH_ANNOTATION])
    if AVOIDED_NODES_ANNOTATION in built["metadata"]["annotations"]:
        cluster["metadata"]["annotations"][AVOIDED_NODES_ANNOTATION] = built["metadata"]["annotations"][
            AVOIDED_NODES_ANNOTATION
        ]
    return cluster


def preferences(rc: dict) -> list[list[dict]]:
    templates = [rc["spec"]["headGroupSpec"]["template"], *(g["template"] for g in rc["spec"]["workerGroupSpecs"])]
    return [
        t["spec"].get("affinity", {}).get("nodeAffinity", {}).get("preferredDuringSchedulingIgnoredDuringExecution", [])
        for t in templates
    ]


def faulted_on_worker_node():
    """Attempt 1 ran on HEAD and WORKER; HyperPod then marked the worker's node for replacement."""
    j = job()
    j = advance(j, decide(j, 1, Observed(), T0))
    j = advance(j, decide(j, 1, Observed(raycluster=cluster_of(j), pods=[HEAD, WORKER]), T0))
    bad = verdicts(node("hyperpod-i-0"), node("hyperpod-i-1", c.HEALTH_PENDING_REPLACEMENT))
    world = Observed(raycluster=cluster_of(j), rayjobs={1: rayjob()}, pods=[HEAD, WORKER], nodes=bad)
    plan = decide(j, 1, world, T0 + timedelta(seconds=30))
    return advance(j, plan), plan


def test_the_node_that_ended_an_attempt_is_remembered_with_its_uid() -> None:
    _, plan = faulted_on_worker_node()
    (avoided,) = plan.status["avoidedNodes"]
    assert avoided["node"] == "hyperpod-i-1" and avoided["uid"] == "uid-hyperpod-i-1"
    assert avoided["attempt"] == 1 and avoided["reason"] == "PendingReplacement"
    assert any(e.reason == "NodeAvoided" for e in plan.events)


def test_next_rayclusters_pods_prefer_other_nodes_without_changing_the_spec_hash() -> None:
    j, _ = faulted_on_worker_node()
    before = build_raycluster(job())
    after = build_raycluster(j)
    assert (
        after["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        == before["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    )
    assert after["metadata"]["annotations"][AVOIDED_NODES_ANNOTATION] == "hyperpod-i-1"
    away = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["hyperpod-i-1"]}
    for prefs in preferences(after):
        assert {"weight": 100, "preference": {"matchExpressions": [away]}} in prefs
    templates = [
        after["spec"]["headGroupSpec"]["template"],
        *(g["template"] for g in after["spec"]["workerGroupSpecs"]),
    ]
    assert {t["metadata"]["annotations"][AVOIDED_NODES_ANNOTATION] for t in templates} == {"hyperpod-i-1"}
    # The ended attempt's cluster is re-applied with the preference (the attempt is no longer running).
    plan = decide(j, 1, Observed(raycluster=cluster_of(job()), pods=[HEAD]), T0 + timedelta(seconds=31))
    applied = [o for o in plan.apply if o["kind"] == "RayCluster"]
    assert applied and applied[0]["metadata"]["annotations"][AVOIDED_NODES_ANNOTATION] == "hyperpod-i-1"


def test_pods_placed_on_the_node_without_the_preference_move_before_the_next_attempt() -> None:
    j, _ = faulted_on_worker_node()
    later = T0 + timedelta(minutes=10)
    # The node came back (rebooted, same Node object) and a worker pod is on it whose template did not avoid it:
    # the old pod, or one KubeRay recreated before the RayCluster carried the preference.
    back = verdicts(node("hyperpod-i-0"), node("hyperpod-i-1"))
    now = {"hyperpod-i-1": "uid-hyperpod-i-1"}
    world = Observed(raycluster=cluster_of(j), pods=[HEAD, WORKER], nodes=back, avoided_now=now)
    plan = decide(j, 1, world, later)
    assert [(d.kind, d.name) for d in plan.delete] == [("Pod", "geo-worker-1")]
    assert "RayJob/geo-a2" not in [f"{o['kind']}/{o['metadata']['name']}" for o in plan.apply]
    assert "off node hyperpod-i-1" in plan.status["message"]
    # A pod the scheduler put there with the preference (no other node had room) stays, and the attempt starts.
    knowing = PodInfo("geo-worker-2", "ray-worker", "hyperpod-i-1", later, "Running", avoids=("hyperpod-i-1",))
    world = Observed(raycluster=cluster_of(j), pods=[HEAD, knowing], nodes=back, avoided_now=now)
    plan = decide(j, 1, world, later)
    assert plan.delete == [] and plan.status["attempt"] == 2


def test_a_replaced_node_is_forgotten() -> None:
    j, _ = faulted_on_worker_node()
    later = T0 + timedelta(minutes=10)
    for now_uid in (None, "uid-new-instance"):  # gone, or back under the same name as a new Node object
        plan = decide(
            j, 1, Observed(raycluster=cluster_of(j), pods=[HEAD], avoided_now={"hyperpod-i-1": now_uid}), later
        )
        assert plan.status.get("avoidedNodes", []) == []
        assert any(e.reason == "AvoidedNodeReplaced" for e in plan.events)
    # Not looked at this pass: kept.
    plan = decide(j, 1, Observed(raycluster=cluster_of(j), pods=[HEAD]), later)
    assert [a["node"] for a in plan.status["avoidedNodes"]] == ["hyperpod-i-1"]


def test_the_memory_is_bounded_oldest_first() -> None:
    j, _ = faulted_on_worker_node()
    status = j.status.wire()
    first = status["avoidedNodes"][0]
    status["avoidedNodes"] = [
        {**first, "node": f"hyperpod-i-{n}", "uid": f"u{n}"} for n in range(10, 10 + MAX_AVOIDED_NODES)
    ]
    status["attempts"][0]["result"] = "Running"
    status["attempts"][0].pop("endTime", None)
    j = job(status=status)
    worker = PodInfo("geo-worker-9", "ray-worker", "hyperpod-i-9", T0, "Running")
    bad = verdicts(node("hyperpod-i-0"), node("hyperpod-i-9", ready=False))
    plan = decide(j, 1, Observed(raycluster=cluster_of(j), rayjobs={1: rayjob()}, pods=[HEAD, worker], nodes=bad), T0)
    nodes = [a["node"] for a in plan.status["avoidedNodes"]]
    assert len(nodes) == MAX_AVOIDED_NODES and nodes[-1] == "hyperpod-i-9" and "hyperpod-i-10" not in nodes
