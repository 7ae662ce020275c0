"""The operator's informers against the real apiserver: list then watch, resume without a re-list when a watch
times out, a re-list drops what was deleted while nobody watched, slim copies, and the jobs they wake."""

from __future__ import annotations

import threading

import pytest

from mmrl_api import constants as c
from mmrl_operator.runtime.caches import PODS, RAYJOBS, Caches
from mmrl_operator.runtime.informer import Informer
from mmrl_operator.runtime.kube import Kube
from tests.cluster.ray_factories import RAY, rayjob

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


def test_a_watch_that_times_out_resumes_from_its_version_without_listing_again(
    api_client, core, namespace, wait
) -> None:
    informer = Informer(api_client, PODS, [namespace], label_selector=c.LABEL_JOB, timeout_seconds=1)
    informer.run()
    for i in range(4):  # spread over several one-second watches
        core.create_namespaced_pod(namespace, pod(f"p{i}", "j"))
        threading.Event().wait(0.7)
    wait(lambda: names(informer.items()) == {"p0", "p1", "p2", "p3"}, what="every pod")
    informer.stop()
    assert informer.lists == 1


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
