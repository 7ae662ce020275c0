"""The contract between the gateway and the real vLLM it fronts (the CPU build the local kubelet runs for a vLLM
image), each started with the arguments a ModelServer replica's containers get from the operator's builder: the
admin API stages real PEFT exports of the tiny model into checked copies and vLLM loads them; the adapters answer as
themselves through the gateway, streamed too; an alias moves in place; vLLM's own LoRA API is refused on the public
port; a changed file is refused by digest; an unload removes the name and, with its last name, the copy."""

from __future__ import annotations

import json
import os
import shutil
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmrl_api.adapter_digest import tree_digest
from mmrl_api.gateway_contract import ADAPTERS, ADMIN_KEY_HEADER, LIVE, LOAD, UNLOAD
from mmrl_api.model_server import parse_server
from mmrl_local.cluster.controlplane import free_port
from mmrl_local.common import procs
from mmrl_operator.cli.chat import chat_request
from mmrl_operator.core.builders.model_server import build_server_deployment
from mmrl_trainer.tiny import build_tiny_vlm
from tests.support.lora import export_random_adapter
from tests.support.polling import wait_until
from tests.support.vllm_engine import vllm_cpu_python, vllm_engine

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
KEY = "an-admin-key-for-this-test"
QUESTION = "What colour is this?"
# A prompt of about 380 tokens: it fills two of the CPU build's 128-token KV blocks, which vLLM's prefix cache keeps.
LONG = " ".join(f"word{i}" for i in range(360)) + " What comes next?"


def containers() -> tuple[dict[str, Any], dict[str, Any]]:
    """The vLLM and gateway containers of examples/local-model-server.yaml's replicas."""
    doc = yaml.safe_load((ROOT / "examples" / "local-model-server.yaml").read_text())
    doc["metadata"]["uid"] = "u-1"
    vllm, gateway = build_server_deployment(parse_server(doc))["spec"]["template"]["spec"]["containers"]
    return vllm, gateway


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def replaced(args: list[str], values: dict[str, str | None]) -> list[str]:
    """`args` with each flag of `values` set to its value (None: dropped, with its value)."""
    out, skip = [], False
    for i, a in enumerate(args):
        if skip:
            skip = False
            continue
        if a in values:
            skip = i + 1 < len(args) and not args[i + 1].startswith("--")
            if values[a] is not None:
                out += [a, str(values[a])]
            continue
        out.append(a)
    return out


class Http:
    def __init__(self, base: str) -> None:
        self.base = base

    def call(self, method: str, path: str, body: Any = None, admin: bool = False) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.base + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        if admin:
            request.add_header(ADMIN_KEY_HEADER, KEY)
        try:
            with urllib.request.urlopen(request, timeout=300) as reply:
                status, raw = reply.status, reply.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        try:
            return status, json.loads(raw)
        except ValueError:
            return status, raw.decode()

    def answer(self, model: str, question: str = QUESTION) -> str:
        status, reply = self.call("POST", "/v1/chat/completions", chat_request(model, question, None, max_tokens=8))
        assert status == 200, reply
        return str(reply["choices"][0]["message"]["content"])

    def models(self) -> dict[str, str]:
        status, reply = self.call("GET", "/v1/models")
        assert status == 200, reply
        return {m["id"]: m["root"] for m in reply["data"]}

    def load(self, name: str, source: Path, **more: Any) -> tuple[int, Any]:
        body = {"name": name, "source": str(source), "digest": tree_digest(source), **more}
        return self.call("POST", LOAD, body, admin=True)


def test_the_gateway_loads_checked_copies_into_real_vllm_and_keeps_vllms_lora_api_to_itself(tmp_path: Path) -> None:
    tiny = build_tiny_vlm()
    root = tmp_path / "claim" / "team"
    a, b = root / "job-a" / "adapter", root / "job-b" / "adapter"
    export_random_adapter(tiny, a, seed=1, base_model=str(tiny))
    export_random_adapter(tiny, b, seed=2, base_model=str(tiny))
    vllm, gateway = containers()
    env = {e["name"]: e["value"] for e in vllm["env"]}
    args = replaced(vllm["args"], {"--model": None, "--served-model-name": "tiny", "--host": None, "--port": None})
    store, key_file = tmp_path / "store", tmp_path / "key"
    store.mkdir()
    key_file.write_text(KEY)
    with vllm_engine(tiny, tmp_path, *args, python=vllm_cpu_python(), env=env) as upstream:
        port = free_port()
        gateway_args = replaced(
            gateway["args"],
            {
                "--port": str(port),
                "--upstream": upstream,
                "--store": str(store),
                "--admin-key-file": str(key_file),
                "--adapter-root": str(root),
            },
        )
        assert flag(gateway_args, "--max-lora-rank") == "8"
        argv = [sys.executable, *gateway["command"][1:], *gateway_args]
        proc = procs.spawn(argv, tmp_path / "gateway.log", env=dict(os.environ))
        try:
            gw = Http(f"http://127.0.0.1:{port}")
            wait_until(lambda: _answers(gw, LIVE), 30, what=f"the gateway (log {tmp_path / 'gateway.log'})")
            check(gw, a, b, store)
        finally:
            procs.stop(proc, timeout=10)


