"""The gateway's admin API: only the admin key reaches it; a load stages a checked, content-addressed copy (links on
any path component, a changed config, bounds and vLLM's rules refused) and vLLM loads the copy; copies are reused and
removed with the last name on them; a vLLM that restarts gets its adapters back before the replica is ready again."""

from __future__ import annotations

import json
import os
import stat
import struct
from pathlib import Path

import pytest

from mmrl_api.adapter_digest import Limits, tree_digest
from mmrl_api.gateway_contract import ADAPTERS, ADMIN_KEY_HEADER, LOAD, READY, UNLOAD
from mmrl_operator.gateway.admin import Admin
from mmrl_operator.gateway.staging import Store
from tests.support.stub_vllm import gateway, run

KEY = {ADMIN_KEY_HEADER: "sesame"}
TENSOR = "base_model.model.model.language_model.layers.0.self_attn.q_proj.lora_A.weight"


def write_adapter(path: Path, seed: int = 0, tensors: tuple[str, ...] = (TENSOR,), **config: object) -> str:
    """A PEFT-shaped adapter directory (a safetensors header with `tensors`); returns its digest."""
    path.mkdir(parents=True)
    cfg = {"peft_type": "LORA", "r": 8, "lora_alpha": 16, "target_modules": ["q_proj"], "bias": "none", **config}
    (path / "adapter_config.json").write_text(json.dumps(cfg))
    header = json.dumps(
        {t: {"dtype": "F32", "shape": [1], "data_offsets": [4 * i, 4 * i + 4]} for i, t in enumerate(tensors)}
    ).encode()
    data = struct.pack("<Q", len(header)) + header + struct.pack("<f", float(seed)) * len(tensors)
    (path / "adapter_model.safetensors").write_bytes(data)
    return tree_digest(path)


def load(name: str, source: Path, digest: str, **more: object) -> dict:
    return {"json": {"name": name, "source": str(source), "digest": digest, **more}, "headers": KEY}


def test_the_admin_api_needs_the_key_and_a_rotated_key_replaces_the_old_one(tmp_path: Path) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            for headers in ({}, {ADMIN_KEY_HEADER: "wrong"}, {ADMIN_KEY_HEADER: "sesam"}, {"Authorization": "sesame"}):
                status, answer = await gw.call("GET", ADAPTERS, headers=headers)
                assert status == 401 and ADMIN_KEY_HEADER in answer["message"]
                status, _ = await gw.call("POST", UNLOAD, json={"name": "x"}, headers=headers)
                assert status == 401
            assert (await gw.call("GET", ADAPTERS, headers=KEY))[0] == 200
            gw.settings.admin_key_file.write_text("rotated")
            assert (await gw.call("GET", ADAPTERS, headers=KEY))[0] == 401
            assert (await gw.call("GET", ADAPTERS, headers={ADMIN_KEY_HEADER: "rotated"}))[0] == 200
            gw.settings.admin_key_file.unlink()
            status, answer = await gw.call("GET", ADAPTERS, headers={ADMIN_KEY_HEADER: ""})
            assert status == 503 and "no admin key" in answer["message"]
        assert not any(p.startswith("/v1/load") or p.startswith("/v1/unload") for p in gw.stub.paths())

    run(test)


def test_a_load_stages_a_sealed_copy_and_vllm_loads_the_copy(tmp_path: Path) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            source = tmp_path / "claim" / "job-1" / "adapter"
            digest = write_adapter(source)
            status, answer = await gw.call("POST", LOAD, **load("geo", source, digest))
            assert status == 200, answer
            copy = tmp_path / "store" / digest
            assert (answer["path"], answer["reused"]) == (str(copy), False)
            assert gw.stub.loaded == {"geo": str(copy)}
            assert tree_digest(copy) == digest
            modes = {stat.S_IMODE((copy / "adapter_config.json").stat().st_mode), stat.S_IMODE(copy.stat().st_mode)}
            assert modes == {0o444, 0o555}  # sealed: nobody writes a checked copy
            # The trainer's files change afterwards: what vLLM loads does not.
            (source / "adapter_config.json").write_text("{}")
            assert tree_digest(copy) == digest
            status, listing = await gw.call("GET", ADAPTERS, headers=KEY)
            assert listing["adapters"] == {"geo": {"digest": digest, "loaded": True}}
            assert listing["staged"] == [digest] and listing["vllm"] == {"geo": str(copy)}

    run(test)


