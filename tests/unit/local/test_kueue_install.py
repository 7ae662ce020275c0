"""The objects `KueueInCluster` installs, built from Kueue's own module manifests (config/components): what is kept,
renamed and wired to the certificates here. The install itself runs in tests/cluster/test_kueue.py."""

from __future__ import annotations

import base64

import yaml

from mmrl_local.addons import kueue_incluster as k
from mmrl_local.common.certs import service_serving

CA = service_serving("test-ca", [f"{k.WEBHOOK_SERVICE}.{k.NAMESPACE}.svc"])
SCOPED = {"matchLabels": {k.NAMESPACE_LABEL: "true"}}


def test_only_kueues_own_and_the_ray_webhooks_are_registered_and_all_call_the_service_with_our_ca() -> None:
    configs = k.webhook_configurations(CA.ca, SCOPED)
    assert [cfg["metadata"]["name"] for cfg in configs] == [
        "kueue-mutating-webhook-configuration",
        "kueue-validating-webhook-configuration",
    ]
    names = {w["name"] for cfg in configs for w in cfg["webhooks"]}
    assert {"mraycluster.kb.io", "vraycluster.kb.io", "mrayjob.kb.io", "vrayjob.kb.io", "vworkload.kb.io"} <= names
    # Pods, Deployments and other frameworks' kinds: not here, so nothing else in the control plane waits on Kueue.
    assert not names & {"mpod.kb.io", "vpod.kb.io", "mdeployment.kb.io", "mjob.kb.io", "mrayservice.kb.io"}
    for cfg in configs:
        for webhook in cfg["webhooks"]:
            client_config = webhook["clientConfig"]
            assert client_config["service"]["name"] == k.WEBHOOK_SERVICE
            assert client_config["service"]["namespace"] == k.NAMESPACE
            assert base64.b64decode(client_config["caBundle"]) == CA.ca
            ray = webhook["rules"][0]["apiGroups"] == ["ray.io"]
            assert (webhook.get("namespaceSelector") == SCOPED) is ray, webhook["name"]


def test_unscoped_the_webhooks_see_every_namespace_and_kueue_manages_them_all() -> None:
    configs = k.webhook_configurations(CA.ca, None)
    assert all("namespaceSelector" not in w for cfg in configs for w in cfg["webhooks"])
    assert "managedJobsNamespaceSelector" not in k.configuration(None)
    assert k.configuration(SCOPED)["managedJobsNamespaceSelector"] == SCOPED


def test_the_crds_with_a_conversion_webhook_in_kueues_release_get_one_here() -> None:
    crds = {crd["spec"]["names"]["plural"]: crd for crd in k.crds(CA.ca)}
    assert {"workloads", "clusterqueues", "localqueues", "resourceflavors", "workloadpriorityclasses"} <= set(crds)
    for plural, crd in crds.items():
        conversion = crd["spec"].get("conversion", {})
        assert (conversion.get("strategy") == "Webhook") is (plural in k.CONVERTED), plural
        if plural in k.CONVERTED:
            assert conversion["webhook"]["clientConfig"]["service"]["path"] == "/convert"


def test_rbac_binds_kueues_roles_to_its_service_account_in_its_namespace() -> None:
    objects = k.rbac()
    bindings = [o for o in objects if o["kind"] in ("ClusterRoleBinding", "RoleBinding")]
    roles = {o["metadata"]["name"] for o in objects if o["kind"] in ("ClusterRole", "Role")}
    assert {"kueue-manager-role", "kueue-metrics-auth-role", "kueue-manager-secrets-role"} <= roles
    for binding in bindings:
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": k.SERVICE_ACCOUNT, "namespace": k.NAMESPACE}]
        assert binding["metadata"]["name"].startswith(k.PREFIX)
    secrets_role = next(o for o in objects if o["metadata"]["name"] == "kueue-manager-secrets-role")
    assert secrets_role["metadata"]["namespace"] == k.NAMESPACE


def test_the_manager_reads_its_configuration_and_certificates_from_what_is_installed_beside_it() -> None:
    cfg = k.configuration(SCOPED)
    certs = {k.WEBHOOK_SECRET: CA, k.METRICS_SECRET: CA, k.VISIBILITY_SECRET: CA}
    objects = k.workloads("kueue-x", "localhost/kueue:1", cfg, certs)
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["image"] == "localhost/kueue:1" and container["command"] == ["/manager"]
    assert pod["serviceAccountName"] == k.SERVICE_ACCOUNT and pod["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[mounts["/tmp/k8s-webhook-server/serving-certs"]]["secret"]["secretName"] == k.WEBHOOK_SECRET
    assert volumes[mounts["/etc/kueue/metrics/certs"]]["secret"]["secretName"] == k.METRICS_SECRET
    assert volumes[mounts["/visibility"]]["secret"]["secretName"] == k.VISIBILITY_SECRET
    config_map = next(o for o in objects if o["kind"] == "ConfigMap")
    assert yaml.safe_load(config_map["data"]["config.yaml"]) == cfg
    assert volumes["manager-config"]["configMap"]["name"] == config_map["metadata"]["name"]
    service = next(o for o in objects if o["kind"] == "Service")
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    assert service["spec"]["ports"][0]["targetPort"] == k.WEBHOOK_PORT