def _answers(gw: Http, path: str) -> bool:
    try:
        return gw.call("GET", path)[0] == 200
    except OSError:
        return False


def check(gw: Http, a: Path, b: Path, store: Path) -> None:
    base = gw.answer("tiny")
    # vLLM's own LoRA API is not reachable through the server's port, whatever the body says.
    for path, body in (
        ("/v1/load_lora_adapter", {"lora_name": "evil", "lora_path": str(a)}),
        ("/v1/load_lora_adapter", {"lora_name": "tiny", "lora_path": str(a), "load_inplace": True}),
        ("/v1/unload_lora_adapter", {"lora_name": "tiny"}),
    ):
        assert gw.call("POST", path, body)[0] == 403
    assert gw.call("POST", LOAD, {"name": "geo-a", "source": str(a), "digest": tree_digest(a)})[0] == 401  # no key
    assert set(gw.models()) == {"tiny"}

    # Through the admin API: vLLM loads the checked copy, and the adapter answers as itself.
    status, reply = gw.load("geo-a", a, baseModel=str(tiny_of(a)))
    assert status == 200, reply
    assert gw.models()["geo-a"] == str(store / tree_digest(a))
    geo_a = gw.answer("geo-a")
    assert geo_a != base
    events = _stream(gw, "geo-a")
    assert events[-1] == "[DONE]" and len(events) > 2, events

    # An alias: a's copy once more under another name, then moved in place to b's.
    assert gw.load("prod", a)[1]["reused"] is True
    assert gw.answer("prod") == geo_a
    long_a = gw.answer("prod", LONG)  # its prompt's KV blocks are now in vLLM's prefix cache, under the alias's name
    assert gw.load("geo-b", b)[0] == 200
    geo_b, long_b = gw.answer("geo-b"), gw.answer("geo-b", LONG)
    status, reply = gw.load("prod", b, inplace=True)
    assert status == 200, reply
    assert gw.answer("prod") == geo_b != geo_a
    # A prompt asked before the move is answered with the new weights, not from blocks the old ones computed: vLLM
    # 0.23 keys a LoRA's cached blocks by its name alone, and answers this as a's (bench/vllm_alias_move.py).
    assert gw.answer("prod", LONG) == long_b != long_a

    # Files changed after the report are refused by digest (the config, here); nothing changes in vLLM.
    c = a.parent.parent / "job-c" / "adapter"
    shutil.copytree(a, c)
    (c / "README.md").write_text("job c")  # files of its own (a's copy would be reused: it has a's digest)
    reported = tree_digest(c)
    config = c / "adapter_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "lora_alpha": 1}))
    status, reply = gw.call("POST", LOAD, {"name": "geo-c", "source": str(c), "digest": reported}, admin=True)
    assert status == 409 and reported in reply["message"] and tree_digest(c) in reply["message"], reply
    assert "geo-c" not in gw.models() and gw.answer("geo-a") == geo_a

    # Unloading geo-a removes the name, and its copy with it: nothing else points at it any more.
    assert gw.call("POST", UNLOAD, {"name": "geo-a"}, admin=True)[0] == 200
    assert set(gw.models()) == {"tiny", "prod", "geo-b"}
    status, listing = gw.call("GET", ADAPTERS, admin=True)
    assert listing["staged"] == [tree_digest(b)] and set(listing["adapters"]) == {"prod", "geo-b"}
    assert all(held["loaded"] for held in listing["adapters"].values())


def tiny_of(adapter: Path) -> str:
    return str(json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"])


def _stream(gw: Http, model: str) -> list[str]:
    """The `data:` payloads of a streamed chat answer through the gateway."""
    body = {**chat_request(model, QUESTION, None, max_tokens=4), "stream": True}
    request = urllib.request.Request(gw.base + "/v1/chat/completions", data=json.dumps(body).encode(), method="POST")
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=120) as reply:
        assert reply.headers["Content-Type"].startswith("text/event-stream")
        lines = reply.read().decode().splitlines()
    return [line.removeprefix("data: ") for line in lines if line.startswith("data: ")]
