"""ModelServer on the real control plane: the CRD's admission rules, and the operator (at its production timings)
turning a server into its Deployment and Service, kwok making the replicas Ready, the status and conditions that
follow, spec changes and hand edits written back, a stranger's object under a child's name left alone, and cascade
deletion. Adapters are loaded into real vLLM in tests/e2e."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from mmrl_api import constants as c
from mmrl_api.constants import DEFAULT_VLLM_IMAGE
from mmrl_local.addons.operator_process import CHECKOUT_IMAGE
from mmrl_local.cluster import storage
from tests.support.operator import wait_until

ROOT = Path(__file__).resolve().parents[2]
NAME = "shared"
CHILD = f"{NAME}-vllm"
ADMIN = f"{NAME}-vllm-admin"


def server_doc(**spec: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "model-server.yaml").read_text())
    doc["metadata"] = {"name": NAME}
    doc["spec"].update(
        {"gpus": 0, "replicas": 1, "resources": {"requests": {"cpu": "1", "memory": "1Gi"}, "limits": {}}}, **spec
    )
    return doc


def _or_none(read: Any, name: str, namespace: str) -> Any:
    """The object `read` returns, or None when the apiserver has none (404)."""
    try:
        return read(name, namespace)
    except client.exceptions.ApiException as exc:
        if exc.status == 404:
            return None
        raise


class Servers:
    def __init__(self, api: client.ApiClient, ns: str) -> None:
        self.custom, self.apps, self.core, self.ns = (
            client.CustomObjectsApi(api),
            client.AppsV1Api(api),
            client.CoreV1Api(api),
            ns,
        )

    def create(self, doc: dict[str, Any]) -> dict[str, Any]:
        body = {**doc, "metadata": {**doc["metadata"], "namespace": self.ns}}
        return self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, self.ns, c.SERVER_PLURAL, body, field_validation="Strict"
        )

    def get(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.SERVER_PLURAL, NAME)

    def status(self) -> dict[str, Any]:
        return self.get().get("status") or {}

    def condition(self, ctype: str) -> dict[str, Any]:
        return next((x for x in self.status().get("conditions") or [] if x["type"] == ctype), {})

    def patch(self, spec: dict[str, Any]) -> None:
        self.custom.patch_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, c.SERVER_PLURAL, NAME, {"spec": spec})

    def deployment(self) -> client.V1Deployment | None:
        return _or_none(self.apps.read_namespaced_deployment, CHILD, self.ns)

    def service(self) -> client.V1Service | None:
        return _or_none(self.core.read_namespaced_service, CHILD, self.ns)

    def events(self) -> list[str]:
        found = self.core.list_namespaced_event(self.ns, field_selector=f"involvedObject.name={NAME}").items
        return [e.reason for e in found if e.involved_object.kind == c.SERVER_KIND]


@pytest.fixture
def servers(api_client, namespace, mmrl_crd) -> Servers:
    return Servers(api_client, namespace)


def wait_phase(servers: Servers, phase: str, timeout: float) -> None:
    try:
        wait_until(lambda: servers.status().get("phase") == phase, timeout, what=f"phase {phase}")
    except AssertionError as err:
        raise AssertionError(f"{err}; the server's status: {servers.status()}") from None


def args_of(dep: client.V1Deployment) -> dict[str, str]:
    a = dep.spec.template.spec.containers[0].args
    return {a[i]: a[i + 1] for i in range(len(a) - 1) if a[i].startswith("--") and not a[i + 1].startswith("--")}


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"maxLoraRank": 33}, "spec.maxLoraRank"),
        ({"maxLoras": 8, "maxAdapters": 4}, "maxAdapters must be at least maxLoras"),
        (
            {"adapterVolumes": [{"claimName": "a", "mountPath": "/fsx"}, {"claimName": "a", "mountPath": "/data"}]},
            "claimName must be unique",
        ),
        ({"gpus": 1, "tensorParallelSize": 2}, "gpus must be 0"),
        ({"extraArgs": ["--max-num-seqs", "8", "--max_lora_r=64"]}, "spec.extraArgs[2]"),
        ({"extraArgs": ["--port", "9000"]}, "sets a vLLM flag the operator sets itself"),
        ({"aliases": [{"name": "a", "jobSelector": {}}, {"name": "a", "jobSelector": {}}]}, "name must be unique"),
        ({"aliasPins": [{"alias": "geo-next", "job": "geo-v1"}]}, "only pin an alias the server declares"),
        (
            {"aliases": [{"name": "a", "jobSelector": {"matchExpressions": [{"key": "team", "operator": "In"}]}}]},
            "values must be non-empty for In",
        ),
        ({"aliases": [{"name": "a"}]}, "spec.aliases[0].jobSelector: Required value"),
    ],
)
def test_the_apiserver_refuses_a_bad_server_and_names_the_field(servers, spec, says) -> None:
    with pytest.raises(client.exceptions.ApiException) as err:
        servers.create(server_doc(**spec))
    assert err.value.status in (400, 422) and says in json.loads(err.value.body)["message"]


def test_the_model_is_immutable(servers) -> None:
    servers.create(server_doc())
    with pytest.raises(client.exceptions.ApiException) as err:
        servers.patch({"model": {"name": "Qwen/Qwen2.5-VL-7B-Instruct"}})
    assert "model is immutable" in json.loads(err.value.body)["message"]


def test_a_server_becomes_a_ready_deployment_and_service_and_follows_its_spec(
    servers, operator, hyperpod_nodes, core, api_client, tmp_path
) -> None:
    hyperpod_nodes.cpu()
    created = servers.create(server_doc())
    dep = wait_until(servers.deployment, 30, what="the server's Deployment")
    ref = dep.metadata.owner_references[0]
    assert (ref.kind, ref.uid, ref.controller) == (c.SERVER_KIND, created["metadata"]["uid"], True)
    env = {e.name: e.value for e in dep.spec.template.spec.containers[0].env}
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert args_of(dep)["--max-cpu-loras"] == "8" and "--lora-modules" not in args_of(dep)
    # The gateway runs from the operator's own image, with the admin key the operator made, owned by the server.
    gateway = dep.spec.template.spec.containers[1]
    assert (gateway.name, gateway.image) == ("gateway", CHECKOUT_IMAGE)
    secret = core.read_namespaced_secret(ADMIN, servers.ns)
    assert secret.metadata.owner_references[0].uid == created["metadata"]["uid"]
    key = secret.data["key"]
    assert len(base64.b64decode(key)) >= 32
    svc = wait_until(servers.service, 30, what="the server's Service")  # written after the Deployment
    assert svc.spec.selector == dep.spec.selector.match_labels

    # Its adapter claim does not exist yet: the scheduler cannot place the replica, and the server says why.
    wait_phase(servers, "Degraded", 60)
    stalled = servers.condition("Stalled")
    assert stalled["status"] == "True" and stalled["reason"] == "Unschedulable" and "fsx-claim" in stalled["message"]
    # With the claim, kwok runs the replica: the Deployment is Available, and the server says so.
    storage.create_hostpath_claim(core, servers.ns, "fsx-claim", tmp_path / "fsx")
    wait_phase(servers, "Ready", 90)
    status = servers.status()
    assert status["observedGeneration"] == servers.get()["metadata"]["generation"] and status["readyReplicas"] == 1
    assert status["url"] == f"http://{CHILD}.{servers.ns}.svc:8000/v1"
    assert servers.condition("Ready")["status"] == "True" and servers.condition("Stalled")["status"] == "False"
    wait_until(
        lambda: {"ServerCreated", "ServerReady", "AdminKeyCreated"} <= set(servers.events()), 10, what="its Events"
    )
    # Deleting the Secret rotates the key: the server's next pass makes a new one (its spec change wakes it here).
    core.delete_namespaced_secret(ADMIN, servers.ns)

    # A spec change rolls the Deployment, and the new generation is observed once it is Available again.
    servers.patch({"maxLoras": 2, "replicas": 2})
    wait_until(lambda: args_of(servers.deployment())["--max-loras"] == "2", 30, what="the new --max-loras")
    rotated = wait_until(lambda: _or_none(core.read_namespaced_secret, ADMIN, servers.ns), 30, what="a new key")
    assert rotated.data["key"] != key
    generation = servers.get()["metadata"]["generation"]
    wait_until(
        lambda: (
            (s := servers.status())["observedGeneration"] == generation
            and s["phase"] == "Ready"
            and s["readyReplicas"] == 2
        ),
        90,
        what="the new generation Ready with 2 replicas",
    )
    # An edit by hand of what the operator set is written back (the Deployment's watch wakes the server).
    hand_edit = {"spec": {"template": {"spec": {"containers": [{"name": "vllm", "image": "elsewhere:1"}]}}}}
    servers.apps.patch_namespaced_deployment(CHILD, servers.ns, hand_edit)
    image = DEFAULT_VLLM_IMAGE
    wait_until(lambda: servers.deployment().spec.template.spec.containers[0].image == image, 30, what="image set back")

    client.CustomObjectsApi(api_client).delete_namespaced_custom_object(
        c.GROUP, c.VERSION, servers.ns, c.SERVER_PLURAL, NAME
    )
    wait_until(lambda: servers.deployment() is None, 60, what="the Deployment garbage-collected")
    wait_until(lambda: not core.list_namespaced_service(servers.ns).items, 60, what="the Service garbage-collected")


@pytest.mark.parametrize("kind", ["Service", "Secret"])
def test_a_strangers_object_under_a_childs_name_stalls_the_server_until_it_is_gone(servers, operator, core, kind):
    """A stranger's Secret under the admin key's name would hand its key to the gateways: it is never used."""
    if kind == "Service":
        name, body = (
            CHILD,
            {"metadata": {"name": CHILD, "labels": {"app": "theirs"}}, "spec": {"ports": [{"port": 80}]}},
        )
        create, read, delete = (
            core.create_namespaced_service,
            core.read_namespaced_service,
            core.delete_namespaced_service,
        )
    else:
        name, body = ADMIN, {"metadata": {"name": ADMIN, "labels": {"app": "theirs"}}, "stringData": {"key": "known"}}
        create, read, delete = core.create_namespaced_secret, core.read_namespaced_secret, core.delete_namespaced_secret
    create(servers.ns, body)
    servers.create(server_doc())
    wait_until(lambda: servers.condition("Stalled").get("reason") == "NameConflict", 30, what="NameConflict")
    assert servers.status()["phase"] == "Degraded" and f"{kind} {name}" in servers.status()["message"]
    assert read(name, servers.ns).metadata.labels == {"app": "theirs"}  # never written
    assert servers.deployment() is None  # nothing is half-made beside it
    delete(name, servers.ns)
    wait_until(servers.deployment, 90, what="the Deployment, once the name is free")
    owned = wait_until(lambda: _or_none(read, name, servers.ns), 30, what=f"the server's {kind}")
    assert owned.metadata.owner_references[0].kind == c.SERVER_KIND
