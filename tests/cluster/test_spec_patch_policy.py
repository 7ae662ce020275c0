"""The chart's specPatch admission policy on the real apiserver: installed with `specPatchPolicy.enabled` (the
default), it refuses every specPatch that would give the Ray pods more power than the job's own (naming the field)
and admits a clean one; a job admitted before the policy can still be updated; with the value off, the same jobs are
admitted again."""

from __future__ import annotations

import json
import secrets
from typing import Any

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_api.spec_patch_rules import violations
from mmrl_operator.core.jsonmerge import merge_patch
from tests.support import polling
from tests.support.chart import CHART, Helm
from tests.support.corpus import example

pytestmark = pytest.mark.cluster
PATCH = "spec.cluster.podTemplate.specPatch"

# (specPatch, the field the refusal must name)
REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"serviceAccountName": "deployer"}, "serviceAccountName"),
    ({"serviceAccountName": None}, "serviceAccountName"),  # merge-patch null: the namespace's default account
    ({"serviceAccount": "deployer"}, "serviceAccount"),
    ({"automountServiceAccountToken": False}, "automountServiceAccountToken"),  # the trainer reports with it
    ({"hostNetwork": True}, "hostNetwork"),
    ({"hostPID": True}, "hostPID"),
    ({"hostIPC": True}, "hostIPC"),
    ({"volumes": [{"name": "a", "emptyDir": {}}, {"name": "root", "hostPath": {"path": "/"}}]}, "volumes[].hostPath"),
    ({"tolerations": [{"key": "gpu", "operator": "Exists"}, {"key": c.HYPERPOD_TAINT_KEY}]}, "tolerations[]"),
    ({"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]}, "tolerations[]"),
    *[
        (
            {kind: [{"name": "x", "image": "busybox", "securityContext": {"privileged": True}}]},
            f"{kind}[].securityContext.privileged",
        )
        for kind in ("containers", "initContainers", "ephemeralContainers")
    ],
    *[
        (
            {kind: [{"name": "x", "image": "busybox", "securityContext": {"capabilities": {"add": ["NET_ADMIN"]}}}]},
            f"{kind}[].securityContext.capabilities.add",
        )
        for kind in ("containers", "initContainers", "ephemeralContainers")
    ],
]
CLEAN: dict[str, Any] = {
    "terminationGracePeriodSeconds": 60,
    "hostNetwork": False,
    "volumes": [{"name": "scratch", "emptyDir": {}}],
    "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    "containers": [
        {"name": "ray", "image": "busybox", "securityContext": {"privileged": False, "capabilities": {"drop": ["ALL"]}}}
    ],
}


def job(name: str, spec_patch: dict[str, Any]) -> dict[str, Any]:
    body = merge_patch(example(), {"metadata": {"name": name, "namespace": None}})
    body["spec"]["cluster"].setdefault("podTemplate", {})["specPatch"] = spec_patch  # null must stay null
    return body


def create(api: client.CustomObjectsApi, namespace: str, body: dict[str, Any], dry_run: bool = True) -> None:
    extra = {"dry_run": "All"} if dry_run else {}
    api.create_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, body, **extra)


def refusal(api: client.CustomObjectsApi, namespace: str, body: dict[str, Any]) -> tuple[int, str] | None:
    """(status, message) of the apiserver's refusal of a dry-run create, or None when it admits the job."""
    try:
        create(api, namespace, body)
    except client.exceptions.ApiException as err:
        return err.status, json.loads(err.body)["message"]
    return None


def install(helm: Helm, release: str, namespace: str, enabled: bool, upgrade: bool = False) -> None:
    # The session already installed the CRD and the trainer status policy; the release brings only the new policy.
    values = {
        "crds": {"enabled": False},
        "trainerStatusPolicy": {"enabled": False},
        "serverPodPolicy": {"enabled": False},
    }
    values["specPatchPolicy"] = {"enabled": enabled}
    helm.run("upgrade" if upgrade else "install", release, CHART, "-n", namespace, "-f", helm.values_file(values))


def test_spec_patch_policy_refuses_each_power_names_the_field_and_is_off_by_value(
    cluster_helm: Helm, api_client, namespace: str, mmrl_crd
) -> None:
    api = client.CustomObjectsApi(api_client)
    probe = job("probe", {"hostPID": True})
    legacy = job("legacy", {"hostIPC": True})
    create(api, namespace, legacy, dry_run=False)  # admitted before the policy exists
    release = f"specpatch-{secrets.token_hex(2)}"
    try:
        install(cluster_helm, release, namespace, enabled=True)
        # The apiserver enforces a new policy once its admission informer has seen it.
        polling.wait_until(lambda: refusal(api, namespace, probe), 30, what="the specPatch policy to be enforced")

        for n, (spec_patch, field) in enumerate(REFUSED):
            refused = refusal(api, namespace, job(f"bad-{n}", spec_patch))
            assert refused is not None, f"{spec_patch} was admitted"
            status, message = refused
            assert status == 403 and f"{PATCH}.{field}:" in message, (spec_patch, message)
            # `mmrl validate` judges it from the same rules: the same field, the same words as the apiserver's.
            (said,) = violations(job(f"bad-{n}", spec_patch))
            assert said == (f"{PATCH}.{field}", said[1]) and said[1] in message, (said, message)
        assert refusal(api, namespace, job("clean", CLEAN)) is None
        assert violations(job("clean", CLEAN)) == []

        # The job from before the policy: unchanged specPatch, so its metadata still changes (the operator's
        # finalizers, a user's labels); a changed specPatch is judged like a new one.
        name = legacy["metadata"]["name"]
        api.patch_namespaced_custom_object(
            c.GROUP, c.VERSION, namespace, c.PLURAL, name, {"metadata": {"labels": {"team": "vision"}}}
        )
        with pytest.raises(client.exceptions.ApiException) as err:
            patch = {"spec": {"cluster": {"podTemplate": {"specPatch": {"hostPID": True}}}}}
            api.patch_namespaced_custom_object(c.GROUP, c.VERSION, namespace, c.PLURAL, name, patch)
        assert err.value.status == 403 and f"{PATCH}.hostPID:" in err.value.body

        install(cluster_helm, release, namespace, enabled=False, upgrade=True)
        polling.wait_until(lambda: refusal(api, namespace, probe) is None, 30, what="the policy to be gone")
        for n, (spec_patch, _) in enumerate(REFUSED):
            assert refusal(api, namespace, job(f"bad-{n}", spec_patch)) is None, spec_patch
    finally:
        cluster_helm.run("uninstall", release, "-n", namespace, check=False)
