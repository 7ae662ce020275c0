"""A pass sends its independent requests at once: its reads by name, the applies nothing else waits for, its events.
What waits (a RayCluster on its ServiceAccount and ConfigMap) still goes after them."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from mmrl_operator.runtime.kube import FAN_OUT, Kube
from mmrl_operator.runtime.reconcile import waves


def obj(kind: str, name: str = "x") -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name}}


def kinds(groups: list[list[dict[str, Any]]]) -> list[list[str]]:
    return [[o["kind"] for o in g] for g in groups]


def test_a_new_jobs_children_go_in_three_waves_with_the_raycluster_alone_after_what_its_pods_name() -> None:
    plan = [obj("ServiceAccount"), obj("ConfigMap"), obj("RayCluster"), obj("Role"), obj("RoleBinding")]
    assert kinds(waves(plan)) == [["ServiceAccount", "ConfigMap"], ["RayCluster"], ["Role", "RoleBinding"]]


def test_workloads_never_share_a_wave_and_order_is_kept() -> None:
    plan = [obj("RayCluster"), obj("RayJob"), obj("ConfigMap"), obj("Deployment"), obj("Service")]
    assert kinds(waves(plan)) == [["RayCluster"], ["RayJob"], ["ConfigMap"], ["Deployment"], ["Service"]]
    assert waves([]) == []


def fake_kube() -> Kube:
    kube = Kube.__new__(Kube)  # no apiserver: `each` only needs the pool and the per-thread counter
    kube._thread = threading.local()
    kube._fan = ThreadPoolExecutor(FAN_OUT)
    return kube


def test_each_runs_at_once_keeps_order_and_counts_the_requests_as_the_callers() -> None:
    kube = fake_kube()
    gate = threading.Barrier(3, timeout=5)  # three calls must be in flight together, or this times out

    def request(i: int) -> int:
        kube._count()
        gate.wait()
        return i * 10

    assert kube.each(request, [1, 2, 3]) == [10, 20, 30]
    assert kube.thread_calls() == 3


def test_each_waits_for_all_then_raises_the_first_error() -> None:
    kube = fake_kube()
    ended: list[int] = []

    def request(i: int) -> int:
        if i == 1:
            raise ValueError("refused")
        ended.append(i)
        return i

    with pytest.raises(ValueError, match="refused"):
        kube.each(request, [1, 2, 3])
    assert sorted(ended) == [2, 3]
