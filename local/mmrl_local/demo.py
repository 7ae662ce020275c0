"""`make demo`: one MultimodalRLJob end to end on a laptop-sized real control plane, through a HyperPod node
replacement, with a summary at the end.

The steps are the product's, not the demo's: a hostPath volume stands in for the FSx claim and holds the tiny
offline Qwen3-VL, `kubectl apply -f examples/local.yaml` submits the job, the operator builds the RayCluster and
RayJobs (installed with `helm install charts/mmrl-operator` from the image `make images` built, and run from that
image by the local kubelet under the chart's ServiceAccount, RBAC and restricted pod security), and the REAL KubeRay
operator (v1.5.1, in the cluster: its pod runs from an image of its binary) turns them into Ray pods and a submitter
Job, once the REAL Kueue (v0.17.0, in the cluster too) has admitted the RayCluster through a LocalQueue and
ClusterQueue. The nodes are run by `kubelet`, so those pods run for real with their own commands: the head's `ray start
--head`, the worker's `ray start --address=...`, the submitter's `ray job submit`, each in its pod's network, mount,
UTS and PID namespaces; Ray's job manager starts the trainer as the job's driver on the head, where it reads its
ConfigMap at /etc/mmrl, writes checkpoints to the claim at its mountPath and reports progress with the pod's
ServiceAccount token. Once the trainer has written a checkpoint, the node hosting the head goes through what
HyperPod does to a failing instance (UnschedulablePendingReplacement → NotReady → deleted → a new instance joins):
its pods' processes are killed and their namespaces removed, KubeRay recreates the head on the new node, the
operator stops the attempt through KubeRay and the next one resumes from that checkpoint. The inference pod's init
container and vLLM server run on a kubelet node too. The MLflow tracking server runs on a node kept for it, which no
Ray pod tolerates, so the fault never takes it (mlflow_server.py); every read the summary makes of it has a time
budget and, past it, says why it gave up.

`Demo` is also what tests/e2e drives, with shorter settings, on the test session's control plane.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from mmrl_api import constants as c
from mmrl_local.addons import mlflow_server
from mmrl_local.cluster import nodes, storage
from mmrl_operator.cli.bounded_mlflow import TrackingReadError
from mmrl_operator.cli.logs import NoHeadPod, read_logs
from mmrl_operator.cli.plot import READ_TIMEOUT, from_mlflow
from mmrl_operator.cli.plot import plot as plot_curves
from mmrl_operator.cli.status import tracking_lines
from mmrl_operator.core.jsonmerge import merge_patch
from mmrl_operator.core.names import raycluster_name
from mmrl_trainer import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local.yaml"
# The demo serves its adapter only if training beat the untrained model on the held-out colours (measured at step 0
# and at the end): the promotion gate of docs/serving.md, on the example job.
PROMOTION_GATE = {"spec": {"inference": {"promoteWhen": {"beatsBaseline": True}}}}
# `make demo` submits through Kueue, as HyperPod's task governance has teams do: a LocalQueue in the job's namespace
# pointing at a ClusterQueue with room for the colour job and the maze job (their Ray pods ask for CPU and memory).
DEMO_QUEUE = "hyperpod-ns-demo-localqueue"
THROUGH_KUEUE = {"spec": {"cluster": {"kueue": {"queueName": DEMO_QUEUE}}}}
DEMO_QUOTA = {"cpu": "8", "memory": "16Gi"}
MODEL_ON_CLAIM = "models/tiny-qwen3-vl"  # where examples/local.yaml's pvc:// model URI points inside the claim
ASK_TIMEOUT = 300  # seconds for the one question to vLLM (ask.py's client tries twice, 120 s each, then gives up)
# `make demo MAZE=1` (`--maze`): a second job, examples/local.yaml turned into a multi-turn maze job (a merge patch,
# so it is the same API and cluster settings), trained by the local backend's episode loop after the colour job;
# the summary prints its held-out success before -> after. The settings are the ones bench/maze_learning.py
# measured learning with (bench/notes.md, maze learning): 3x3 mazes from the top-left to the bottom-right corner,
# progress-shaped reward, 8 turns. No serving, no fault.
MAZE_JOB: dict[str, Any] = {
    "metadata": {"name": "tiny-maze"},
    "spec": {
        "algorithm": {
            "samplesPerPrompt": 8,
            "learningRate": 2.0e-2,
            "trainBatchSize": 4,
            "miniBatchSize": 4,
            "maxSteps": 30,
            "maxResponseLength": 3,
        },
        "dataset": {
            "train": "synthetic://maze?n=256",
            "validation": "synthetic://maze?n=32&seed=1",
            "reward": None,
            "environment": {
                "name": "maze",
                "maxTurns": 8,
                "params": {"size": "3", "walls": "0.2", "ends": "corners", "reward": "shaped"},
            },
        },
        "checkpoint": {"intervalSteps": 30},
        "inference": {"enabled": False},
    },
}


def say_now(line: str) -> None:
    """Print one line of the demo's progress at once, also when stdout is a pipe (`make demo | tee`)."""
    print(line, flush=True)