@pytest.mark.parametrize("where", ["job directory", "adapter directory", "config file"])
def test_a_link_on_any_component_of_the_source_is_refused_and_nothing_is_loaded(tmp_path: Path, where: str) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            real = tmp_path / "claim" / "real"
            digest = write_adapter(real / "adapter")
            if where == "job directory":
                (tmp_path / "claim" / "job").symlink_to(real)
                source = tmp_path / "claim" / "job" / "adapter"
            elif where == "adapter directory":
                (tmp_path / "claim" / "linked").symlink_to(real / "adapter")
                source = tmp_path / "claim" / "linked"
            else:
                (real / "adapter" / "adapter_config.json").rename(tmp_path / "cfg.json")
                (real / "adapter" / "adapter_config.json").symlink_to(tmp_path / "cfg.json")
                source = real / "adapter"
            status, answer = await gw.call("POST", LOAD, **load("geo", source, digest))
            assert status == 422 and "link" in answer["message"], answer
            assert gw.stub.loaded == {} and os.listdir(tmp_path / "store") == []

    run(test)


def test_a_changed_config_is_refused_by_digest_naming_both(tmp_path: Path) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            source = tmp_path / "claim" / "adapter"
            reported = write_adapter(source)
            (source / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 8, "lora_alpha": 99}))
            found = tree_digest(source)
            status, answer = await gw.call("POST", LOAD, **load("geo", source, reported))
            assert status == 409 and found in answer["message"] and reported in answer["message"], answer
            assert gw.stub.loaded == {} and os.listdir(tmp_path / "store") == []

    run(test)


@pytest.mark.parametrize(
    ("config", "tensors", "rule"),
    [
        ({"use_dora": True}, (TENSOR,), "dora"),
        ({"r": 64}, (TENSOR,), "max-lora-rank"),
        ({}, ("base_model.model.model.visual.blocks.0.attn.qkv.lora_A.weight",), "vision-tower"),
    ],
)
def test_what_vllm_cannot_serve_is_refused_on_the_copy(tmp_path: Path, config: dict, tensors: tuple, rule: str) -> None:
    async def test() -> None:
        async with gateway(tmp_path, max_lora_rank=32) as gw:
            source = tmp_path / "claim" / "adapter"
            digest = write_adapter(source, tensors=tensors, **config)
            status, answer = await gw.call("POST", LOAD, **load("geo", source, digest))
            assert status == 422 and f"rule {rule}" in answer["message"], answer
            assert gw.stub.loaded == {}

    run(test)


def test_sources_outside_the_adapter_volumes_and_past_the_bounds_are_refused(tmp_path: Path) -> None:
    async def test() -> None:
        outside = tmp_path / "elsewhere"
        digest = write_adapter(outside)
        async with gateway(tmp_path, limits=Limits(max_files=2)) as gw:
            status, answer = await gw.call("POST", LOAD, **load("geo", outside, digest))
            assert status == 403 and "adapter volumes" in answer["message"]
            source = tmp_path / "claim" / "adapter"
            write_adapter(source)
            (source / "README.md").write_text("hello")
            status, answer = await gw.call("POST", LOAD, **load("geo", source, tree_digest(source)))
            assert status == 422 and "more than 2 files" in answer["message"]
            status, answer = await gw.call("POST", LOAD, json={"name": "geo", "source": "relative"}, headers=KEY)
            assert status == 400

    run(test)


