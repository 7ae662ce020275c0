"""What mmrl refuses at admission because Kueue would refuse the RayCluster is what Kueue's own webhook refuses.

Kueue's RayCluster webhook (the pinned sigs.k8s.io/kueue module, run by mmrl_local.addons.kueue_webhook) judges the
RayClusters the operator builds: from every example and edge-of-valid job it must admit them, and from every
bad_specs.yaml case marked `kueue: true` (job specs mmrl refuses, built here with the Kueue rules bypassed) it must
refuse them. The label changes mmrl allows only while a job is suspended are refused by Kueue as updates of a
running RayCluster.
"""

from __future__ import annotations

from typing import Any

import pytest

from mmrl_api import MultimodalRLJob, WorkerGroup, parse_job
from mmrl_local.addons import kueue_webhook
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.jsonmerge import merge_patch
from tests.support.corpus import bad_cases, bad_manifest, example, good_cases

pytestmark = pytest.mark.cluster
KUEUE_CASES = [case for case in bad_cases() if case.kueue]


def rendered(manifest: dict[str, Any]) -> dict[str, Any]:
    return build_raycluster(parse_job(manifest))


def rendered_without_kueue_rules(manifest: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster the operator would build if mmrl had no Kueue rules: the job is parsed with harmless worker
    groups, annotations and queue, then given the manifest's own (pydantic does not validate assignments)."""
    cluster = manifest["spec"]["cluster"]
    harmless = {"workerGroups": [{"name": "gpu"}], "podTemplate": {"annotations": None}, "kueue": {"queueName": "q"}}
    job: MultimodalRLJob = parse_job(merge_patch(manifest, {"spec": {"cluster": harmless}}))
    job.spec.cluster.worker_groups = [WorkerGroup.model_validate(g) for g in cluster["workerGroups"]]
    job.spec.cluster.pod_template.annotations = dict(cluster.get("podTemplate", {}).get("annotations", {}))
    assert job.spec.cluster.kueue is not None
    job.spec.cluster.kueue.queue_name = cluster["kueue"]["queueName"]
    return build_raycluster(job)


def test_corpus_marks_the_cases_kueue_refuses() -> None:
    assert len(KUEUE_CASES) >= 10


def test_kueue_admits_the_rayclusters_of_jobs_mmrl_accepts() -> None:
    manifests = {name: example(name) for name in ("job.yaml", "local.yaml")}
    manifests |= {case.case: bad_manifest(case) for case in good_cases()}
    verdicts = kueue_webhook.verdicts([{"new": rendered(m)} for m in manifests.values()])
    refused = {name: verdict for name, verdict in zip(manifests, verdicts, strict=True) if verdict}
    assert refused == {}


def test_kueue_refuses_what_mmrl_refuses_for_it() -> None:
    clusters = [rendered_without_kueue_rules(bad_manifest(case)) for case in KUEUE_CASES]
    verdicts = kueue_webhook.verdicts([{"new": rc} for rc in clusters])
    admitted = [case.case for case, verdict in zip(KUEUE_CASES, verdicts, strict=True) if not verdict]
    assert admitted == []


@pytest.mark.parametrize(
    ("before", "after", "admitted_when_suspended"),
    [
        ({}, {"queueName": "other-queue"}, True),
        ({"priorityClass": None}, {"priorityClass": "urgent"}, True),
        # Refused even while suspended; mmrl never sends it, since a suspended job has no RayCluster.
        ({}, {"priorityClass": None}, False),
    ],
    ids=["queue-changed", "priority-added", "priority-removed"],
)
def test_kueue_refuses_the_label_changes_mmrl_allows_only_while_suspended(
    before: dict, after: dict, admitted_when_suspended: bool
) -> None:
    old_job = merge_patch(example(), {"spec": {"cluster": {"kueue": before}}})
    old = rendered(old_job)
    new = rendered(merge_patch(old_job, {"spec": {"cluster": {"kueue": after}}}))
    suspended = [merge_patch(rc, {"spec": {"suspend": True}}) for rc in (old, new)]
    running, stopped = kueue_webhook.verdicts([{"old": old, "new": new}, {"old": suspended[0], "new": suspended[1]}])
    assert "metadata.labels[kueue.x-k8s.io/" in running
    assert (stopped == "") is admitted_when_suspended
