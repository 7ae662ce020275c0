"""The gateway's client side: only the allow-listed vLLM paths reach vLLM, bodies stream both ways, the request body
is bounded, and the admin key never travels upstream."""

from __future__ import annotations

import asyncio
from pathlib import Path

import aiohttp
import pytest

from mmrl_api.gateway_contract import ADMIN_KEY_HEADER, CLIENT_ROUTES
from tests.support.stub_vllm import gateway, run


def test_allowed_paths_reach_vllm_with_their_query_and_headers_but_not_the_admin_key(tmp_path: Path) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            headers = {"Authorization": "Bearer EMPTY", "X-Request-Id": "r1", ADMIN_KEY_HEADER: "sesame"}
            status, echo = await gw.call("POST", "/v1/completions?x=1&y=%20", json={"prompt": "hi"}, headers=headers)
            assert status == 200
            assert (echo["path"], echo["query"]) == ("/v1/completions", "x=1&y= ")
            sent = {k.lower(): v for k, v in echo["headers"].items()}
            assert sent["x-request-id"] == "r1" and sent["authorization"] == "Bearer EMPTY"
            assert ADMIN_KEY_HEADER.lower() not in sent
            for method, path in sorted(CLIENT_ROUTES):
                status, _ = await gw.call(method, path, json={} if method == "POST" else None)
                assert status == 200, (method, path)
            assert sorted(gw.stub.paths()[1:]) == sorted(p for _m, p in CLIENT_ROUTES)

    run(test)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("POST", "/v1/load_lora_adapter", 403),
        ("POST", "/v1/unload_lora_adapter", 403),
        ("POST", "/v1/load_lora_adapter/", 403),
        ("POST", "//v1/load_lora_adapter", 404),
        ("POST", "/v1/chat/completions/../../v1/load_lora_adapter", 404),
        ("POST", "/v1/%6coad_lora_adapter", 403),
        ("GET", "/v1/load_lora_adapter", 403),
        ("POST", "/sleep", 404),
        ("POST", "/collective_rpc", 404),
        ("POST", "/update_weights", 404),
        ("POST", "/reset_prefix_cache", 404),
        ("GET", "/v1/chat/completions", 404),
        ("POST", "/v1/models", 404),
        ("GET", "/mmrl/v1/nothing", 404),
    ],
)
def test_every_other_path_is_answered_by_the_gateway_and_never_reaches_vllm(
    tmp_path: Path, method: str, path: str, status: int
) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            url = aiohttp.client.URL(gw.url + path, encoded=True)
            async with gw.client.request(method, url, json={"lora_name": "x", "lora_path": "/etc"}) as reply:
                assert reply.status == status, await reply.text()
                assert (await reply.json())["message"]
            assert gw.stub.seen == []

    run(test)


def test_a_streamed_answer_arrives_event_by_event(tmp_path: Path) -> None:
    """vLLM's second event waits until the client has read the first through the gateway: a gateway that buffered
    the answer would never deliver it, and the test would time out."""

    async def test() -> None:
        async with gateway(tmp_path) as gw:
            body = {"model": "m", "messages": [], "stream": True}
            async with gw.client.post(gw.url + "/v1/chat/completions", json=body) as reply:
                assert reply.headers["Content-Type"].startswith("text/event-stream")
                first = await asyncio.wait_for(reply.content.readuntil(b"\n\n"), 10)
                assert first == b'data: {"n": 1}\n\n'
                gw.stub.second_event.set()
                rest = await asyncio.wait_for(reply.content.read(), 10)
            assert rest == b'data: {"n": 2}\n\ndata: [DONE]\n\n'

    run(test)


def test_a_request_body_over_the_bound_is_refused(tmp_path: Path) -> None:
    async def chunks(n: int):  # no Content-Length: the bound is found while forwarding
        for _ in range(n):
            yield b"x" * 1024

    async def test() -> None:
        async with gateway(tmp_path, max_request_bytes=4096) as gw:
            status, answer = await gw.call("POST", "/v1/completions", data=b"x" * 5000)
            assert status == 413 and "4096 bytes" in answer["message"]
            assert gw.stub.seen == []
            status, answer = await gw.call("POST", "/v1/completions", data=chunks(8))
            assert status == 413, answer
            status, echo = await gw.call("POST", "/v1/completions", data=chunks(4))
            assert (status, echo["size"]) == (200, 4096)

    run(test)


def test_a_vllm_that_does_not_answer_is_a_503(tmp_path: Path) -> None:
    async def test() -> None:
        async with gateway(tmp_path, upstream_override="http://127.0.0.1:9") as gw:
            status, answer = await gw.call("GET", "/v1/models")
            assert status == 503 and "vLLM does not answer" in answer["message"]

    run(test)