def test_copies_are_shared_by_content_moved_in_place_and_removed_with_their_last_name(tmp_path: Path) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            v1 = write_adapter(tmp_path / "claim" / "v1" / "adapter", seed=1)
            v2 = write_adapter(tmp_path / "claim" / "v2" / "adapter", seed=2)
            assert (await gw.call("POST", LOAD, **load("geo-v1", tmp_path / "claim/v1/adapter", v1)))[0] == 200
            status, answer = await gw.call("POST", LOAD, **load("prod", tmp_path / "claim/v1/adapter", v1))
            assert (status, answer["reused"]) == (200, True)
            assert (await gw.call("POST", LOAD, **load("geo-v2", tmp_path / "claim/v2/adapter", v2)))[0] == 200
            assert sorted(os.listdir(tmp_path / "store")) == sorted([".held.json", v1, v2])
            # The alias moves to v2 in place; v1's copy stays for geo-v1.
            status, _ = await gw.call("POST", LOAD, **load("prod", tmp_path / "claim/v2/adapter", v2, inplace=True))
            assert status == 200 and gw.stub.loaded["prod"] == str(tmp_path / "store" / v2)
            assert (await gw.call("POST", UNLOAD, json={"name": "geo-v1"}, headers=KEY))[0] == 200
            assert sorted(os.listdir(tmp_path / "store")) == sorted([".held.json", v2])
            assert set(gw.stub.loaded) == {"prod", "geo-v2"}
            # A load vLLM refuses (a name it holds, without inplace) keeps nothing new.
            v3 = write_adapter(tmp_path / "claim" / "v3" / "adapter", seed=3)
            status, answer = await gw.call("POST", LOAD, **load("prod", tmp_path / "claim/v3/adapter", v3))
            assert status == 502 and "already been loaded" in answer["message"]
            assert v3 not in os.listdir(tmp_path / "store")

    run(test)


def test_a_restarted_vllm_is_not_ready_until_the_gateway_has_loaded_its_adapters_again(tmp_path: Path) -> None:
    async def test() -> None:
        async with gateway(tmp_path) as gw:
            source = tmp_path / "claim" / "adapter"
            digest = write_adapter(source)
            assert (await gw.call("POST", LOAD, **load("geo", source, digest)))[0] == 200
            assert (await gw.call("GET", READY))[0] == 200
            gw.stub.loaded.clear()  # the vLLM container restarted in place: the pod's store is still there
            status, answer = await gw.call("GET", READY)
            assert status == 503 and "geo" in answer["message"]
            admin = Admin(Store(gw.settings.store, gw.settings.adapter_roots), _vllm_of(gw), gw.settings.admin_key_file)
            assert await admin.resync() == 1
            assert gw.stub.loaded == {"geo": str(tmp_path / "store" / digest)}
            assert (await gw.call("GET", READY))[0] == 200
            gw.stub.up = False
            status, answer = await gw.call("GET", READY)
            assert status == 503 and "engine dead" in answer["message"]

    run(test)


def _vllm_of(gw):  # type: ignore[no-untyped-def]
    """A second gateway process's view (a restarted gateway container): the same store and vLLM."""
    from mmrl_operator.gateway.upstream import VLLM

    return VLLM(gw.client, gw.settings.upstream)


def test_an_adapter_the_gateway_may_not_read_is_refused_with_what_to_change(tmp_path: Path, monkeypatch) -> None:
    """The gateway runs as the operator image's user: a directory only its owner may read (mkdtemp's 0700, say) is
    refused with the fix, not a 500."""
    from mmrl_operator.gateway import staging

    def denied(path, *args, **kwargs):  # type: ignore[no-untyped-def]
        raise PermissionError(13, "Permission denied", "adapter")

    async def test() -> None:
        async with gateway(tmp_path) as gw:
            source = tmp_path / "claim" / "job" / "adapter"
            digest = write_adapter(source)
            monkeypatch.setattr(staging, "read_tree", denied)
            status, answer = await gw.call("POST", LOAD, **load("geo", source, digest))
            assert status == 403 and "readable by other users" in answer["message"], answer
            assert os.listdir(tmp_path / "store") == []

    run(test)
