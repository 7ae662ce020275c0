"""`mmrl status NAME`: a job's phase, conditions, attempts, progress and recent events, for humans."""

from __future__ import annotations

import sys
from typing import Any, TextIO

from mmrl_api import constants as c
from mmrl_operator.cli.cluster import connect
from mmrl_operator.cli.kubeconfig import ClusterOptions
from mmrl_operator.cli.output import formatted


def render_status(job: dict[str, Any], events: list[dict[str, Any]]) -> str:
    meta, st = job["metadata"], job.get("status") or {}
    prog = st.get("progress") or {}
    lines = [
        f"{meta['namespace']}/{meta['name']}  phase={st.get('phase', 'Pending')}  attempt={st.get('attempt', 0)}",
        f"  message: {st.get('message') or '-'}",
        f"  progress: step {prog.get('step', 0)}/{prog.get('totalSteps') or '?'}  reward {prog.get('rewardMean', '-')}"
        f"  heartbeat {prog.get('heartbeat') or '-'}",
    ]
    episodes = prog.get("episodes")
    if episodes:
        lines.append(
            f"  episodes: success {episodes.get('successRate', '-')}  turns {episodes.get('turns', '-')}"
            f"  tokens {episodes.get('tokens', '-')}"
        )
    evaluation = (st.get("adapter") or {}).get("evaluation")
    if evaluation:
        gate = next((x for x in st.get("conditions") or [] if x.get("type") == "Promoted"), None)
        verdict = f"  promoted: {gate['status']}" if gate else ""
        lines.append(
            f"  held-out reward: adapter {evaluation.get('heldOutReward', '-')} (step {evaluation.get('step', '?')}),"
            f" base model {evaluation.get('baselineReward', '-')}{verdict}"
        )
    lines.extend(tracking_lines(st.get("tracking") or {}))
    ckpt = prog.get("lastCheckpoint")
    if ckpt:
        lines.append(f"  last checkpoint: step {ckpt['step']} at {ckpt['path']}")
    footprint = st.get("checkpointFootprint")
    if footprint:
        lines.append(f"  checkpoint storage (expected): {footprint.get('summary', '-')}")
    memory = st.get("memoryPlan")
    if memory:
        lines.append(f"  GPU memory (expected, per GPU): {memory.get('summary', '-')}")
    restarts = st.get("restarts") or {}
    spec_res = (job.get("spec") or {}).get("resilience") or {}
    lines.append(
        f"  restarts: application {restarts.get('application', 0)}/{spec_res.get('maxRestarts', '?')}, "
        f"infra {restarts.get('infra', 0)}/{spec_res.get('maxInfraRestarts', '?')}"
    )
    lines.append("  conditions:")
    # Several conditions usually carry the job's message; print each distinct message once.
    shown = {st.get("message") or ""}
    for cond in st.get("conditions") or []:
        message = cond.get("message", "")
        text = "" if message in shown else message
        shown.add(message)
        lines.append(f"    {cond['type']:<13} {cond['status']:<7} {cond.get('reason', ''):<24} {text}".rstrip())
    lines.append("  attempts:")
    pf = st.get("preflight")
    if pf:
        lines.append(
            f"    #0 {pf.get('rayJob') or '-'} preflight -> {pf.get('phase')} {pf.get('message') or ''}".rstrip()
        )
    for a in st.get("attempts") or []:
        resumed = f" resumed@{a['resumedFromStep']}" if a.get("resumedFromStep") is not None else ""
        why = f" [{a['failure']}{' on ' + a['node'] if a.get('node') else ''}]" if a.get("failure") else ""
        lines.append(
            f"    #{a['index']} {a['rayJob']} {a['cause']}{resumed} -> {a['result']}{why} {a.get('message') or ''}"
        )
    lines.append("  events:")
    for e in events[-10:]:
        lines.append(f"    {e.get('type', ''):<8} {e.get('reason', ''):<22} {e.get('message', '')}")
    return "\n".join(lines)


def tracking_lines(tracking: dict[str, Any]) -> list[str]:
    """Where the training curves are: the TensorBoard directory and each run (its URL, or its id offline)."""
    lines = []
    if tracking.get("tensorboard"):
        lines.append(f"  tensorboard: {tracking['tensorboard']}")
    for sink in ("mlflow", "wandb"):
        run = tracking.get(sink)
        if run:
            lines.append(f"  {sink}: {run.get('url') or 'run ' + run.get('runId', '?') + ' (offline)'}")
    return lines


def show_status(name: str, opts: ClusterOptions, output: str | None = None, out: TextIO | None = None) -> int:
    """Print the job for humans (with its recent events), or as the apiserver returns it with `output` yaml|json."""
    from kubernetes import client

    api, namespace = connect(opts)
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name)
    text = formatted(job, output) if output else render_status(job, recent_events(api, namespace, name, c.KIND)) + "\n"
    (out or sys.stdout).write(text)
    return 0


def recent_events(api, namespace: str, name: str, kind: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The Events about one object, oldest first."""
    from kubernetes import client

    events = client.CoreV1Api(api).list_namespaced_event(
        namespace, field_selector=f"involvedObject.name={name},involvedObject.kind={kind}"
    )
    return sorted((api.sanitize_for_serialization(e) for e in events.items), key=lambda e: e.get("lastTimestamp") or "")
