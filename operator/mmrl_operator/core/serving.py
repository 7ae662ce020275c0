"""After training: serve the adapter (phase Serving) or end at Succeeded. Pure, like `core.decide.decide`.

The adapter is checked before anything is created: the rules of `mmrl_api.adapter_rules` run on what the
trainer reported in `status.adapter`, so an adapter vLLM cannot serve fails the job with the rule named and no
Deployment is made. `InferenceReady` is True only when the Deployment is Available at its current generation
with every replica updated AND the operator has seen the adapter's name in `/v1/models` through the Service:
a pod that is Ready is not yet proof that the adapter (rather than only the base model) answers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from mmrl_api import MultimodalRLJob, adapter_rules
from mmrl_api.status import AdapterStatus, JobStatus
from mmrl_operator.core.builders import inference as build
from mmrl_operator.core.builders.common import SPEC_HASH_ANNOTATION
from mmrl_operator.core.builders.model_server import server_child_name
from mmrl_operator.core.names import inference_name
from mmrl_operator.core.observed import ServingObserved
from mmrl_operator.core.promotion import gate_verdict
from mmrl_operator.core.shape import dig, integer, mapping, records, text
from mmrl_operator.core.shared_serving import job_view

PROBE_INTERVAL_SECONDS = 30.0  # while serving, /v1/models is checked again this often (and on every change)
WAIT_INTERVAL_SECONDS = 10.0  # while a roll-out or the adapter listing is pending


@dataclass
class ServingDecision:
    phase: str
    message: str
    reason: str
    apply: list[dict[str, Any]] = field(default_factory=list)
    delete: list[tuple[str, str, str]] = field(default_factory=list)  # (apiVersion, kind, name)
    events: list[tuple[str, str, str]] = field(default_factory=list)  # (type, reason, message)
    inference: dict[str, Any] | None = None
    ready: tuple[bool | None, str, str] | None = None  # InferenceReady (status, reason, message)
    promoted: tuple[bool, str] | None = None  # the promotion gate's verdict; None without a gate
    requeue_after: float | None = None


def adapter_of(job: MultimodalRLJob, status: JobStatus) -> tuple[build.Adapter, AdapterStatus | None]:
    reported = status.adapter
    if reported is None:
        return build.default_adapter(job), None
    rank = reported.max_lora_rank or adapter_rules.smallest_max_lora_rank(reported.rank)
    return build.Adapter(reported.path, rank, reported.base_model or build.model_path(job), reported.sha256), reported


def adapter_violations(job: MultimodalRLJob, reported: AdapterStatus | None) -> list[adapter_rules.Violation]:
    if reported is None:
        return []  # nothing reported: the init container checks the files before vLLM starts
    cfg = dict(reported.config) or {
        "r": reported.rank,
        "lora_alpha": reported.alpha,
        "target_modules": reported.target_modules,
    }
    cfg.setdefault("base_model_name_or_path", reported.base_model or None)
    found = adapter_rules.config_violations(cfg, base_model=build.model_path(job))
    if not found and reported.rank != adapter_rules.max_rank(cfg):
        found.append(adapter_rules.Violation("rank", "r", f"reported rank {reported.rank} != config rank"))
    return found


def deployment_state(dep: dict[str, Any] | None, replicas: int) -> tuple[bool, str]:
    """(available at the current generation with every replica updated, why not)."""
    if dep is None:
        return False, "creating the vLLM Deployment"
    st = mapping(dep.get("status"))
    if integer(st.get("observedGeneration")) < integer(dig(dep, "metadata", "generation")):
        return False, "the Deployment controller has not seen the latest spec yet"
    conditions = records(st.get("conditions"))
    for cond in conditions:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return False, f"roll-out stalled: {text(cond.get('message'))}"
    updated, available = integer(st.get("updatedReplicas")), integer(st.get("availableReplicas"))
    if updated < replicas or available < replicas or integer(st.get("replicas")) > replicas:
        return False, f"rolling out: {updated}/{replicas} updated, {available} available"
    avail = next((x for x in conditions if x.get("type") == "Available"), None)
    if not avail or avail.get("status") != "True":
        return False, "the Deployment is not Available"
    return True, ""


def out_of_date(current: dict[str, Any] | None, desired: dict[str, Any]) -> bool:
    """Whether a child must be written: it is missing, was built from another spec (its digest differs), or its
    replicas were changed by hand (set back, as every pass used to by applying it). Other edits by hand show as a
    Deployment's moved generation (`ServingObserved.deployment_edited`)."""
    if current is None:
        return True
    if dig(current, "metadata", "annotations", SPEC_HASH_ANNOTATION) != desired["metadata"]["annotations"].get(
        SPEC_HASH_ANNOTATION
    ):
        return True
    return "replicas" in desired["spec"] and dig(current, "spec", "replicas") != desired["spec"]["replicas"]


def adapter_listed(models: Any, name: str, base: str) -> bool:
    """Whether vLLM's /v1/models `data` lists the adapter under the base model; any other shape is "not listed"."""
    if not isinstance(models, list):
        return False
    return any(isinstance(m, dict) and m.get("id") == name and m.get("parent") in (base, None) for m in models)


