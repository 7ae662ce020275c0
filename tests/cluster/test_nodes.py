"""Fake HyperPod nodes look and fail like HyperPod's: labels and capacity, the health label with its
NoSchedule taint, NotReady, and replacement by a new instance whose pods then run there."""

from __future__ import annotations

import re

import pytest
from kubernetes import client

from mmrl_local.cluster import hyperpod as hp
from tests.cluster.test_workloads import deployment

pytestmark = pytest.mark.cluster


def test_gpu_nodes_carry_hyperpod_labels_and_capacity(core, hyperpod_nodes) -> None:
    (name,) = hyperpod_nodes.gpu(1, instance_group="train-p5")
    node = core.read_node(name)
    assert re.fullmatch(r"hyperpod-i-[0-9a-f]{17}", name)
    labels = node.metadata.labels
    assert labels[hp.NODE_HEALTH_STATUS] == "Schedulable"
    assert labels[hp.INSTANCE_TYPE] == "ml.p5.48xlarge"
    assert labels[hp.INSTANCE_GROUP_NAME] == "train-p5"
    assert node.status.allocatable[hp.GPU] == "8"
    assert node.status.allocatable[hp.EFA] == "32"
    assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_unhealthy_node_is_tainted_and_gets_no_new_pods(api_client, core, namespace, hyperpod_nodes, wait) -> None:
    sick, healthy = hyperpod_nodes.gpu(2)
    hyperpod_nodes.set_health(sick, hp.NodeHealth.UNSCHEDULABLE)
    node = core.read_node(sick)
    assert node.metadata.labels[hp.NODE_HEALTH_STATUS] == "Unschedulable"
    # Only HyperPod's own taint: a node this new may also still carry node.kubernetes.io/not-ready, which the
    # node lifecycle controller removes once it has seen the kubelet's first Ready.
    taints = [(t.key, t.value, t.effect) for t in node.spec.taints or [] if t.key == hp.NODE_HEALTH_STATUS]
    assert taints == [(hp.NODE_HEALTH_STATUS, "Unschedulable", "NoSchedule")]

    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, deployment("gpu", replicas=4, node_selector={hp.INSTANCE_GROUP_NAME: "gpu-workers"})
    )
    pods = wait(
        lambda: (
            (p := core.list_namespaced_pod(namespace).items)
            and len(p) == 4
            and all(x.status.phase == "Running" for x in p)
            and p
        ),
        what="4 running pods",
    )
    assert {p.spec.node_name for p in pods} == {healthy}

    hyperpod_nodes.set_health(sick, hp.NodeHealth.SCHEDULABLE)
    assert not core.read_node(sick).spec.taints


def test_not_ready_node_reports_ready_false(core, hyperpod_nodes) -> None:
    (name,) = hyperpod_nodes.gpu(1)
    hyperpod_nodes.set_not_ready(name)
    ready = next(c for c in core.read_node(name).status.conditions if c.type == "Ready")
    assert ready.status == "False"


def test_pods_run_on_the_new_node_after_a_replacement(api_client, core, namespace, hyperpod_nodes, wait) -> None:
    (old,) = hyperpod_nodes.gpu(1, instance_group="train-p5")
    client.AppsV1Api(api_client).create_namespaced_deployment(
        namespace, deployment("trainer", replicas=2, node_selector={hp.INSTANCE_GROUP_NAME: "train-p5"})
    )
    wait(
        lambda: [
            p
            for p in core.list_namespaced_pod(namespace).items
            if p.status.phase == "Running" and p.spec.node_name == old
        ],
        what="pods on the old node",
    )

    new = hyperpod_nodes.replace(old)

    assert new != old
    assert [n.metadata.name for n in core.list_node(label_selector=f"{hp.INSTANCE_GROUP_NAME}=train-p5").items] == [new]
    pods = wait(
        lambda: (
            (p := core.list_namespaced_pod(namespace).items)
            and len(p) == 2
            and all(x.status.phase == "Running" and x.spec.node_name == new for x in p)
            and p
        ),
        what="both pods running on the replacement node",
    )
    assert core.read_node(new).metadata.labels[hp.NODE_HEALTH_STATUS] == "Schedulable"
    assert len(pods) == 2
