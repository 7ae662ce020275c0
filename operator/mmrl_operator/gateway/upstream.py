"""The gateway's calls to the vLLM beside it (on loopback): its listing, and its runtime LoRA API, which only the
gateway reaches. Each call is bounded: five seconds to list, two minutes to load."""

from __future__ import annotations

import json
from typing import Any

import aiohttp

LIST_SECONDS, LOAD_SECONDS, UNLOAD_SECONDS = 5.0, 120.0, 30.0
MAX_ANSWER = 4 << 20


class UpstreamError(Exception):
    """vLLM refused or did not answer: `status` 502 (it answered an error) or 503 (it did not answer)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


def _message(body: bytes) -> str:
    """vLLM's error in one line: its `message` (OpenAI's error shape or FastAPI's detail), else the body."""
    try:
        data = json.loads(body)
    except ValueError:
        return " ".join(body.decode(errors="replace").split())[:500]
    if isinstance(data, dict):
        inner = data.get("error") if isinstance(data.get("error"), dict) else data
        text = inner.get("message") or inner.get("detail") or data
        return " ".join(str(text).split())[:500]
    return str(data)[:500]


class VLLM:
    def __init__(self, session: aiohttp.ClientSession, base: str, api_key: str | None = None) -> None:
        self.session, self.base = session, base.rstrip("/")
        # vLLM's own key (the server's VLLM_API_KEY, which clients send too): it guards every /v1 path.
        self.headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}

    async def _call(self, method: str, path: str, body: dict[str, Any] | None, seconds: float) -> bytes:
        try:
            async with self.session.request(
                method, self.base + path, json=body, headers=self.headers, timeout=aiohttp.ClientTimeout(total=seconds)
            ) as reply:
                data = await reply.content.read(MAX_ANSWER + 1)
                if len(data) > MAX_ANSWER:
                    raise UpstreamError(502, f"vLLM's answer to {path} is larger than {MAX_ANSWER} bytes")
                if reply.status >= 400:
                    raise UpstreamError(502, f"vLLM answered {reply.status}: {_message(data)}")
                return data
        except (aiohttp.ClientError, TimeoutError) as err:
            raise UpstreamError(503, f"vLLM does not answer {path}: {err or type(err).__name__}") from err

    async def models(self) -> dict[str, str]:
        """The LoRA names vLLM holds: {name: the path it loaded}; the base model is left out."""
        data = json.loads(await self._call("GET", "/v1/models", None, LIST_SECONDS))
        listed = data.get("data") if isinstance(data, dict) else None
        out: dict[str, str] = {}
        for m in listed if isinstance(listed, list) else []:
            if isinstance(m, dict) and isinstance(m.get("id"), str) and m.get("parent"):
                out[m["id"]] = str(m.get("root") or "")
        return out

    async def load(self, name: str, path: str, inplace: bool) -> None:
        body = {"lora_name": name, "lora_path": path, "load_inplace": inplace}
        await self._call("POST", "/v1/load_lora_adapter", body, LOAD_SECONDS)

    async def unload(self, name: str) -> None:
        await self._call("POST", "/v1/unload_lora_adapter", {"lora_name": name}, UNLOAD_SECONDS)
