"""The trainer's environment and what the operator writes: a secret travels only as a secretKeyRef (to the Ray pods
and to the vLLM server, which loads the same model), and no env value reaches the trainer ConfigMap, the job status
or an event."""

from __future__ import annotations

import json

import pytest

from mmrl_api import parse_job
from mmrl_operator.core.builders.inference import build_deployment, default_adapter
from mmrl_operator.core.builders.raycluster import build_raycluster
from mmrl_operator.core.builders.trainer_config import build_config_map
from mmrl_operator.core.decide import decide
from mmrl_operator.core.observed import Observed
from tests.support.corpus import example
from tests.support.factories import T0, job

MARKER = "marker-4f9c2e-not-for-configmaps"
HF_TOKEN = {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}}
ENV = [
    HF_TOKEN,
    {"name": "WANDB_API_KEY", "valueFrom": {"secretKeyRef": {"name": "wandb", "key": "api-key"}}},
    {"name": "SETTINGS_FROM_MAP", "valueFrom": {"configMapKeyRef": {"name": "settings", "key": "x"}}},
    {"name": "NCCL_DEBUG", "value": MARKER},
]


def with_env(status: dict | None = None):  # type: ignore[no-untyped-def]
    return job({"spec": {"trainer": {"env": ENV}}}, status=status)


def server_env(j) -> list[dict]:  # type: ignore[no-untyped-def]
    dep = build_deployment(j, default_adapter(j))
    return next(c for c in dep["spec"]["template"]["spec"]["containers"] if c["name"] == "vllm")["env"]


def test_the_trainers_secret_env_reaches_the_built_vllm_deployment_as_the_same_secret_key_ref() -> None:
    j = with_env({"phase": "Succeeded"})
    env = server_env(j)
    assert HF_TOKEN in env and ENV[1] in env
    # Never as a value; the trainer's literal and ConfigMap settings stay the trainer's.
    names = [e["name"] for e in env]
    assert "NCCL_DEBUG" not in names and "SETTINGS_FROM_MAP" not in names
    assert all("value" not in e for e in env if e["name"] in ("HF_TOKEN", "WANDB_API_KEY"))
    assert names.count("VLLM_NO_USAGE_STATS") == 1


def test_the_example_jobs_hf_token_reaches_the_built_vllm_deployment() -> None:
    j = job(status={"phase": "Succeeded"})  # examples/job.yaml, as a platform team would write it
    assert HF_TOKEN in example()["spec"]["trainer"]["env"]
    assert HF_TOKEN in server_env(j)


def test_no_env_value_or_secret_reference_is_written_to_the_trainer_config_map() -> None:
    data = json.dumps(build_config_map(with_env()))
    assert MARKER not in data
    assert "hf-token" not in data and "HF_TOKEN" not in data  # the Ray pods' env carries them, by reference
    pod = build_raycluster(with_env())["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    assert HF_TOKEN in pod["env"]


def test_no_env_value_reaches_the_status_or_an_event() -> None:
    j = with_env()
    plan = decide(j, 1, Observed(), T0)
    assert plan.events  # the pass does report (JobCreated, ...), just never the env
    written = json.dumps([plan.status, [(e.reason, e.message) for e in plan.events]])
    assert MARKER not in written and "hf-token" not in written


@pytest.mark.parametrize("value", ["hf_live_5ecr3t", MARKER])
def test_an_inline_credential_is_refused_without_repeating_its_value(value: str) -> None:
    doc = example()
    doc["metadata"].update({"name": "geo", "namespace": "team"})
    doc["spec"]["trainer"]["env"] = [{"name": "HF_TOKEN", "value": value}]
    # The operator's second line of validation: its message becomes status.message and an InvalidSpec event.
    with pytest.raises(ValueError) as caught:
        parse_job(doc)
    assert "spec.trainer.env[0].value" in str(caught.value) and "secretKeyRef" in str(caught.value)
    assert value not in str(caught.value)


TRACKING = {
    "mlflow": {"trackingUri": "http://mlflow.mlflow.svc:5000", "credentialsSecret": "mlflow-auth"},
    "wandb": {"project": "vlm-rl", "apiKeySecretRef": {"name": "wandb", "key": "api-key"}},
}


def test_tracking_credentials_reach_every_ray_container_by_secret_key_ref_and_never_the_config_map() -> None:
    j = job({"spec": {"tracking": TRACKING}})
    cluster = build_raycluster(j)
    templates = [cluster["spec"]["headGroupSpec"]["template"]] + [
        g["template"] for g in cluster["spec"]["workerGroupSpecs"]
    ]
    for template in templates:
        env = {e["name"]: e for e in template["spec"]["containers"][0]["env"]}
        for var in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
            ref = {"name": "mlflow-auth", "key": var, "optional": True}
            assert env[var] == {"name": var, "valueFrom": {"secretKeyRef": ref}}
        assert env["WANDB_API_KEY"] == {
            "name": "WANDB_API_KEY",
            "valueFrom": {"secretKeyRef": TRACKING["wandb"]["apiKeySecretRef"]},
        }
    config = json.loads(build_config_map(j)["data"]["trainer.json"])
    assert config["tracking"]["mlflow"] == {**TRACKING["mlflow"], "experiment": None}  # the Secret's name only
    assert config["tracking"]["wandb"]["project"] == "vlm-rl"


def test_a_tracking_variable_the_user_set_in_trainer_env_wins() -> None:
    j = job({"spec": {"tracking": TRACKING, "trainer": {"env": ENV}}})
    env = build_raycluster(j)["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["env"]
    assert [e for e in env if e["name"] == "WANDB_API_KEY"] == [ENV[1]]
