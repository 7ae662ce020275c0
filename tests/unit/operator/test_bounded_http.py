"""The service-proxy reader on a real socket: a whole-request deadline that a trickling server cannot stretch, a
1 MiB cap that stops reading instead of buffering, and an ordinary answer still decoded."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client

from mmrl_operator.runtime import bounded_http
from mmrl_operator.runtime.bounded_http import DeadlineExceeded, ResponseTooLarge
from mmrl_operator.runtime.service_proxy import describe_error, proxy_json
from tests.support import misbehaving_server
from tests.support.misbehaving_server import HUGE, Record

ANSWER_BYTES = 10_000  # what the trickling modes would send in full: minutes at their pace


@pytest.fixture
def serve() -> Iterator:
    servers = []

    def start(mode: str) -> tuple[client.ApiClient, Record]:
        server, record = misbehaving_server.start(mode)
        servers.append((server, record))
        host, port = server.server_address[:2]
        return client.ApiClient(client.Configuration(host=f"http://{host}:{port}")), record

    yield start
    for server, record in servers:
        record.release.set()
        server.shutdown()
        server.server_close()


def finished(record: Record, connections: int = 1) -> Record:
    """The record once the server's connection threads saw the end of their exchange (the client hung up)."""
    from tests.support.polling import wait_until

    wait_until(lambda: len(record.sent) >= connections, 30, what="the server to see the connection end")
    return record


def models(api: client.ApiClient, deadline: float = 1.0):  # type: ignore[no-untyped-def]
    return proxy_json(api, "GET", "ns", "geo-inference", 8000, "/v1/models", deadline=deadline)


@pytest.mark.parametrize("mode", ["trickle-headers", "trickle-body"])
def test_a_server_sending_a_byte_at_a_time_cannot_stretch_the_deadline(serve, mode: str) -> None:
    api, record = serve(mode)
    with pytest.raises(DeadlineExceeded) as caught:
        models(api, deadline=0.5)
    assert describe_error(caught.value) == "no complete answer within 0.5s"
    record = finished(record)
    # The client hung up long before the server got its answer out.
    assert record.cut == [True] and record.sent[0] < ANSWER_BYTES


@pytest.mark.parametrize("mode", ["huge", "huge-chunked"])
def test_an_answer_over_1_mib_is_refused_without_reading_the_rest(serve, mode: str) -> None:
    api, record = serve(mode)
    with pytest.raises(ResponseTooLarge) as caught:
        models(api, deadline=30)
    assert "1 MiB accepted" in describe_error(caught.value)
    if mode == "huge":
        assert "400 MiB" in str(caught.value)  # its Content-Length said so: not a byte of the body was read
    record = finished(record)
    # Socket buffers take a few MiB at most; the other ~390 MiB were never sent, let alone held in memory.
    assert record.cut == [True] and record.sent[0] < 64 << 20 < HUGE


def test_an_ordinary_answer_is_decoded(serve) -> None:
    api, _ = serve("models")
    assert [m["id"] for m in models(api)["data"]] == ["geo-lora"]


def test_a_server_that_is_not_listening_is_an_os_error_not_a_hang() -> None:
    api = client.ApiClient(client.Configuration(host="http://127.0.0.1:9"))
    with pytest.raises(OSError):
        bounded_http.request(api, "GET", "/api/v1/namespaces/ns/services/s:8000/proxy/v1/models", deadline=2)


def test_a_non_2xx_answer_is_an_api_exception_carrying_the_apiservers_message(serve) -> None:
    api, _ = serve("unavailable")
    with pytest.raises(client.exceptions.ApiException) as caught:
        models(api)
    assert describe_error(caught.value) == 'HTTP 503: no endpoints available for service "geo-inference"'
