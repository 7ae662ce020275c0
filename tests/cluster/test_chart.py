"""The Helm chart against the real tools and the real apiserver: `helm lint --strict`, every object `helm template`
renders (cluster-wide and namespaced) accepted by a server-side dry run, the operator's pod admitted under the
`restricted` Pod Security Standard, and `helm install` / `upgrade` / `uninstall` on the local control plane."""

from __future__ import annotations

import json
import secrets
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from mmrl_api import constants as c
from mmrl_api.gateway_contract import DEFAULT_OPERATOR_IMAGE, OPERATOR_IMAGE_ENV
from mmrl_local.addons.operator_release import RESTRICTED
from mmrl_local.cluster import crds
from mmrl_local.toolchain import build
from mmrl_operator.codegen import chart
from mmrl_operator.codegen.crd import JOB, KINDS, SERVER, KindSpec, build_crd
from mmrl_operator.codegen.server_pod_policy import PODS_POLICY, WORKLOADS_POLICY
from mmrl_operator.codegen.spec_patch_policy import POLICY_NAME as SPEC_PATCH_POLICY
from mmrl_operator.codegen.trainer_status_policy import POLICY_NAME
from mmrl_operator.core.builders.identity import build_trainer_identity
from mmrl_operator.runtime import permissions as rbac
from mmrl_operator.runtime.identity import IdentitySettings
from tests.cluster.test_model_server import server_doc
from tests.support.chart import (
    CHART,
    Helm,
    apply_objects,
    is_gone,
    of_kind,
    remove_cluster_objects,
    restore_cluster_objects,
)
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

DEFAULT: dict[str, Any] = {}
NAMESPACED_WITH_OPT_INS = {"metrics": {"serviceMonitor": {"enabled": True}}}


@pytest.fixture
def helm(tmp_path: Path) -> Helm:
    return Helm(build.build()["helm"], tmp_path / "helm")


