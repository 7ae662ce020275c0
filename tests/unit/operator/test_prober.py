"""The /v1/models prober against real servers on 127.0.0.1: a pass reads the latest answer without waiting while every
prober thread is stuck on a server that does not answer, a fresh answer wakes the job, an unchanged one does not,
and an answer for a replaced Deployment is not taken for the new one's."""

from __future__ import annotations

import queue
from collections.abc import Iterator

import pytest
from kubernetes import client

from mmrl_operator.runtime.prober import Probe, Prober, Target, news
from mmrl_operator.runtime.service_proxy import describe_error, proxy_json
from tests.support import misbehaving_server
from tests.support.polling import wait_until


def target(job: str, uid: str = "uid-1") -> Target:
    return Target("ns", f"{job}-inference", 8000, uid)


class Servers:
    """One real server per job (by the target's service name), each with its own misbehaviour."""

    def __init__(self) -> None:
        self.running: dict[str, tuple] = {}
        self.started: list[tuple] = []

    def add(self, job: str, mode: str) -> misbehaving_server.Record:
        server, record = misbehaving_server.start(mode)
        self.running[f"{job}-inference"] = (server, record)
        self.started.append((server, record))
        return record

    def ask(self, t: Target) -> Probe:
        """What the operator's ask_models does, with the server's own address standing in for the apiserver."""
        host, port = self.running[t.service][0].server_address[:2]
        api = client.ApiClient(client.Configuration(host=f"http://{host}:{port}"))
        try:
            return Probe(t, proxy_json(api, "GET", t.namespace, t.service, t.port, "/v1/models", deadline=30)["data"])
        except Exception as exc:
            return Probe(t, None, describe_error(exc))


@pytest.fixture
def servers() -> Iterator[Servers]:
    s = Servers()
    yield s
    for server, record in s.started:
        record.release.set()
        server.shutdown()
        server.server_close()


def test_passes_never_wait_for_servers_that_hold_every_prober_thread(servers: Servers) -> None:
    woken: queue.Queue = queue.Queue()
    prober = Prober(servers.ask, woken.put, workers=2)
    prober.start()
    held = [servers.add(job, "hold") for job in ("a", "b", "c")]
    for job in ("a", "b", "c"):
        assert prober.seen(("ns", job), target(job)) is None  # nothing yet, and the call returned at once
    wait_until(lambda: sum(r.held for r in held) == 2, 30, what="both prober threads to be stuck on a server")
    # Every prober thread is inside a request that has not been answered: a pass still gets its answer now.
    assert [prober.seen(("ns", job), target(job)) for job in ("a", "b", "c")] == [None, None, None]
    assert held[2].held == 0  # the third job waits its turn behind them; it does not take a reconcile worker

    for record in held:
        record.release.set()
    assert {woken.get(timeout=30) for _ in range(3)} == {("ns", "a"), ("ns", "b"), ("ns", "c")}
    for job in ("a", "b", "c"):
        answer = wait_until(lambda j=job: prober.seen(("ns", j), target(j)), 30, what=f"{job}'s answer")
        assert [m["id"] for m in answer.models] == ["geo-lora"] and answer.error is None
    prober.stop()


def test_a_changed_answer_wakes_the_job_and_an_unchanged_one_does_not(servers: Servers) -> None:
    woken: queue.Queue = queue.Queue()
    prober = Prober(servers.ask, woken.put, workers=1, fresh=0.0)
    prober.start()
    servers.add("a", "unavailable")
    key = ("ns", "a")
    prober.seen(key, target("a"))
    assert woken.get(timeout=30) == key
    first = prober.seen(key, target("a"))  # also asks again: the same 503
    assert first is not None and first.models is None and "no endpoints" in first.error
    wait_until(lambda: woken.empty() and prober.idle(), 30, what="the second probe")
    assert woken.empty()

    servers.add("a", "models")  # the server came up
    prober.seen(key, target("a"))
    assert woken.get(timeout=30) == key
    assert prober.seen(key, target("a")).models is not None
    # The Deployment was replaced: the old one's answer says nothing about the new one.
    assert prober.seen(key, target("a", uid="uid-2")) is None
    prober.stop()


def test_the_pass_a_fresh_answer_wakes_does_not_ask_again(servers: Servers) -> None:
    asked: list[Target] = []
    woken: queue.Queue = queue.Queue()
    prober = Prober(lambda t: asked.append(t) or servers.ask(t), woken.put, workers=1, fresh=3600)
    prober.start()
    servers.add("a", "models")
    prober.seen(("ns", "a"), target("a"))
    woken.get(timeout=30)
    assert prober.seen(("ns", "a"), target("a")) is not None  # the woken pass reads the answer...
    assert not prober._wanted and len(asked) == 1  # ...and queues nothing: no probe-wake-probe loop
    prober.stop()


def test_news_is_any_other_outcome() -> None:
    t = target("a")
    assert news(None, Probe(t, None, "HTTP 503: x"))
    assert not news(Probe(t, None, "HTTP 503: x"), Probe(t, None, "HTTP 503: x"))
    assert news(Probe(t, None, "HTTP 503: x"), Probe(t, None, "no complete answer within 5s"))
    assert news(Probe(t, None, "HTTP 503: x"), Probe(t, []))
    assert news(Probe(t, []), Probe(t, [{"id": "geo-lora"}]))
    assert news(Probe(t, []), Probe(target("a", "uid-2"), []))


def test_a_forgotten_job_keeps_no_answer(servers: Servers) -> None:
    woken: queue.Queue = queue.Queue()
    prober = Prober(servers.ask, woken.put, workers=1)
    prober.start()
    servers.add("a", "models")
    prober.seen(("ns", "a"), target("a"))
    woken.get(timeout=30)
    prober.forget(("ns", "a"))
    assert not prober._latest and not prober._wanted
    prober.stop()
