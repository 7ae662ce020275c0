"""Shared serving end to end: one ModelServer, real vLLM (the CPU build, run by the local kubelet from the server's
own Deployment), and two jobs whose adapters the operator loads into it at run time. Both sides of the operator ↔
vLLM contract are real: the operator lists, loads and unloads through vLLM's runtime LoRA API (through the
apiserver's pod proxy), and each adapter answers, as itself, through the server's Service (`mmrl chat`'s path).

The jobs train on the KubeRay stand-in (their training is not what is tested here); their adapters are real PEFT
exports of the tiny model, made and reported with the trainer's own export and report code, with weights that
change the model's answers, on the claim the server mounts."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from mmrl_api import constants as c
from mmrl_api import parse_job
from mmrl_local import storage
from mmrl_local.kubelet import Kubelet
from mmrl_local.nodes import DEDICATED_LABEL, create_dedicated_node, dedicated_taint, delete_node
from mmrl_operator.cli.chat import ask
from mmrl_operator.core.names import job_dir
from mmrl_operator.runtime.service_proxy import proxy_json
from mmrl_trainer.adapter import export_adapter
from mmrl_trainer.tiny import build_tiny_vlm
from tests.support.operator import wait_until

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]
CLAIM, MOUNT, MODEL_DIR = "mmrl-checkpoints", "/ckpt", "models/tiny-qwen3-vl"
MODEL = f"pvc://{CLAIM}/{MODEL_DIR}"
SERVER, ROLE = "shared", "serving"
QUESTION = "What colour is this?"
VLLM_START = 600  # the CPU build loads the tiny model and compiles in a few minutes on 2 busy cores


def job_doc(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    doc["metadata"] = {"name": name}
    doc["spec"]["inference"] = {"server": SERVER, "servedModelName": f"{name}-lora"}
    doc["spec"]["dataset"].pop("validation", None)
    return doc


def server_doc() -> dict[str, Any]:
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.SERVER_KIND,
        "metadata": {"name": SERVER},
        "spec": {
            "model": {"name": MODEL},
            "image": "public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0",
            "gpus": 0,
            "replicas": 1,
            "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {}},
            "maxLoraRank": 8,
            "maxLoras": 2,
            "maxAdapters": 4,
            "maxModelLen": 512,
            "maxImagesPerPrompt": 1,
            "adapterVolumes": [{"claimName": CLAIM, "mountPath": MOUNT}],
            "hyperpod": False,
            "nodeSelector": {DEDICATED_LABEL: ROLE},
            "tolerations": [{**dedicated_taint(ROLE), "operator": "Equal"}],
        },
    }


def export(model: Path, out: Path, seed: int, base_model: str) -> dict[str, Any]:
    """A LoRA adapter of the tiny model whose B matrices are not zero (so it changes answers), exported and
    described by the trainer's own code: what the trainer would report as status.adapter."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(seed)
    base = AutoModelForImageTextToText.from_pretrained(model)
    cfg = LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], exclude_modules=r".*visual.*")
    peft_model = get_peft_model(base, cfg)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.normal_(0.0, 0.5)
    return export_adapter(peft_model, out, base_model=base_model).status()


class Cluster:
    def __init__(self, api: client.ApiClient, ns: str) -> None:
        self.api, self.ns = api, ns
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)

    def create(self, plural: str, doc: dict[str, Any]) -> dict[str, Any]:
        body = {**doc, "metadata": {**doc["metadata"], "namespace": self.ns}}
        return self.custom.create_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, plural, body)

    def get(self, plural: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, plural, name)

    def server(self) -> dict[str, Any]:
        return self.get(c.SERVER_PLURAL, SERVER).get("status") or {}

    def job(self, name: str) -> dict[str, Any]:
        return self.get(c.PLURAL, name).get("status") or {}

    def ready(self, name: str) -> dict[str, Any]:
        return next((x for x in self.job(name).get("conditions") or [] if x["type"] == "InferenceReady"), {})

    def models(self) -> dict[str, str]:
        """What the server's Service answers in /v1/models: {id: root}."""
        data = proxy_json(self.api, "GET", self.ns, f"{SERVER}-vllm", 8000, "/v1/models", deadline=10)["data"]
        return {m["id"]: m.get("root", "") for m in data}

    def replica(self) -> str | None:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"{c.LABEL_SERVER}={SERVER}").items
        ready = [
            p.metadata.name
            for p in pods
            if not p.metadata.deletion_timestamp
            and any(x.type == "Ready" and x.status == "True" for x in (p.status.conditions or []))
        ]
        return ready[0] if ready else None


