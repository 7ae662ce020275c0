"""The REAL Kueue (v0.17.0, ``kueue_build``) in the cluster, installed from the manifests its module publishes
(config/components: CRDs, the manager's ClusterRole, the webhook configurations and Service) under the names
Kueue's release gives them (``kueue-`` prefix, namespace kueue-system), its controller manager's pod run by the
local kubelet from an image of the binary (``images_build.build_kueue``).

What differs from Kueue's default install, and why:
- Certificates come from here, as cert-manager would provide them (Kueue's documented alternative to its internal
  cert management): a CA of its own signs the webhook Service's certificate; the CA goes into every webhook's
  ``caBundle``, and into the conversion webhooks of the CRDs that have one. Kueue's internal rotator waits for the
  kubelet to refresh a Secret volume it has just written, which the local kubelet does not do.
- ``integrations.frameworks`` lists the Ray kinds only, and only their webhooks and Kueue's own API's are
  registered: the other frameworks' CRDs are not installed here, and their pod/Deployment webhooks (failure policy
  Fail) would stand between every other pod in the control plane and a Kueue that tests start and stop.
- The Ray webhooks, and the jobs Kueue manages, are limited to namespaces carrying ``NAMESPACE_LABEL``: the test
  suite's control plane is shared by tests that do not run under Kueue.
- One replica without leader election, and no visibility APIService (an aggregated API left unavailable when Kueue
  stops would break discovery for every client of the control plane).

The apiserver reaches the webhook through the Service's endpoints (``--enable-aggregator-routing``), the pod IP.
"""

from __future__ import annotations

import base64
import contextlib
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from mmrl_local.addons.incluster import InClusterController, ignore_missing
from mmrl_local.cluster import crds as crd_files
from mmrl_local.cluster import nodes
from mmrl_local.common.apply import apply_objects
from mmrl_local.common.certs import ServingPems, service_serving
from mmrl_local.node.kubelet import Kubelet
from mmrl_local.toolchain import build, images_build, kueue_build
from mmrl_local.toolchain.images_build import ImageFacts

NAMESPACE = "kueue-system"
PREFIX = "kueue-"
ROLE = "kueue"  # the dedicated node's role
SERVICE_ACCOUNT = "kueue-controller-manager"
WEBHOOK_SERVICE = "kueue-webhook-service"
WEBHOOK_SECRET = "kueue-webhook-server-cert"
METRICS_SECRET = "kueue-metrics-server-cert"
VISIBILITY_SECRET = "kueue-visibility-server-cert"
METRICS_SERVICE, VISIBILITY_SERVICE = "kueue-controller-manager-metrics-service", "kueue-visibility-server"
CONFIG_MAP = "kueue-manager-config"
WEBHOOK_PORT, PROBE_PORT, METRICS_PORT = 9443, 8081, 8443
NAMESPACE_LABEL = "kueue.mmrl-local.dev/managed"
FRAMEWORKS = ("ray.io/raycluster", "ray.io/rayjob")
RAY_RESOURCES = {"rayclusters", "rayjobs"}
# The CRDs whose release manifests carry a conversion webhook (config/components/crd/kustomization.yaml).
CONVERTED = {"localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters"}
GROUP, VERSION = "kueue.x-k8s.io", "v1beta2"
NO_FINALIZERS = {"metadata": {"finalizers": None}}
LABELS = {"app.kubernetes.io/name": "kueue", "control-plane": "controller-manager"}


def _docs(path: Path) -> list[dict[str, Any]]:
    """Kueue's manifests, from its module: parsed once per cache (each test's Kueue read 1.6 MB of CRDs again)."""
    return crd_files.load_module_docs(path, build.cache_root() / "crds")


def _config() -> Path:
    return kueue_build.module_dir() / "config" / "components"