def job_document(overrides: dict[str, Any] | None = None, *, gate: bool = True) -> dict[str, Any]:
    """The job the demo applies: examples/local.yaml, with the promotion gate when it serves, then `overrides`."""
    doc = yaml.safe_load(EXAMPLE.read_text())
    return merge_patch(merge_patch(doc, PROMOTION_GATE) if gate else doc, overrides or {})


@dataclass
class Summary:
    name: str
    phase: str
    attempts: list[dict[str, Any]]
    resumed_from_step: int | None
    steps_sealed_by_attempt_1: list[int]
    held_out_first: float | None
    held_out_last: float | None
    adapter_host_dir: Path
    adapter_pod_dir: str
    plot: Path | None
    wall_seconds: float
    plot_source: str = ""
    tracking: dict[str, Any] = field(default_factory=dict)
    """status.tracking: the TensorBoard directory and the runs."""
    mlflow: dict[str, Any] = field(default_factory=dict)
    """The job's MLflow run, read back from the server: reward steps and points, attempts, markers."""
    fault: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    served: dict[str, Any] = field(default_factory=dict)
    """The serving step: adapter name, URL, vLLM args, the question, the answer and its latency."""
    kuberay: str = ""
    kueue: str = ""
    submissions: dict[str, str] = field(default_factory=dict)
    promoted: str = ""
    """The Promoted condition's status and message (spec.inference.promoteWhen), when the job has a gate."""
    logs: dict[int, list[str]] = field(default_factory=dict)
    """`mmrl logs NAME --attempt N` for each attempt: the trainer's log from the job's volume."""

    def render(self) -> str:
        lines = [f"job {self.name}: {self.phase} in {self.wall_seconds:.0f} s"]
        if self.kuberay:
            lines.append(
                f"  KubeRay {self.kuberay} (the real operator, in the cluster) and Ray: each attempt a real Ray job"
            )
        if self.kueue:
            lines.append(f"  {self.kueue}")
        for a in self.attempts:
            why = f", stopped by {a['failure']} fault on {a.get('node')}" if a.get("failure") else ""
            resumed = f", resumed from step {a['resumedFromStep']}" if a.get("resumedFromStep") is not None else ""
            submission = self.submissions.get(a.get("rayJob") or "")
            ray_id = f" [RayJob {a.get('rayJob')}, Ray submission {submission}]" if submission else ""
            lines.append(f"  attempt {a['index']} ({a['cause']}{resumed}): {a['result']}{why}{ray_id}")
        if self.fault:
            lines.append(f"  node fault: {self.fault}")
        if self.resumed_from_step is not None:
            lines.append(
                f"  resumed from step {self.resumed_from_step} (found by the trainer in the checkpoint directory; "
                f"attempt 1 had sealed steps {self.steps_sealed_by_attempt_1})"
            )
        if self.held_out_first is not None and self.held_out_last is not None:
            lines.append(f"  held-out reward: {self.held_out_first:.3f} -> {self.held_out_last:.3f}")
        if self.promoted:
            lines.append(f"  promotion gate: {self.promoted}")
        for n, logged in self.logs.items():
            lines.append(f"  mmrl logs {self.name} --attempt {n}: {len(logged)} lines, the last:")
            lines += [f"    {line[:160]}" for line in logged[-3:]]
        lines.append(f"  adapter: {self.adapter_pod_dir} on the claim = {self.adapter_host_dir}")
        for line in tracking_lines(self.tracking):
            lines.append(f"  tracking {line.strip()}")
        if self.mlflow.get("error"):
            lines.append(f"  MLflow run {self.mlflow.get('run_id')}: not read: {self.mlflow['error']}")
        elif self.mlflow:
            ml = self.mlflow
            lines.append(
                f"  MLflow run {ml['run_id']}: reward at steps {ml['reward_steps'][0]}..{ml['reward_steps'][-1]} "
                f"({ml['reward_points']} points: attempt 1's lost steps too), attempts {ml['attempts']}"
            )
        if self.plot:
            lines.append(f"  reward curve (mmrl plot {self.name}): {self.plot} from {self.plot_source}")
        if self.served.get("error"):
            lines.append(
                f"  serving: {self.served['model']} at {self.served['url']}; asking it failed: {self.served['error']}"
            )
        elif self.served:
            sv = self.served
            lines.append(
                f"  serving: {sv['model']} (adapter on {sv['base_model']}) at {sv['url']}; InferenceReady "
                f"{sv['ready_seconds']:.0f} s after training ended"
            )
            lines.append(f"  asked ({sv['image']}): {sv['question']!r}")
            lines.append(f"  answer: {sv['answer'].strip()!r} in {sv['answer_seconds'] * 1000:.0f} ms (OpenAI client)")
        if self.timings:
            lines.append("  timings: " + ", ".join(f"{k} {v:.0f} s" for k, v in self.timings.items()))
        return "\n".join(lines)


