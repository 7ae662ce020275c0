"""EFA for NCCL: the Ray pods that request EFA devices get libfabric's efa provider and the aws-ofi-nccl plugin."""

from __future__ import annotations

import pytest

from mmrl_api import constants as c
from mmrl_operator.core.builders.raycluster import build_raycluster
from tests.support.factories import job


def env_of(template: dict) -> dict[str, str]:
    return {e["name"]: e.get("value", "") for e in template["spec"]["containers"][0]["env"]}


def worker_env(patch: dict) -> dict[str, str]:
    rc = build_raycluster(job(patch))
    return env_of(rc["spec"]["workerGroupSpecs"][0]["template"])


def group(**fields: object) -> dict:
    base = {"name": "p5", "replicas": 1, "gpusPerNode": 8}
    return {"spec": {"cluster": {"workerGroups": [{**base, **fields}]}}}


def test_workers_that_request_efa_load_the_efa_provider_and_nccl_plugin() -> None:
    env = worker_env(group(instanceType="ml.p5.48xlarge", efaPerNode=32))
    assert {k: env[k] for k in ("FI_PROVIDER", "FI_EFA_FORK_SAFE", "NCCL_NET_PLUGIN")} == {
        "FI_PROVIDER": "efa",
        "FI_EFA_FORK_SAFE": "1",
        "NCCL_NET_PLUGIN": "ofi",
    }
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"  # p5's EFA devices do GPUDirect RDMA


def test_the_head_and_workers_without_efa_get_no_efa_settings() -> None:
    rc = build_raycluster(job(group(instanceType="ml.p5.48xlarge", efaPerNode=0)))
    for template in [rc["spec"]["headGroupSpec"]["template"], rc["spec"]["workerGroupSpecs"][0]["template"]]:
        assert not set(env_of(template)) & {*c.EFA_ENV, *c.EFA_RDMA_ENV}


@pytest.mark.parametrize(
    ("instance_type", "rdma"),
    [
        ("ml.p4d.24xlarge", True),
        ("ml.p4de.24xlarge", True),
        ("ml.p5en.48xlarge", True),
        ("ml.p6-b200.48xlarge", True),
        ("p5.48xlarge", True),  # plain EKS (hyperpod: false) names the type without HyperPod's ml. prefix
        ("ml.g5.48xlarge", False),  # EFA without RDMA: forcing it would abort the process in libfabric
        ("ml.g6e.48xlarge", False),
        (None, False),
    ],
)
def test_gpudirect_rdma_is_forced_only_where_the_efa_device_has_it(instance_type: str | None, rdma: bool) -> None:
    patch = group(instanceType=instance_type, efaPerNode=1)
    patch["spec"]["cluster"]["hyperpod"] = instance_type is None or instance_type.startswith("ml.")
    env = worker_env(patch)
    assert env["FI_PROVIDER"] == "efa"
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) is rdma


def test_efa_requested_through_resources_counts_too() -> None:
    env = worker_env(group(instanceType="ml.p5.48xlarge", resources={"limits": {c.EFA_RESOURCE: "32"}}))
    assert env["NCCL_NET_PLUGIN"] == "ofi"


def test_the_users_own_setting_wins_and_is_not_repeated() -> None:
    patch = group(instanceType="ml.p5.48xlarge", efaPerNode=32)
    patch["spec"]["trainer"] = {"env": [{"name": "FI_EFA_USE_DEVICE_RDMA", "value": "0"}]}
    rc = build_raycluster(job(patch))
    names = [e["name"] for e in rc["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]]
    assert names.count("FI_EFA_USE_DEVICE_RDMA") == 1
    assert worker_env(patch)["FI_EFA_USE_DEVICE_RDMA"] == "0"
