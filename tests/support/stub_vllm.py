"""A stand-in for vLLM's HTTP server, for the gateway's unit tests: it records every request that reaches it, keeps
the LoRA names it was told to load (as vLLM does: a name loaded twice without load_inplace is refused), and streams
a chat answer one event at a time, the second only once the test says so. The contract with the real vLLM is tested
in tests/e2e/test_gateway_vllm.py."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientSession, web
from aiohttp.test_utils import TestServer

from mmrl_operator.gateway.app import Settings, build_app

BASE = "base-model"


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": {"message": message}}, status=status)  # vLLM's ErrorResponse shape


@dataclass
class StubVLLM:
    loaded: dict[str, str] = field(default_factory=dict)  # name -> path
    seen: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)  # method, path+query, headers
    second_event: asyncio.Event = field(default_factory=asyncio.Event)
    up: bool = True
    refuse_inplace: str = ""  # when set: every load_inplace is refused with this message (a 500, as vLLM's errors are)

    def paths(self) -> list[str]:
        return [path.split("?")[0] for _method, path, _headers, _body in self.seen]

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        self.seen.append((request.method, request.path_qs, dict(request.headers), body))
        if not self.up:
            return _error(500, "engine dead")
        if request.path == "/v1/models":
            data = [{"id": BASE, "root": BASE, "parent": None}]
            data += [{"id": n, "root": p, "parent": BASE} for n, p in sorted(self.loaded.items())]
            return web.json_response({"object": "list", "data": data})
        if request.path == "/v1/load_lora_adapter":
            ask = json.loads(body)
            name, path = ask["lora_name"], ask["lora_path"]
            if ask.get("load_inplace") and self.refuse_inplace:
                return _error(500, self.refuse_inplace)
            if name in self.loaded and not ask.get("load_inplace"):
                return web.json_response(
                    {"error": {"message": f"The lora adapter '{name}' has already been loaded"}}, status=400
                )
            if not (Path(path) / "adapter_config.json").is_file():
                return _error(400, f"no adapter at {path}")
            self.loaded[name] = path
            return web.Response(text=f"Success: LoRA adapter '{name}' added successfully.")
        if request.path == "/v1/unload_lora_adapter":
            name = json.loads(body)["lora_name"]
            if self.loaded.pop(name, None) is None:
                return web.json_response(
                    {"error": {"message": f"The lora adapter '{name}' cannot be found."}}, status=404
                )
            return web.Response(text="Success")
        if request.path == "/v1/chat/completions" and json.loads(body or b"{}").get("stream"):
            reply = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await reply.prepare(request)
            await reply.write(b'data: {"n": 1}\n\n')
            await self.second_event.wait()
            await reply.write(b'data: {"n": 2}\n\ndata: [DONE]\n\n')
            await reply.write_eof()
            return reply
        echo = {
            "path": request.path,
            "query": request.query_string,
            "headers": dict(request.headers),
            "size": len(body),
        }
        return web.json_response(echo)


@dataclass
class Running:
    stub: StubVLLM
    client: ClientSession
    url: str  # the gateway
    settings: Settings

    async def call(self, method: str, path: str, **kwargs: Any) -> tuple[int, Any]:
        async with self.client.request(method, self.url + path, **kwargs) as reply:
            text = await reply.text()
            try:
                return reply.status, json.loads(text)
            except ValueError:
                return reply.status, text


@contextlib.asynccontextmanager
async def gateway(tmp_path: Path, **overrides: Any) -> AsyncIterator[Running]:
    """The gateway in this process in front of a StubVLLM; the admin key is "sesame", adapters may be staged from
    `tmp_path / "claim"`."""
    stub = StubVLLM()
    upstream_app = web.Application(client_max_size=1 << 30)
    upstream_app.router.add_route("*", "/{tail:.*}", stub.handle)
    (tmp_path / "store").mkdir(exist_ok=True)
    (tmp_path / "claim").mkdir(exist_ok=True)
    key = tmp_path / "key"
    if not key.exists():
        key.write_text("sesame\n")
    override = overrides.pop("upstream_override", None)
    async with TestServer(upstream_app, host="127.0.0.1") as upstream:
        settings = Settings(
            upstream=override or str(upstream.make_url("")).rstrip("/"),
            store=tmp_path / "store",
            admin_key_file=key,
            adapter_roots=[str(tmp_path / "claim")],
            resync=False,
            **overrides,
        )
        async with TestServer(build_app(settings), host="127.0.0.1") as server, ClientSession() as client:
            yield Running(stub, client, str(server.make_url("")).rstrip("/"), settings)


def run(test: Callable[[], Any]) -> Any:
    return asyncio.run(test())
