"""The chart is secure by default, with the real helm and the real apiserver: it renders the spec-patch policy, the
user roles and the operator's NetworkPolicy settings unless each is turned off, and on the live control plane the
controller-manager aggregates the user roles into Kubernetes' `edit` and `view`, so a ServiceAccount bound to `edit`
in a namespace creates jobs and servers there (never their status) and one bound to `view` only reads them."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_local.toolchain import build
from mmrl_operator.codegen.spec_patch_policy import POLICY_NAME as SPEC_PATCH_POLICY
from mmrl_operator.core.builders.network_policy import SETTINGS_ENV, KubeRayPeer, NetworkPolicySettings
from tests.support.chart import CHART, Helm, client_for, of_kind, token_kubeconfig
from tests.support.jobspecs import cluster_job
from tests.support.operator import wait_until

pytestmark = pytest.mark.cluster

ALL_OFF = {
    "specPatchPolicy": {"enabled": False},
    "serverPodPolicy": {"enabled": False},
    "networkPolicy": {"enabled": False},
    "aggregatedRoles": {"enabled": False},
}
AGGREGATE = "rbac.authorization.k8s.io/aggregate-to-"


@pytest.fixture
def helm(tmp_path: Path) -> Helm:
    return Helm(build.build()["helm"], tmp_path / "helm")


def operator_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    (deployment,) = of_kind(objects, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value") for e in container["env"]}


def user_roles(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    roles = of_kind(objects, "ClusterRole")
    return {r["metadata"]["name"]: r for r in roles if any(k.startswith(AGGREGATE) for k in r["metadata"]["labels"])}


def test_the_chart_renders_every_guard_by_default_and_each_turns_off_by_its_value(helm: Helm) -> None:
    objects = helm.template("mmrl", "mmrl-system")
    policies = {o["metadata"]["name"] for o in of_kind(objects, "ValidatingAdmissionPolicy")}
    bindings = {o["spec"]["policyName"] for o in of_kind(objects, "ValidatingAdmissionPolicyBinding")}
    assert SPEC_PATCH_POLICY in policies and SPEC_PATCH_POLICY in bindings
    assert NetworkPolicySettings.from_json(operator_env(objects)[SETTINGS_ENV]) == NetworkPolicySettings()
    roles = user_roles(objects)
    assert set(roles) == {"mmrl-mmrl-operator-edit", "mmrl-mmrl-operator-view"}
    assert roles["mmrl-mmrl-operator-edit"]["metadata"]["labels"][f"{AGGREGATE}edit"] == "true"

    off = helm.template("mmrl", "mmrl-system", ALL_OFF)
    assert SPEC_PATCH_POLICY not in {o["metadata"]["name"] for o in of_kind(off, "ValidatingAdmissionPolicy")}
    assert NetworkPolicySettings.from_json(operator_env(off)[SETTINGS_ENV]).enabled is False
    assert user_roles(off) == {}


def test_the_operator_reads_the_kuberay_namespace_and_extra_rules_the_chart_was_given(helm: Helm) -> None:
    prometheus = {"from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}], "ports": [{"port": 8080}]}
    # Helm merges maps with the defaults: a key set to null is how a value removes the default label.
    value = {"kuberay": {"namespace": "ray-system", "podLabels": {"app.kubernetes.io/name": None}}}
    value["extraIngress"] = [prometheus]
    env = operator_env(helm.template("mmrl", "mmrl-system", {"networkPolicy": value}))
    settings = NetworkPolicySettings.from_json(env[SETTINGS_ENV])
    assert settings.kuberay == KubeRayPeer(namespace="ray-system", podLabels={})
    assert [rule.wire() for rule in settings.extra_ingress] == [prometheus]
    bad = helm.run(
        "template", "x", CHART, "-f", helm.values_file({"networkPolicy": {"kuberay": {"ns": "x"}}}), check=False
    )
    assert bad.returncode != 0 and "ns" in bad.stderr  # values.schema.json names the misspelt key


@pytest.fixture
def roles_release(cluster_helm: Helm, namespace: str, mmrl_crd: None) -> Iterator[str]:
    """A release that brings only the user roles (the session has the CRDs and the trainer status policy)."""
    release = f"roles-{secrets.token_hex(2)}"
    values = {
        "crds": {"enabled": False},
        "trainerStatusPolicy": {"enabled": False},
        "specPatchPolicy": {"enabled": False},
        "serverPodPolicy": {"enabled": False},
        "replicaCount": 0,
        "metrics": {"service": {"enabled": False}},
    }
    cluster_helm.run("install", release, CHART, "-n", namespace, "-f", cluster_helm.values_file(values))
    try:
        yield release
    finally:
        cluster_helm.run("uninstall", release, "-n", namespace, check=False)


def bound_account(api_client: client.ApiClient, namespace: str, name: str, role: str, tmp_path: Path) -> Path:
    """A ServiceAccount bound to a built-in ClusterRole in the namespace; a kubeconfig with its token."""
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(namespace, {"metadata": {"name": name}})
    rbac.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return token_kubeconfig(api_client, namespace, name, tmp_path / f"{name}.kubeconfig")


def allowed(api: client.ApiClient, namespace: str, verb: str, resource: str, subresource: str = "") -> bool:
    """The apiserver's answer to a SelfSubjectAccessReview by the client's own identity."""
    attributes = {"namespace": namespace, "verb": verb, "group": c.GROUP, "resource": resource}
    if subresource:
        attributes["subresource"] = subresource
    review = client.AuthorizationV1Api(api).create_self_subject_access_review(
        {"spec": {"resourceAttributes": attributes}}
    )
    return bool(review.status.allowed)


def refused(call) -> int | None:  # type: ignore[no-untyped-def]
    try:
        call()
    except client.exceptions.ApiException as err:
        return err.status
    return None


def test_edit_creates_jobs_and_servers_but_no_status_and_view_only_reads_through_the_aggregated_roles(
    api_client, namespace: str, roles_release: str, tmp_path: Path
) -> None:
    rbac = client.RbacAuthorizationV1Api(api_client)

    def aggregated(role: str) -> bool:
        rules = rbac.read_cluster_role(role).rules or []
        return any(c.GROUP in (r.api_groups or []) and c.PLURAL in (r.resources or []) for r in rules)

    # The controller-manager's aggregation controller copies the labelled roles' rules into the built-in ones.
    for role in ("admin", "edit", "view"):
        wait_until(lambda r=role: aggregated(r), 60, what=f"mmrl's rules aggregated into ClusterRole {role}")

    editor = client_for(bound_account(api_client, namespace, "alice", "edit", tmp_path))
    viewer = client_for(bound_account(api_client, namespace, "bob", "view", tmp_path))
    for plural in (c.PLURAL, c.SERVER_PLURAL):
        for verb in ("create", "update", "patch", "delete", "get", "list", "watch"):
            assert allowed(editor, namespace, verb, plural), (verb, plural)
        assert allowed(viewer, namespace, "get", plural) and allowed(viewer, namespace, "watch", plural)
        assert allowed(viewer, namespace, "get", plural, "status")
        for verb in ("create", "patch", "delete"):
            assert not allowed(viewer, namespace, verb, plural), (verb, plural)
        assert not allowed(editor, namespace, "patch", plural, "status")  # the operator's and the trainer's
    assert not allowed(editor, "kube-system", "create", c.PLURAL)  # the binding is the namespace's only

    # Real requests, as the two would make them.
    jobs_as = {who: client.CustomObjectsApi(api) for who, api in (("alice", editor), ("bob", viewer))}
    body = cluster_job("edited")
    jobs_as["alice"].create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, body)
    read = jobs_as["bob"].get_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "edited")
    assert read["metadata"]["name"] == "edited"
    assert [
        j["metadata"]["name"]
        for j in jobs_as["bob"].list_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL)["items"]
    ] == ["edited"]
    viewer_create = cluster_job("viewed")
    assert (
        refused(
            lambda: jobs_as["bob"].create_namespaced_custom_object(
                c.GROUP, c.VERSION, namespace, c.PLURAL, viewer_create
            )
        )
        == 403
    )
    assert (
        refused(
            lambda: jobs_as["alice"].patch_namespaced_custom_object_status(
                c.GROUP, c.VERSION, namespace, c.PLURAL, "edited", {"status": {"phase": "Succeeded"}}
            )
        )
        == 403
    )
    assert (
        refused(
            lambda: jobs_as["bob"].delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "edited")
        )
        == 403
    )
    jobs_as["alice"].delete_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, "edited")
