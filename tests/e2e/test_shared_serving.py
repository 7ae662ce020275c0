"""Shared serving end to end: one ModelServer, real vLLM (the CPU build, run by the local kubelet from the server's own
Deployment) behind the gateway (this checkout's, as the operator's image), and jobs whose adapters the operator (as
the chart installs it: its ServiceAccount and RBAC, with the chart's server-pod policy) loads into it at run time,
with an alias that moves on a promotion and is rolled back while a client keeps asking it. Every part of the path is
real: the operator lists, loads and unloads through each replica's gateway (the apiserver's pod proxy, the server's
admin key), the gateway stages checked copies and has vLLM load them, and each adapter answers, as itself, through
the server's Service (`mmrl chat`'s path). Strangers' pods, in the namespace and outside it, try vLLM's runtime LoRA
API and the gateway's admin API from the pod network, and change nothing.

The jobs train on the KubeRay stand-in (their training is not what is tested here); their adapters are real PEFT
exports of the tiny model, made and reported with the trainer's own export and report code, with weights that change
the model's answers, on the claim the server mounts."""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, watch

from mmrl_api import constants as c
from mmrl_api import parse_job
from mmrl_local.cluster import storage
from mmrl_local.cluster.nodes import DEDICATED_LABEL, create_dedicated_node, dedicated_taint, delete_node
from mmrl_local.demo_shared import KeepAsking
from mmrl_local.node.kubelet import Kubelet
from mmrl_local.stranger import attempts, run_stranger
from mmrl_operator.cli.chat import ask, ask_server
from mmrl_operator.core.builders.model_server import ADAPTERS_LOADED
from mmrl_operator.core.names import job_dir
from mmrl_operator.runtime.service_proxy import proxy_json
from mmrl_trainer.tiny import build_tiny_vlm
from tests.support.cli import mmrl
from tests.support.lora import export_random_adapter
from tests.support.operator import wait_until
from tests.support.polling import wait_while_progressing
from tests.support.server_progress import ServerProgress

pytestmark = [pytest.mark.e2e, pytest.mark.cluster]

ROOT = Path(__file__).resolve().parents[2]
CLAIM, MOUNT, MODEL_DIR = "mmrl-checkpoints", "/ckpt", "models/tiny-qwen3-vl"
MODEL = f"pvc://{CLAIM}/{MODEL_DIR}"
SERVER, ROLE = "shared", "serving"
QUESTION = "What colour is this?"
# vLLM's CPU build loads the tiny model and compiles in one to several minutes on 2 busy cores: waits on it last while
# it works (logs or uses CPU) and fail when it has done neither for this long, or when its container exits.
VLLM_STALLED = 180


ALIAS = "colors-prod"
GATE = {"heldOutRewardAtLeast": 0.1}


def job_doc(name: str) -> dict[str, Any]:
    """The example job, served from SERVER, labelled as its alias's jobSelector wants."""
    doc = yaml.safe_load((ROOT / "examples" / "local.yaml").read_text())
    doc["metadata"] = {"name": name, "labels": {"team": "colors"}}
    doc["spec"]["inference"] = {
        "server": SERVER,
        "servedModelName": f"{name}-lora",
        "alias": ALIAS,
        "promoteWhen": GATE,
    }
    return doc


def server_doc() -> dict[str, Any]:
    """examples/local-model-server.yaml, on the node kept for serving."""
    doc = yaml.safe_load((ROOT / "examples" / "local-model-server.yaml").read_text())
    doc["metadata"] = {"name": SERVER}
    doc["spec"].update(
        hyperpod=False,
        nodeSelector={DEDICATED_LABEL: ROLE},
        tolerations=[{**dedicated_taint(ROLE), "operator": "Equal"}],
    )
    return doc