def children_to_remove(job: MultimodalRLJob, obs: ServingObserved) -> list[tuple[str, str, str]]:
    name = inference_name(job.name)
    out = []
    if obs.deployment is not None:
        out.append(("apps/v1", "Deployment", name))
    if obs.service is not None:
        out.append(("v1", "Service", name))
    return out


def decide_serving(job: MultimodalRLJob, status: JobStatus, obs: ServingObserved) -> ServingDecision:
    """Called once training succeeded (phase Succeeded or Serving)."""
    inf = job.spec.inference
    done = status.message or "training finished"
    if not inf.enabled:
        d = ServingDecision("Succeeded", done, "Succeeded", delete=children_to_remove(job, obs))
        d.ready = (False, "Disabled", "spec.inference.enabled is false")
        return d
    verdict = gate_verdict(job, status)
    if verdict is not None and not verdict[0]:
        d = ServingDecision("Succeeded", verdict[1], "NotPromoted", delete=children_to_remove(job, obs))
        d.ready, d.promoted = (False, "NotPromoted", verdict[1]), verdict
        return d
    adapter, reported = adapter_of(job, status)
    broken = adapter_violations(job, reported)
    if broken or obs.check_failure:
        why = "; ".join(str(v) for v in broken) or obs.check_failure or ""
        msg = f"the adapter at {adapter.path} cannot be served by vLLM: {why}"
        d = ServingDecision("Failed", msg, "InvalidAdapter", delete=children_to_remove(job, obs))
        d.events.append(("Warning", "InvalidAdapter", msg))
        d.ready = (False, "InvalidAdapter", msg)
        return d
    if inf.server:
        return decide_shared_serving(job, status, obs, verdict, adapter)
    name, base = build.adapter_name(job), build.served_base_name(job.spec.model.name)
    deployment, service = build.build_deployment(job, adapter), build.build_service(job)
    apply = [deployment] if obs.deployment_edited or out_of_date(obs.deployment, deployment) else []
    apply += [service] if out_of_date(obs.service, service) else []
    d = ServingDecision("Serving", "", "Serving", apply=apply)
    d.promoted = verdict
    if obs.deployment is None:
        d.events.append(
            ("Normal", "InferenceCreated", f"serving adapter {name} on {base} as {inference_name(job.name)}")
        )
    available, why = deployment_state(obs.deployment, inf.replicas)
    listed = adapter_listed(obs.models, name, base)
    if inf.replicas == 0:
        ready = (False, "ScaledToZero", "spec.inference.replicas is 0")
    elif not available:
        reason, text = obs.pod_problem or ("Deploying", why)
        ready = (False, reason, text)
    elif not listed:
        detail = f" ({obs.probe_error})" if obs.probe_error else ""
        ready = (False, "AdapterNotListed", f"/v1/models does not list adapter {name} yet{detail}")
    else:
        ready = (True, "AdapterServed", f"adapter {name} answers at {build.service_url(job)}")
    d.ready = ready
    d.message = ready[2]
    d.inference = {
        "service": inference_name(job.name),
        "url": build.service_url(job),
        "ready": ready[0] is True,
        "model": name,
        "baseModel": base,
    }
    was_ready = bool(status.inference and status.inference.ready)
    if was_ready and ready[0] is not True:
        d.events.append(("Warning", "InferenceNotReady", ready[2]))
    elif ready[0] is True and not was_ready:
        d.events.append(("Normal", "InferenceReady", ready[2]))
    d.requeue_after = PROBE_INTERVAL_SECONDS if ready[0] is True or inf.replicas == 0 else WAIT_INTERVAL_SECONDS
    return d


def decide_shared_serving(
    job: MultimodalRLJob,
    status: JobStatus,
    obs: ServingObserved,
    verdict: tuple[bool, str] | None,
    adapter: build.Adapter,
) -> ServingDecision:
    """Served from a ModelServer: no Deployment of the job's own (one left from before is removed). The server's
    pass loads the adapter (each replica's gateway copies the files and checks the copy against the digest the
    trainer reported, in the operator's image), and its status says how far it got (`shared_serving.job_view`)."""
    server_name = job.spec.inference.server or ""
    name, base = build.adapter_name(job), build.served_base_name(job.spec.model.name)
    d = ServingDecision("Serving", "", "Serving", delete=children_to_remove(job, obs))
    ready = job_view(job, obs.server)
    d.message = ready[2]
    d.ready, d.promoted = ready, verdict
    server_status = mapping((obs.server or {}).get("status"))
    d.inference = {
        "service": text(server_status.get("service")) or server_child_name(server_name),
        "url": text(server_status.get("url"))
        or f"http://{server_child_name(server_name)}.{job.namespace}.svc:{build.PORT}/v1",
        "ready": ready[0],
        "model": name,
        "baseModel": base,
        "server": server_name,
    }
    alias = job.spec.inference.alias
    if alias and any(a.get("name") == alias and a.get("job") == job.name for a in server_status.get("aliases") or []):
        d.inference["alias"] = alias
    was_ready = bool(status.inference and status.inference.ready)
    if was_ready and not ready[0]:
        d.events.append(("Warning", "InferenceNotReady", ready[2]))
    elif ready[0] and not was_ready:
        d.events.append(("Normal", "InferenceReady", ready[2]))
    d.requeue_after = PROBE_INTERVAL_SECONDS if ready[0] else WAIT_INTERVAL_SECONDS
    return d
