"""The `make demo` path, end to end with shorter settings: examples/local.yaml through kubectl, the operator as the
chart installs it from its image (2 replicas; the leader's pod crashes mid-training and the standby takes over),
the real KubeRay operator and real Ray (the local kubelet runs the Ray head, worker and submitter pods with their
own commands, and Ray's job manager starts the trainer as the job's driver on the head), a HyperPod node
replacement once the trainer has sealed a checkpoint (the node's pods die with it, KubeRay recreates the head), a
resume from that checkpoint, and vLLM serving the adapter from the inference pod's own network namespace. Every
stage is asserted from cluster state, from Ray's own job list and from the files the trainer wrote on the claim."""

from __future__ import annotations

import ipaddress
import json
import os
import re
import threading
import urllib.request
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_local.addons import mlflow_server
from mmrl_local.addons.operator_release import Release
from mmrl_local.demo import Demo
from mmrl_local.network import podnet
from mmrl_operator.cli.chat import ask
from mmrl_operator.cli.logs import read_logs
from mmrl_operator.cli.plot import from_tensorboard
from mmrl_trainer.adapter import check_adapter_dir, sha256_file
from mmrl_trainer.synthetic import COLOURS, QUESTION
from tests.support.demo import make_demo
from tests.support.operator import Jobs, wait_until
from tests.support.ray_dashboard import ray_jobs

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

SHORT = {"spec": {"algorithm": {"maxSteps": 12}, "checkpoint": {"intervalSteps": 4}}}


def demo(control_plane, api_client, namespace: str, tmp_path: Path, overrides: dict, **kwargs) -> Demo:
    return make_demo(control_plane, api_client, namespace, tmp_path, overrides=overrides, **kwargs)


def test_job_trains_survives_a_node_replacement_and_a_leader_crash_resumes_and_serves_its_adapter_with_vllm(
    control_plane, api_client, namespace, real_ray, hyperpod_nodes, operator_pods, tmp_path
) -> None:
    hyperpod_nodes.cpu(kubelet=True)
    hyperpod_nodes.gpu(2, kubelet=True)
    tracking = mlflow_server.create_node(hyperpod_nodes.core)  # as `make demo` does: the MLflow server's own node
    hyperpod_nodes.names.append(tracking)
    d = demo(control_plane, api_client, namespace, tmp_path, SHORT, mlflow=True)
    crash = LeaderCrash(operator_pods, real_ray.kubelet, api_client, namespace, d.name).start()
    # The crash comes before the node fault, never in the middle of the leader's handling of it: a leader killed
    # between deleting the attempt's RayJob and recording why finds it "disappeared" (Failed, not Stopped).
    summary = d.run(fault=True, timeout=900, before_fault=crash.join)
    crash.check()
    hyperpod_nodes.names.append(summary.fault.rsplit(" ", 1)[-1])  # the new instance, for cleanup
    # The fault took the Ray head's node, never the MLflow server's, which still serves from its own node.
    server = d.mlflow_pod()
    assert server is not None and server["spec"]["nodeName"] == tracking
    assert not summary.fault.startswith(tracking) and "error" not in summary.mlflow, summary.mlflow
    assert_trained(d, api_client, namespace, summary)
    assert_ran_on_real_ray(d, api_client, namespace, summary)
    assert_served(d, api_client, namespace, summary, tmp_path, real_ray, control_plane.pod_network)


class LeaderCrash:
    """Crash the leading operator pod mid-training (at step ``AT_STEP``, before the node fault's checkpoint), as a
    lost node would: the standby pod must take the job over after the Lease runs out."""

    AT_STEP = 2

    def __init__(self, release: Release, kubelet, api_client, namespace: str, job: str) -> None:
        self.release, self.kubelet, self.api, self.job = release, kubelet, api_client, job
        self.core, self.jobs = client.CoreV1Api(api_client), Jobs(api_client, namespace)
        self.leader: str | None = None
        self.log: Path | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="leader-crash", daemon=True)

    def start(self) -> LeaderCrash:
        self._thread.start()
        return self

    def _step(self) -> int:
        try:
            return int((self.jobs.status(self.job).get("progress") or {}).get("step") or 0)
        except client.ApiException:
            return 0  # not created yet

    def _run(self) -> None:
        try:
            wait_until(lambda: self._step() >= self.AT_STEP, 600, what=f"step {self.AT_STEP}")
            self.leader = self.release.leader(self.api)
            (pod,) = [p for p in self.release.ready_pods(self.core) if p.metadata.name == self.leader]
            self.log = self.release.crash(self.kubelet, self.core, pod)
        except BaseException as err:  # reported by check()
            self.error = err

    def join(self) -> None:
        """Until the leader has been crashed (or crashing it failed: check() says so)."""
        self._thread.join(600)

    def check(self) -> None:
        self._thread.join(30)
        assert self.error is None, f"crashing the leader failed: {self.error!r}"
        assert self.leader is not None and self.log is not None, "the leader was never crashed"
        assert self.release.leader(self.api) not in (None, self.leader), "the standby did not take over"
        assert "released the lease" not in self.log.read_text()


