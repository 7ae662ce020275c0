"""Metadata shared by every child: owner reference to the job, labels, namespace, and the digest of what was built."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_api import constants as c
from mmrl_operator.core.names import job_labels, job_uid

# The digest of what the operator built, on the child it built: a pass compares it with the digest of what it would
# build now and writes the child only when they differ (a steady-state pass writes nothing).
SPEC_HASH_ANNOTATION = "mmrl.dev/spec-hash"


def spec_hash(spec: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def stamped(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` with SPEC_HASH_ANNOTATION set to the digest of its spec, labels and other annotations: everything the
    operator sets on it."""
    meta = obj["metadata"]
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k != SPEC_HASH_ANNOTATION}
    digest = spec_hash({"spec": obj.get("spec"), "labels": meta.get("labels"), "annotations": annotations})
    meta["annotations"] = {**annotations, SPEC_HASH_ANNOTATION: digest}
    return obj


def owner_reference(job: MultimodalRLJob) -> dict[str, Any]:
    return controller_reference(c.KIND, job.name, job_uid(job))


def controller_reference(kind: str, name: str, uid: str) -> dict[str, Any]:
    """A child of one of our objects (a job, a ModelServer) is garbage-collected with it; `controller: true` marks
    mmrl as its one manager."""
    return {
        "apiVersion": c.API_VERSION,
        "kind": kind,
        "name": name,
        "uid": uid,
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
