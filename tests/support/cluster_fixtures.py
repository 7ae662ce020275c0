"""Fixtures for tests against the real local control plane (``mmrl_local``), shared by tests/cluster and
tests/e2e through tests/conftest.py: one control plane per test session (started only when a test asks for it),
a fresh namespace per test, fake HyperPod nodes that are removed after each test, and a KubeRay stand-in watching
only the test's namespace, in scripted mode (``kuberay``) or running entrypoints in the head pod (``kuberay_run``),
or the real KubeRay with real Ray pods run by the local kubelet (``real_ray``).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.addons import operator_release
from mmrl_local.addons.kuberay_incluster import KubeRayInCluster
from mmrl_local.addons.kuberay_operator import KubeRayOperator
from mmrl_local.addons.kueue_incluster import KueueInCluster
from mmrl_local.addons.operator_process import FORKSERVER_ENV, PREIMPORT
from mmrl_local.cluster import hyperpod as hp
from mmrl_local.cluster import nodes
from mmrl_local.cluster.controlplane import AUDITED_NAMESPACE, ControlPlane
from mmrl_local.cluster.crd_install import (
    install_mmrl_crd,
    install_policies,
    install_trainer_status_policy,
    remove_policies,
)
from mmrl_local.common.forkserver import ForkServer
from mmrl_local.network.podnet import PodNetwork
from mmrl_local.node.kubelet import Kubelet
from mmrl_local.standin.kuberay_standin import KubeRayStandIn
from mmrl_local.toolchain import build, images_build
from mmrl_operator.codegen.server_pod_policy import build_server_pod_policy
from tests.support.chart import ChartIdentity, Helm
from tests.support.operator import Jobs, OperatorProcess
from tests.support.polling import wait_until


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """etcd + kube-apiserver + controller-manager + scheduler + kwok, KubeRay CRDs installed. Beside it, the
    session's operator fork server (imports the operator while the control plane starts): every operator a test
    starts is forked from it, the same process as `mmrl operator` without its 2 s of imports (forkserver.py)."""
    work = Path(tempfile.mkdtemp(prefix="mmrl-fork-"))
    server = ForkServer(PREIMPORT, work / "operator.sock", work / "forkserver.log").start()
    cp = ControlPlane(binaries=build.build())
    try:
        cp.start()
        server.ready()
        os.environ[FORKSERVER_ENV] = str(server.socket_path)
        yield cp
    finally:
        os.environ.pop(FORKSERVER_ENV, None)
        server.stop()
        cp.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="session")
def api_client(control_plane: ControlPlane) -> client.ApiClient:
    return control_plane.api_client()


@pytest.fixture(scope="session")
def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)


@pytest.fixture(scope="session")
def custom(api_client: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(api_client)


# The namespaced kinds whose controllers (KubeRay, Kueue) put finalizers on objects, and may be stopped first.
FINALIZED = [(c.RAY_GROUP, c.RAY_VERSION, "rayjobs"), (c.RAY_GROUP, c.RAY_VERSION, "rayclusters")]
FINALIZED.append(("kueue.x-k8s.io", "v1beta2", "workloads"))


def release_ray_finalizers(custom: client.CustomObjectsApi, namespace: str) -> None:
    """Drop the finalizers KubeRay (or the strict stand-in, which adds KubeRay's) and Kueue left on the namespace's
    Ray objects and Workloads. In a cluster they keep running and remove them when an object is deleted; a test stops
    its controllers before its namespace goes, so without this the namespace stays Terminating for the rest of the
    run, and the namespace controller retries it (a LIST and a DELETE of every resource type each time) until the
    apiserver is busy with nothing else."""
    for group, version, plural in FINALIZED:
        try:
            items = custom.list_namespaced_custom_object(group, version, namespace, plural)["items"]
        except client.exceptions.ApiException:
            continue  # the CRD is not installed
        for item in items:
            if item["metadata"].get("finalizers"):
                with contextlib.suppress(client.exceptions.ApiException):
                    custom.patch_namespaced_custom_object(
                        group, version, namespace, plural, item["metadata"]["name"], {"metadata": {"finalizers": None}}
                    )


@pytest.fixture
def namespace(core: client.CoreV1Api, custom: client.CustomObjectsApi, request: pytest.FixtureRequest) -> Iterator[str]:
    """A new namespace named after the test; deleted (without waiting) afterwards, with nothing left to hold it."""
    base = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-")
    name = f"{base}-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name, "labels": {"mmrl-local.dev/test": "true"}}})
    # ServiceAccount admission rejects pods until the controller-manager created "default".
    deadline = time.monotonic() + 30
    while not core.list_namespaced_service_account(name, field_selector="metadata.name=default").items:
        assert time.monotonic() < deadline, "no default ServiceAccount in the test namespace"
        time.sleep(0.1)
    yield name
    release_ray_finalizers(custom, name)
    core.delete_namespace(name)


class HyperPodNodes:
    """Fake HyperPod nodes for one test; all of them (and their replacements) are deleted at teardown."""

    def __init__(self, core: client.CoreV1Api) -> None:
        self.core = core
        self.names: list[str] = []

    def gpu(
        self,
        count: int = 1,
        instance_group: str = "gpu-workers",
        labels: dict[str, str] | None = None,
        *,
        kubelet: bool = False,
    ) -> list[str]:
        """``kubelet``: nodes whose pods run for real (needs the ``real_ray`` fixture's kubelet)."""
        names = nodes.create_gpu_nodes(self.core, count, instance_group=instance_group, labels=labels, kubelet=kubelet)
        self.names += names
        return names

    def cpu(self, instance_group: str = "controller", *, kubelet: bool = False) -> str:
        name = nodes.create_cpu_node(self.core, instance_group=instance_group, kubelet=kubelet)
        self.names.append(name)
        return name

    def wait_schedulable(self, names: list[str], timeout: float = 120.0) -> None:
        """Until the scheduler may use every node: Ready is not enough, the node lifecycle controller's not-ready
        taint lags it by a node-monitor period, and on this 2-core machine under a full parallel run (real Ray and
        vLLM beside the control planes) by more than 30 s: a job's 90 s could run out with its pods still Pending."""
        for name in names:
            wait_until(
                lambda n=name: nodes.schedulable_ready(self.core.read_node(n)),
                timeout,
                what=lambda n=name: f"node {n} schedulable (taints {self._taints(n)})",
            )

    def _taints(self, name: str) -> list[str]:
        return [t.key for t in self.core.read_node(name).spec.taints or []]

    def set_health(self, name: str, status: hp.NodeHealth | str) -> None:
        nodes.set_health(self.core, name, status)

    def set_not_ready(self, name: str) -> None:
        nodes.set_not_ready(self.core, name)

    def delete(self, name: str) -> None:
        nodes.delete_node(self.core, name)

    def replace(self, name: str) -> str:
        new = nodes.replace_node(self.core, name)
        self.names.append(new)
        return new

    def cleanup(self) -> None:
        for name in self.names:
            nodes.delete_node(self.core, name)


@pytest.fixture
def hyperpod_nodes(core: client.CoreV1Api) -> Iterator[HyperPodNodes]:
    helper = HyperPodNodes(core)
    yield helper
    helper.cleanup()


def _standin(
    api_client: client.ApiClient,
    namespace: str,
    tmp_path: Path,
    mode: str,
    strict: bool = False,
    network: PodNetwork | None = None,
) -> Iterator[KubeRayStandIn]:
    standin = KubeRayStandIn(
        api_client,
        mode=mode,
        namespaces={namespace},
        log_dir=tmp_path / "rayjobs",
        resync=0.3,
        strict=strict,
        network=network,
    )
    standin.start()
    yield standin
    standin.stop()
    assert not standin.errors, f"the stand-in's reconcile loop failed: {standin.errors}"
    assert not standin.violations, f"two attempts overlapped: {standin.violations}"


@pytest.fixture
def kuberay(
    control_plane: ControlPlane, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[KubeRayStandIn]:
    """The KubeRay stand-in in scripted mode, limited to this test's namespace. ``kuberay.script(name, ...)``
    decides how RayJobs end; RayJob logs of run-mode jobs go to ``tmp_path / "rayjobs"``."""
    yield from _standin(api_client, namespace, tmp_path, "scripted", network=control_plane.pod_network)


@pytest.fixture
def kuberay_strict(
    control_plane: ControlPlane, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[KubeRayStandIn]:
    """Scripted mode with KubeRay v1.5's timing: RayJob finalizers, graceful pod termination, Terminating pods
    counted as ready; it records any attempt that starts while the previous one is not gone."""
    yield from _standin(api_client, namespace, tmp_path, "scripted", strict=True, network=control_plane.pod_network)


@pytest.fixture
def kuberay_run(
    control_plane: ControlPlane, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[KubeRayStandIn]:
    """The stand-in in run mode: every RayJob's entrypoint really runs inside its Ray head pod's view, in the head
    pod's network namespace where this machine can make one (else in this machine's network)."""
    yield from _standin(api_client, namespace, tmp_path, "run", network=control_plane.pod_network)


@pytest.fixture
def real_kuberay(
    api_client: client.ApiClient, control_plane: ControlPlane, namespace: str, tmp_path: Path
) -> Iterator[KubeRayOperator]:
    """The REAL KubeRay operator (v1.5.1) as a process on this machine, watching this test's namespace, on kwok's
    nodes: it makes the pods, Services and submitter Jobs, and no Ray runs in them."""
    with KubeRayOperator(api_client, control_plane.kubeconfig, tmp_path / "kuberay.log", namespaces=[namespace]) as kr:
        yield kr


@dataclass
class RealRay:
    kubelet: Kubelet
    kuberay: KubeRayInCluster


@pytest.fixture
def real_ray(
    control_plane: ControlPlane, pod_network: PodNetwork, api_client: client.ApiClient, namespace: str, tmp_path: Path
) -> Iterator[RealRay]:
    """The local kubelet that runs the pods of nodes created with ``kubelet=True`` for real (Ray's head and workers,
    KubeRay's submitter, the inference pod), and the real KubeRay operator (v1.5.1) in the cluster, watching this
    test's namespace: its pod runs from its image on a node kept for it and reaches each Ray head by the head
    Service's name. Skipped with ``pod_network`` where pods cannot get namespaces here."""
    with (
        Kubelet(api_client, pod_network, tmp_path / "pods") as kubelet,
        KubeRayInCluster(api_client, kubelet, namespaces=[namespace]) as kuberay,
    ):
        yield RealRay(kubelet, kuberay)
    assert not kubelet.errors, f"the kubelet's loop failed: {kubelet.errors[-3:]}"


@pytest.fixture
def kueue(
    control_plane: ControlPlane,
    pod_network: PodNetwork,
    api_client: client.ApiClient,
    custom: client.CustomObjectsApi,
    namespace: str,
    tmp_path: Path,
) -> Iterator[KueueInCluster]:
    """The REAL Kueue (v0.17.0) in the cluster, its controller's pod run from its image by the local kubelet,
    managing this test's namespace (only: its Ray webhooks see no other). Queues and priority classes made with
    ``kueue.apply`` are removed afterwards."""
    with (
        Kubelet(api_client, pod_network, tmp_path / "kueue-pods") as kubelet,
        KueueInCluster(api_client, kubelet) as running,
    ):
        running.label_namespace(namespace)
        yield running
        release_ray_finalizers(custom, namespace)
    assert not kubelet.errors, f"the kubelet's loop failed: {kubelet.errors[-3:]}"


@pytest.fixture
def pod_network(control_plane: ControlPlane) -> PodNetwork:
    """The session's pod network; tests that run pods for real are skipped, with the reason, where there is none.
    CI runs as root, where there always is one."""
    if control_plane.pod_network is None:
        pytest.skip(control_plane.network_note)
    return control_plane.pod_network


def wait_for(predicate, timeout: float = 30.0, interval: float = 0.2, what: str = "condition"):
    """Poll ``predicate`` until it returns something truthy; return that value."""
    return wait_until(predicate, timeout, interval, what)


@pytest.fixture
def wait():
    return wait_for


# --- the mmrl operator under test ---------------------------------------------------------------------------


@pytest.fixture(scope="session")
def mmrl_crd(api_client: client.ApiClient) -> None:
    install_mmrl_crd(api_client)
    install_trainer_status_policy(api_client)


@pytest.fixture
def jobs(api_client: client.ApiClient, namespace: str, mmrl_crd: None) -> Jobs:
    return Jobs(api_client, namespace)


@pytest.fixture
def operator(control_plane, namespace: str, tmp_path: Path, mmrl_crd: None) -> Iterator[OperatorProcess]:
    with OperatorProcess(control_plane.kubeconfig, tmp_path / "operator.log", namespaces=[namespace]) as op:
        yield op


@pytest.fixture
def chart_operator(
    api_client, cluster_helm, audited_namespace, namespace, tmp_path, mmrl_crd: None
) -> Iterator[OperatorProcess]:
    """The operator as a process authenticated as the chart's ServiceAccount, with only the chart's RBAC
    (namespaced: it watches the test's namespace)."""
    identity = ChartIdentity(api_client, cluster_helm, audited_namespace, [namespace], tmp_path)
    env = {"POD_NAMESPACE": identity.namespace, "MMRL_LEASE_NAME": identity.lease}
    try:
        log = tmp_path / "operator.log"
        with OperatorProcess(identity.kubeconfig, log, standalone=False, namespaces=identity.watch, env=env) as op:
            yield op
    finally:
        identity.delete()


@pytest.fixture
def server_pod_policy(api_client: client.ApiClient) -> Iterator[None]:
    """The chart's server-pod admission policies (serverPodPolicy.enabled), removed after the test."""
    objects = build_server_pod_policy()
    install_policies(api_client, objects)
    admission = client.AdmissionregistrationV1Api(api_client)
    for obj in objects:
        if obj["kind"] == "ValidatingAdmissionPolicy":
            checked = admission.read_validating_admission_policy(obj["metadata"]["name"]).status.type_checking
            assert not (checked and checked.expression_warnings), checked.expression_warnings
    try:
        yield
    finally:
        remove_policies(api_client, objects)


@pytest.fixture
def operator_pods(
    api_client: client.ApiClient,
    core: client.CoreV1Api,
    real_ray: RealRay,
    hyperpod_nodes: HyperPodNodes,
    cluster_helm: Helm,
    audited_namespace: str,
    namespace: str,
    mmrl_crd: None,
) -> Iterator[operator_release.Release]:
    """The operator as a platform team installs it: `helm install` of the chart with the image `make images` built,
    2 replicas with leader election, on a node kept for it whose pods ``real_ray``'s kubelet runs from the image."""
    image = images_build.build_operator(verbose=False)
    core.patch_namespace(audited_namespace, {"metadata": {"labels": operator_release.RESTRICTED}})
    hyperpod_nodes.names.append(nodes.create_dedicated_node(core, operator_release.ROLE))
    release = operator_release.Release(cluster_helm, audited_namespace, f"op-{secrets.token_hex(3)}")
    irsa = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/mmrl-trainer"}  # as on EKS; inert here
    release.install(
        operator_release.values(image, watch=[namespace], replicas=2, cluster_objects=False, trainer_annotations=irsa)
    )
    try:
        release.wait_ready(core, 2)
        yield release
    finally:
        release.uninstall()


@pytest.fixture
def nodes_ready(hyperpod_nodes) -> list[str]:
    """A CPU node and two GPU nodes the scheduler may use (not only Ready: see `wait_schedulable`)."""
    cpu = hyperpod_nodes.cpu()
    gpus = hyperpod_nodes.gpu(2)
    hyperpod_nodes.wait_schedulable([cpu, *gpus])
    return gpus


# --- the Helm chart ------------------------------------------------------------------------------------------


@pytest.fixture
def cluster_helm(control_plane: ControlPlane, tmp_path: Path) -> Helm:
    """helm against the control plane, with throwaway homes."""
    return Helm(control_plane.binaries["helm"], tmp_path / "helm", control_plane.kubeconfig)


@pytest.fixture(scope="session")
def audited_namespace(core: client.CoreV1Api) -> str:
    """A release namespace for the chart: the apiserver audits its ServiceAccounts' requests (kept for the session)."""
    with contextlib.suppress(client.exceptions.ApiException):
        core.create_namespace({"metadata": {"name": AUDITED_NAMESPACE}})
    return AUDITED_NAMESPACE


@pytest.fixture
def other_namespace(core: client.CoreV1Api) -> Iterator[str]:
    """A second namespace, for what must (not) reach beyond the test's own."""
    name = f"other-{secrets.token_hex(3)}"
    core.create_namespace({"metadata": {"name": name}})
    yield name
    core.delete_namespace(name)