class Demo:
    def __init__(
        self,
        api: client.ApiClient,
        kubectl: Path,
        kubeconfig: Path,
        *,
        namespace: str,
        volume_dir: Path,
        out_dir: Path,
        overrides: dict[str, Any] | None = None,
        gate: bool = True,
        say: Callable[[str], None] = say_now,
        mlflow: bool = False,
        mlflow_node: str | None = None,
        read_timeout: float = READ_TIMEOUT,
    ) -> None:
        """`mlflow`: run an MLflow tracking server for the job, on the node kept for tracking
        (mlflow_server.create_node) or, with `mlflow_node`, pinned to that node. `read_timeout`: seconds for each of
        the summary's reads of the MLflow server, retries included."""
        self.api, self.core = api, client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.kubectl, self.kubeconfig = kubectl, kubeconfig
        self.ns, self.volume_dir, self.out_dir, self.say = namespace, volume_dir, out_dir, say
        doc = job_document(overrides, gate=gate)
        doc["metadata"]["namespace"] = namespace
        self.doc = doc
        self.name = doc["metadata"]["name"]
        self.claim = doc["spec"]["checkpoint"]["pvc"]["claimName"]
        self.mount_path = doc["spec"]["checkpoint"]["pvc"].get("mountPath", "/fsx")
        self.started = time.monotonic()
        self.timings: dict[str, float] = {}
        self.fault = ""
        self._last_line = ""
        self.served: dict[str, Any] = {}
        self.inference: Any = None
        self.submissions: dict[str, str] = {}  # RayJob name -> the Ray submission id KubeRay gave it
        self.checkpoint_at_fault = 0
        self.kueue = ""  # how Kueue admitted the job, when it goes through a queue
        self.mlflow, self.mlflow_node, self.read_timeout = mlflow, mlflow_node, read_timeout
        self.mlflow_store = volume_dir.parent / "mlflow-store"  # the server's runs, on a claim of their own

    # --- setup -----------------------------------------------------------------------------------------------

    def prepare_volume(self) -> None:
        """The shared volume the job's claim names, with the base model on it (as on FSx)."""
        storage.create_hostpath_claim(self.core, self.ns, self.claim, self.volume_dir)
        from mmrl_trainer.tiny import build_tiny_vlm

        built = build_tiny_vlm()
        target = self.volume_dir / MODEL_ON_CLAIM
        marker = target / ".built-from"
        if not (marker.exists() and marker.read_text() == str(built)):
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(built, target)
            marker.write_text(str(built))
        self.say(f"claim {self.ns}/{self.claim} -> {self.volume_dir} (base model at {MODEL_ON_CLAIM})")

    def start_mlflow(self, timeout: float = 300) -> None:
        """An MLflow tracking server in the job's namespace (mmrl_local/addons/mlflow_server.py), its store on a claim
        of its own, and the job's spec.tracking.mlflow pointing at its Service; returns once its /health answers
        (readiness probe)."""
        storage.create_hostpath_claim(self.core, self.ns, mlflow_server.STORE_CLAIM, self.mlflow_store)
        apps = client.AppsV1Api(self.api)
        for obj in mlflow_server.manifests(self.ns, self.mlflow_node):
            try:
                if obj["kind"] == "Deployment":
                    apps.create_namespaced_deployment(self.ns, obj)
                else:
                    self.core.create_namespaced_service(self.ns, obj)
            except ApiException as exc:
                if exc.status != 409:
                    raise
        uri = mlflow_server.tracking_uri(self.ns)
        self.doc["spec"]["tracking"] = {"mlflow": {"trackingUri": uri, "experiment": "mmrl-demo"}}
        deadline = time.monotonic() + timeout
        while (pod := self.mlflow_pod()) is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the MLflow server was not ready within {timeout:.0f}s: {self.mlflow_state()}")
            time.sleep(1)
        self.timings["MLflow server ready"] = time.monotonic() - self.started
        node = pod["spec"]["nodeName"]
        where = "pinned there" if self.mlflow_node else "the node kept for tracking, which no Ray pod tolerates"
        self.say(
            f"MLflow tracking server {uri} ready (pod {pod['metadata']['name']} on {node}, {where}; runs in "
            f"{self.mlflow_store} on claim {mlflow_server.STORE_CLAIM}, kept when the pod restarts)"
        )

    def mlflow_pod(self) -> dict[str, Any] | None:
        """The MLflow server's pod if one runs and is Ready now (its address changes when it is recreated)."""
        from mmrl_local.node.kubelet import running_pod

        pod = running_pod(self.core, self.ns, mlflow_server.SELECTOR)
        conditions = (pod or {}).get("status", {}).get("conditions") or []
        return pod if any(x["type"] == "Ready" and x["status"] == "True" for x in conditions) else None

    def mlflow_state(self) -> str:
        """Where the MLflow server's pods are and why none serves: what the summary says when it cannot read it."""
        pods = self.core.list_namespaced_pod(self.ns, label_selector=mlflow_server.SELECTOR).items
        if not pods:
            return "no MLflow server pod"
        states = []
        for p in pods:
            waiting = next(
                (f": {x.reason} {x.message or ''}".rstrip() for x in p.status.conditions or [] if x.status != "True"),
                "",
            )
            states.append(f"pod {p.metadata.name} {p.status.phase} on {p.spec.node_name or 'no node'}{waiting}")
        return "; ".join(states)

    def apply_job(self) -> None:
        manifest = self.out_dir / f"{self.name}.yaml"
        manifest.parent.mkdir(parents=True, exist_ok=True)
        manifest.write_text(yaml.safe_dump(self.doc, sort_keys=False))
        cmd = [str(self.kubectl), "--kubeconfig", str(self.kubeconfig), "apply", "-f", str(manifest)]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True)
        self.say(f"$ kubectl apply -f {EXAMPLE.relative_to(REPO)}\n{out.stdout.strip()}")

    # --- watching --------------------------------------------------------------------------------------------

    def job(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.PLURAL, self.name)

    def host_dir(self, pod_path: str) -> Path:
        """Where a path on the claim, as the pods see it, lives on this machine."""
        return self.volume_dir / Path(pod_path).relative_to(self.mount_path)

    def job_dir(self) -> Path | None:
        pod_dir = (self.job().get("status") or {}).get("jobDir")
        return self.host_dir(pod_dir) if pod_dir else None

    def observe(self, st: dict[str, Any]) -> None:
        """Record what KubeRay and the trainer report: Ray submission ids and the phase timings."""
        elapsed = time.monotonic() - self.started
        mark = lambda key: self.timings.setdefault(key, elapsed)  # noqa: E731
        since_fault = lambda key: self.timings.setdefault(key, elapsed - self.timings["fault"])  # noqa: E731
        for rj in self.custom.list_namespaced_custom_object("ray.io", "v1", self.ns, "rayjobs")["items"]:
            job_id = (rj.get("status") or {}).get("jobId")
            if rj["metadata"]["name"].startswith(f"{self.name}-a") and job_id:
                self.submissions.setdefault(rj["metadata"]["name"], job_id)
        clusters = self.custom.list_namespaced_custom_object("ray.io", "v1", self.ns, "rayclusters")["items"]
        head_ready = any(
            x.get("type") == "HeadPodReady" and x.get("status") == "True"
            for rc in clusters
            for x in (rc.get("status") or {}).get("conditions") or []
        )
        prog = st.get("progress") or {}
        if head_ready:
            mark("Ray head ready")
        if (prog.get("step") or 0) > 0:
            mark("first step")
        if "fault" in self.timings:
            if (st.get("attempt") or 0) >= 2 and st.get("phase") == "Running":
                since_fault("fault -> next attempt running")
            if (prog.get("attempt") or 0) >= 2 and (prog.get("step") or 0) > self.checkpoint_at_fault:
                since_fault("fault -> first new step")

    def show(self) -> dict[str, Any]:
        st = self.job().get("status") or {}
        self.observe(st)
        prog = st.get("progress") or {}
        reward = prog.get("rewardMean")
        line = (
            f"[{time.monotonic() - self.started:6.1f}s] {st.get('phase', 'Pending'):<12} attempt {st.get('attempt', 0)}"
            f"  step {prog.get('step', 0)}/{prog.get('totalSteps') or '?'}"
            f"  reward {reward if reward is not None else '-'}  {st.get('message') or ''}"
        )
        if line.split("]", 1)[1] != self._last_line:
            self._last_line = line.split("]", 1)[1]
            self.say(line)
        return st

    def wait(self, predicate: Callable[[dict[str, Any]], Any], timeout: float, what: str) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            st = self.show()
            found = predicate(st)
            if found:
                return found
            time.sleep(0.5)
        raise TimeoutError(f"{self.name}: {what} within {timeout:.0f}s; last status: {json.dumps(st)[:2000]}")

    def wait_admitted(self, timeout: float) -> None:
        """Until Kueue admitted the RayCluster's Workload (its RayCluster is created suspended until then)."""
        from mmrl_local.addons import kueue_incluster

        def admitted(_: dict[str, Any]) -> dict[str, Any] | None:
            workload = kueue_incluster.workload_of(self.custom, self.ns, raycluster_name(self.name))
            cond = kueue_incluster.workload_condition(workload, "Admitted")
            return workload if cond and cond["status"] == "True" else None

        workload = self.wait(admitted, timeout, "Kueue to admit the job")
        queue = self.doc["spec"]["cluster"]["kueue"]["queueName"]
        self.kueue = (
            f"Kueue admitted Workload {workload['metadata']['name']} from LocalQueue {queue} into ClusterQueue "
            f"{workload['status']['admission']['clusterQueue']}"
        )
        self.say(self.kueue)

    def wait_for_checkpoint(self, timeout: float) -> int:
        """The first checkpoint the trainer sealed, read from the checkpoint directory on the volume."""

        def sealed(_: dict[str, Any]) -> int | None:
            root = self.job_dir()
            latest = ckpt.latest_complete(root) if root and root.exists() else None
            return latest.step if latest else None

        step = self.wait(sealed, timeout, "no checkpoint was written")
        self.timings["first checkpoint"] = time.monotonic() - self.started
        self.checkpoint_at_fault = step
        return step

    def trainer_node(self) -> str:
        """The node of the Ray head pod: the RayJob's driver (our trainer) runs there."""
        selector = f"{c.LABEL_JOB}={self.name},{c.LABEL_COMPONENT}=ray-head"
        pods = [p for p in self.core.list_namespaced_pod(self.ns, label_selector=selector).items if p.spec.node_name]
        if not pods:
            raise RuntimeError(f"{self.name}: no scheduled Ray head pod")
        return pods[0].spec.node_name

    def replace_trainer_node(self) -> str:
        old = self.trainer_node()
        mlflow_pod = self.mlflow_pod() if self.mlflow else None
        if mlflow_pod and mlflow_pod["spec"]["nodeName"] == old:
            # Only where the server was pinned next to the head: on its own node no Ray pod can join it.
            self.say(
                f"the MLflow server (pod {mlflow_pod['metadata']['name']}) runs on {old} too and goes down with it: "
                "its runs stay on their claim, and the summary reads them only if a new pod serves them"
            )
        self.say(f"HyperPod: {old} -> {c.HEALTH_PENDING_REPLACEMENT}, NotReady, deleted; a new instance joins")
        new = nodes.replace_node(self.core, old)
        self.fault = f"{old} replaced by {new}"
        self.timings["fault"] = time.monotonic() - self.started
        return new

    def wait_done(self, timeout: float) -> str:
        phase = self.wait(
            lambda st: st.get("phase") if st.get("phase") in ("Succeeded", "Serving", "Failed") else None,
            timeout,
            "the job did not finish",
        )
        self.timings["finished"] = time.monotonic() - self.started
        return phase

    # --- results ---------------------------------------------------------------------------------------------

    def metrics(self) -> list[dict[str, Any]]:
        root = self.job_dir()
        path = root / "metrics.jsonl" if root else None
        if path is None or not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def summary(self) -> Summary:
        job = self.job()
        st = job.get("status") or {}
        records = self.metrics()
        last_attempt = max((r.get("attempt") or 0 for r in records), default=0)
        started = [r for r in records if r.get("event") == "started" and r.get("attempt") == last_attempt]
        resumed = started[-1].get("resumed_from_step") if started else None
        sealed = [r["step"] for r in records if r.get("event") == "checkpoint" and r.get("attempt") == 1]
        held_out = [(r["step"], r["eval_reward"]) for r in records if r.get("eval_reward") is not None]
        final = [r for r in records if r.get("event") == "finished" and r.get("held_out_reward") is not None]
        last = final[-1]["held_out_reward"] if final else (held_out[-1][1] if held_out else None)
        # `mmrl plot NAME --dir <the job directory on the claim>`: the curve from the TensorBoard files.
        on_claim = self.host_dir(st["jobDir"]) if st.get("jobDir") else None
        try:
            plot, curves = plot_curves(job, self.out_dir / "reward-curve.png", on_claim, self.read_timeout)
            plot_source = f"{curves.source}; attempts {[a for a, _, _ in curves.attempt_starts()]}"
        except LookupError as exc:  # TrackingReadError too: an MLflow server that did not answer in time
            plot, plot_source = None, str(exc)
            self.say(f"mmrl plot {self.name}: {exc}")
        mlflow_run = self.mlflow_run(st)
        pod_adapter = f"{st.get('jobDir', '')}/adapter"
        gate = next((c for c in st.get("conditions") or [] if c.get("type") == "Promoted"), None)
        return Summary(
            name=self.name,
            phase=st.get("phase", ""),
            attempts=st.get("attempts") or [],
            resumed_from_step=resumed,
            steps_sealed_by_attempt_1=sealed,
            held_out_first=held_out[0][1] if held_out else None,
            held_out_last=last,
            adapter_host_dir=self.host_dir(pod_adapter) if st.get("jobDir") else Path(),
            adapter_pod_dir=pod_adapter,
            plot=plot,
            plot_source=plot_source,
            tracking=st.get("tracking") or {},
            mlflow=mlflow_run,
            wall_seconds=time.monotonic() - self.started,
            fault=self.fault,
            timings=dict(self.timings),
            served=dict(self.served),
            submissions=dict(self.submissions),
            kueue=self.kueue,
            promoted=f"Promoted={gate['status']}: {gate.get('message', '')}" if gate else "",
            logs=self.attempt_logs(st.get("attempts") or []),
        )

    def mlflow_run(self, st: dict[str, Any]) -> dict[str, Any]:
        """The job's MLflow run as the server holds it, read with `mmrl plot`'s MLflow reader within
        `read_timeout`; {} without one, and the cause under "error" when the server is not there or gave no answer."""
        run_id = ((st.get("tracking") or {}).get("mlflow") or {}).get("runId")
        if not (self.mlflow and run_id):
            return {}
        pod = self.mlflow_pod()
        if pod is None:
            error = f"no MLflow server is serving ({self.mlflow_state()})"
            self.say(f"MLflow run {run_id}: {error}")
            return {"run_id": run_id, "error": error}
        try:
            curves = from_mlflow(f"http://{pod['status']['podIP']}:{mlflow_server.PORT}", run_id, self.read_timeout)
        except TrackingReadError as exc:
            self.say(str(exc))
            return {"run_id": run_id, "error": str(exc)}
        return {
            "run_id": run_id,
            "reward_steps": [s for s, _ in curves.series("reward")],
            "reward_points": len(curves.points.get("reward", [])),
            "attempts": [a for a, _, _ in curves.attempt_starts()],
            "markers": curves.markers(),
        }

    def attempt_logs(self, attempts: list[dict[str, Any]]) -> dict[int, list[str]]:
        """What `mmrl logs` prints for each attempt (through the head pod's trainer-log container)."""
        try:
            return {
                a["index"]: list(read_logs(self.api, self.ns, self.name, a["index"], timeout=self.read_timeout))
                for a in attempts
            }
        except (NoHeadPod, ApiException, urllib3.exceptions.HTTPError) as err:
            self.say(f"mmrl logs: {err}")
            return {}

    # --- serving -------------------------------------------------------------------------------------------

    def serve(self, timeout: float) -> dict[str, Any]:
        """The kubelet runs the inference pod (its init container checks the adapter, then vLLM on CPU); wait until
        the operator sees the adapter in /v1/models through the Service (InferenceReady), then ask one image
        question."""
        from mmrl_local.node.kubelet import running_pod
        from mmrl_local.toolchain.vllm_cpu import ensure
        from mmrl_trainer.synthetic import QUESTION, colour_image

        trained_at = time.monotonic()
        selector = f"{c.LABEL_JOB}={self.name},{c.LABEL_COMPONENT}=inference"
        pod = self.wait(lambda _: running_pod(self.core, self.ns, selector), timeout, "no running inference pod")
        vllm = next(x for x in pod["spec"]["containers"] if x["name"] == "vllm")
        self.say(f"inference pod {pod['metadata']['name']} ({pod['status']['podIP']}): adapter check, then")
        self.say("  " + " ".join(vllm["command"] + vllm["args"]))
        self.wait(
            lambda st: any(x["type"] == "InferenceReady" and x["status"] == "True" for x in st.get("conditions") or []),
            timeout,
            "InferenceReady never became True",
        )
        self.timings["training end -> InferenceReady"] = time.monotonic() - trained_at
        inference = (self.job().get("status") or {}).get("inference") or {}
        image = self.out_dir / "question-red.png"
        colour_image("red", random.Random(0)).save(image)
        ask = Path(__file__).with_name("ask.py")
        port = int(vllm["ports"][0]["containerPort"])
        base_url = f"http://{pod['status']['podIP']}:{port}/v1"
        cmd = [str(ensure() / "python"), str(ask), "--base-url", base_url, "--model", inference["model"]]
        self.inference = pod
        self.served = {
            "model": inference["model"],
            "base_model": inference.get("baseModel"),
            "url": inference["url"],
            "pod_ip": pod["status"]["podIP"],
            "port": port,
            "vllm_args": vllm["args"],
            "ready_seconds": time.monotonic() - trained_at,
            "image": image.name,
            "question": QUESTION,
        }
        try:
            asked = subprocess.run(
                [*cmd, "--image", str(image), QUESTION], capture_output=True, text=True, timeout=ASK_TIMEOUT
            )
        except subprocess.TimeoutExpired:
            self.served["error"] = f"no answer within {ASK_TIMEOUT}s"
        else:
            if asked.returncode == 0:
                reply = json.loads(asked.stdout)
                self.served.update(answer=reply["answer"], answer_seconds=reply["seconds"])
            else:
                self.served["error"] = f"ask.py exited {asked.returncode}: {asked.stderr.strip()[-1000:]}"
        if "error" in self.served:
            self.say(f"asking {base_url} failed: {self.served['error']}")
        return self.served

    def run(
        self, *, fault: bool = True, timeout: float = 900, before_fault: Callable[[], None] | None = None
    ) -> Summary:
        """``before_fault``: called once the checkpoint is sealed, just before the node is replaced (a test's own
        fault that must come first, e.g. the leader's crash)."""
        self.prepare_volume()
        if self.mlflow:
            self.start_mlflow()
        self.apply_job()
        if self.doc["spec"]["cluster"].get("kueue"):
            self.wait_admitted(timeout)
        if fault:
            step = self.wait_for_checkpoint(timeout)
            self.say(f"checkpoint step {step} sealed on the volume")
            if before_fault is not None:
                before_fault()
            self.replace_trainer_node()
        if self.wait_done(timeout) == "Serving" and not self.doc["spec"]["inference"].get("server"):
            self.serve(timeout)  # a Deployment of the job's own (a shared server's jobs: demo_shared.py)
        return self.summary()


