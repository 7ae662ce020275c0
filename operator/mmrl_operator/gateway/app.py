"""The gateway's HTTP application: the admin API and the probes under `/mmrl/`, every other path through the
client allow-list (`proxy`)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web

from mmrl_api.adapter_digest import Limits
from mmrl_api.gateway_contract import ADAPTERS, LIVE, LOAD, READY, UNLOAD
from mmrl_operator.gateway.admin import Admin
from mmrl_operator.gateway.proxy import Proxy, error
from mmrl_operator.gateway.staging import DEFAULT_LIMITS, Store
from mmrl_operator.gateway.upstream import VLLM

log = logging.getLogger("mmrl.gateway")
ADMIN_BODY = 64 << 10  # a load request is a few hundred bytes


@dataclass(frozen=True)
class Settings:
    upstream: str  # vLLM's base URL, on loopback
    store: Path
    admin_key_file: Path
    adapter_roots: list[str] = field(default_factory=list)
    max_lora_rank: int | None = None
    max_request_bytes: int = 64 << 20  # a chat request with a few base64 images
    limits: Limits = DEFAULT_LIMITS
    vllm_api_key: str | None = None  # the server's VLLM_API_KEY, when it sets one
    resync: bool = True


@dataclass
class Parts:
    """What start-up makes (they need the running loop): the admin API and the proxy."""

    admin: Admin | None = None
    proxy: Proxy | None = None


SETTINGS = web.AppKey("settings", Settings)
PARTS = web.AppKey("parts", Parts)


def build_app(settings: Settings) -> web.Application:
    app = web.Application(client_max_size=ADMIN_BODY)
    app[SETTINGS] = settings
    app[PARTS] = Parts()
    app.cleanup_ctx.append(_lifetime)
    app.router.add_route("*", "/{tail:.*}", _dispatch)
    return app


async def _live(_request: web.Request) -> web.Response:
    return web.json_response({"live": True})


async def _dispatch(request: web.Request) -> web.StreamResponse:
    parts = request.app[PARTS]
    admin = parts.admin
    assert admin is not None and parts.proxy is not None  # set at start-up, before the first request
    if request.path.startswith("/mmrl/"):
        routes = {
            ("GET", LIVE): _live,
            ("GET", READY): admin.ready,
            ("GET", ADAPTERS): admin.listing,
            ("POST", LOAD): admin.load,
            ("POST", UNLOAD): admin.unload,
        }
        handler = routes.get((request.method, request.path))
        if handler is None:
            return error(404, f"{request.method} {request.path} is not served here")
        return await handler(request)
    return await parts.proxy.handle(request)


async def _lifetime(app: web.Application) -> AsyncIterator[None]:
    settings, parts = app[SETTINGS], app[PARTS]
    # Bytes pass through unchanged (compressed answers stay compressed); the admin calls share the pool.
    session = aiohttp.ClientSession(auto_decompress=False, connector=aiohttp.TCPConnector(limit=0))
    store = Store(settings.store, settings.adapter_roots, settings.limits, settings.max_lora_rank)
    parts.admin = admin = Admin(store, VLLM(session, settings.upstream, settings.vllm_api_key), settings.admin_key_file)
    parts.proxy = Proxy(session, settings.upstream, settings.max_request_bytes)
    log.info(
        "gateway up: vLLM at %s, store %s, %d adapter names held, adapters staged from %s",
        settings.upstream,
        settings.store,
        len(admin.held),
        ", ".join(settings.adapter_roots) or "nowhere",
    )
    resync = asyncio.create_task(admin.resync_forever()) if settings.resync else None
    try:
        yield
    finally:
        if resync is not None:
            resync.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await resync
        await session.close()