def assert_trained(d: Demo, api_client, namespace: str, summary) -> None:
    status = Jobs(api_client, namespace).status(d.name)
    assert status["phase"] == "Serving", status.get("message")
    first, second = status["attempts"]
    assert (first["cause"], first["result"], first["failure"]) == ("initial", "Stopped", "infra")
    assert (second["cause"], second["result"]) == ("infra", "Succeeded")
    assert status["restarts"] == {"infra": 1}
    # The trainer of attempt 2 found the newest checkpoint attempt 1 sealed, and that is what status records.
    assert summary.steps_sealed_by_attempt_1 and summary.resumed_from_step == max(summary.steps_sealed_by_attempt_1)
    assert summary.resumed_from_step > 0 and second["resumedFromStep"] == summary.resumed_from_step
    assert status["progress"]["step"] == 12 and status["progress"]["attempt"] == 2
    assert summary.held_out_first is not None and summary.held_out_last is not None
    assert summary.held_out_last - summary.held_out_first >= 0.15, (summary.held_out_first, summary.held_out_last)
    # The trainer reported what the promotion gate reads (the demo gates on beatsBaseline), and the gate passed.
    evaluation, lineage = status["adapter"]["evaluation"], status["adapter"]["lineage"]
    assert (evaluation["baselineReward"], evaluation["heldOutReward"]) == (
        summary.held_out_first,
        summary.held_out_last,
    )
    assert evaluation["step"] == lineage["checkpointStep"] == 12
    assert set(lineage["datasets"]) == {"train", "validation"}
    promoted = next(c for c in status["conditions"] if c["type"] == "Promoted")
    assert promoted["status"] == "True" and promoted["reason"] == "GatePassed", promoted["message"]
    assert "promotion gate: Promoted=True" in summary.render()
    # `mmrl logs` for both attempts, through the head pod's trainer-log container (pods/log): attempt 1's log
    # outlived the node it trained on, because the trainer wrote it to the job's volume.
    first, second = summary.logs[1], summary.logs[2]
    assert any("backend=local" in line for line in first) and any("step" in line for line in first)
    assert any(f"resuming from step {summary.resumed_from_step}" in line for line in second)
    assert list(read_logs(api_client, namespace, d.name, 2)) == second
    adapter = check_adapter_dir(summary.adapter_host_dir)
    assert adapter.rank == 8 and adapter.base_model == "/ckpt/models/tiny-qwen3-vl"  # the path every pod mounts
    # Tracking: TensorBoard files on the job's volume, one run continued by attempt 2 from its checkpoint, and
    # `mmrl plot` drew the curve from them with attempt 2's start marked.
    assert status["tracking"]["tensorboard"] == f"{status['jobDir']}/tracking/tensorboard"
    assert summary.plot is not None and summary.plot.stat().st_size > 0
    assert "TensorBoard files" in summary.plot_source
    # Attempt 1's trainer may have started twice: when the node fault takes the Ray head while no replica leads,
    # KubeRay's submitter resubmits the job to the new head inside attempt 1 (core/attempts.py, track_running).
    runs = [int(n) for n in re.search(r"attempts \[([\d, ]*)\]", summary.plot_source).group(1).split(",")]
    assert list(dict.fromkeys(runs)) == [1, 2], summary.plot_source
    curves = from_tensorboard(d.host_dir(status["tracking"]["tensorboard"]))
    assert curves.markers() == [
        (float(summary.resumed_from_step), f"attempt 2: resumed from step {summary.resumed_from_step}")
    ]
    assert [s for s, _ in curves.series("reward")] == list(range(1, 13))
    # The same run on a real MLflow server in the job's namespace (its own pod), reached by the trainer through the
    # Service name from its pod's network namespace: every step, both attempts, the same curve as TensorBoard's.
    run = status["tracking"]["mlflow"]
    assert run["url"] == f"http://mlflow.{namespace}.svc:5000/#/experiments/{run['experimentId']}/runs/{run['runId']}"
    assert summary.mlflow["run_id"] == run["runId"] and summary.mlflow["attempts"] == [1, 2]
    assert summary.mlflow["reward_steps"] == list(range(1, 13))
    assert summary.mlflow["reward_points"] >= 12 and summary.mlflow["markers"] == curves.markers()
    assert f"MLflow run {run['runId']}" in summary.render()
    events = Jobs(api_client, namespace).events(d.name)
    assert events.count("AttemptStarted") == 2 and "NodeFault" in events and "Succeeded" in events


