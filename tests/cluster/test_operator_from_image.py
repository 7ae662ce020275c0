"""The operator as users receive it: the image `make images` builds from docker/operator.Dockerfile, installed with
`helm install charts/mmrl-operator` (image.repository set to it), run by the local kubelet from the image's own root
filesystem through runc under the chart's restricted pod security, talking to the apiserver as the chart's
ServiceAccount. Two replicas elect a leader through the chart's Lease; when the leader crashes (its container
SIGKILLed and its pod force-deleted, as on a lost node: nothing releases the Lease) the standby pod takes over within
the lease and one pass.

Also the kubelet's refusals that a real kubelet makes: runAsNonRoot against a root user, and a `localhost/` image
that was never built."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_local.addons import operator_release
from mmrl_local.cluster import nodes
from mmrl_local.node.kubelet import Kubelet
from mmrl_local.toolchain import images_build
from mmrl_operator.core.names import TRAINER_IDENTITY
from tests.support.audit import requests_by
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
}
ARN = "eks.amazonaws.com/role-arn"
IRSA = {ARN: "arn:aws:iam::111122223333:role/mmrl-trainer"}
LEASE_SECONDS = 15  # leader.py: a standby takes a lease over this long after its last renewal
FAILOVER_BOUND = LEASE_SECONDS + 15  # the lease, one poll and one pass, on a busy host


@pytest.fixture(scope="module")
def operator_image() -> images_build.ImageFacts:
    # Built by `make test`'s prerequisites (make images); a fraction of a second when it is there.
    return images_build.build_operator(verbose=False)


def process_status(kubelet: Kubelet, pod: client.V1Pod) -> dict[str, str]:
    """/proc/<pid>/status of the pod's container's PID 1, as this machine sees it."""
    worker = kubelet.workers[pod.metadata.uid]
    (container,) = worker.containers
    pid = container.pid_one()
    assert pid is not None and container.oci is not None, "the operator's container does not run from its image"
    lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    return {k: v.strip() for k, _, v in (line.partition(":") for line in lines)}


def root_mount_options(kubelet: Kubelet, pod: client.V1Pod) -> list[str]:
    pid = kubelet.workers[pod.metadata.uid].containers[0].pid_one()
    for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == "/":
            return fields[5].split(",")
    raise AssertionError("no root mount")


def test_helm_installs_the_operator_from_its_image_and_a_standby_pod_takes_over_from_a_killed_leader(
    control_plane,
    api_client,
    core,
    jobs,
    kuberay,
    nodes_ready,
    hyperpod_nodes,
    pod_network,
    cluster_helm,
    audited_namespace,
    operator_image,
    tmp_path: Path,
) -> None:
    core.patch_namespace(audited_namespace, {"metadata": {"labels": operator_release.RESTRICTED}})
    release = operator_release.Release(cluster_helm, audited_namespace, f"op-{secrets.token_hex(3)}")
    values = operator_release.values(
        operator_image, watch=[jobs.ns], replicas=2, cluster_objects=False, trainer_annotations=IRSA
    )
    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        hyperpod_nodes.names.append(nodes.create_dedicated_node(core, operator_release.ROLE))
        release.install(values)
        try:
            pods = {p.metadata.name: p for p in release.wait_ready(core, 2)}
            for pod in pods.values():
                (container,) = pod.spec.containers
                assert container.image == operator_image.image
                status = process_status(kubelet, pod)
                assert status["Uid"].split()[:2] == ["10001", "10001"], status["Uid"]  # the image's USER
                assert status["CapEff"] == status["CapBnd"] == "0000000000000000"  # drop: [ALL]
                assert status["NoNewPrivs"] == "1"  # allowPrivilegeEscalation: false
                assert "ro" in root_mount_options(kubelet, pod)  # readOnlyRootFilesystem

            leader = wait_until(lambda: release.leader(api_client), 60, what="a leader")
            assert leader in pods
            kuberay.script("geo-a1", "hang")
            jobs.create(cluster_job("geo"))
            wait_until(lambda: jobs.status("geo").get("phase") == "Running", 90, what="the job Running")
            # The pod acted as the chart's ServiceAccount, with the chart's RBAC (server-side apply: a patch); no
            # kubeconfig is in the image.
            username = f"system:serviceaccount:{audited_namespace}:{release.name}-mmrl-operator"
            writes = requests_by(control_plane.audit_log, username)
            created = {(r.resource, r.name) for r in writes if r.verb in ("create", "patch") and r.code < 300}
            assert ("rayclusters", "geo") in created, sorted(created)
            # The chart's networkPolicy value reached it: the job's NetworkPolicy, under the chart's RBAC.
            assert ("networkpolicies", "geo-ray") in created, sorted(created)
            # The chart's trainerIdentity values reached the operator through the ConfigMap its pod mounts: the
            # namespace's trainer identity carries the IRSA role, and an edit of it is put back.
            account = core.read_namespaced_service_account(TRAINER_IDENTITY, jobs.ns)
            assert IRSA.items() <= (account.metadata.annotations or {}).items()
            theirs = {"metadata": {"annotations": {ARN: "arn:aws:iam::999999999999:role/theirs"}}}
            core.patch_namespaced_service_account(TRAINER_IDENTITY, jobs.ns, theirs)
            wait_until(
                lambda: (
                    core.read_namespaced_service_account(TRAINER_IDENTITY, jobs.ns).metadata.annotations[ARN]
                    == IRSA[ARN]
                ),
                30,
                what="the operator to put the role ARN back",
            )

            # The leader crashes as on a lost node: its container's PID 1 (and with it the container's whole PID
            # namespace) is SIGKILLed and its pod force-deleted. Nothing releases the Lease: the standby must wait
            # for it to expire.
            log = release.crash(kubelet, core, pods[leader])
            killed = time.monotonic()
            jobs.patch("geo", {"spec": {"suspend": True}})  # work only a leader does
            wait_until(
                lambda: jobs.status("geo").get("phase") == "Suspended",
                FAILOVER_BOUND - (time.monotonic() - killed),
                what="the standby pod to take over and suspend the job",
            )
            # The standby, or the Deployment's replacement pod if it was up first: either way not the crashed one.
            assert release.leader(api_client) not in (None, leader)
            assert "released the lease" not in log.read_text()
            # The Deployment replaced the killed pod: two replicas again, the new one a standby.
            release.wait_ready(core, 2, timeout=120)
        finally:
            release.uninstall()
        wait_until(lambda: not release.pods(core), 60, what="the release's pods gone")
    assert not kubelet.errors, kubelet.errors[-3:]


def test_the_kubelet_refuses_what_a_kubelet_refuses_for_an_image(
    api_client, core, namespace, pod_network, hyperpod_nodes, operator_image, tmp_path: Path
) -> None:
    def waiting(name: str) -> tuple[str, str] | None:
        statuses = core.read_namespaced_pod(name, namespace).status.container_statuses or []
        state = statuses[0].state.waiting if statuses else None
        return (state.reason, state.message) if state and state.reason not in (None, "ContainerCreating") else None

    with Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet:
        node = hyperpod_nodes.cpu(kubelet=True)
        root = {"runAsNonRoot": True, "runAsUser": 0}
        for name, image, security in [
            ("as-root", operator_image.image, root),
            ("never-built", "localhost/mmrl-operator:never-built", {}),
        ]:
            container = {"name": "main", "image": image, "args": ["--help"], "securityContext": security}
            body = {"metadata": {"name": name}, "spec": {"nodeName": node, "containers": [container]}}
            core.create_namespaced_pod(namespace, body)
        reason, message = wait_until(lambda: waiting("as-root"), 60, what="as-root refused")
        assert reason == "CreateContainerConfigError" and "runAsNonRoot and image will run as root" in message
        reason, message = wait_until(lambda: waiting("never-built"), 60, what="never-built refused")
        assert reason == "ErrImageNeverPull" and "never-built" in message
        assert core.read_namespaced_pod("as-root", namespace).status.phase == "Pending"
    assert not kubelet.errors, kubelet.errors[-3:]
