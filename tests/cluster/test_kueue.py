"""The REAL Kueue (v0.17.0, its controller from its Go module, in the cluster) admits, holds and preempts mmrl's
RayClusters through a LocalQueue and ClusterQueue. Kueue owns RayCluster.spec.suspend: a cluster it has not
admitted shows as Queued, a preemption stops the attempt without spending a restart, and nothing mmrl applies ever
touches the field (checked through managedFields). Its webhooks refuse what they refuse, and mmrl's admission
refuses those specs first."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.addons import kueue_webhook
from mmrl_local.addons.kueue_incluster import priority_class, queues
from mmrl_operator.core.jsonmerge import merge_patch
from tests.cluster.test_kueue_webhook import KUEUE_CASES, rendered_without_kueue_rules
from tests.support.corpus import bad_manifest
from tests.support.jobspecs import MULTI_NODE, cluster_job
from tests.support.kueue import quota_for, suspend_managers, workload_condition, workload_of
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster
QUEUE = "team-queue"


def cluster(jobs, name: str) -> dict[str, Any]:
    return next(rc for rc in jobs.ray("rayclusters") if rc["metadata"]["name"] == name)


def queued_job(name: str, priority: str) -> dict[str, Any]:
    kueue = {"spec": {"cluster": {"kueue": {"queueName": QUEUE, "priorityClass": priority}}}}
    return cluster_job(name, merge_patch(MULTI_NODE, merge_patch(kueue, {"spec": {"ttlSecondsAfterFinished": 0}})))


def test_kueue_holds_admits_and_preempts_without_spending_budgets(jobs, operator, kuberay, nodes_ready, custom, kueue):
    kuberay.script("geo-a1", "hang")
    kuberay.script("geo-a2", "succeed-after=1")
    kuberay.script("urgent-a1", "succeed-after=1")
    kueue.apply([priority_class(f"low-{jobs.ns}", 100), priority_class(f"high-{jobs.ns}", 1000)])
    # The ClusterQueue first has no quota: Kueue holds the job's workload, and the job says it is queued.
    kueue.apply(queues(QUEUE, jobs.ns, {"cpu": "0", "memory": "0", c.GPU_RESOURCE: "0"}))
    jobs.create(queued_job("geo", f"low-{jobs.ns}"))
    wait_until(lambda: jobs.ray_names("rayclusters") == ["geo"], 30, what="the RayCluster")
    workload = wait_until(lambda: workload_of(custom, jobs.ns, "geo"), 30, what="Kueue's Workload for geo")
    wait_until(lambda: jobs.status("geo").get("phase") == "Queued", 30, what="phase Queued")
    assert QUEUE in jobs.status("geo")["message"] and jobs.ray_names("rayjobs") == []
    assert jobs.ray("rayclusters")[0]["spec"]["suspend"] is True  # Kueue's webhook suspended it at creation
    assert workload_condition(custom, jobs.ns, "geo", "QuotaReserved") != "True"

    # Quota for exactly one such job: Kueue admits it, unsuspends its RayCluster, and training starts.
    kueue.apply(queues(QUEUE, jobs.ns, quota_for(workload))[1:2])
    wait_until(lambda: workload_condition(custom, jobs.ns, "geo", "Admitted") == "True", 60, what="geo admitted")
    wait_until(lambda: jobs.condition("geo", "Training") == "True", 60, what="attempt 1 training")

    # A job of higher priority in the same queue: Kueue preempts geo (suspends its RayCluster) to admit it.
    jobs.create(queued_job("urgent", f"high-{jobs.ns}"))
    wait_until(lambda: jobs.status("geo")["attempts"][0]["result"] == "Stopped", 60, what="attempt 1 stopped")
    status = jobs.status("geo")
    assert status["phase"] == "Queued" and status["attempts"][0]["failure"] == "preemption"
    assert workload_condition(custom, jobs.ns, "geo", "Evicted") == "True"
    # A worker-count change makes mmrl re-apply the RayCluster: it must not take spec.suspend from Kueue.
    groups = jobs.get("geo")["spec"]["cluster"]["workerGroups"]
    jobs.patch("geo", {"spec": {"cluster": {"workerGroups": [{**groups[0], "replicas": 2}]}}})
    wait_until(lambda: cluster(jobs, "geo")["spec"]["workerGroupSpecs"][0]["replicas"] == 2, 30, what="re-apply")
    assert cluster(jobs, "geo")["spec"]["suspend"] is True
    # Kueue's webhook and controller own spec.suspend; nothing mmrl applied ever touched it.
    managers = suspend_managers(cluster(jobs, "geo"))
    assert managers and c.FIELD_MANAGER not in managers, managers

    # urgent succeeds and its RayCluster goes (ttl 0): the quota is free, but geo now needs two workers' worth.
    wait_until(lambda: jobs.status("urgent").get("phase") == "Succeeded", 90, what="urgent to succeed")
    wait_until(lambda: workload_of(custom, jobs.ns, "urgent") is None, 60, what="urgent's Workload gone")
    grown = wait_until(lambda: workload_of(custom, jobs.ns, "geo"), 30, what="geo's Workload")
    kueue.apply(queues(QUEUE, jobs.ns, quota_for(grown))[1:2])
    wait_until(lambda: jobs.status("geo").get("phase") == "Succeeded", 90, what="attempt 2 to succeed")
    status = jobs.status("geo")
    assert [a["cause"] for a in status["attempts"]] == ["initial", "preemption"]
    assert status.get("restarts", {}) == {}
    assert jobs.status("urgent").get("restarts", {}) == {}


def test_kueue_webhook_refuses_what_mmrl_admission_refuses_first(jobs, core, custom, kueue, mmrl_crd):
    """Each job spec mmrl refuses because Kueue would refuse its RayCluster: the apiserver refuses the job, naming
    the field; the RayCluster mmrl would have built, created directly, is refused by Kueue's own webhook."""
    refused_by_kueue, offline = {}, []
    for case in KUEUE_CASES:
        manifest = bad_manifest(case)
        with pytest.raises(client.ApiException) as refused:
            jobs.create(manifest)
        assert refused.value.status == 422 and case.expect in json.loads(refused.value.body)["message"], case
        rc = rendered_without_kueue_rules(manifest)
        offline.append({"new": rc})
        rc = {
            **rc,
            "metadata": {"name": rc["metadata"]["name"], "namespace": jobs.ns, "labels": rc["metadata"]["labels"]},
        }
        with pytest.raises(client.ApiException) as denied:
            custom.create_namespaced_custom_object("ray.io", "v1", jobs.ns, "rayclusters", rc)
        refused_by_kueue[case.case] = json.loads(denied.value.body)["message"]
    # A queue name that is no label value at all is refused by the apiserver before any webhook sees it.
    webhook = 'admission webhook "vraycluster.kb.io" denied the request: '
    by_webhook = {case: m.removeprefix(webhook) for case, m in refused_by_kueue.items() if m.startswith(webhook)}
    assert set(refused_by_kueue) - set(by_webhook) == {"kueue-queue-not-label-value"}, refused_by_kueue
    # The webhook in the cluster says what the same Go code says offline (tests/cluster/test_kueue_webhook.py).
    verdicts = dict(zip(refused_by_kueue, kueue_webhook.verdicts(offline), strict=True))
    assert {case: verdicts[case] for case in by_webhook} == by_webhook