def rules(role: dict[str, Any]) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {
        (group, resource, verb, tuple(rule.get("resourceNames") or ()))
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def table(scope: rbac.Scope, lease: str) -> set[tuple[str, str, str, tuple[str, ...]]]:
    return {(r.group, r.resource, verb, (lease,) if r.named else ()) for r in rbac.rules_for(scope) for verb in r.verbs}


@pytest.mark.parametrize(
    "values",
    [DEFAULT, {"watchNamespaces": ["team-a", "team-b"], **NAMESPACED_WITH_OPT_INS}],
    ids=["default", "namespaced"],
)
def test_helm_lint_strict_passes(helm: Helm, values: dict[str, Any]) -> None:
    result = helm.run("lint", "--strict", CHART, "-f", helm.values_file(values))
    assert "0 chart(s) failed" in result.stdout


def test_values_schema_rejects_a_misspelt_value(helm: Helm) -> None:
    result = helm.run("template", "x", CHART, "-f", helm.values_file({"watchNamespace": ["team-a"]}), check=False)
    assert result.returncode != 0 and "watchNamespace" in result.stderr


def test_operator_deployment_runs_restricted_with_probe_metrics_and_lease(helm: Helm) -> None:
    objects = helm.template("mmrl", "mmrl-system", {"watchNamespaces": ["team-a"]})
    (deployment,) = of_kind(objects, "Deployment")
    spec = deployment["spec"]
    # A rollout keeps a ready standby up until the old leader has handed the Lease over.
    assert spec["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    app_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert container["image"] == f"ghcr.io/mmrl-dev/mmrl-operator:{app_version}"
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    sc = container["securityContext"]
    assert sc["readOnlyRootFilesystem"] is True and sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"] == {"drop": ["ALL"]} and sc["runAsNonRoot"] is True
    assert container["resources"]["requests"] and container["resources"]["limits"]["memory"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    args = container["args"]
    assert f"--liveness=http://0.0.0.0:{ports['health']}/healthz" in args
    assert f"--metrics-port={ports['metrics']}" in args
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert "--namespace=team-a" in args and "--standalone" not in args
    (leader_role,) = [r for r in of_kind(objects, "Role") if r["metadata"]["namespace"] == "mmrl-system"]
    lease = next(r["resourceNames"][0] for r in leader_role["rules"] if r.get("resourceNames"))
    assert f"--peering={lease}" in args
    assert {e["name"] for e in container["env"]} >= {"POD_NAME", "POD_NAMESPACE"}
    # The operator knows its own image: every ModelServer replica's gateway runs from it.
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[OPERATOR_IMAGE_ENV] == container["image"] == DEFAULT_OPERATOR_IMAGE
    (service,) = of_kind(objects, "Service")
    assert service["spec"]["ports"][0]["targetPort"] == "metrics"
    assert not of_kind(objects, "ServiceMonitor")


def test_trainer_identity_values_reach_the_operator_and_a_change_rolls_it(helm: Helm) -> None:
    arn = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/mmrl-trainer"}
    vision = {"eks.amazonaws.com/role-arn": "arn:aws:iam::111122223333:role/vision"}
    values = {"trainerIdentity": {"annotations": arn, "namespaces": {"team-b": {"annotations": vision}}}}

    def rendered(chosen: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        objects = helm.template("mmrl", "mmrl-system", chosen)
        (deployment,) = of_kind(objects, "Deployment")
        (config,) = [o for o in of_kind(objects, "ConfigMap") if o["metadata"]["name"].endswith("-trainer-identity")]
        return deployment, config

    deployment, config = rendered(values)
    # The operator reads the mounted file its flag names, and builds each namespace's mmrl-trainer from it.
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    (flag,) = [a.split("=", 1)[1] for a in container["args"] if a.startswith("--trainer-identity=")]
    (mount,) = [m for m in container["volumeMounts"] if flag.startswith(m["mountPath"] + "/")]
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["configMap"]["name"] == config["metadata"]["name"]
    settings = IdentitySettings.parse(json.loads(config["data"][flag.rsplit("/", 1)[1]]))
    for namespace, want in (("team-a", arn), ("team-b", vision)):
        (account,) = of_kind(build_trainer_identity(namespace, settings.annotations_for(namespace)), "ServiceAccount")
        assert want.items() <= account["metadata"]["annotations"].items()
    # New values, new checksum on the pod template: `helm upgrade` restarts the operator, which reads them at start.
    checksum = deployment["spec"]["template"]["metadata"]["annotations"]["checksum/trainer-identity"]
    other = rendered({"trainerIdentity": {"annotations": vision}})[0]["spec"]["template"]["metadata"]["annotations"]
    assert other["checksum/trainer-identity"] != checksum
    # No job-level value selects an identity; the values take annotations and namespaces only.
    wrong = {"trainerIdentity": {"serviceAccountName": "admin"}}
    result = helm.run("template", "x", CHART, "-f", helm.values_file(wrong), check=False)
    assert result.returncode != 0 and "serviceAccountName" in result.stderr


def test_crds_are_installed_and_kept_by_default_and_both_can_be_switched_off(helm: Helm) -> None:
    found = {
        o["metadata"]["name"]: o for o in of_kind(helm.template("mmrl", "mmrl-system"), "CustomResourceDefinition")
    }
    assert set(found) == {c.CRD_NAME, c.SERVER_CRD_NAME}
    for kind in KINDS:
        crd = found[kind.crd_name]
        assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
        assert crd["spec"] == build_crd(kind)["spec"]  # the very CRD crds/ holds, from the same models
    unkept = of_kind(helm.template("mmrl", "mmrl-system", {"crds": {"keep": False}}), "CustomResourceDefinition")
    assert len(unkept) == 2 and not any("annotations" in u["metadata"] for u in unkept)
    assert not of_kind(helm.template("mmrl", "mmrl-system", {"crds": {"enabled": False}}), "CustomResourceDefinition")


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_rendered_rbac_is_the_permission_table(helm: Helm, mode: str) -> None:
    watch = ["team-a", "team-b"] if mode == "namespaced" else []
    objects = helm.template("mmrl", "mmrl-system", {"watchNamespaces": watch})
    # The operator's own; the user roles aggregated into edit and view are tests/cluster/test_chart_security.py's.
    (cluster_role,) = [r for r in of_kind(objects, "ClusterRole") if r["metadata"]["name"] == "mmrl-mmrl-operator"]
    roles = {r["metadata"]["namespace"]: r for r in of_kind(objects, "Role")}
    lease = next(r["resourceNames"][0] for r in roles["mmrl-system"]["rules"] if r.get("resourceNames"))
    if watch:
        assert rules(cluster_role) == table("cluster", lease)
        assert set(roles) == {"mmrl-system", *watch}
        for ns in watch:
            assert rules(roles[ns]) == table("watched", lease)
    else:
        assert rules(cluster_role) == table("cluster", lease) | table("watched", lease)
        assert set(roles) == {"mmrl-system"}
    assert rules(roles["mmrl-system"]) == table("own", lease)
    bindings = of_kind(objects, "ClusterRoleBinding", "RoleBinding")
    assert len(bindings) == 1 + len(roles)
    (account,) = of_kind(objects, "ServiceAccount")
    assert {s["name"] for b in bindings for s in b["subjects"]} == {account["metadata"]["name"]}


@pytest.mark.parametrize("mode", ["cluster-wide", "namespaced"])
def test_every_rendered_object_passes_a_server_side_dry_run(
    helm: Helm, api_client, core, namespace: str, other_namespace: str, mode: str
) -> None:
    values: dict[str, Any] = {}
    if mode == "namespaced":
        crds.install(api_client, [build.servicemonitor_crd_path()])
        values = {"watchNamespaces": [namespace, other_namespace], **NAMESPACED_WITH_OPT_INS}
    objects = helm.template(f"dry-{secrets.token_hex(2)}", namespace, values)
    kinds = sorted({o["kind"] for o in objects})
    expected = {"ServiceAccount", "CustomResourceDefinition", "ClusterRole", "ClusterRoleBinding", "Role"}
    expected |= {"RoleBinding", "Service", "Deployment", "ValidatingAdmissionPolicy"}
    assert expected <= set(kinds) and ("ServiceMonitor" in kinds) is (mode == "namespaced")
    policies = {o["metadata"]["name"] for o in of_kind(objects, "ValidatingAdmissionPolicy")}
    assert {SPEC_PATCH_POLICY, PODS_POLICY, WORKLOADS_POLICY} <= policies  # on by default
    apply_objects(api_client, objects, dry_run=True)  # raises on the first object the apiserver refuses
    # The restricted Pod Security Standard is enforced on pods (a Deployment only warns): admit the pod itself.
    core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    (deployment,) = of_kind(objects, "Deployment")
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "operator-pod", "namespace": namespace}}
    # The chart's ServiceAccount exists only after a real install; admission would refuse the pod for that alone.
    pod["spec"] = {**deployment["spec"]["template"]["spec"], "serviceAccountName": "default"}
    core.create_namespaced_pod(namespace, pod, dry_run="All")
    insecure = {**pod, "spec": {**pod["spec"], "securityContext": {}}}
    insecure["spec"]["containers"] = [{**pod["spec"]["containers"][0], "securityContext": {}}]
    with pytest.raises(client.exceptions.ApiException) as err:
        core.create_namespaced_pod(namespace, insecure, dry_run="All")
    assert err.value.status == 403 and "restricted" in err.value.body


def _crd(api: client.ApiClient, name: str = c.CRD_NAME) -> dict[str, Any]:
    ext = client.ApiextensionsV1Api(api)
    return api.sanitize_for_serialization(ext.read_custom_resource_definition(name))


# The field each kind gains in this release, as the upgrade from the previous release adds it: optional, without a
# default and in no CEL rule, so the previous schema is the current one less this property.
ADDED = {JOB.kind: ("ttlSecondsAfterFinished", 3600), SERVER.kind: ("maxImagePixels", 522240)}
CRD_TEMPLATES = {JOB.kind: "templates/crd.yaml", SERVER.kind: "templates/crd-modelserver.yaml"}


def _spec_fields(crd: dict[str, Any]) -> set[str]:
    return set(crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"])


def _previous_chart_version(tmp: Path) -> Path:
    """A copy of the chart as the previous release shipped it: both CRDs without the field `ADDED` names."""
    copy = tmp / "mmrl-operator-previous"
    shutil.copytree(CHART, copy)
    for kind in KINDS:
        template = copy / CRD_TEMPLATES[kind.kind]
        crd = build_crd(kind)
        assert template.read_text() == chart.render_crd(crd), f"{template.name} is not the {kind.kind} CRD"
        del crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"][
            ADDED[kind.kind][0]
        ]
        template.write_text(chart.render_crd(crd))
    meta = yaml.safe_load((copy / "Chart.yaml").read_text())
    meta["version"] = "0.0.9-previous"
    (copy / "Chart.yaml").write_text(yaml.safe_dump(meta))
    return copy


class LiveObject:
    """A MultimodalRLJob or ModelServer created before the upgrade, followed through upgrade and uninstall."""

    def __init__(self, api: client.ApiClient, namespace: str, kind: KindSpec, body: dict[str, Any]) -> None:
        self.custom, self.ns, self.kind = client.CustomObjectsApi(api), namespace, kind
        self.field, self.value = ADDED[kind.kind]
        assert self.field not in body["spec"]
        created = self.custom.create_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, kind.plural, body, field_validation="Strict"
        )
        self.name, self.uid, self.spec = created["metadata"]["name"], created["metadata"]["uid"], created["spec"]

    def get(self) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(c.GROUP, c.VERSION, self.ns, self.kind.plural, self.name)

    def set_added_field(self, dry_run: str | None = None) -> dict[str, Any]:
        """Set the new field; a schema that does not know it refuses it (Strict) instead of pruning it silently."""
        return self.custom.patch_namespaced_custom_object(
            c.GROUP,
            c.VERSION,
            self.ns,
            self.kind.plural,
            self.name,
            {"spec": {self.field: self.value}},
            field_validation="Strict",
            dry_run=dry_run,
        )

    def accepts_added_field(self) -> bool:
        try:
            self.set_added_field(dry_run="All")
        except client.exceptions.ApiException as exc:
            if exc.status == 422 and f'unknown field "spec.{self.field}"' in json.loads(exc.body)["message"]:
                return False
            raise
        return True

    def assert_unchanged(self, *, added: bool) -> None:
        """The same object (uid) with the spec it was created with, plus the new field once it was set."""
        now = self.get()
        assert now["metadata"]["uid"] == self.uid, f"{self.kind.kind} {self.name} was deleted and created again"
        assert now["spec"] == ({**self.spec, self.field: self.value} if added else self.spec)


def _live_objects(api: client.ApiClient, namespace: str) -> list[LiveObject]:
    server = server_doc()
    del server["spec"][ADDED[SERVER.kind][0]]  # the example sets it; the previous release's server could not
    return [
        LiveObject(api, namespace, JOB, {**cluster_job("geo"), "metadata": {"name": "geo", "namespace": namespace}}),
        LiveObject(api, namespace, SERVER, {**server, "metadata": {"name": "shared", "namespace": namespace}}),
    ]


def test_helm_upgrade_changes_both_crds_under_live_objects_and_uninstall_keeps_them(
    cluster_helm: Helm, api_client, core, namespace: str, hyperpod_nodes, tmp_path: Path
) -> None:
    hyperpod_nodes.cpu()  # a kwok node for the operator pod; kwok reports it Ready (no container really runs)
    core.patch_namespace(namespace, {"metadata": {"labels": RESTRICTED}})
    apps = client.AppsV1Api(api_client)
    admission = client.AdmissionregistrationV1Api(api_client)
    release = "mmrl-operator"
    remove_cluster_objects(api_client)
    try:
        cluster_helm.run("install", release, _previous_chart_version(tmp_path), "-n", namespace)
        crds.wait_established(api_client, [c.CRD_NAME, c.SERVER_CRD_NAME])
        for kind in KINDS:
            crd = _crd(api_client, kind.crd_name)
            assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
            assert ADDED[kind.kind][0] not in _spec_fields(crd)
        admission.read_validating_admission_policy(POLICY_NAME)

        def available() -> bool:
            status = apps.read_namespaced_deployment(release, namespace).status
            return any(cond.type == "Available" and cond.status == "True" for cond in status.conditions or [])

        wait_until(available, 90, what="the operator Deployment to be Available")
        (pod,) = core.list_namespaced_pod(namespace, label_selector="app.kubernetes.io/name=mmrl-operator").items
        assert pod.spec.security_context.run_as_non_root and pod.spec.service_account_name == release

        live = _live_objects(api_client, namespace)
        for obj in live:
            assert not obj.accepts_added_field()  # the previous release's schema refuses it

        cluster_helm.run("upgrade", release, CHART, "-n", namespace)
        for kind in KINDS:
            assert ADDED[kind.kind][0] in _spec_fields(_crd(api_client, kind.crd_name))
        for obj in live:
            obj.assert_unchanged(added=False)
            # The apiserver serves a changed CRD's schema a moment after the update; then the field is accepted.
            wait_until(obj.accepts_added_field, 30, what=f"{obj.kind.kind} to accept spec.{obj.field}")
            assert obj.set_added_field()["spec"][obj.field] == obj.value
            obj.assert_unchanged(added=True)

        cluster_helm.run("uninstall", release, "-n", namespace, "--wait")
        # docs/install.md: uninstalling keeps both CRDs (helm.sh/resource-policy: keep), and with them every job and
        # every server, untouched; what else the chart installed is gone.
        for kind in KINDS:
            assert _crd(api_client, kind.crd_name)["metadata"]["name"] == kind.crd_name
        for obj in live:
            obj.assert_unchanged(added=True)
        assert is_gone(admission.read_validating_admission_policy, POLICY_NAME)
        assert is_gone(apps.read_namespaced_deployment, release, namespace)
        assert is_gone(core.read_namespaced_service_account, release, namespace)
    finally:
        cluster_helm.run("uninstall", release, "-n", namespace, check=False)
        restore_cluster_objects(api_client)
