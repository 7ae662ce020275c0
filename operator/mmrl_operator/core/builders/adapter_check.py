"""The Pod `<name>-adapter-check` that checks a job's adapter files before a shared server loads them.

A dedicated server checks its adapter in an init container before vLLM starts (`inference.check_container`). A
ModelServer loads adapters at run time into a vLLM that is already serving other teams, so the same check runs
first in a pod of the job's own: the trainer image's `python -m mmrl_trainer.adapter` with the adapter rules of
today (config, rank, target modules, base model, tensor names, regular files rather than links) and the sha256
the trainer reported, under the job's ServiceAccount, with the job's claims read-only at the job's mount paths,
where the job's pods may run. The server's pass loads the adapter only once the job's status records a check of
that path and digest (`status.inference.adapterCheck`), which only the operator writes.

A bare pod rather than a batch Job: it is one short container, nothing retries it but the operator's next pass
(which recreates it when its node went away), and the operator already caches its job's pods.
"""

from __future__ import annotations

from typing import Any

from mmrl_api import MultimodalRLJob
from mmrl_operator.core.builders.common import child_metadata, stamped
from mmrl_operator.core.builders.inference import (
    ADAPTER_SHA_ANNOTATION,
    Adapter,
    adapter_volumes,
    check_container,
    job_pod_basics,
)
from mmrl_operator.core.builders.pod_security import non_root_pod
from mmrl_operator.core.names import adapter_check_name

COMPONENT = "adapter-check"
CHECKED_PATH_ANNOTATION = "mmrl.dev/adapter-path"
CHECKED_SHA_ANNOTATION = ADAPTER_SHA_ANNOTATION  # as on a dedicated server's pods
DEADLINE_SECONDS = 600  # a check reads a few hundred MiB at most; past this the pod fails and is made again


def build_check_pod(job: MultimodalRLJob, adapter: Adapter) -> dict[str, Any]:
    volumes, mounts = adapter_volumes(job, adapter)
    metadata = child_metadata(job, adapter_check_name(job.name), COMPONENT)
    metadata["annotations"] = {CHECKED_PATH_ANNOTATION: adapter.path, CHECKED_SHA_ANNOTATION: adapter.sha256}
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            **job_pod_basics(job, 0),
            "securityContext": non_root_pod(),  # only the trainer image runs here
            "restartPolicy": "Never",
            "activeDeadlineSeconds": DEADLINE_SECONDS,
            "containers": [check_container(job, adapter, mounts)],
            "volumes": volumes,
        },
    }
    return stamped(pod)


def checks(pod: dict[str, Any] | None, adapter: Adapter) -> bool:
    """Whether `pod` is the check of this adapter (its path and digest)."""
    annotations = ((pod or {}).get("metadata") or {}).get("annotations") or {}
    return (annotations.get(CHECKED_PATH_ANNOTATION), annotations.get(CHECKED_SHA_ANNOTATION)) == (
        adapter.path,
        adapter.sha256,
    )
