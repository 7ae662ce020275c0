"""Client traffic: the allow-listed vLLM paths (`gateway_contract.CLIENT_ROUTES`) forwarded to the vLLM beside the
gateway, bodies streamed both ways (a `stream: true` chat answer arrives as vLLM sends each event), the request body
bounded. Anything else is answered here and never reaches vLLM: 403 for vLLM's runtime LoRA API (only the operator
changes what a server holds, through the admin API), 404 for the rest.

Only the path from the allow-list is sent upstream, never the one the client wrote (so no spelling of a path reaches
vLLM as another), with the client's query string and headers, less the hop-by-hop ones and the admin key."""

from __future__ import annotations

from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from yarl import URL

from mmrl_api.gateway_contract import ADMIN_KEY_HEADER, CLIENT_ROUTES, LORA_PATHS

HOP_BY_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)
CONNECT_SECONDS = 5.0


def error(status: int, message: str) -> web.Response:
    return web.json_response({"message": message}, status=status)


def _headers(headers: object, drop: frozenset[str]) -> dict[str, str]:
    items = headers.items()  # type: ignore[attr-defined]
    return {k: v for k, v in items if k.lower() not in drop}


class _Bounded:
    """The request body as it arrives, cut off once it passes `limit` (`over` says so)."""

    def __init__(self, request: web.Request, limit: int) -> None:
        self.request, self.limit, self.over = request, limit, False

    async def chunks(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self.request.content.iter_any():
            seen += len(chunk)
            if seen > self.limit:
                self.over = True
                raise ValueError("request body too large")
            yield chunk


class Proxy:
    def __init__(self, session: aiohttp.ClientSession, upstream: str, max_body: int) -> None:
        self.session, self.upstream, self.max_body = session, upstream.rstrip("/"), max_body
        self.drop = HOP_BY_HOP | {ADMIN_KEY_HEADER.lower()}

    async def handle(self, request: web.Request) -> web.StreamResponse:
        path = request.path
        if (request.method, path) not in CLIENT_ROUTES:
            if path.rstrip("/") in LORA_PATHS:
                return error(403, f"{path} is not served here: only the operator loads and unloads adapters")
            return error(404, f"{request.method} {path} is not served here")
        route = next(p for m, p in CLIENT_ROUTES if (m, p) == (request.method, path))
        if request.content_length is not None and request.content_length > self.max_body:
            return error(413, f"the request body is larger than the {self.max_body} bytes accepted")
        query = request.rel_url.raw_query_string
        url = URL(self.upstream + route + (f"?{query}" if query else ""), encoded=True)
        body = _Bounded(request, self.max_body)
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_SECONDS)
        reply: web.StreamResponse | None = None
        try:
            async with self.session.request(
                request.method,
                url,
                headers=_headers(request.headers, self.drop),
                data=body.chunks() if request.body_exists else None,
                allow_redirects=False,
                timeout=timeout,
            ) as upstream:
                reply = web.StreamResponse(status=upstream.status, reason=upstream.reason)
                reply.headers.update(_headers(upstream.headers, HOP_BY_HOP))
                await reply.prepare(request)
                async for chunk in upstream.content.iter_any():
                    await reply.write(chunk)
                await reply.write_eof()
                return reply
        except ConnectionResetError:  # the client left: leaving the block closed vLLM's side too (it aborts)
            return reply or error(499, "the client closed the connection")
        except (aiohttp.ClientError, TimeoutError, ValueError) as err:
            if body.over:
                return error(413, f"the request body is larger than the {self.max_body} bytes accepted")
            if reply is not None and reply.prepared:
                return reply  # the answer was under way: the client sees it end early
            return error(503, f"vLLM does not answer: {err or type(err).__name__}")
