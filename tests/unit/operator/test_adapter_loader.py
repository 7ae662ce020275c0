"""What the operator's side of a replica (`runtime.adapter_loader.sync_replica`) makes of the real gateway's answers,
in front of a stand-in vLLM: what the replica holds from the right files, and what it answers each name with after
the pass, a failed in-place alias move included (the name is still answered, from its old files)."""

from __future__ import annotations

import asyncio
import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.rest import ApiException

from mmrl_operator.core.server_replicas import Wanted
from mmrl_operator.runtime.adapter_loader import ReplicaResult, sync_replica
from tests.support.stub_vllm import Running, gateway
from tests.unit.operator.test_gateway_admin import write_adapter


class GatewayPod:
    """The gateway as `Kube.pod_call` reaches a replica (there through the apiserver's pod proxy), here over HTTP."""

    def __init__(self, running: Running) -> None:
        self.running = running

    def pod_call(
        self,
        namespace: str,
        pod: str,
        port: int,
        method: str,
        path: str,
        body: Any = None,
        deadline: float = 5.0,
        headers: dict[str, str] | None = None,
    ) -> bytes:
        data = None if body is None else json.dumps(body).encode()
        ask = urllib.request.Request(self.running.url + path, data=data, method=method, headers=headers or {})
        ask.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(ask, timeout=deadline) as reply:
                return reply.read()
        except urllib.error.HTTPError as err:  # as bounded_http raises a non-2xx answer
            raise ApiException(status=err.code, reason=err.reason, body=err.read().decode()) from None


@pytest.fixture
def replica(tmp_path: Path) -> Iterator[GatewayPod]:
    """The gateway and its stand-in vLLM on an event loop of their own, for the synchronous loader to call."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    context = gateway(tmp_path)
    running = asyncio.run_coroutine_threadsafe(context.__aenter__(), loop).result(30)
    try:
        yield GatewayPod(running)
    finally:
        asyncio.run_coroutine_threadsafe(context.__aexit__(None, None, None), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)


def wanted(tmp_path: Path, name: str, seed: int) -> Wanted:
    source = tmp_path / "claim" / name
    return Wanted(str(source), write_adapter(source, seed=seed))


def sync(replica: GatewayPod, want: dict[str, Wanted]) -> ReplicaResult:
    return sync_replica(replica, "ns", "replica-0", "sesame", want)  # type: ignore[arg-type]


def test_a_failed_in_place_move_leaves_the_alias_answered_from_its_old_files(replica, tmp_path: Path) -> None:
    v1, v2 = wanted(tmp_path, "v1", 1), wanted(tmp_path, "v2", 2)
    first = sync(replica, {"v1": v1, "prod": v1})
    assert (first.holds, first.serves, first.errors) == ({"v1", "prod"}, {"v1": v1.digest, "prod": v1.digest}, {})

    replica.running.stub.refuse_inplace = "engine busy"
    moved = sync(replica, {"v1": v1, "v2": v2, "prod": v2})
    assert moved.holds == {"v1", "v2"} and "engine busy" in moved.errors["prod"]
    assert moved.serves == {"v1": v1.digest, "v2": v2.digest, "prod": v1.digest}  # still answered, at v1

    replica.running.stub.refuse_inplace = ""
    again = sync(replica, {"v2": v2, "prod": v2})  # v1's job deleted: unloaded, and no longer answered
    assert (again.holds, again.errors) == ({"v2", "prod"}, {})
    assert again.serves == {"v2": v2.digest, "prod": v2.digest}
