"""`mmrl render`: every object the operator would create for a job file, without a cluster.

The objects come from `core.decide.decide` itself, run over three imagined moments of the job's life rather than
from a second list of builders: a new job (ServiceAccount, ConfigMap, RayCluster, Role, RoleBinding), the same job
once its RayCluster reports ready (the first RayJob), and the job after training succeeded (the inference
Deployment and Service, unless `spec.inference.enabled` is false). So what render prints is what the controller
applies, and a builder added to the decision shows up here without touching this module.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import yaml

from mmrl_api import MultimodalRLJob, validate_manifest
from mmrl_api.constants import KIND
from mmrl_api.job import ObjectMeta
from mmrl_api.memory_plan import spec_plan
from mmrl_api.status import JobStatus
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


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the trainer config, scripts) as literal blocks, readable as the pods will see them."""


def _text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _text)


def render_yaml(objects: list[dict[str, Any]]) -> str:
    return yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, explicit_start=True)


def render_file(path: str, namespace: str | None, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Print the objects of every MultimodalRLJob in `path` as one multi-document YAML stream. Exit status: 1 when
    the file cannot be read or a job does not validate (errors name the field, as `mmrl validate` does)."""
    out, err = out or sys.stdout, err or sys.stderr
    try:
        docs = [d for d in yaml.safe_load_all(Path(path).read_text()) if d is not None]
    except (OSError, yaml.YAMLError) as exc:
        print(f"{path}: cannot read: {exc}", file=err)
        return 1
    jobs = [d for d in docs if not isinstance(d, dict) or d.get("kind", KIND) == KIND]
    if not jobs:
        print(f"{path}: no {KIND} documents", file=err)
        return 1
    objects: list[dict[str, Any]] = []
    notes: list[str] = []
    for doc in jobs:
        job, errors = validate_manifest(doc)
        for e in errors:
            print(f"{path}: {e.path}: {e.message}", file=err)
        if job is None:
            return 1  # nothing is printed for a file the apiserver would refuse in part
        if job.spec.suspend:
            print(f"{path}: spec.suspend is true: the operator creates these once it is false", file=err)
        plan = spec_plan(job.spec)
        if plan is not None:  # as YAML comments, so the output still applies with `kubectl apply -f -`
            notes += [f"# {job.name}: {line}" for line in plan.lines()]
        try:
            objects += render_objects(as_submitted(job, namespace))
        except RenderError as exc:
            print(f"{path}: {exc}", file=err)
            return 1
    out.write("".join(f"{line}\n" for line in notes) + render_yaml(objects))
    return 0