@pytest.fixture
def serving_node(control_plane, api_client, pod_network, tmp_path):
    core = client.CoreV1Api(api_client)
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = create_dedicated_node(core, ROLE)
        yield kubelet
        delete_node(core, node)
    assert not kubelet.errors, f"the kubelet's loop failed: {kubelet.errors[-3:]}"


def test_two_jobs_adapters_share_one_vllm_server_each_answers_as_itself_and_a_restart_reloads_both(
    api_client, namespace, operator, kuberay, nodes_ready, serving_node, tmp_path
) -> None:
    cluster = Cluster(api_client, namespace)
    host = storage.create_hostpath_claim(cluster.core, namespace, CLAIM, tmp_path / "claim")
    tiny = build_tiny_vlm()
    model_copy = host / MODEL_DIR
    model_copy.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(tiny, model_copy)
    cluster.create(c.SERVER_PLURAL, server_doc())

    # Two jobs train (the stand-in succeeds their RayJobs) and report their adapters as the trainer does.
    for name in ("alpha", "beta"):
        kuberay.script(f"{name}-a*", "succeed-after=1")
        created = cluster.create(c.PLURAL, job_doc(name))
        pod_dir = f"{job_dir(parse_job(created))}/adapter"
        on_host = host / pod_dir.removeprefix(f"{MOUNT}/")
        report = export(tiny, on_host, seed={"alpha": 1, "beta": 2}[name], base_model=f"{MOUNT}/{MODEL_DIR}")
        report["path"] = pod_dir
        wait_until(lambda n=name: cluster.job(n).get("phase") in ("Succeeded", "Serving"), 120, what=f"{name} done")
        cluster.custom.patch_namespaced_custom_object_status(
            c.GROUP, c.VERSION, namespace, c.PLURAL, name, {"status": {"adapter": report}}
        )

    # vLLM starts with the base model only; once its replica is ready the operator loads both adapters into it.
    started = time.monotonic()
    wait_until(lambda: cluster.ready("alpha").get("status") == "True", VLLM_START, what="alpha served")
    wait_until(lambda: cluster.ready("beta").get("status") == "True", 60, what="beta served")
    ready_after = time.monotonic() - started
    status = cluster.server()
    held = {a["name"]: a for a in status["adapters"]}
    assert set(held) == {"alpha-lora", "beta-lora"} and status["adapterCount"] == 2
    assert all(a["loadedOn"] == [cluster.replica()] for a in held.values()), held
    listed = cluster.models()
    assert listed["alpha-lora"] == held["alpha-lora"]["path"] and listed["beta-lora"] == held["beta-lora"]["path"]
    assert cluster.job("alpha")["inference"]["server"] == SERVER

    # Each adapter answers as itself: greedy answers through the server's Service differ from each other and from
    # the base model's (the adapters' weights are not zero).
    answers = {name: ask(api_client, namespace, name, QUESTION)[0] for name in ("alpha", "beta")}
    base = proxy_json(
        api_client,
        "POST",
        namespace,
        f"{SERVER}-vllm",
        8000,
        "/v1/chat/completions",
        {
            "model": status["model"],
            "messages": [{"role": "user", "content": QUESTION}],
            "max_tokens": 64,
            "temperature": 0,
        },
        deadline=120,
    )["choices"][0]["message"]["content"]
    assert len({answers["alpha"], answers["beta"], base}) == 3, (answers, base)

    # A replica that restarts holds nothing: the operator loads both again.
    old = cluster.replica()
    cluster.core.delete_namespaced_pod(old, namespace)
    wait_until(lambda: (r := cluster.replica()) is not None and r != old, VLLM_START, what="a new replica ready")
    wait_until(
        lambda: (
            {a["name"]: a["loadedOn"] for a in cluster.server()["adapters"]}
            == {"alpha-lora": [cluster.replica()], "beta-lora": [cluster.replica()]}
        ),
        120,
        what="both adapters on the new replica",
    )
    assert set(cluster.models()) >= {"alpha-lora", "beta-lora"}
    assert ask(api_client, namespace, "beta", QUESTION)[0] == answers["beta"]

    # Deleting a job unloads its adapter; the other stays.
    cluster.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "alpha")
    wait_until(lambda: "alpha-lora" not in cluster.models(), 60, what="alpha unloaded")
    assert [a["name"] for a in cluster.server()["adapters"]] == ["beta-lora"]
    assert ask(api_client, namespace, "beta", QUESTION)[0] == answers["beta"]
    print(f"shared server: both adapters answering {ready_after:.0f}s after both jobs reported them")