def crds(ca: bytes) -> list[dict[str, Any]]:
    out = []
    for path in sorted((_config() / "crd" / "bases").glob("*.yaml")):
        for crd in _docs(path):
            if crd["spec"]["names"]["plural"] in CONVERTED:
                service = {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE, "path": "/convert"}
                crd["spec"]["conversion"] = {
                    "strategy": "Webhook",
                    "webhook": {
                        "clientConfig": {"service": service, "caBundle": base64.b64encode(ca).decode()},
                        "conversionReviewVersions": ["v1"],
                    },
                }
            out.append(crd)
    return out


def rbac() -> list[dict[str, Any]]:
    """The manager's ClusterRole, the metrics endpoint's auth role and the Role for Secrets in its namespace, bound to
    its ServiceAccount."""
    objects: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}}
    ]
    for role_file in ("role", "metrics_auth_role", "manager_secrets_role"):
        (role,) = _docs(_config() / "rbac" / f"{role_file}.yaml")
        (binding,) = _docs(_config() / "rbac" / f"{role_file}_binding.yaml")
        for obj in (role, binding):
            obj["metadata"]["name"] = PREFIX + obj["metadata"]["name"]
            if "namespace" in obj["metadata"]:  # the Secrets it reads live in its own namespace
                obj["metadata"]["namespace"] = NAMESPACE
        binding["roleRef"]["name"] = role["metadata"]["name"]
        binding["subjects"] = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
        objects += [role, binding]
    # The visibility server (an extension apiserver inside the manager) reads the apiserver's authentication config.
    (reader,) = _docs(_config() / "visibility" / "role_binding.yaml")
    reader["metadata"]["name"] = PREFIX + reader["metadata"]["name"]
    reader["subjects"] = [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]
    return [*objects, reader]


def _kept(webhook: dict[str, Any]) -> bool:
    rules = webhook["rules"]
    groups = {g for r in rules for g in r["apiGroups"]}
    resources = {r for rule in rules for r in rule["resources"]}
    return groups == {"kueue.x-k8s.io"} or (groups == {"ray.io"} and resources <= RAY_RESOURCES)


def webhook_configurations(ca: bytes, namespace_selector: dict[str, Any] | None) -> list[dict[str, Any]]:
    out = []
    for config in _docs(_config() / "webhook" / "manifests.yaml"):
        config["metadata"]["name"] = PREFIX + config["metadata"]["name"]
        kept = []
        for webhook in filter(_kept, config["webhooks"]):
            webhook["clientConfig"]["service"].update(name=WEBHOOK_SERVICE, namespace=NAMESPACE)
            webhook["clientConfig"]["caBundle"] = base64.b64encode(ca).decode()
            if namespace_selector is not None and webhook["rules"][0]["apiGroups"] == ["ray.io"]:
                webhook["namespaceSelector"] = namespace_selector
            kept.append(webhook)
        config["webhooks"] = kept
        out.append(config)
    return out


def configuration(namespace_selector: dict[str, Any] | None) -> dict[str, Any]:
    """The manager's Configuration (config.kueue.x-k8s.io/v1beta2), Kueue's defaults except as the module says."""
    cfg: dict[str, Any] = {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "health": {"healthProbeBindAddress": f":{PROBE_PORT}"},
        "metrics": {"bindAddress": f":{METRICS_PORT}"},
        "webhook": {"port": WEBHOOK_PORT},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "integrations": {"frameworks": list(FRAMEWORKS)},
    }
    if namespace_selector is not None:
        cfg["managedJobsNamespaceSelector"] = namespace_selector
    return cfg


