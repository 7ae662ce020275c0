"""The stranger's attempts cover every way in (vLLM's LoRA API, the gateway's admin API, vLLM's own port) at the
Service and at a replica, and only an answer that changes nothing counts as refused. The e2e test runs them."""

from __future__ import annotations

from mmrl_local.stranger import Attempt, attempts


def test_every_way_in_is_tried_at_the_service_and_at_the_replica() -> None:
    tries = attempts("s-vllm.ns.svc", "10.1.0.7", "geo-v1", "geo-prod", "/ckpt/mmrl/ns/geo-v1-1234abcd/adapter")
    by_host: dict[str, set[str]] = {}
    for t in tries:
        by_host.setdefault(t["url"].split("/")[2], set()).add(t["what"])
    ways = {"load", "unload", "load_inplace", "admin unload", "admin load, guessed key"}
    assert by_host == {
        "s-vllm.ns.svc:8000": ways,
        "10.1.0.7:8000": ways,
        "10.1.0.7:8001": {"unload at vLLM's own port"},
    }
    inplace = next(t for t in tries if t["what"] == "load_inplace")
    assert inplace["body"] == {
        "lora_name": "geo-prod",
        "lora_path": "/ckpt/mmrl/ns/geo-v1-1234abcd/adapter",
        "load_inplace": True,
    }


def test_only_an_answer_that_changes_nothing_is_a_refusal() -> None:
    assert all(Attempt("x", "u", status, "").refused for status in (None, 401, 403, 404, 405))
    assert not any(Attempt("x", "u", status, "").refused for status in (200, 400, 409, 500, 502))