def assert_ran_on_real_ray(d: Demo, api_client, namespace: str, summary) -> None:
    """Both attempts were Ray jobs KubeRay submitted; the one that trained to the end is SUCCEEDED in Ray's list
    on the head KubeRay recreated, and nothing is left running there."""
    status = Jobs(api_client, namespace).status(d.name)
    first, second = (a["rayJob"] for a in status["attempts"])
    assert set(summary.submissions) == {first, second}, summary.submissions
    assert all(sid.startswith(f"{rj}-") for rj, sid in summary.submissions.items())  # KubeRay's `<rayjob>-<5>`
    listed = ray_jobs(api_client, namespace, d.name)
    assert listed.get(summary.submissions[second]) == "SUCCEEDED", listed
    assert not [sid for sid, st in listed.items() if st in ("PENDING", "RUNNING")], listed
    assert {"Ray head ready", "first step", "fault -> next attempt running", "fault -> first new step"} <= set(
        summary.timings
    ), summary.timings


def assert_served(d: Demo, api_client, namespace: str, summary, tmp_path: Path, real_ray, network) -> None:
    """Real vLLM (CPU build) ran the Deployment's own command and args against the trained adapter, started by the
    kubelet in the inference pod's own namespaces."""
    status = Jobs(api_client, namespace).status(d.name)
    inference = status["inference"]
    assert inference["ready"] is True and inference["model"] == d.name
    assert next(c for c in status["conditions"] if c["type"] == "InferenceReady")["status"] == "True"
    assert status["adapter"]["sha256"] == sha256_file(summary.adapter_host_dir / "adapter_model.safetensors")
    # vLLM ran in the inference pod's own network namespace; the host's loopback never got the pod's address.
    pod = d.inference
    box = next(b for b in network.sandboxes() if b.uid == pod["metadata"]["uid"])
    worker = real_ray.kubelet.workers[pod["metadata"]["uid"]]
    pid = next(x for x in worker.containers if x.name == "vllm").pid_one()
    assert pid is not None and os.readlink(f"/proc/{pid}/ns/net") == f"net:[{os.stat(box.netns_path).st_ino}]"
    assert box.ip == pod["status"]["podIP"] and podnet.route_get(box.ip)["dev"] == network.bridge
    lo = [i["local"] for e in podnet.ip_json("addr", "show", "dev", "lo") for i in e.get("addr_info") or []]
    assert all(ipaddress.ip_address(a).is_loopback for a in lo), lo
    with urllib.request.urlopen(f"http://{box.ip}:{summary.served['port']}/v1/models", timeout=10) as r:
        listed = {m["id"]: m.get("parent") for m in json.load(r)["data"]}
    assert listed[d.name] == "tiny-qwen3-vl"  # the adapter, child of the served base model
    assert summary.served["answer"].strip().lower() in COLOURS, summary.served
    # `mmrl chat` goes through the Service and the apiserver's service proxy, as a user on the cluster would.
    image = tmp_path / "out" / summary.served["image"]
    answer, _ = ask(api_client, namespace, d.name, QUESTION, image)
    assert answer.strip() == summary.served["answer"].strip()
    assert "InferenceReady" in Jobs(api_client, namespace).events(d.name)


def test_a_trainer_that_cannot_load_its_model_fails_the_job_at_once(
    control_plane, api_client, namespace, real_ray, hyperpod_nodes, operator_pods, tmp_path
) -> None:
    hyperpod_nodes.cpu(kubelet=True)
    hyperpod_nodes.gpu(1, kubelet=True)
    missing = {"spec": {"model": {"name": "pvc://mmrl-checkpoints/models/not-there"}}}
    d = demo(control_plane, api_client, namespace, tmp_path, missing)
    d.prepare_volume()
    d.apply_job()

    assert d.wait_done(timeout=180) == "Failed"

    status = Jobs(api_client, namespace).status(d.name)
    assert len(status["attempts"]) == 1  # exit 3 is not retried
    assert status.get("restarts", {}) == {}
    stalled = next(c for c in status["conditions"] if c["type"] == "Stalled")
    assert (stalled["status"], stalled["reason"]) == ("True", "InvalidInput")
    assert "/ckpt/models/not-there has no config.json" in status["message"]
    assert "InvalidInput" in Jobs(api_client, namespace).events(d.name)