def export(model: Path, out: Path, seed: int, base_model: str) -> dict[str, Any]:
    """An adapter that changes the tiny model's answers, as the trainer would report it (status.adapter)."""
    return export_random_adapter(model, out, seed, base_model).status()  # type: ignore[no-any-return]


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

    def held(self) -> tuple[dict[str, str], list[tuple[str, str, tuple[str, ...]]]]:
        """What the server holds: its Service's /v1/models, and its status's adapters and aliases (where loaded)."""
        st = self.server()
        names = [(a["name"], a.get("digest", ""), tuple(a.get("loadedOn") or [])) for a in st.get("adapters") or []]
        names += [(a["name"], a.get("digest", ""), tuple(a.get("loadedOn") or [])) for a in st.get("aliases") or []]
        return self.models(), sorted(names)

    def replica(self) -> str | None:
        pods = self.core.list_namespaced_pod(self.ns, label_selector=f"{c.LABEL_SERVER}={SERVER}").items
        ready = [
            p.metadata.name
            for p in pods
            if not p.metadata.deletion_timestamp
            and any(x.type == "Ready" and x.status == "True" for x in (p.status.conditions or []))
        ]
        return ready[0] if ready else None


@dataclass
class ServingNodes:
    node: str  # the node kept for the server (the strangers' pods run there too)
    kubelet: Kubelet


@pytest.fixture
def serving_node(control_plane, api_client, pod_network, tmp_path):
    """A node kept for the server, run by the kubelet."""
    core = client.CoreV1Api(api_client)
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = create_dedicated_node(core, ROLE)
        yield ServingNodes(node, kubelet)
        delete_node(core, node)
    assert not kubelet.errors, f"the kubelet's loop failed: {kubelet.errors[-3:]}"


def wait_on_vllm(cluster: Cluster, kubelet: Kubelet, pred, what: str):  # type: ignore[no-untyped-def]
    """Wait for `pred` while the server's vLLM works towards it (ServerProgress)."""
    progress = ServerProgress(cluster.core, kubelet, cluster.ns, f"{c.LABEL_SERVER}={SERVER}")
    return wait_while_progressing(
        pred, progress, stalled=VLLM_STALLED, what=what, retry_on=(client.exceptions.ApiException,)
    )


def report(
    cluster: Cluster, host: Path, tiny: Path, name: str, seed: int, reward: float, swap: Path | None = None
) -> Path:
    """What the trainer does at the end of a job: export the adapter to <jobDir>/adapter and report it, with the
    held-out evaluation the gate reads. `swap`: another adapter whose weights replace this one's after the export
    and before the report (a tenant's own pod writing to the claim). Returns the adapter's directory here."""
    created = cluster.get(c.PLURAL, name)
    pod_dir = f"{job_dir(parse_job(created))}/adapter"
    here = host / pod_dir.removeprefix(f"{MOUNT}/")
    status = export(tiny, here, seed=seed, base_model=f"{MOUNT}/{MODEL_DIR}")
    if swap is not None:
        shutil.copyfile(swap / "adapter_model.safetensors", here / "adapter_model.safetensors")
    status["path"] = pod_dir
    status["evaluation"] = {"heldOutReward": reward, "baselineReward": 0.0, "step": 30}
    wait_until(lambda: cluster.job(name).get("phase") in ("Succeeded", "Serving"), 120, what=f"{name} trained")
    cluster.custom.patch_namespaced_custom_object_status(
        c.GROUP, c.VERSION, cluster.ns, c.PLURAL, name, {"status": {"adapter": status}}
    )
    return here


def alias_target(cluster: Cluster) -> tuple[str, bool] | None:
    found = next((a for a in cluster.server().get("aliases") or [] if a["name"] == ALIAS), None)
    return (found["job"], found["pinned"]) if found and found.get("loadedOn") else None


