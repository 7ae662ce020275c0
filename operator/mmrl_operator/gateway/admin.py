"""The gateway's admin API, which only the holder of the server's admin key reaches (the operator, through the
apiserver's pod proxy): stage and load an adapter, unload one, list what the replica holds. And the replica's own
memory of what it loaded: a vLLM container that restarts in the same pod (the store outlives it) forgets every
adapter, so the gateway loads them again from its checked copies, and answers not-ready until vLLM holds them all.

We chose to reload here rather than wait for the operator: the copies were checked when they were staged, the reload
is local and starts the moment vLLM answers, and the replica is back in the Service without an operator pass (which
may be a minute away, or the operator down). The operator's readiness gate still keeps a new replica (an empty store)
out until the operator has loaded it.

The key is read from its mounted file on every request, so a rotated Secret takes effect once the kubelet has updated
the file, without a restart; it is compared in constant time and never logged.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from pathlib import Path
from typing import TypeVar

from aiohttp import web
from pydantic import ValidationError

from mmrl_api.gateway_contract import ADMIN_KEY_HEADER, HeldAdapter, Listing, LoadRequest, UnloadRequest
from mmrl_operator.gateway.proxy import error
from mmrl_operator.gateway.staging import Refused, Store
from mmrl_operator.gateway.upstream import VLLM, UpstreamError

log = logging.getLogger("mmrl.gateway")
Asked = TypeVar("Asked", LoadRequest, UnloadRequest)
RESYNC_SECONDS = 2.0


class Admin:
    def __init__(self, store: Store, vllm: VLLM, key_file: Path) -> None:
        self.store, self.vllm, self.key_file = store, vllm, key_file
        self.held: dict[str, str] = store.load_state()  # name -> digest of the copy it was loaded from
        self.lock = asyncio.Lock()  # one change at a time: stage, load, unload, reload

    # --- authentication -------------------------------------------------------------------------------------------
    def _key(self) -> bytes:
        try:
            return self.key_file.read_bytes().strip()
        except OSError:
            return b""

    def refused(self, request: web.Request) -> web.Response | None:
        """None when the request carries the admin key; the answer to give it otherwise."""
        key = self._key()
        if not key:
            return error(503, "the gateway has no admin key mounted; the operator creates it with the server")
        given = request.headers.get(ADMIN_KEY_HEADER, "").strip().encode()
        if not hmac.compare_digest(given, key):
            log.warning("admin request %s %s refused: no valid admin key", request.method, request.path)
            return error(401, f"the admin API needs the server's admin key in {ADMIN_KEY_HEADER}")
        return None

    # --- handlers ---------------------------------------------------------------------------------------------------
    async def _asked(self, request: web.Request, kind: type[Asked]) -> Asked | web.Response:
        """The request's body as `kind`, or the answer to give a request without the key or with a bad body."""
        if (denied := self.refused(request)) is not None:
            return denied
        try:
            return kind.model_validate(await request.json())
        except (ValidationError, ValueError) as err:
            return error(400, f"not a {kind.__name__}: {' '.join(str(err).split())[:500]}")

    async def load(self, request: web.Request) -> web.Response:
        ask = await self._asked(request, LoadRequest)
        if isinstance(ask, web.Response):
            return ask
        async with self.lock:
            try:
                path, reused = await asyncio.to_thread(self.store.stage, ask.source, ask.digest, ask.base_model)
            except Refused as refused:
                log.warning("adapter %s from %s refused: %s", ask.name, ask.source, refused.message)
                return error(refused.status, refused.message)
            try:
                await self.vllm.load(ask.name, path, ask.inplace)
            except UpstreamError as err:
                await self._forget_unused()
                return error(err.status, f"vLLM could not load {ask.name} from {path}: {err.message}")
            self.held[ask.name] = ask.digest
            await self._commit()
        log.info("loaded %s from %s (digest %s, %s)", ask.name, ask.source, ask.digest, "reused" if reused else "new")
        return web.json_response({"name": ask.name, "digest": ask.digest, "path": path, "reused": reused})

    async def unload(self, request: web.Request) -> web.Response:
        ask = await self._asked(request, UnloadRequest)
        if isinstance(ask, web.Response):
            return ask
        async with self.lock:
            try:
                listed = await self.vllm.models()
                if ask.name in listed:
                    await self.vllm.unload(ask.name)
            except UpstreamError as err:
                return error(err.status, f"vLLM could not unload {ask.name}: {err.message}")
            was = self.held.pop(ask.name, None)
            await self._commit()
        log.info("unloaded %s", ask.name)
        return web.json_response({"name": ask.name, "unloaded": was is not None or ask.name in listed})

    async def listing(self, request: web.Request) -> web.Response:
        if (denied := self.refused(request)) is not None:
            return denied
        return web.json_response((await self.snapshot()).model_dump(by_alias=True))

    async def snapshot(self) -> Listing:
        vllm, why = None, ""
        try:
            vllm = await self.vllm.models()
        except UpstreamError as err:
            why = err.message
        adapters = {
            name: HeldAdapter(digest=digest, loaded=vllm is not None and vllm.get(name) == self.store.path(digest))
            for name, digest in sorted(self.held.items())
        }
        staged = await asyncio.to_thread(self.store.digests)
        return Listing(adapters=adapters, vllm=vllm, vllm_error=why, staged=staged)

    async def ready(self, request: web.Request) -> web.Response:
        """Ready when vLLM answers and holds every name the gateway loaded, each from its copy."""
        try:
            listed = await self.vllm.models()
        except UpstreamError as err:
            return error(503, err.message)
        missing = sorted(n for n, d in self.held.items() if listed.get(n) != self.store.path(d))
        if missing:
            return error(503, f"vLLM does not hold {', '.join(missing)} yet; the gateway loads them again")
        return web.json_response({"ready": True, "adapters": len(self.held)})

    # --- vLLM restarted: load again what it held -------------------------------------------------------------------
    async def resync(self) -> int:
        """Load into vLLM every name the gateway loaded that vLLM no longer holds from its copy; how many."""
        async with self.lock:
            try:
                listed = await self.vllm.models()
            except UpstreamError:
                return 0  # vLLM is not up (yet): the next round tries
            done = 0
            for name, digest in sorted(self.held.items()):
                path = self.store.path(digest)
                if listed.get(name) == path:
                    continue
                if not self.store.has(digest):
                    log.error("the copy of %s (%s) is gone; %s is forgotten", name, digest, name)
                    self.held.pop(name)
                    await self._commit()
                    continue
                try:
                    await self.vllm.load(name, path, inplace=name in listed)
                    done += 1
                    log.info("loaded %s again from its staged copy (vLLM had lost it)", name)
                except UpstreamError as err:
                    log.warning("could not load %s again: %s", name, err.message)
            return done

    async def resync_forever(self) -> None:
        while True:
            await asyncio.sleep(RESYNC_SECONDS)
            try:
                await self.resync()
            except Exception:  # never let the loop die: the next round tries again
                log.exception("resync failed")

    # --- state ------------------------------------------------------------------------------------------------------
    async def _commit(self) -> None:
        """Persist the names held and drop the copies none of them points at."""
        await asyncio.to_thread(self.store.save_state, dict(self.held))
        await self._forget_unused()

    async def _forget_unused(self) -> None:
        removed = await asyncio.to_thread(self.store.remove_unreferenced, set(self.held.values()))
        for digest in removed:
            log.info("removed staged copy %s: no loaded name points at it", digest)
