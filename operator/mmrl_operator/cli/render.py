"""`mmrl render`: every object the operator would create for a job file, without a cluster.

The objects come from `core.decide.decide` itself, run over three imagined moments of the job's life rather than
from a second list of builders: a new job (ConfigMap, RayCluster), the same job once its RayCluster reports ready
(the first RayJob), and the job after training succeeded (the inference Deployment and Service, unless
`spec.inference.enabled` is false). So what render prints is what the controller applies, and a builder added to the
decision shows up here without touching this module. The pods run as the namespace's `mmrl-trainer`, which the
operator makes once per namespace from the platform's settings, not from the job: render does not print it.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, TextIO

from mmrl_api import MultimodalRLJob, validate_manifest
from mmrl_api.constants import KIND
from mmrl_api.job import ObjectMeta
from mmrl_api.memory_plan import spec_plan
from mmrl_api.status import JobStatus
from mmrl_operator.cli.errors import UserError
from mmrl_operator.cli.output import yaml_documents
from mmrl_operator.cli.sources import Source, read_sources
from mmrl_operator.cli.version import mmrl_version
from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed, desired_workers

RENDER_UID = "00000000-0000-4000-8000-000000000000"
"""The job's UID in rendered objects (owner references, the job directory), which only the apiserver assigns."""
RENDER_NOW = datetime(2026, 1, 1, tzinfo=UTC)
GENERATION = 1


def as_submitted(job: MultimodalRLJob, namespace: str | None, uid: str = RENDER_UID) -> MultimodalRLJob:
    """The job as the apiserver would hand it to the operator: in `namespace` (else its own, else `default`), with
    a UID and no status."""
    given = job.metadata.model_dump()
    meta = ObjectMeta.model_validate({**given, "namespace": namespace or job.namespace, "uid": given.get("uid") or uid})
    return job.model_copy(update={"metadata": meta, "status": None})


def _ready(raycluster: dict[str, Any]) -> dict[str, Any]:
    """The RayCluster as KubeRay reports it once every pod is ready."""
    status = {
        "state": "ready",
        "readyWorkerReplicas": desired_workers(raycluster),
        "conditions": [{"type": "HeadPodReady", "status": "True"}],
    }
    return {**raycluster, "status": status}


def _with_status(job: MultimodalRLJob, status: dict[str, Any], **changes: Any) -> MultimodalRLJob:
    return job.model_copy(update={"status": JobStatus.model_validate({**status, **changes})})


class RenderError(Exception):
    """The decision created no RayCluster for the job, so there is nothing to render from."""


def render_objects(job: MultimodalRLJob) -> list[dict[str, Any]]:
    """Every object the operator applies for `job` (as submitted), in the order it first applies them. A suspended
    job is rendered as it runs once `spec.suspend` is false: suspended, it has no children at all."""
    if job.spec.suspend:
        job = job.model_copy(update={"spec": job.spec.model_copy(update={"suspend": False})})
    created = decide(job, GENERATION, Observed(), RENDER_NOW)
    cluster = next((o for o in created.apply if o["kind"] == "RayCluster"), None)
    if cluster is None:
        raise RenderError(created.status.get("message") or "the operator would create no RayCluster for this job")
    on_cluster = Observed(raycluster=_ready(cluster))
    first_attempt = decide(_with_status(job, created.status), GENERATION, on_cluster, RENDER_NOW)
    trained = _with_status(job, first_attempt.status, phase="Succeeded", message="training finished")
    serving = decide(trained, GENERATION, on_cluster, RENDER_NOW)
    return unique([*created.apply, *first_attempt.apply, *serving.apply])


def unique(objects: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """One object per (apiVersion, kind, name): the last version applied, at the place it was first applied."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"], obj["metadata"]["name"])
        out[key] = obj
    return list(out.values())


def render_sources(sources: Sequence[Source], namespace: str | None, fallback: str, out: TextIO, err: TextIO) -> int:
    """Print the objects of every MultimodalRLJob in `sources` as one multi-document YAML stream, under a header
    naming the mmrl version and the sources. Each job goes into `namespace` (`-n`), else its file's, else
    `fallback`. Exit status: 1 when a source is not YAML or a job does not validate (errors name the field, as
    `mmrl validate` does); nothing is printed then."""
    objects: list[dict[str, Any]] = []
    notes: list[str] = []
    for source in sources:
        try:
            docs = source.documents()
        except UserError as exc:
            print(exc, file=err)
            return 1
        jobs = [d for d in docs if not isinstance(d, dict) or d.get("kind", KIND) == KIND]
        if not jobs and source.named:
            print(f"{source.name}: no {KIND} documents", file=err)
            return 1
        for doc in jobs:
            job, errors = validate_manifest(doc)
            for e in errors:
                print(f"{source.name}: {e.path}: {e.message}", file=err)
            if job is None:
                return 1  # nothing is printed for a file the apiserver or the operator would refuse in part
            if job.spec.suspend:
                print(f"{source.name}: spec.suspend is true: the operator creates these once it is false", file=err)
            plan = spec_plan(job.spec)
            if plan is not None:  # as YAML comments, so the output still applies with `kubectl apply -f -`
                notes += [f"# {job.name}: {line}" for line in plan.lines()]
            try:
                objects += render_objects(as_submitted(job, namespace or job.metadata.namespace or fallback))
            except RenderError as exc:
                print(f"{source.name}: {exc}", file=err)
                return 1
    if not objects:
        print(f"no {KIND} documents in {', '.join(s.name for s in sources)}", file=err)
        return 1
    header = f"# rendered by mmrl {mmrl_version()} from {', '.join(s.name for s in sources)}\n"
    out.write(header + "".join(f"{line}\n" for line in notes) + yaml_documents(objects))
    return 0


def render_file(
    path: str, namespace: str | None, out: TextIO | None = None, err: TextIO | None = None, fallback: str = "default"
) -> int:
    """`render_sources` over one file, directory or `-`."""
    return render_sources(read_sources([path]), namespace, fallback, out or sys.stdout, err or sys.stderr)