class GateWatch:
    """Every value a replica's readiness gate takes while it runs, from a watch of the pod: a gate that goes False
    for a moment (until the next pass) is seen here even when no request happened to meet it. It watches in 2 s
    slices from the last version seen, so it stops at once; a watch that failed fails the test."""

    def __init__(self, core: client.CoreV1Api, ns: str, pod: str) -> None:
        self.core, self.ns, self.pod = core, ns, pod
        self.values: list[str] = []
        self.error: BaseException | None = None
        self._since = core.read_namespaced_pod(pod, ns).metadata.resource_version
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                stream = watch.Watch().stream(
                    self.core.list_namespaced_pod,
                    self.ns,
                    field_selector=f"metadata.name={self.pod}",
                    resource_version=self._since,
                    timeout_seconds=2,
                )
                for event in stream:
                    pod = event["object"]
                    self._since = pod.metadata.resource_version
                    self.values += [x.status for x in pod.status.conditions or [] if x.type == ADAPTERS_LOADED]
        except BaseException as err:  # reported by the test, never lost in a thread
            self.error = err

    def __enter__(self) -> GateWatch:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the gate's watch did not stop"
        assert self.error is None, f"the gate's watch failed: {self.error!r}"


def test_two_adapters_share_one_vllm_server_an_alias_moves_and_rolls_back_without_errors_and_a_restart_reloads(
    api_client,
    control_plane,
    namespace,
    other_namespace,
    server_pod_policy,
    chart_operator,
    kuberay,
    nodes_ready,
    serving_node,
    tmp_path,
) -> None:
    cluster = Cluster(api_client, namespace)
    host = storage.create_hostpath_claim(cluster.core, namespace, CLAIM, tmp_path / "claim")
    tiny = build_tiny_vlm()
    shutil.copytree(tiny, host / MODEL_DIR)
    cluster.create(c.SERVER_PLURAL, server_doc())
    for name in ("alpha", "beta", "gamma", "delta", "omega"):
        kuberay.script(f"{name}-a*", "succeed-after=1")
        cluster.create(c.PLURAL, job_doc(name))

    # alpha finishes first: vLLM starts with the base model only, then the operator loads alpha's adapter and points
    # the alias at it.
    started = time.monotonic()
    alpha_dir = report(cluster, host, tiny, "alpha", seed=1, reward=0.5)
    wait_on_vllm(cluster, serving_node.kubelet, lambda: cluster.ready("alpha").get("status") == "True", "alpha served")
    # The replica's gateway loaded a copy of exactly the files the trainer reported (their digest).
    (entry,) = [a for a in cluster.server()["adapters"] if a["job"] == "alpha"]
    assert entry["digest"] == cluster.job("alpha")["adapter"]["digest"] and entry["loadedOn"]

    # gamma's files were changed after its export (alpha's weights in its directory): the gateway refuses its copy
    # by digest, gamma's InferenceReady says so, and it never answers or takes the alias (alpha holds it).
    report(cluster, host, tiny, "gamma", seed=3, reward=0.9, swap=alpha_dir)
    wait_until(lambda: cluster.ready("gamma").get("reason") == "AdapterLoadFailed", 120, what="gamma refused")
    assert "digest" in cluster.ready("gamma")["message"], cluster.ready("gamma")
    wait_until(lambda: alias_target(cluster) == ("alpha", False), 60, what=f"{ALIAS} on alpha")
    assert "gamma-lora" not in cluster.models()

    # delta is not one of the jobs the server lets claim the alias (its jobSelector: team=colors): refused with the
    # reason in its condition, whatever its score, and never loaded.
    cluster.custom.patch_namespaced_custom_object(
        c.GROUP, c.VERSION, namespace, c.PLURAL, "delta", {"metadata": {"labels": {"team": "someone-else"}}}
    )
    report(cluster, host, tiny, "delta", seed=4, reward=0.95)
    wait_until(lambda: cluster.ready("delta").get("reason") == "AliasNotAllowed", 60, what="delta refused")
    assert "team=colors" in cluster.ready("delta")["message"], cluster.ready("delta")
    assert "delta-lora" not in cluster.models() and alias_target(cluster) == ("alpha", False)
    cluster.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "delta")

    # Strangers: a pod of the namespace that is not the operator, and one of another namespace, try to load, unload
    # and load in place, through the Service and at the replica's IP, and the gateway's admin API with no key or a
    # guessed one. Each is refused, and what the server holds is unchanged.
    replica = cluster.replica()
    assert replica is not None
    pod_ip = cluster.core.read_namespaced_pod(replica, namespace).status.pod_ip
    before = cluster.held()
    tries = attempts(f"{SERVER}-vllm.{namespace}.svc", pod_ip, "alpha-lora", ALIAS, str(alpha_dir))
    for ns in (namespace, other_namespace):
        got = run_stranger(cluster.core, ns, "stranger", serving_node.node, tries)
        assert len(got) == len(tries) and all(a.refused for a in got), [a.line() for a in got if not a.refused]
        by_what = {(a.what, a.url.split("/")[2]): a.status for a in got}
        assert by_what[("unload", f"{pod_ip}:8000")] == 403 and by_what[("admin unload", f"{pod_ip}:8000")] == 401
        assert by_what[("unload at vLLM's own port", f"{pod_ip}:8001")] is None  # vLLM listens on loopback only
    assert cluster.held() == before
    # gamma's files are tried on a few passes, then quarantined: refused for good (its job Stalled, the reason said),
    # never loaded again until the job exports other files. Then gamma goes.
    wait_until(lambda: cluster.ready("gamma").get("reason") == "Quarantined", 120, what="gamma quarantined")
    (quarantined,) = [r for r in cluster.server()["refused"] if r["job"] == "gamma"]
    assert quarantined["reason"] == "Quarantined" and "digest" in quarantined["message"], quarantined
    assert "gamma-lora" not in {a["name"] for a in cluster.server()["adapters"]}
    cluster.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "gamma")
    wait_until(lambda: all(r["job"] != "gamma" for r in cluster.server()["refused"]), 60, what="gamma gone")
    first_ready = time.monotonic() - started
    alpha = ask(api_client, namespace, "alpha", QUESTION)[0]  # `mmrl chat alpha`
    base = ask_server(api_client, namespace, SERVER, cluster.server()["model"], QUESTION)[0]
    assert ask_server(api_client, namespace, SERVER, ALIAS, QUESTION)[0] == alpha  # `mmrl chat colors-prod --server`
    assert cluster.job("alpha")["inference"]["alias"] == ALIAS

    # beta is promoted while a client keeps asking the alias: the alias moves to beta, then a rollback pins it back
    # on alpha; the client sees no error, and both adapters' answers. (Nothing else asks meanwhile: answers batched
    # with other requests may differ in the last digits, and so in a greedy token.)
    with KeepAsking(api_client, namespace, SERVER, ALIAS, QUESTION) as asker:
        wait_until(lambda: asker.answers, 60, what="the client's first answer")
        promoted = time.monotonic()
        report(cluster, host, tiny, "beta", seed=2, reward=0.7)
        wait_until(lambda: alias_target(cluster) == ("beta", False), 120, what=f"{ALIAS} on beta")
        promotion_seconds = time.monotonic() - promoted
        wait_until(lambda: asker.answers[-1] != alpha, 60, what="the alias answering as another adapter")
        # `mmrl rollback`, as a user runs it: a target the server does not hold is refused (exit 1, nothing
        # changed); the previous target in the alias's history is pinned.
        on_server = ("--server", SERVER, "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace)
        refused = mmrl("rollback", ALIAS, *on_server, "--to", "gamma", home=tmp_path)  # gamma was deleted
        assert refused.returncode == 1 and "gamma" in refused.stderr, refused
        assert not cluster.get(c.SERVER_PLURAL, SERVER)["spec"].get("aliasPins")
        done = mmrl("rollback", ALIAS, *on_server, home=tmp_path)
        assert done.returncode == 0 and f"pinned {ALIAS} to job alpha" in done.stdout, done
        wait_until(lambda: alias_target(cluster) == ("alpha", True), 60, what=f"{ALIAS} pinned back on alpha")
        wait_until(lambda: asker.answers[-1] == alpha, 60, what="the alias answering as alpha again")
    beta = ask(api_client, namespace, "beta", QUESTION)[0]
    assert not asker.errors, asker.errors[:3]
    assert len({alpha, beta, base}) == 3, (alpha, beta, base)
    assert set(asker.answers) == {alpha, beta}, sorted(set(asker.answers))
    status = cluster.server()
    assert {a["name"] for a in status["adapters"]} == {"alpha-lora", "beta-lora"}  # alpha never left; no gamma
    history = next(a for a in status["aliases"] if a["name"] == ALIAS)["history"]
    assert [(h["job"], h["heldOutReward"]) for h in history] == [("alpha", 0.5), ("beta", 0.7), ("alpha", 0.5)]
    assert all(h.get("until") for h in history[:-1]) and not history[-1].get("until")
    # `mmrl status NAME --server`, as a user runs it: the adapters, the pinned alias and its history with the rewards.
    shown = mmrl(
        "status", SERVER, "--server", "--kubeconfig", str(control_plane.kubeconfig), "-n", namespace, home=tmp_path
    )
    assert shown.returncode == 0, shown
    lines = shown.stdout.splitlines()
    assert f"  alias {ALIAS} -> alpha-lora (job alpha) (pinned)" in lines, shown.stdout
    assert [ln.split()[3] for ln in lines if ln.startswith("    20")] == ["alpha", "beta", "alpha"], shown.stdout

    # A replica that restarts holds nothing: the operator loads both adapters and the alias again.
    old = cluster.replica()
    cluster.core.delete_namespaced_pod(old, namespace)
    new_replica = lambda: (r := cluster.replica()) is not None and r != old  # noqa: E731
    wait_on_vllm(cluster, serving_node.kubelet, new_replica, "a new replica ready")
    wait_until(lambda: set(cluster.models()) >= {"alpha-lora", "beta-lora", ALIAS}, 120, what="all loaded again")
    assert ask_server(api_client, namespace, SERVER, ALIAS, QUESTION)[0] == alpha
    assert ask(api_client, namespace, "beta", QUESTION)[0] == beta

    # Raising a job's gate above its score, then deleting another job, unloads their adapters while a client keeps
    # asking the alias: the pinned alias and the other adapter stay, and no replica leaves the Service for either
    # unload (its gate wanted every name the last pass served, the unloaded one included, so the only replica went
    # out until the next pass: #44).
    report(cluster, host, tiny, "omega", seed=5, reward=0.6)
    wait_until(lambda: "omega-lora" in cluster.models(), 120, what="omega loaded")
    replica = cluster.replica()
    assert replica is not None
    with (
        KeepAsking(api_client, namespace, SERVER, ALIAS, QUESTION) as asker,
        GateWatch(cluster.core, namespace, replica) as gate,
    ):
        wait_until(lambda: asker.answers, 60, what="the client's first answer")
        raised = {"spec": {"inference": {"promoteWhen": {"heldOutRewardAtLeast": 0.99}}}}
        cluster.custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "omega", raised)
        wait_until(lambda: "omega-lora" not in cluster.models(), 60, what="omega unloaded: its gate raised")
        cluster.custom.delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "beta")
        wait_until(lambda: "beta-lora" not in cluster.models(), 60, what="beta unloaded")
        # The server's status follows its replicas: the pass that unloaded writes it once the unload is done.
        held = lambda: [a["name"] for a in cluster.server()["adapters"]]  # noqa: E731
        wait_until(lambda: held() == ["alpha-lora"], 30, what=lambda: f"status: alpha only, not {held()}")
        asked = len(asker.answers) + len(asker.errors)
        wait_until(lambda: len(asker.answers) + len(asker.errors) > asked + 3, 60, what="answers after the unload")
    assert not asker.errors, asker.errors[:3]
    assert set(asker.answers) == {alpha}, sorted(set(asker.answers))
    assert "False" not in gate.values, gate.values  # the replica never left the Service, not even for a pass
    promoted = next(x for x in cluster.job("omega")["conditions"] if x["type"] == "Promoted")
    assert promoted["status"] == "False" and "heldOutRewardAtLeast 0.99" in promoted["message"], promoted
    print(
        f"shared server: first adapter answering {first_ready:.0f}s after its report (vLLM start included); "
        f"alias on the next promotion {promotion_seconds:.1f}s after its report"
    )