# --- `python -m mmrl_local.demo` ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmrl_local.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "demo-out")
    parser.add_argument("--no-fault", action="store_true", help="skip the node replacement")
    parser.add_argument("--keep", action="store_true", help="leave the control plane up until Ctrl-C")
    parser.add_argument("--maze", action="store_true", help="then train a second job on the tiny maze (MAZE_JOB)")
    parser.add_argument(
        "--shared", action="store_true", help="then shared serving: two jobs, one ModelServer, an alias (demo_shared)"
    )
    args = parser.parse_args(argv)
    if isinstance(sys.stdout, io.TextIOWrapper):
        sys.stdout.reconfigure(line_buffering=True)  # each line as it is printed, also into a pipe
    os.environ.setdefault("PYTHONUNBUFFERED", "1")  # and the same for the processes the demo starts

    from mmrl_api import constants
    from mmrl_local.addons import operator_release
    from mmrl_local.addons.kuberay_incluster import NAMESPACE as KUBERAY_NAMESPACE
    from mmrl_local.addons.kuberay_incluster import KubeRayInCluster
    from mmrl_local.addons.kueue_incluster import NAMESPACE as KUEUE_NAMESPACE
    from mmrl_local.addons.kueue_incluster import KueueInCluster, queues
    from mmrl_local.cluster import crds
    from mmrl_local.cluster.controlplane import ControlPlane
    from mmrl_local.common.helm import Helm
    from mmrl_local.node.kubelet import Kubelet
    from mmrl_local.toolchain import build, images_build, kueue_build

    t0 = time.monotonic()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = build.cache_root() / "run" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    binaries = build.build(verbose=False)
    build.build_kuberay()
    image = images_build.build_operator(verbose=False)  # `make demo` built it first (make images)
    print(f"control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok ({binaries.kube_version})")
    (work / "cluster").mkdir(parents=True)
    with ControlPlane(binaries=binaries, workdir=work / "cluster") as cp:
        if cp.pod_network is None:
            print(f"the demo runs its pods for real and needs pod network namespaces: {cp.network_note}")
            return 2
        control_plane_up = time.monotonic() - t0
        api = cp.api_client()
        core = client.CoreV1Api(api)
        with (
            Kubelet(api, cp.pod_network, out / "pods") as kubelet,
            KubeRayInCluster(api, kubelet) as kuberay_pod,
            KueueInCluster(api, kubelet, scoped=False) as kueue,
        ):
            # The operator as a platform team installs it: the chart (with its CRD and trainer-status policy) and
            # the image `make images` built, into a namespace that enforces the restricted Pod Security Standard.
            system = "mmrl-system"
            core.create_namespace({"metadata": {"name": system, "labels": operator_release.RESTRICTED}})
            operator_node = nodes.create_dedicated_node(core, operator_release.ROLE)
            release = operator_release.Release(Helm(binaries["helm"], work / "helm", cp.kubeconfig), system, "mmrl")
            release.install(operator_release.values(image))
            crds.wait_established(api, [constants.CRD_NAME])
            (operator_pod,) = release.wait_ready(core, 1)
            print(
                f"operator runs from image {image.image}@{image.digest}, installed by Helm (release {release.name} "
                f"in {system}; pod {operator_pod.metadata.name} on {operator_node}, "
                f"ServiceAccount {operator_pod.spec.service_account_name})"
            )
            head = nodes.create_cpu_node(core, kubelet=True)
            gpus = nodes.create_gpu_nodes(core, 2, kubelet=True)
            tracking = mlflow_server.create_node(core)
            print(
                f"HyperPod nodes run by the local kubelet: {head} (controller), {', '.join(gpus)} (ml.p5.48xlarge), "
                f"{tracking} (kept for the MLflow server: no Ray pod tolerates its taint {mlflow_server.ROLE_LABEL})"
            )
            print(
                "images: the operator, KubeRay and Kueue run from their built images; the trainer, vLLM and MLflow "
                "pods run from local environments that stand in for their images (mmrl_local/node/images.py)"
            )
            assert kuberay_pod.image is not None
            print(
                f"KubeRay {build.KUBERAY_VERSION} runs in the cluster (namespace {KUBERAY_NAMESPACE}, from image "
                f"{kuberay_pod.image.image}@{kuberay_pod.image.digest}, without --use-kubernetes-proxy: it reaches "
                f"each Ray head by its Service's name); pods and logs in {out / 'pods'}"
            )
            assert kueue.image is not None
            kueue.apply(queues(DEMO_QUEUE, "default", DEMO_QUOTA, preemption=False))
            print(
                f"Kueue {kueue_build.KUEUE_VERSION} runs in the cluster (namespace {KUEUE_NAMESPACE}, from image "
                f"{kueue.image.image}@{kueue.image.digest}, its CRDs and webhooks installed); LocalQueue "
                f"default/{DEMO_QUEUE} -> ClusterQueue {DEMO_QUEUE} "
                f"({', '.join(f'{k} {v}' for k, v in DEMO_QUOTA.items())})"
            )

            def make_demo(overrides: dict[str, Any], job_out: Path, **settings: Any) -> Demo:
                """A job of the demo, on this cluster, through the demo's LocalQueue."""
                return Demo(
                    api,
                    binaries["kubectl"],
                    cp.kubeconfig,
                    namespace="default",
                    volume_dir=work / "fsx",
                    out_dir=job_out,
                    overrides=merge_patch(overrides, THROUGH_KUEUE),
                    **settings,
                )

            demo = make_demo({}, out, mlflow=True)
            demo.timings["control plane up (from the start)"] = control_plane_up
            summary = demo.run(fault=not args.no_fault)
            summary.wall_seconds = time.monotonic() - t0
            summary.kuberay = build.KUBERAY_VERSION
            print("\n" + summary.render())
            (out / "summary.json").write_text(json.dumps(summary.__dict__, default=str, indent=2))
            if args.maze:
                maze = make_demo(MAZE_JOB, out / "maze", gate=False)
                maze_phase = maze.run(fault=False).phase
                print("\n" + maze_success_line(maze.name, maze_phase, maze.metrics()))
            shared = None
            if args.shared:
                from mmrl_local.demo_shared import SharedDemo

                shared = SharedDemo(
                    api,
                    binaries["kubectl"],
                    cp.kubeconfig,
                    make_demo,
                    namespace="default",
                    out_dir=out / "shared",
                    say=say_now,
                ).run()
                print("\n" + shared.render())
                (out / "shared-summary.json").write_text(json.dumps(shared.__dict__, default=str, indent=2))
            if args.keep:
                print(f"\nexport KUBECONFIG={cp.kubeconfig}; Ctrl-C to stop")
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
    ok = summary.phase in ("Succeeded", "Serving") and (not args.maze or maze_phase == "Succeeded")
    ok = ok and (shared is None or shared.ok)
    return 0 if ok else 1


def maze_success_line(name: str, phase: str, records: list[dict[str, Any]]) -> str:
    """The maze job's held-out success rate before training (the trainer's `baseline`) and after (`finished`)."""
    found = {r.get("event"): r.get("eval_success") for r in records if r.get("event") in ("baseline", "finished")}
    shown = lambda v: "-" if v is None else f"{v:.3f}"  # noqa: E731
    return (
        f"job {name}: {phase}; held-out maze success {shown(found.get('baseline'))} -> {shown(found.get('finished'))}"
        " (untrained -> trained, same held-out mazes)"
    )


if __name__ == "__main__":
    sys.exit(main())
