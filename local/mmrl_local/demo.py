"""`make demo`: one MultimodalRLJob end to end on a laptop-sized real control plane, through a HyperPod node
replacement, with a summary at the end.

The steps are the product's, not the demo's: a hostPath volume stands in for the FSx claim and holds the tiny
offline Qwen3-VL, `kubectl apply -f examples/local.yaml` submits the job, the real operator (a subprocess) builds
the RayCluster and RayJobs, and the KubeRay stand-in runs each RayJob's entrypoint inside the Ray head pod's view
(`podrun`) and its network namespace (`podnet`), so the trainer reads its ConfigMap at /etc/mmrl, writes
checkpoints to the claim at its mountPath and reports progress with the pod's ServiceAccount token. Once the
trainer has written a checkpoint, the node hosting the trainer goes through what HyperPod does to a failing
instance (UnschedulablePendingReplacement → NotReady → deleted → a new instance joins); the operator stops the
attempt and the next one resumes from that checkpoint. The inference pod's init container and vLLM server run in
that pod's own network namespace too.

`Demo` is also what tests/e2e drives, with shorter settings, on the test session's control plane.
"""

from __future__ import annotations

import argparse
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

import yaml
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local import nodes, podnet, storage
from mmrl_local.plot import line_chart
from mmrl_operator.jsonmerge import merge_patch
from mmrl_trainer import checkpoint as ckpt

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "local.yaml"
MODEL_ON_CLAIM = "models/tiny-qwen3-vl"  # where examples/local.yaml's pvc:// model URI points inside the claim


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
    fault: str = ""
    timings: dict[str, float] = field(default_factory=dict)
    served: dict[str, Any] = field(default_factory=dict)
    """The serving step: adapter name, URL, vLLM args, the question, the answer and its latency."""

    def render(self) -> str:
        lines = [f"job {self.name}: {self.phase} in {self.wall_seconds:.0f} s"]
        for a in self.attempts:
            why = f", stopped by {a['failure']} fault on {a.get('node')}" if a.get("failure") else ""
            resumed = f", resumed from step {a['resumedFromStep']}" if a.get("resumedFromStep") is not None else ""
            lines.append(f"  attempt {a['index']} ({a['cause']}{resumed}): {a['result']}{why}")
        if self.fault:
            lines.append(f"  node fault: {self.fault}")
        if self.resumed_from_step is not None:
            lines.append(
                f"  resumed from step {self.resumed_from_step} (found by the trainer in the checkpoint directory; "
                f"attempt 1 had sealed steps {self.steps_sealed_by_attempt_1})"
            )
        if self.held_out_first is not None and self.held_out_last is not None:
            lines.append(f"  held-out reward: {self.held_out_first:.3f} -> {self.held_out_last:.3f}")
        lines.append(f"  adapter: {self.adapter_pod_dir} on the claim = {self.adapter_host_dir}")
        if self.plot:
            lines.append(f"  reward curve: {self.plot}")
        if self.served:
            sv = self.served
            lines.append(
                f"  serving: {sv['model']} (adapter on {sv['base_model']}) at {sv['url']}; vLLM listened "
                f"{sv['vllm_ready_seconds']:.0f} s after start, InferenceReady {sv['ready_seconds']:.0f} s after "
                "training ended"
            )
            lines.append(f"  asked ({sv['image']}): {sv['question']!r}")
            lines.append(f"  answer: {sv['answer'].strip()!r} in {sv['answer_seconds'] * 1000:.0f} ms (OpenAI client)")
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
        say: Callable[[str], None] = print,
        network: podnet.PodNetwork | None = None,
        network_note: str = "",
    ) -> None:
        self.api, self.core = api, client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.kubectl, self.kubeconfig = kubectl, kubeconfig
        self.ns, self.volume_dir, self.out_dir, self.say = namespace, volume_dir, out_dir, say
        doc = merge_patch(yaml.safe_load(EXAMPLE.read_text()), overrides or {})
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
        self.network, self.network_note = network, network_note

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

    def show(self) -> dict[str, Any]:
        st = self.job().get("status") or {}
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

    def wait_for_checkpoint(self, timeout: float) -> int:
        """The first checkpoint the trainer sealed, read from the checkpoint directory on the volume."""

        def sealed(_: dict[str, Any]) -> int | None:
            root = self.job_dir()
            latest = ckpt.latest_complete(root) if root and root.exists() else None
            return latest.step if latest else None

        step = self.wait(sealed, timeout, "no checkpoint was written")
        self.timings["first checkpoint"] = time.monotonic() - self.started
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
        train = [(r["step"], r["reward"]) for r in records if r.get("reward") is not None]
        plot = None
        if train:
            fault_step = resumed if self.fault else None
            plot = line_chart(
                {"training reward": train, "held-out reward": held_out},
                self.out_dir / "reward-curve.png",
                title=f"{self.name}: GRPO + LoRA on the tiny Qwen3-VL",
                x_label="step",
                y_label="reward",
                markers=[(fault_step, "node replaced; resumed here")] if fault_step is not None else [],
            )
        pod_adapter = f"{st.get('jobDir', '')}/adapter"
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
            wall_seconds=time.monotonic() - self.started,
            fault=self.fault,
            timings=dict(self.timings),
            served=dict(self.served),
        )

    # --- serving -------------------------------------------------------------------------------------------

    def serve(self, timeout: float) -> dict[str, Any]:
        """Be the kubelet of the inference pod (init container, then vLLM on CPU), wait until the operator sees
        the adapter in /v1/models through the Service (InferenceReady), then ask one image question."""
        from mmrl_local.inference_kubelet import InferencePod, running_pod
        from mmrl_local.vllm_cpu import ensure
        from mmrl_trainer.synthetic import QUESTION, colour_image

        trained_at = time.monotonic()
        selector = f"{c.LABEL_JOB}={self.name},{c.LABEL_COMPONENT}=inference"
        pod = self.wait(lambda _: running_pod(self.core, self.ns, selector), timeout, "no running inference pod")
        ensure()
        assert self.network is not None, "serving runs a pod for real: it needs the run's pod network"
        self.inference = InferencePod(self.api, pod, self.out_dir / "inference", self.network)
        vllm = next(x for x in pod["spec"]["containers"] if x["name"] == "vllm")
        self.say(f"inference pod {pod['metadata']['name']} ({pod['status']['podIP']}): adapter check, then")
        self.say("  " + " ".join(vllm["command"] + vllm["args"]))
        self.inference.start()
        vllm_ready = self.inference.wait_listening(timeout)
        self.wait(
            lambda st: any(x["type"] == "InferenceReady" and x["status"] == "True" for x in st.get("conditions") or []),
            timeout,
            "InferenceReady never became True",
        )
        inference = (self.job().get("status") or {}).get("inference") or {}
        image = self.out_dir / "question-red.png"
        colour_image("red", random.Random(0)).save(image)
        ask = Path(__file__).with_name("ask.py")
        base_url = f"http://{pod['status']['podIP']}:{self.inference.port()}/v1"
        cmd = [str(ensure() / "python"), str(ask), "--base-url", base_url, "--model", inference["model"]]
        reply = json.loads(
            subprocess.run([*cmd, "--image", str(image), QUESTION], capture_output=True, text=True, check=True).stdout
        )
        self.served = {
            "model": inference["model"],
            "base_model": inference.get("baseModel"),
            "url": inference["url"],
            "vllm_args": vllm["args"],
            "vllm_ready_seconds": vllm_ready,
            "ready_seconds": time.monotonic() - trained_at,
            "image": image.name,
            "question": QUESTION,
            "answer": reply["answer"],
            "answer_seconds": reply["seconds"],
        }
        return self.served

    def close(self) -> None:
        if getattr(self, "inference", None) is not None:
            self.inference.stop()

    def run(self, *, fault: bool = True, timeout: float = 900) -> Summary:
        self.prepare_volume()
        self.apply_job()
        if fault:
            step = self.wait_for_checkpoint(timeout)
            self.say(f"checkpoint step {step} sealed on the volume")
            self.replace_trainer_node()
        if self.wait_done(timeout) == "Serving":
            if self.network is None:
                self.say(f"skipping the vLLM server: {self.network_note or 'no pod network'}")
            else:
                self.serve(timeout)
        return self.summary()


