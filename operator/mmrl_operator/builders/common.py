"""Metadata shared by every child: owner reference to the job, labels, namespace."""

from __future__ import annotations

from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_operator.names import job_labels, job_uid


def owner_reference(job: MultimodalRLJob) -> dict[str, Any]:
    """Children are garbage-collected with the job; `controller: true` marks mmrl as their one manager."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.KIND,
        "name": job.name,
        "uid": job_uid(job),
        "controller": True,
        "blockOwnerDeletion": True,
    }


def child_metadata(
    job: MultimodalRLJob, name: str, component: str, extra_labels: dict[str, str] | None = None
) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": {**job_labels(job.name, component), **(extra_labels or {})},
        "ownerReferences": [owner_reference(job)],
    }
