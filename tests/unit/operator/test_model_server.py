"""A ModelServer's Deployment and Service, and its pass's decision: pure functions, no cluster."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from mmrl_api import constants as c
from mmrl_api.model_server import ModelServer, parse_server
from mmrl_operator.core.builders import model_server as build
from mmrl_operator.core.model_server import ServerObserved, decide_server, status_changed

ROOT = Path(__file__).resolve().parents[3]
NOW = "2026-10-01T09:00:00Z"
UID = "0b7d6f1c-2a3e-4c55-9a11-2f4e8d7b9c02"


def server(generation: int = 1, **spec: Any) -> ModelServer:
    doc = yaml.safe_load((ROOT / "examples" / "model-server.yaml").read_text())
    doc["metadata"].update(uid=UID, generation=generation)
    doc["spec"].update(spec)
    return parse_server(doc)


def args(s: ModelServer) -> dict[str, str]:
    a = build.vllm_args(s)
    return {a[i]: a[i + 1] if i + 1 < len(a) and not a[i + 1].startswith("--") else "" for i in range(len(a))}


def test_vllm_starts_with_no_adapter_and_the_limits_the_spec_fixes() -> None:
    a = args(server())
    assert "--lora-modules" not in a and "--enable-lora" in a
    assert (a["--max-lora-rank"], a["--max-loras"], a["--max-cpu-loras"]) == ("32", "4", "8")
    assert a["--max-model-len"] == "3072" and a["--served-model-name"] == "Qwen/Qwen3-VL-8B-Instruct"
    assert json.loads(a["--mm-processor-kwargs"]) == {"size": {"longest_edge": 522240, "shortest_edge": 65536}}
    env = build.build_server_deployment(server())["spec"]["template"]["spec"]["containers"][0]["env"]
    assert {"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "True"} in env


def test_a_server_variable_cannot_turn_runtime_loading_off() -> None:
    s = server(env=[{"name": "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "value": "False"}, {"name": "X", "value": "1"}])
    env = build.build_server_deployment(s)["spec"]["template"]["spec"]["containers"][0]["env"]
    assert [e["value"] for e in env if e["name"] == "VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == ["True"]
    assert {"name": "X", "value": "1"} in env


def test_only_the_namespaces_directory_of_an_adapter_claim_and_only_the_models_directory_are_mounted() -> None:
    s = server(model={"name": "pvc://fsx-claim/models/qwen3-vl-8b"})
    pod = build.build_server_deployment(s)["spec"]["template"]["spec"]
    vllm, gateway = pod["containers"]
    mounts = {m["mountPath"]: m for m in gateway["volumeMounts"]}
    adapters = mounts["/fsx/mmrl/hyperpod-ns-research"]
    assert (adapters["subPath"], adapters["readOnly"]) == ("mmrl/hyperpod-ns-research", True)
    assert not any(m.startswith("/fsx") and m != "/fsx/mmrl/hyperpod-ns-research" for m in mounts)
    vllm_mounts = {m["mountPath"]: m for m in vllm["volumeMounts"]}
    assert not any(m.startswith("/fsx") for m in vllm_mounts)  # vLLM reads the gateway's checked copies only
    model = vllm_mounts["/mnt/pvc/fsx-claim/models/qwen3-vl-8b"]
    assert (model["subPath"], model["readOnly"]) == ("models/qwen3-vl-8b", True)
    claims = [v["persistentVolumeClaim"] for v in pod["volumes"] if "persistentVolumeClaim" in v]
    assert {x["claimName"] for x in claims} == {"fsx-claim"} and all(x["readOnly"] for x in claims)
    assert args(s)["--model"] == "/mnt/pvc/fsx-claim/models/qwen3-vl-8b"
    assert args(s)["--served-model-name"] == "qwen3-vl-8b"
    assert pod["automountServiceAccountToken"] is False
    assert pod["readinessGates"] == [{"conditionType": "mmrl.dev/adapters-loaded"}]


def test_children_are_owned_by_the_server_and_selected_by_its_label() -> None:
    dep, svc = build.build_server_deployment(server()), build.build_server_service(server())
    for obj in (dep, svc):
        (ref,) = obj["metadata"]["ownerReferences"]
        assert (ref["kind"], ref["uid"], ref["controller"]) == (c.SERVER_KIND, UID, True)
        assert obj["metadata"]["name"] == "qwen3vl-8b-vllm"
        assert obj["metadata"]["labels"][c.LABEL_SERVER] == "qwen3vl-8b"
    assert (
        svc["spec"]["selector"]
        == dep["spec"]["selector"]["matchLabels"]
        == dep["spec"]["template"]["metadata"]["labels"]
    )
    gpus = dep["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"][c.GPU_RESOURCE]
    assert gpus == "1"


def available(replicas: int = 2, generation: int = 1) -> dict[str, Any]:
    dep = build.build_server_deployment(server())
    dep["metadata"]["generation"] = generation
    dep["status"] = {
        "observedGeneration": generation,
        "replicas": replicas,
        "updatedReplicas": replicas,
        "availableReplicas": replicas,
        "readyReplicas": replicas,
        "conditions": [{"type": "Available", "status": "True"}],
    }
    return dep


def test_a_new_server_creates_both_children_and_says_it_is_pending() -> None:
    plan = decide_server(server(), ServerObserved(), NOW)
    assert [o["kind"] for o in plan.apply] == ["Deployment", "Service"]
    assert plan.status["phase"] == "Pending" and plan.status["observedGeneration"] == 1
    conditions = {cd["type"]: cd["status"] for cd in plan.status["conditions"]}
    assert conditions == {"Ready": "False", "Reconciling": "True", "Stalled": "False"}
    assert [e[1] for e in plan.events] == ["ServerCreated"]


def test_an_available_deployment_makes_the_server_ready_and_a_steady_pass_writes_nothing() -> None:
    observed = ServerObserved(deployment=available(), service=build.build_server_service(server()))
    plan = decide_server(server(), observed, NOW)
    assert plan.apply == [] and plan.status["phase"] == "Ready" and plan.status["readyReplicas"] == 2
    stored = server().model_dump(by_alias=True, exclude_none=True) | {"status": plan.status}
    again = decide_server(parse_server(stored), observed, "2026-10-01T10:00:00Z")
    assert status_changed(plan.status, again.status) is None  # lastTransitionTime kept: nothing to write
    assert again.events == []  # ServerReady is said once, on the transition


def test_the_servers_periodic_passes_follow_the_operators_resync() -> None:
    ready = ServerObserved(deployment=available(), service=build.build_server_service(server()))
    pending = ServerObserved()
    assert decide_server(server(), ready, NOW).requeue_after == 60  # twice the default 30 s resync
    assert decide_server(server(), pending, NOW).requeue_after == 10
    # An operator resyncing hourly (tests/cluster/test_wakes.py) leaves the server to its events.
    assert decide_server(server(), ready, NOW, resync=3600).requeue_after == 7200
    assert decide_server(server(), pending, NOW, resync=3600).requeue_after == 1200


def test_a_changed_spec_or_an_edited_deployment_is_written_again() -> None:
    observed = ServerObserved(deployment=available(), service=build.build_server_service(server()))
    assert [o["kind"] for o in decide_server(server(2, maxLoras=2), observed, NOW).apply] == ["Deployment"]
    edited = ServerObserved(
        deployment=available(), service=build.build_server_service(server()), deployment_edited=True
    )
    assert [o["kind"] for o in decide_server(server(), edited, NOW).apply] == ["Deployment"]


def test_a_replica_that_cannot_start_stalls_the_server_with_its_reason() -> None:
    dep = available()
    dep["status"].update(availableReplicas=1, readyReplicas=1)
    observed = ServerObserved(deployment=dep, service={}, pod_problem=("ImagePullBackOff", "pod p: ImagePullBackOff"))
    plan = decide_server(server(), observed, NOW)
    stalled = next(cd for cd in plan.status["conditions"] if cd["type"] == "Stalled")
    assert plan.status["phase"] == "Degraded" and (stalled["status"], stalled["reason"]) == ("True", "ImagePullBackOff")


def test_an_object_under_a_childs_name_that_is_not_the_servers_is_never_written() -> None:
    plan = decide_server(server(), ServerObserved(foreign=("Service qwen3vl-8b-vllm",)), NOW)
    assert plan.apply == [] and plan.status["phase"] == "Degraded"
    assert "Service qwen3vl-8b-vllm" in plan.status["message"]
    assert next(cd for cd in plan.status["conditions"] if cd["type"] == "Stalled")["reason"] == "NameConflict"