def _secret(name: str, pems: ServingPems) -> dict[str, Any]:
    data = {"ca.crt": pems.ca, "tls.crt": pems.cert, "tls.key": pems.key}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "type": "kubernetes.io/tls",
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def workloads(name: str, image: str, cfg: dict[str, Any], certs: dict[str, ServingPems]) -> list[dict]:
    """The Secrets (``certs`` by Secret name), ConfigMap, webhook Service and the manager's Deployment
    (config/components/manager/manager.yaml with config/default's patches: the config file, the webhook's, metrics'
    and visibility server's certificates, and ports)."""
    (_, deployment) = _docs(_config() / "manager" / "manager.yaml")
    labels = {**LABELS, "app.kubernetes.io/instance": name}
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    container.update(image=image, imagePullPolicy="Never")
    container["args"] = ["--config=/controller_manager_config.yaml", "--zap-log-level=2"]
    container["ports"] = [
        {"containerPort": WEBHOOK_PORT, "name": "webhook-server", "protocol": "TCP"},
        {"containerPort": METRICS_PORT, "name": "metrics", "protocol": "TCP"},
    ]
    container["volumeMounts"] = [
        {"name": "manager-config", "mountPath": "/controller_manager_config.yaml", "subPath": "config.yaml"},
        {"name": "cert", "mountPath": "/tmp/k8s-webhook-server/serving-certs", "readOnly": True},
        {"name": "metrics-certs", "mountPath": "/etc/kueue/metrics/certs", "readOnly": True},
        {"name": "visibility", "mountPath": "/visibility", "readOnly": True},
    ]
    # Probed every second (the module's 10 s period is for a cluster, not a test waiting on it).
    container["readinessProbe"].update(initialDelaySeconds=0, periodSeconds=1)
    container.pop("resources", None)  # the node kept for it is a local kubelet's, without Kueue's 512Mi to give
    pod.update(
        serviceAccountName=SERVICE_ACCOUNT,
        nodeSelector={nodes.DEDICATED_LABEL: ROLE},
        tolerations=[{**nodes.dedicated_taint(ROLE), "operator": "Equal"}],
        volumes=[
            {"name": "manager-config", "configMap": {"name": CONFIG_MAP}},
            {"name": "cert", "secret": {"secretName": WEBHOOK_SECRET, "defaultMode": 0o644}},
            {"name": "metrics-certs", "secret": {"secretName": METRICS_SECRET}},
            {"name": "visibility", "secret": {"secretName": VISIBILITY_SECRET}},
        ],
    )
    deployment["metadata"] = {"name": name, "namespace": NAMESPACE, "labels": labels}
    deployment["spec"]["selector"] = {"matchLabels": labels}
    deployment["spec"]["template"]["metadata"] = {"labels": labels}
    (service,) = _docs(_config() / "webhook" / "service.yaml")
    service["metadata"] = {"name": WEBHOOK_SERVICE, "namespace": NAMESPACE}
    service["spec"]["selector"] = labels
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": CONFIG_MAP, "namespace": NAMESPACE},
        "data": {"config.yaml": yaml.safe_dump(cfg)},
    }
    return [*(_secret(n, pems) for n, pems in certs.items()), config_map, service, deployment]