# --- `python -m mmrl_local.demo` ------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mmrl_local.demo", description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "demo-out")
    parser.add_argument("--no-fault", action="store_true", help="skip the node replacement")
    parser.add_argument("--keep", action="store_true", help="leave the control plane up until Ctrl-C")
    args = parser.parse_args(argv)

    from mmrl_local import build
    from mmrl_local.controlplane import ControlPlane
    from mmrl_local.crd_install import install_mmrl_crd, install_trainer_status_policy
    from mmrl_local.kuberay_standin import KubeRayStandIn
    from mmrl_local.operator_process import OperatorProcess

    t0 = time.monotonic()
    out = args.out.resolve()
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    work = build.cache_root() / "run" / "demo"
    shutil.rmtree(work, ignore_errors=True)
    binaries = build.build(verbose=False)
    print(f"control plane: etcd, kube-apiserver, controller-manager, scheduler, kwok ({binaries.kube_version})")
    (work / "cluster").mkdir(parents=True)
    with ControlPlane(binaries=binaries, workdir=work / "cluster") as cp:
        if cp.network_note:
            print(f"{cp.network_note}; the trainer shares this machine's network and vLLM is not run")
        api = cp.api_client()
        core = client.CoreV1Api(api)
        head = nodes.create_cpu_node(core)
        gpus = nodes.create_gpu_nodes(core, 2)
        print(f"fake HyperPod nodes: {head} (controller) and {', '.join(gpus)} (ml.p5.48xlarge)")
        install_mmrl_crd(api)
        install_trainer_status_policy(api)
        with (
            KubeRayStandIn(api, mode="run", log_dir=out / "rayjob-logs", network=cp.pod_network),
            OperatorProcess(cp.kubeconfig, out / "operator.log", namespaces=[]),
        ):
            print(f"operator running (log {out / 'operator.log'}); KubeRay stand-in in run mode")
            demo = Demo(
                api,
                binaries["kubectl"],
                cp.kubeconfig,
                namespace="default",
                volume_dir=work / "fsx",
                out_dir=out,
                network=cp.pod_network,
                network_note=cp.network_note,
            )
            try:
                summary = demo.run(fault=not args.no_fault)
            finally:
                demo.close()
            summary.wall_seconds = time.monotonic() - t0
            print("\n" + summary.render())
            (out / "summary.json").write_text(json.dumps(summary.__dict__, default=str, indent=2))
            if args.keep:
                print(f"\nexport KUBECONFIG={cp.kubeconfig}; Ctrl-C to stop")
                try:
                    while True:
                        time.sleep(3600)
                except KeyboardInterrupt:
                    pass
    return 0 if summary.phase in ("Succeeded", "Serving") else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
