"""The operator's informers against the real apiserver: list then watch, resume without a re-list when the apiserver
ends a watch (seen in its audit log), a re-list drops what was deleted while nobody watched, slim copies, and the
jobs they wake."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from mmrl_api import constants as c
from mmrl_operator.runtime.caches import PODS, RAYJOBS, Caches
from mmrl_operator.runtime.informer import Informer
from mmrl_operator.runtime.kube import Kube
from tests.cluster.ray_factories import RAY, rayjob
from tests.support.audit import Request, requests_by
from tests.support.chart import client_for, token_kubeconfig

pytestmark = pytest.mark.cluster


def pod(name: str, job: str | None) -> dict:
    labels = {c.LABEL_JOB: job} if job else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "spec": {"containers": [{"name": "c", "image": "busybox", "env": [{"name": "BIG", "value": "x" * 2000}]}]},
    }


def names(objs: list[dict]) -> set[str]:
    return {o["metadata"]["name"] for o in objs}


@pytest.fixture
def woken() -> list[tuple[str, str]]:
    return []


@pytest.fixture
def caches(api_client, namespace, woken):
    found = Caches(Kube(api_client), [namespace], wake=woken.append)
    found.start()
    yield found
    found.stop()


def test_children_are_cached_slim_and_every_change_wakes_their_job(core, namespace, caches, woken, wait) -> None:
    core.create_namespaced_pod(namespace, pod("a-head", "a"))
    core.create_namespaced_pod(namespace, pod("b-head", "b"))
    core.create_namespaced_pod(namespace, pod("stray", None))  # no job label: not ours
    wait(lambda: names(caches.owned("v1", "Pod", namespace, "a")) == {"a-head"}, what="a's pod in the cache")
    wait(lambda: (namespace, "b") in woken, what="b woken")
    (cached,) = caches.owned("v1", "Pod", namespace, "a")
    assert "managedFields" not in cached["metadata"]
    assert cached["spec"]["containers"] == [{"name": "c"}]  # only the names (which container is Ray's), not the env
    assert cached["metadata"]["labels"][c.LABEL_JOB] == "a"
    assert all(o["metadata"]["name"] != "stray" for o in caches.children["Pod"].items())

    woken.clear()
    core.patch_namespaced_pod("a-head", namespace, {"metadata": {"annotations": {"touched": "1"}}})
    wait(lambda: (namespace, "a") in woken, what="a woken by the update")
    core.delete_namespaced_pod("a-head", namespace, grace_period_seconds=0)
    wait(lambda: caches.owned("v1", "Pod", namespace, "a") == [], what="a's pod gone from the cache")


class AuditedWatcher:
    """A ServiceAccount that may list and watch pods in `namespace`, living where the apiserver audits every request
    (``AUDITED_NAMESPACE``): its client, and what the audit log says it asked for."""

    def __init__(self, api: client.ApiClient, audited: str, namespace: str, audit_log: Path, tmp: Path) -> None:
        self.core, self.audited, self.namespace, self.audit_log = client.CoreV1Api(api), audited, namespace, audit_log
        self.name = f"watcher-{secrets.token_hex(3)}"
        self.username = f"system:serviceaccount:{audited}:{self.name}"
        self.core.create_namespaced_service_account(audited, {"metadata": {"name": self.name}})
        rbac = client.RbacAuthorizationV1Api(api)
        rule = {"apiGroups": [""], "resources": ["pods"], "verbs": ["list", "watch"]}
        rbac.create_namespaced_role(namespace, {"metadata": {"name": self.name}, "rules": [rule]})
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": self.name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": self.name},
                "subjects": [{"kind": "ServiceAccount", "name": self.name, "namespace": audited}],
            },
        )
        self.client = client_for(token_kubeconfig(api, audited, self.name, tmp / f"{self.name}.kubeconfig"))

    def requests(self, verb: str) -> list[Request]:
        """Its requests on pods in the namespace with this verb, in the order the apiserver answered them."""
        made = requests_by(self.audit_log, self.username)
        return [r for r in made if r.verb == verb and r.resource == "pods" and r.namespace == self.namespace]

    def delete(self) -> None:
        self.core.delete_namespaced_service_account(self.name, self.audited)


@pytest.fixture
def watcher(api_client, control_plane, audited_namespace, namespace, tmp_path) -> Iterator[AuditedWatcher]:
    found = AuditedWatcher(api_client, audited_namespace, namespace, control_plane.audit_log, tmp_path)
    yield found
    found.delete()


def test_a_watch_that_times_out_resumes_from_its_version_without_listing_again(core, namespace, watcher, wait) -> None:
    # The apiserver ends each of this informer's watches after a second (timeoutSeconds).
    informer = Informer(watcher.client, PODS, [namespace], label_selector=c.LABEL_JOB, timeout_seconds=1)
    informer.run()
    try:
        before = core.create_namespaced_pod(namespace, pod("before", "j")).metadata.resource_version
        wait(lambda: names(informer.items()) == {"before"}, what="the first pod in the cache")
        restarts_from = len(watcher.requests("watch"))
        # A watch asked for after the cache held the first pod: the one that was open then has ended (the apiserver
        # closed it) and the informer watched again.
        wait(lambda: len(watcher.requests("watch")) > restarts_from, 60, what="the informer to watch again")
        core.create_namespaced_pod(namespace, pod("after", "j"))
        wait(lambda: names(informer.items()) == {"before", "after"}, 60, what="the second pod through the new watch")
    finally:
        informer.stop()
    watches = watcher.requests("watch")
    assert [(w.code, w.query.get("timeoutSeconds")) for w in watches] == [(200, "1")] * len(watches)
    asked = [w.query.get("resourceVersion", "") for w in watches]
    assert all(v.isdigit() for v in asked), f"a watch from no version (everything again, or only what is new): {asked}"
    versions = [int(v) for v in asked]
    assert versions == sorted(versions) and len(versions) >= 2
    # Each watch after the first pod was cached resumes from that pod's version or later: from where the last one
    # ended, not from the LIST's version (which would deliver the first pod again) nor from "now".
    assert min(versions[restarts_from:]) >= int(before), f"resumed from before the first pod ({before}): {versions}"
    assert len(watcher.requests("list")) == 1 and informer.lists == 1


def test_a_relist_drops_what_was_deleted_while_nobody_watched(api_client, custom, namespace) -> None:
    # RayJobs: nothing else touches them here (no KubeRay runs in this test), unlike pods the scheduler updates.
    seen: list[tuple[str | None, str | None]] = []

    def changed(old, new) -> None:
        seen.append(((old or {}).get("metadata", {}).get("name"), (new or {}).get("metadata", {}).get("name")))

    informer = Informer(api_client, RAYJOBS, [namespace], label_selector=c.LABEL_JOB, on_change=changed)
    for name in ("ghost", "kept"):
        body = rayjob(name, "geo")
        body["metadata"]["labels"] = {c.LABEL_JOB: "geo"}
        custom.create_namespaced_custom_object(*RAY, namespace, "rayjobs", body)
    informer.list_once()  # no watch: whatever happens next is missed, as during a lost connection
    assert names(informer.items()) == {"ghost", "kept"}
    custom.delete_namespaced_custom_object(*RAY, namespace, "rayjobs", "ghost")
    seen.clear()
    informer._relist(namespace)
    assert names(informer.items()) == {"kept"}
    assert seen == [("ghost", None)]  # reported as deleted, so its job is woken; the unchanged one wakes nobody


def test_a_node_missing_from_the_cache_is_read_from_the_apiserver_not_taken_for_deleted(
    api_client, namespace, hyperpod_nodes
) -> None:
    caches = Caches(Kube(api_client), [namespace], wake=lambda key: None)
    caches.nodes.list_once()  # before the node exists, and no watch
    (name,) = hyperpod_nodes.gpu(1)
    assert caches.nodes.get("", name) is None
    found = caches.node(name)
    assert found is not None and found["metadata"]["name"] == name
    assert set(found["status"]) == {"conditions"} and [cd["type"] for cd in found["status"]["conditions"]] == ["Ready"]
    assert caches.nodes.get("", name) is not None  # kept, slim
    assert caches.node("hyperpod-i-does-not-exist") is None