class KueueInCluster(InClusterController):
    """``start()`` (or a context manager): Kueue installed and its pod Ready; ``stop()`` removes its webhooks, the
    queues made with ``apply`` and its Deployment (CRDs stay, as an uninstall leaves them). When ``scoped``, only
    namespaces carrying ``NAMESPACE_LABEL`` are Kueue's (``label_namespace``)."""

    NAMESPACE, ROLE, CONTAINER, WHAT = NAMESPACE, ROLE, "manager", "Kueue"

    def __init__(self, api: client.ApiClient, kubelet: Kubelet, *, scoped: bool = True) -> None:
        super().__init__(api, kubelet, "kueue")
        self.selector = {"matchLabels": {NAMESPACE_LABEL: "true"}} if scoped else None
        self.image: ImageFacts | None = None
        self.created: list[dict[str, Any]] = []  # cluster-scoped queue objects, removed by stop()

    def start(self, timeout: float = 120.0) -> KueueInCluster:
        self.image = images_build.build_kueue(kueue_build.binaries(verbose=False) / kueue_build.MANAGER, False)
        webhook = service_serving("kueue-webhook-ca", [f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"])
        certs = {
            WEBHOOK_SECRET: webhook,
            METRICS_SECRET: service_serving("kueue-ca", [f"{METRICS_SERVICE}.{NAMESPACE}.svc"]),
            VISIBILITY_SECRET: service_serving("kueue-ca", [f"{VISIBILITY_SERVICE}.{NAMESPACE}.svc"]),
        }
        self._ensure_namespace()
        apply_objects(self.api, [*crds(webhook.ca), *rbac()])
        apply_objects(self.api, workloads(self.name, self.image.image, configuration(self.selector), certs))
        self._place_and_wait(timeout)
        # Registered once the server answers: a webhook with failure policy Fail and nobody behind it refuses.
        apply_objects(self.api, webhook_configurations(webhook.ca, self.selector))
        return self

    def label_namespace(self, namespace: str) -> None:
        self.core.patch_namespace(namespace, {"metadata": {"labels": {NAMESPACE_LABEL: "true"}}})

    def apply(self, objects: list[dict[str, Any]]) -> None:
        """Apply Kueue objects; the cluster-scoped ones are deleted again by ``stop()``."""
        apply_objects(self.api, objects)
        self.created += [o for o in objects if "namespace" not in o["metadata"]]

    def _uninstall(self) -> None:
        custom = client.CustomObjectsApi(self.api)
        for obj in reversed(self.created):
            plural = obj["kind"].lower() + ("es" if obj["kind"].endswith("s") else "s")
            # Kueue drops its in-use finalizer once nothing uses the object; what it had no time for goes here.
            with contextlib.suppress(client.ApiException):
                custom.patch_cluster_custom_object(GROUP, VERSION, plural, obj["metadata"]["name"], NO_FINALIZERS)
            ignore_missing(custom.delete_cluster_custom_object, GROUP, VERSION, plural, obj["metadata"]["name"])
        self.created.clear()
        admission = client.AdmissionregistrationV1Api(self.api)
        ignore_missing(admission.delete_mutating_webhook_configuration, f"{PREFIX}mutating-webhook-configuration")
        ignore_missing(admission.delete_validating_webhook_configuration, f"{PREFIX}validating-webhook-configuration")


def queues(name: str, namespace: str, quota: dict[str, str], *, preemption: bool = True) -> list[dict[str, Any]]:
    """A ResourceFlavor, a ClusterQueue with ``quota`` of it for ``namespace`` only, and a LocalQueue named ``name``
    in ``namespace`` pointing at it: what a platform team (HyperPod task governance) sets up per team. With
    ``preemption``, a workload of higher priority preempts lower ones in the ClusterQueue."""
    api = f"{GROUP}/{VERSION}"
    resources = [{"name": r, "nominalQuota": q} for r, q in sorted(quota.items())]
    spec: dict[str, Any] = {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
        "resourceGroups": [{"coveredResources": sorted(quota), "flavors": [{"name": name, "resources": resources}]}],
    }
    if preemption:
        spec["preemption"] = {"withinClusterQueue": "LowerPriority"}
    return [
        {"apiVersion": api, "kind": "ResourceFlavor", "metadata": {"name": name}},
        {"apiVersion": api, "kind": "ClusterQueue", "metadata": {"name": name}, "spec": spec},
        {
            "apiVersion": api,
            "kind": "LocalQueue",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"clusterQueue": name},
        },
    ]


def priority_class(name: str, value: int) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": name},
        "value": value,
    }


def workload_of(custom: client.CustomObjectsApi, ns: str, cluster: str) -> dict[str, Any] | None:
    """Kueue's Workload for the RayCluster named ``cluster`` (the one it owns), or None."""
    items = custom.list_namespaced_custom_object(GROUP, VERSION, ns, "workloads")["items"]
    owned = (w for w in items if any(o["name"] == cluster for o in w["metadata"].get("ownerReferences") or []))
    return next(owned, None)


def workload_condition(workload: dict[str, Any] | None, type_: str) -> dict[str, Any] | None:
    conds = (workload or {}).get("status", {}).get("conditions") or []
    return next((x for x in conds if x["type"] == type_), None)
