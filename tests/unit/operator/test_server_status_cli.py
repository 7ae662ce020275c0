"""`mmrl status NAME --server` rendering of a ModelServer whose status the pure side of shared serving built: an
alias promoted twice and rolled back."""

from __future__ import annotations

from mmrl_api.model_server import ModelServerStatus, RefusedAdapter
from mmrl_operator.cli.server_status import render_server_status
from mmrl_operator.core.shared_serving import alias_targets
from tests.unit.operator.test_shared_serving import claim, server


def test_a_servers_status_shows_its_adapters_the_alias_history_with_rewards_and_refusals() -> None:
    v1 = claim("geo-v1", "2026-10-01T08:00:00Z", 0.5).model_copy(update={"loaded_on": ["qwen-vllm-0"]})
    v2 = claim("geo-v2", "2026-10-01T09:00:00Z", 0.7).model_copy(update={"loaded_on": ["qwen-vllm-0"]})
    aliases = alias_targets(server(), [v1], [], "2026-10-01T08:00:00Z")
    aliases = alias_targets(server(), [v1, v2], aliases, "2026-10-01T09:00:00Z")
    pinned = server(aliasPins=[{"alias": "geo-prod", "job": "geo-v1"}])
    aliases = alias_targets(pinned, [v1, v2], aliases, "2026-10-01T10:00:00Z")
    refused = RefusedAdapter(job="big", name="big", reason="RankTooLarge", message="adapter rank 64 is above 32")
    status = ModelServerStatus(
        phase="Ready", replicas=1, ready_replicas=1, adapters=[v1, v2], aliases=aliases, refused=[refused]
    )
    text = render_server_status(
        {"metadata": {"name": "qwen3vl-8b", "namespace": "team"}, "status": status.wire()},
        [{"type": "Normal", "reason": "AliasMoved", "message": "geo-prod -> geo-v2"}],
    )
    lines = text.splitlines()
    assert lines[0] == "team/qwen3vl-8b  phase=Ready  replicas=1/1 ready"
    assert any(ln.split()[:4] == ["geo-v2", "job", "geo-v2", "held-out"] and "0.700" in ln for ln in lines)
    assert "  alias geo-prod -> geo-v1 (job geo-v1) (pinned)" in lines
    history = [ln.split() for ln in lines if ln.startswith("    2026-10-01T")]
    assert [(h[0], h[2], h[3], h[-1]) for h in history] == [
        ("2026-10-01T08:00:00Z", "2026-10-01T09:00:00Z", "geo-v1", "0.500"),
        ("2026-10-01T09:00:00Z", "2026-10-01T10:00:00Z", "geo-v2", "0.700"),
        ("2026-10-01T10:00:00Z", "now", "geo-v1", "0.500"),
    ]
    assert "  refused: job big (RankTooLarge): adapter rank 64 is above 32" in lines
    assert "AliasMoved" in text


def test_an_alias_that_did_not_move_says_why() -> None:
    v1 = claim("geo-v1", "2026-10-01T08:00:00Z", 0.5)
    (alias,) = alias_targets(server(), [v1], [], "2026-10-01T08:00:00Z")
    stuck = alias.model_copy(update={"error": "moving to job geo-v2's adapter geo-v2 failed on every replica: 500"})
    status = ModelServerStatus(phase="Ready", adapters=[v1], aliases=[stuck])
    text = render_server_status({"metadata": {"name": "s", "namespace": "team"}, "status": status.wire()}, [])
    assert "    warning: moving to job geo-v2's adapter geo-v2 failed on every replica: 500" in text.splitlines()
