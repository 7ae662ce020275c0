"""The operator's start lists before kopf is imported (dispatch.Runtime.warm_start), with no discovery request
first: a LIST answered 404 is a resource the apiserver does not serve yet. Stubs stand in for the caches, client
and queue: this is the start's control flow only (the cluster tests start the real operator every time)."""

from __future__ import annotations

import threading

import pytest
from kubernetes.client.exceptions import ApiException

from mmrl_operator.runtime import dispatch


class Caches:
    def __init__(self, failures: list[int]) -> None:
        self.failures, self.starts = failures, 0
        self.also: list[object] = []

    def start(self, also: list[object] | None = None) -> None:
        self.starts += 1
        self.also = list(also or [])
        if self.failures:
            raise ApiException(status=self.failures.pop(0), reason="from the test")


class Kube:
    def __init__(self) -> None:
        self.asked: list[str] = []

    def serves(self, group: str, version: str, plural: str) -> bool:
        self.asked.append(plural)
        return True


class Queue:
    started = False

    def start(self) -> None:
        self.started = True


class Servers:
    """The ModelServer controller: its informers are listed with the caches', and its queue starts with the jobs'."""

    def __init__(self) -> None:
        self.queue = Queue()

    def informers(self) -> list[str]:
        return ["modelservers", "server deployments"]


class Identities:
    """The namespaces' trainer identities: their watches are listed with the caches' too."""

    def informers(self) -> list[str]:
        return ["trainer serviceaccounts"]


def runtime(caches: Caches) -> dispatch.Runtime:
    made = object.__new__(dispatch.Runtime)
    made.kube, made.queue, made.caches, made.elector = Kube(), Queue(), caches, None  # type: ignore[assignment]
    made.servers = Servers()  # type: ignore[assignment]
    made.identities = Identities()  # type: ignore[assignment]
    made.stop = threading.Event()
    return made


def test_the_lists_come_first_and_the_queue_runs_once_they_are_done() -> None:
    started = runtime(Caches([]))
    started.warm_start()
    assert started.caches.starts == 1  # type: ignore[attr-defined]
    assert started.kube.asked == []  # type: ignore[attr-defined]  # no discovery round trip on the way
    also = ["modelservers", "server deployments", "trainer serviceaccounts"]
    assert started.caches.also == also  # type: ignore[attr-defined]  # in one go
    assert started.queue.started and started.servers.queue.started  # type: ignore[attr-defined]


def test_a_list_answered_404_waits_until_kuberays_resources_are_served_then_lists_again() -> None:
    started = runtime(Caches([404]))
    started.warm_start()
    assert started.kube.asked == ["rayclusters", "rayjobs", "modelservers"]  # type: ignore[attr-defined]
    assert started.caches.starts == 2  # type: ignore[attr-defined]
    assert started.queue.started  # type: ignore[attr-defined]


def test_any_other_failure_is_raised_and_the_queue_does_not_run() -> None:
    started = runtime(Caches([403]))
    with pytest.raises(ApiException):
        started.warm_start()
    assert not started.queue.started and not started.servers.queue.started  # type: ignore[attr-defined]
