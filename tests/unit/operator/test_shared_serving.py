"""Which adapters a ModelServer holds, which jobs it refuses and why, what a replica loads and unloads, and what a
job's InferenceReady says: the pure side of shared serving (`core.shared_serving`), no cluster."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
import yaml

from mmrl_api import MultimodalRLJob, parse_job
from mmrl_api.gateway_contract import Listing
from mmrl_api.model_server import ModelServer, ServedAdapter, parse_server
from mmrl_api.status import Condition, JobStatus
from mmrl_operator.core.names import job_dir
from mmrl_operator.core.server_replicas import Wanted, replica_plan
from mmrl_operator.core.shared_serving import (
    QUARANTINE_AFTER,
    Candidate,
    Refusal,
    alias_targets,
    candidate,
    desired_names,
    held_set,
    job_view,
    quarantine,
    server_refusal,
    settle_aliases,
)
from tests.support.factories import adapter_report

ROOT = Path(__file__).resolve().parents[3]
NS = "hyperpod-ns-research"
NOW = "2026-10-01T09:00:00Z"


def server(**spec: Any) -> ModelServer:
    doc = yaml.safe_load((ROOT / "examples" / "model-server.yaml").read_text())
    doc["metadata"].update(uid="5e7c0000-0000-0000-0000-000000000001", generation=1)
    doc["spec"].update(spec)
    return parse_server(doc)


def job(
    name: str = "geo", created: str = "2026-10-01T08:00:00Z", labels: dict[str, str] | None = None, **inference: Any
) -> MultimodalRLJob:
    """examples/job.yaml served from examples/model-server.yaml, labelled (by default) as its alias geo-prod wants."""
    doc = yaml.safe_load((ROOT / "examples" / "job.yaml").read_text())
    doc["metadata"].update(name=name, uid=f"{name}-0000-0000-0000-000000000000", creationTimestamp=created)
    doc["metadata"]["labels"] = {"team": "geo"} if labels is None else labels
    doc["spec"]["inference"] = {"server": "qwen3vl-8b", **inference}
    return parse_job(doc)


def trained(j: MultimodalRLJob, **adapter: Any) -> JobStatus:
    """Trained and reported (with the digest of the adapter's files)."""
    return JobStatus.model_validate({"phase": "Serving", "adapter": adapter_report(f"{job_dir(j)}/adapter", **adapter)})


def test_a_trained_job_that_fits_becomes_a_candidate_under_its_served_name() -> None:
    j = job(servedModelName="geo-lora")
    got = candidate(j, trained(j), server())
    assert isinstance(got, Candidate)
    assert (got.name, got.job, got.path, got.rank) == ("geo-lora", "geo", f"{job_dir(j)}/adapter", 32)
    assert (got.digest, got.base_model) == ("d1" * 32, "Qwen/Qwen3-VL-8B-Instruct")
    assert got.served(NOW).digest == "d1" * 32


def test_an_adapter_without_the_digest_of_its_files_is_refused() -> None:
    """The gateway loads only a copy with the reported digest: without one there is nothing to check against."""
    j = job()
    got = candidate(j, trained(j, digest=""), server())
    assert isinstance(got, Refusal) and got.reason == "AdapterDigestMissing" and "status.adapter.digest" in got.message


def test_nothing_is_decided_for_a_job_still_training_or_naming_another_server() -> None:
    j = job()
    assert candidate(j, JobStatus.model_validate({"phase": "Running"}), server()) is None
    other = job(server="another")
    assert candidate(other, trained(other), server()) is None


def test_a_job_whose_gate_failed_is_not_taken() -> None:
    j = job(promoteWhen={"heldOutRewardAtLeast": 0.9})
    status = trained(j, evaluation={"heldOutReward": 0.5, "baselineReward": 0.1, "step": 10})
    assert candidate(j, status, server()) is None


@pytest.mark.parametrize(
    ("spec", "adapter", "reason", "says"),
    [
        ({"model": {"name": "Qwen/Qwen2.5-VL-7B-Instruct"}}, {}, "BaseModelMismatch", "trained on Qwen/Qwen3-VL-8B"),
        ({"maxLoraRank": 16}, {}, "RankTooLarge", "adapter rank 32 is above"),
        ({"maxModelLen": 2048}, {}, "ContextTooShort", "up to 3072 tokens"),
        ({"maxImagePixels": 1_000_000}, {}, "PixelCapTooLarge", "at most 522240 pixels"),
        ({"maxImagePixels": None}, {}, "PixelCapTooLarge", "the model's own image size"),
        ({"adapterVolumes": [{"claimName": "other"}]}, {}, "AdapterNotOnAVolume", "claim fsx-claim at /fsx"),
        ({"adapterVolumes": [{"claimName": "fsx-claim", "subPath": "x"}]}, {}, "AdapterNotOnAVolume", "subPath mmrl"),
        ({}, {"path": "/fsx/mmrl/other-ns/victim-12345678/adapter"}, "AdapterPath", "must be at /fsx/mmrl/"),
    ],
)
def test_a_job_the_server_cannot_serve_as_trained_is_refused_with_the_reason(
    spec: dict[str, Any], adapter: dict[str, Any], reason: str, says: str
) -> None:
    j = job()
    got = candidate(j, trained(j, **adapter), server(**spec))
    assert isinstance(got, Refusal) and got.reason == reason and says in got.message, got


def cand(name: str, created: str = "2026-10-01T08:00:00Z", served: str | None = None) -> Candidate:
    j = job(name, created, **({"servedModelName": served} if served else {}))
    got = candidate(j, trained(j), server())
    assert isinstance(got, Candidate)
    return got


def test_held_adapters_stay_new_ones_fill_the_room_oldest_first_and_the_rest_wait() -> None:
    s = server(maxAdapters=2, maxLoras=2)
    held = [cand("a").served("2026-10-01T07:00:00Z")]
    verdicts = {
        "a": cand("a"),
        "c": cand("c", "2026-10-01T08:30:00Z"),
        "b": cand("b", "2026-10-01T08:10:00Z"),
    }
    keep, refused = held_set(s, held, verdicts, NOW)
    assert [(e.job, e.since) for e in keep] == [("a", "2026-10-01T07:00:00Z"), ("b", NOW)]
    assert [(r.job, r.reason) for r in refused] == [("c", "ServerFull")]


def test_an_adapter_goes_when_its_job_is_gone_or_recreated_and_a_name_is_never_shared() -> None:
    s = server()
    held = [cand("a").served(NOW), cand("b").served(NOW)]
    recreated = Candidate(**{**cand("b").__dict__, "job_uid": "another-uid"})
    verdicts: dict[str, Candidate | Refusal | None] = {
        "a": None,  # deleted: a fresh read found no job
        "b": recreated,
        "c": cand("c", served="b"),  # wants b's served name
    }
    keep, refused = held_set(s, held, verdicts, NOW)
    assert [e.job_uid for e in keep] == ["another-uid"]  # b's new object takes the name, as a new adapter
    assert [(r.job, r.reason) for r in refused] == [("c", "NameTaken")]
    base = held_set(s, [], {"d": cand("d", served="Qwen/Qwen3-VL-8B-Instruct")}, NOW)[1]
    assert [r.reason for r in base] == ["NameTaken"] and "the base model" in base[0].message


def test_a_replica_loads_what_it_lacks_reloads_moved_files_in_place_and_unloads_the_rest() -> None:
    held = [
        ServedAdapter(name="a", job="a", path="/fsx/a", digest="a1" * 32),
        ServedAdapter(name="b", job="b", path="/fsx/b", digest="b2" * 32),
    ]
    want = desired_names(held, [], {"a": "/models/q"})
    assert want["a"] == Wanted("/fsx/a", "a1" * 32, "/models/q") and want["b"].base_model == ""
    listing = Listing.model_validate(
        {
            "adapters": {
                "b": {"digest": "b1" * 32, "loaded": True},  # other files under the name: loaded in place
                "old": {"digest": "c" * 64, "loaded": True},
            },
            "vllm": {"b": "/mnt/adapter/" + "b1" * 32, "old": "/mnt/adapter/" + "c" * 64, "stray": "/x"},
        }
    )
    load, unload = replica_plan(want, listing)
    assert [(name, w.digest, inplace) for name, w, inplace in load] == [("a", "a1" * 32, False), ("b", "b2" * 32, True)]
    assert unload == ["old", "stray"]
    lost = Listing.model_validate(  # vLLM restarted: the gateway still has the names, vLLM does not hold them
        {"adapters": {"a": {"digest": "a1" * 32, "loaded": False}, "b": {"digest": "b2" * 32, "loaded": True}}}
    )
    assert [(n, inplace) for n, _, inplace in replica_plan(want, lost)[0]] == [("a", False)]
    done = Listing.model_validate({"adapters": {n: {"digest": w.digest, "loaded": True} for n, w in want.items()}})
    assert replica_plan(want, done) == ([], [])


def test_the_jobs_inference_ready_reads_the_servers_status() -> None:
    j = job(servedModelName="geo-lora")
    uid = "geo-0000-0000-0000-000000000000"
    entry = {"name": "geo-lora", "job": "geo", "jobUid": uid, "path": "/p", "loadedOn": ["r1"]}
    st: dict[str, Any] = {"readyReplicas": 2, "url": "http://shared-vllm.ns.svc:8000/v1", "adapters": [entry]}
    assert job_view(j, None)[1] == "ServerNotFound"
    assert job_view(j, {"status": st})[:2] == (False, "AdapterLoading")
    entry["loadedOn"] = ["r1", "r2"]
    assert job_view(j, {"status": st})[:2] == (True, "AdapterServed")
    entry["error"] = "r2: HTTP 400: bad adapter"
    assert job_view(j, {"status": st})[1] == "AdapterLoadFailed"
    refused = {"status": {"refused": [{"job": "geo", "reason": "RankTooLarge", "message": "m"}]}}
    assert job_view(j, refused) == (False, "RankTooLarge", "m")


def test_a_job_served_from_a_server_makes_no_deployment_and_removes_one_it_had() -> None:
    from mmrl_operator.core.observed import ServingObserved
    from mmrl_operator.core.serving import decide_serving

    j = job(servedModelName="geo-lora")
    uid = "geo-0000-0000-0000-000000000000"
    shared = {
        "status": {
            "service": "qwen3vl-8b-vllm",
            "url": f"http://qwen3vl-8b-vllm.{NS}.svc:8000/v1",
            "readyReplicas": 1,
            "adapters": [{"name": "geo-lora", "job": "geo", "jobUid": uid, "path": "/p", "loadedOn": ["r1"]}],
        }
    }
    before = ServingObserved(deployment={"metadata": {}}, service={"metadata": {}}, server=shared)
    d = decide_serving(j, trained(j), before)
    assert d.phase == "Serving" and d.apply == []
    assert sorted(kind for _, kind, _ in d.delete) == ["Deployment", "Service"]
    assert d.ready is not None and d.ready[:2] == (True, "AdapterServed")
    assert d.inference == {
        "service": "qwen3vl-8b-vllm",
        "url": f"http://qwen3vl-8b-vllm.{NS}.svc:8000/v1",
        "ready": True,
        "model": "geo-lora",
        "baseModel": "Qwen/Qwen3-VL-8B-Instruct",
        "server": "qwen3vl-8b",
    }
    missing = decide_serving(j, trained(j), ServingObserved())
    assert missing.ready is not None and missing.ready[1] == "ServerNotFound" and missing.delete == []


def claim(name: str, since: str, reward: float, alias: str = "geo-prod") -> ServedAdapter:
    """A job's claim of `alias` on a server that lets every job of the namespace claim it, with no gate of its own."""
    j = job(name, servedModelName=name, alias=alias, promoteWhen={"heldOutRewardAtLeast": 0.1})
    digest = hashlib.sha256(name.encode()).hexdigest()  # each adapter's files differ
    status = trained(j, evaluation={"heldOutReward": reward, "baselineReward": 0.0, "step": 10}, digest=digest)
    got = candidate(j, status, server(aliases=[{"name": alias, "jobSelector": {}}]))
    assert isinstance(got, Candidate) and got.alias == alias
    return got.served(since).model_copy(update={"loaded_on": ["r1"]})


def test_an_alias_follows_the_latest_promotion_keeps_its_history_and_a_pin_rolls_it_back() -> None:
    v1 = claim("geo-v1", "2026-10-01T08:00:00Z", 0.5)
    (first,) = alias_targets(server(), [v1], [], "2026-10-01T08:00:00Z")
    assert (first.name, first.job, first.path, first.pinned) == ("geo-prod", "geo-v1", v1.path, False)
    v2 = claim("geo-v2", "2026-10-01T09:00:00Z", 0.7)
    (moved,) = alias_targets(server(), [v1, v2], [first], "2026-10-01T09:00:00Z")
    assert (moved.job, moved.path) == ("geo-v2", v2.path)
    assert [(h.job, h.since, h.until, h.held_out_reward) for h in moved.history] == [
        ("geo-v1", "2026-10-01T08:00:00Z", "2026-10-01T09:00:00Z", 0.5),
        ("geo-v2", "2026-10-01T09:00:00Z", None, 0.7),
    ]
    # Both adapters stay loaded under their own names, and the alias is one more name on v2's files.
    want = desired_names([v1, v2], [moved])
    assert {n: w.path for n, w in want.items()} == {"geo-v1": v1.path, "geo-v2": v2.path, "geo-prod": v2.path}
    assert want["geo-prod"].digest == v2.digest != v1.digest
    pinned = server(aliasPins=[{"alias": "geo-prod", "job": "geo-v1"}])
    (back,) = alias_targets(pinned, [v1, v2], [moved], "2026-10-01T10:00:00Z")
    assert (back.job, back.path, back.pinned) == ("geo-v1", v1.path, True)
    assert [h.job for h in back.history] == ["geo-v1", "geo-v2", "geo-v1"] and back.history[1].until is not None
    # A later promotion does not move a pinned alias; removing the pin lets it follow the latest again.
    v3 = claim("geo-v3", "2026-10-01T11:00:00Z", 0.8)
    (still,) = alias_targets(pinned, [v1, v2, v3], [back], "2026-10-01T11:00:00Z")
    assert still.job == "geo-v1" and len(still.history) == 3
    (followed,) = alias_targets(server(), [v1, v2, v3], [still], "2026-10-01T12:00:00Z")
    assert followed.job == "geo-v3" and not followed.pinned


def test_a_second_check_of_an_older_promotion_does_not_take_the_alias_and_names_sort_naturally() -> None:
    v9 = claim("geo-v9", "2026-10-01T08:00:00Z", 0.5).model_copy(update={"promoted": "2026-10-01T07:59:00Z"})
    v10 = claim("geo-v10", "2026-10-01T09:00:00Z", 0.7).model_copy(update={"promoted": "2026-10-01T08:59:00Z"})
    (first,) = alias_targets(server(), [v9, v10], [], NOW)
    assert first.job == "geo-v10"
    # v9's files left the held set and came back (checked again): the server took them later, its job was not
    # promoted again, so the alias stays on v10.
    again = v9.model_copy(update={"since": "2026-10-01T10:00:00Z"})
    (kept,) = alias_targets(server(), [again, v10], [first], NOW)
    assert kept.job == "geo-v10" and len(kept.history) == 1
    # Promoted in the same second: geo-v10 is the later name (natural order), not geo-v9.
    same = [
        e.model_copy(update={"promoted": "2026-10-01T09:00:00Z", "since": "2026-10-01T09:00:00Z"}) for e in (v9, v10)
    ]
    assert alias_targets(server(), same, [], NOW)[0].job == "geo-v10"


def test_the_job_promotion_time_is_what_the_server_holds_an_adapter_by() -> None:
    j = job("geo-v1", servedModelName="geo-v1", alias="geo-prod", promoteWhen={"heldOutRewardAtLeast": 0.1})
    status = trained(j, evaluation={"heldOutReward": 0.7, "baselineReward": 0.0, "step": 10})
    promoted = {
        "type": "Promoted",
        "status": "True",
        "reason": "GatePassed",
        "message": "m",
        "lastTransitionTime": "2026-10-01T07:00:00Z",
    }
    status = status.model_copy(update={"conditions": [Condition.model_validate(promoted)]})
    got = candidate(j, status, server())
    assert isinstance(got, Candidate) and got.promoted == "2026-10-01T07:00:00Z"
    assert got.served(NOW).promoted == "2026-10-01T07:00:00Z"


def scored(j: MultimodalRLJob, reward: float, baseline: float = 0.0) -> JobStatus:
    return trained(j, evaluation={"heldOutReward": reward, "baselineReward": baseline, "step": 10})


def test_an_alias_is_the_servers_only_jobs_its_selector_takes_that_pass_its_owners_gate_may_claim_it() -> None:
    """examples/model-server.yaml declares geo-prod for jobs labelled team=geo, held-out reward at least 0.6 and
    above the base model's. The job's own gate (0.1) is lower: the owner's is what the alias asks."""
    gate = {"heldOutRewardAtLeast": 0.1}
    ok = job("geo-v1", alias="geo-prod", promoteWhen=gate)
    got = candidate(ok, scored(ok, 0.7), server())
    assert isinstance(got, Candidate) and got.alias == "geo-prod"

    stranger = job("geo-v2", labels={"team": "vision"}, alias="geo-prod", promoteWhen=gate)
    refused = candidate(stranger, scored(stranger, 0.9), server())
    assert isinstance(refused, Refusal) and refused.reason == "AliasNotAllowed", refused
    assert "team=geo" in refused.message and "geo-prod" in refused.message
    unlabelled = job("geo-v3", labels={}, alias="geo-prod", promoteWhen=gate)
    assert candidate(unlabelled, scored(unlabelled, 0.9), server()).reason == "AliasNotAllowed"  # type: ignore[union-attr]

    undeclared = job("geo-v4", alias="geo-staging", promoteWhen=gate)
    refused = candidate(undeclared, scored(undeclared, 0.9), server())
    assert isinstance(refused, Refusal) and refused.reason == "AliasNotDeclared"
    assert "geo-staging" in refused.message and "spec.aliases: geo-prod" in refused.message

    # Passes its own gate (0.1), not the owner's: 0.5 is below 0.6, and 0.7 does not beat a base model at 0.8.
    for reward, baseline, missed in ((0.5, 0.0, "below heldOutRewardAtLeast 0.6"), (0.7, 0.8, "does not beat")):
        low = job("geo-v5", alias="geo-prod", promoteWhen=gate)
        refused = candidate(low, scored(low, reward, baseline), server())
        assert isinstance(refused, Refusal) and refused.reason == "AliasGateNotMet", refused
        assert missed in refused.message and "alias geo-prod" in refused.message

    # A job that claims no alias is served under its own name whatever its labels: the selector guards the alias.
    plain = job("geo-v6", labels={"team": "vision"}, servedModelName="geo-v6")
    assert isinstance(candidate(plain, scored(plain, 0.1), server()), Candidate)


def test_a_refused_claim_is_said_in_the_jobs_condition_and_stalls_it() -> None:
    stranger = job("geo-v2", labels={"team": "vision"}, alias="geo-prod", promoteWhen={"heldOutRewardAtLeast": 0.1})
    verdict = candidate(stranger, scored(stranger, 0.9), server())
    _, refused = held_set(server(), [], {"geo-v2": verdict}, NOW)
    status = {"status": {"refused": [r.model_dump(by_alias=True) for r in refused], "adapters": []}}
    ready, reason, message = job_view(stranger, status)
    assert (ready, reason) == (False, "AliasNotAllowed") and "team=geo" in message
    assert server_refusal("qwen3vl-8b", (ready, reason, message)) == (reason, message)


def test_an_alias_moves_only_to_an_adapter_some_replica_loaded() -> None:
    """A newer claim whose files every replica's gateway refused (a changed file, say) never takes the alias; a
    first adapter gets it once loaded."""
    v1 = claim("geo-v1", "2026-10-01T08:00:00Z", 0.5)
    assert alias_targets(server(), [v1.model_copy(update={"loaded_on": []})], [], NOW) == []  # not loaded yet
    (first,) = alias_targets(server(), [v1], [], NOW)
    refused = claim("geo-v2", "2026-10-01T09:00:00Z", 0.9).model_copy(update={"loaded_on": [], "error": "409"})
    (still,) = alias_targets(server(), [v1, refused], [first], NOW)
    assert still.job == "geo-v1" and [h.job for h in still.history] == ["geo-v1"]
    # The current target keeps the alias while its replica restarts (loaded nowhere for a moment).
    (kept,) = alias_targets(server(), [v1.model_copy(update={"loaded_on": []}), refused], [still], NOW)
    assert kept.job == "geo-v1"


def test_a_pin_to_a_job_the_server_does_not_hold_is_said_not_silently_dropped() -> None:
    """The pinned job was deleted (the documented cure for ServerFull): the alias follows promotions again, and its
    status says why, until the pin is removed or the job is back."""
    v1, v2 = claim("geo-v1", "2026-10-01T08:00:00Z", 0.5), claim("geo-v2", "2026-10-01T09:00:00Z", 0.7)
    pinned = server(aliasPins=[{"alias": "geo-prod", "job": "geo-v1"}])
    (held,) = alias_targets(pinned, [v1, v2], [], NOW)
    assert (held.job, held.pinned, held.error) == ("geo-v1", True, "")
    (lost,) = alias_targets(pinned, [v2], [held], NOW)
    assert (lost.job, lost.pinned) == ("geo-v2", False)
    assert "pinned to job geo-v1, which the server does not hold" in lost.error and "--unpin" in lost.error
    (back,) = alias_targets(pinned, [v1, v2], [lost], NOW)  # the job is held again: the pin holds again
    assert (back.job, back.pinned, back.error) == ("geo-v1", True, "")


def test_an_alias_move_that_failed_on_every_replica_leaves_the_status_on_what_they_serve() -> None:
    """The in-place load of the alias at its new target fails everywhere: the replicas still answer the alias with
    its old files, so the status names the old target (history as before) and why; where it succeeded on some
    replica, the move stands and the alias is loaded there only."""
    v1, v2 = claim("geo-v1", "2026-10-01T08:00:00Z", 0.5), claim("geo-v2", "2026-10-01T09:00:00Z", 0.7)
    (first,) = alias_targets(server(), [v1], [], "2026-10-01T08:00:00Z")
    first = first.model_copy(update={"loaded_on": ["r1", "r2"]})
    (moved,) = alias_targets(server(), [v1, v2], [first], "2026-10-01T09:00:00Z")
    old = {"geo-prod": v1.digest, "geo-v1": v1.digest, "geo-v2": v2.digest}
    failed = {"geo-prod": "r1: 500 vLLM refused the load"}
    (kept,) = settle_aliases([moved], [first], {"r1": old, "r2": old}, failed)
    assert (kept.job, kept.digest, kept.loaded_on) == ("geo-v1", v1.digest, ["r1", "r2"])
    assert [h.job for h in kept.history] == ["geo-v1"] and kept.history[-1].until is None
    assert "geo-v2" in kept.error and "500 vLLM refused the load" in kept.error
    # Moved on one replica of two: the move stands, loaded where it happened.
    (half,) = settle_aliases([moved], [first], {"r1": old, "r2": {**old, "geo-prod": v2.digest}}, failed)
    assert (half.job, half.loaded_on, half.error) == ("geo-v2", ["r2"], "")
    assert [h.job for h in half.history] == ["geo-v1", "geo-v2"]
    # Not moving, or answered nowhere (a replica restarting): the alias as decided, loaded where it is held.
    (same,) = settle_aliases([first], [first], {"r1": old}, {})
    assert (same.job, same.loaded_on) == ("geo-v1", ["r1"])
    (nowhere,) = settle_aliases([moved], [first], {}, {})
    assert (nowhere.job, nowhere.loaded_on, nowhere.error) == ("geo-v2", [], "")


def test_an_alias_stays_on_its_adapter_while_held_and_goes_with_it() -> None:
    v1 = claim("geo-v1", "2026-10-01T08:00:00Z", 0.5)
    (first,) = alias_targets(server(), [v1], [], NOW)
    unclaimed = v1.model_copy(update={"alias": ""})  # the job no longer claims it: the alias keeps pointing there
    assert [a.job for a in alias_targets(server(), [unclaimed], [first], NOW)] == ["geo-v1"]
    assert alias_targets(server(), [], [first], NOW) == []  # its adapter unloaded: nothing to point at


def test_an_alias_takes_a_slot_and_never_shares_a_name() -> None:
    s = server(maxAdapters=2, maxLoras=1)
    c1 = claim("geo-v1", NOW, 0.5)
    keep, refused = held_set(s, [], {"geo-v1": cand_of(c1)}, NOW)
    assert [e.job for e in keep] == ["geo-v1"] and refused == []  # adapter + alias: both slots
    other = cand("other", "2026-10-01T08:30:00Z")
    keep, refused = held_set(s, keep, {"geo-v1": cand_of(c1), "other": other}, NOW)
    assert [(r.job, r.reason) for r in refused] == [("other", "ServerFull")]
    clash = cand("clash", served="geo-prod")
    _, refused = held_set(server(), keep, {"geo-v1": cand_of(c1), "clash": clash}, NOW)
    assert [(r.job, r.reason) for r in refused] == [("clash", "NameTaken")] and "alias" in refused[0].message


def cand_of(entry: ServedAdapter) -> Candidate:
    return Candidate(
        name=entry.name,
        job=entry.job,
        job_uid=entry.job_uid,
        path=entry.path,
        sha256=entry.sha256,
        rank=entry.rank or 0,
        held_out_reward=entry.held_out_reward,
        created="2026-10-01T08:00:00Z",
        alias=entry.alias,
        digest=entry.digest,
    )


def test_a_replica_is_ready_only_once_it_holds_every_name_the_server_already_serves() -> None:
    from mmrl_api.model_server import ModelServerStatus
    from mmrl_operator.core.server_replicas import announced_names, fronted, gate_condition, vllm_up

    status = ModelServerStatus.model_validate(
        {
            "adapters": [
                {"name": "a", "job": "a", "path": "/a", "loadedOn": ["r1"]},
                {"name": "new", "job": "n", "path": "/n", "loadedOn": []},  # never loaded anywhere yet
            ],
            "aliases": [{"name": "prod", "job": "a", "adapter": "a", "path": "/a", "loadedOn": ["r1"]}],
        }
    )
    announced = announced_names(status, {"a", "new", "prod"})
    assert announced == {"a", "prod"}
    assert gate_condition(None, announced, NOW)["status"] == "False"
    loading = gate_condition({"a"}, announced, NOW)
    assert (loading["status"], loading["reason"], loading["message"]) == ("False", "AdaptersLoading", "loading prod")
    assert gate_condition({"a", "prod"}, announced, NOW)["status"] == "True"  # "new" failing does not hold it back
    assert gate_condition(set(), announced_names(None, {"a"}), NOW)["status"] == "True"  # nothing served yet
    # A name the server no longer wants (its job deleted, its gate raised) is unloaded without taking the replica
    # out of the Service: the replica that holds only the alias now is still Ready.
    after_delete = announced_names(status, {"prod"})
    assert after_delete == {"prod"}
    assert gate_condition({"prod"}, after_delete, NOW)["status"] == "True"
    gateway = {"name": "gateway", "ready": False, "state": {"running": {}}}  # not ready while it reloads: reachable
    up = {"status": {"containerStatuses": [{"name": "vllm", "ready": True}, gateway]}}
    assert vllm_up(up) and not vllm_up({"status": {"containerStatuses": [{"name": "vllm", "ready": False}, gateway]}})
    gone = {"name": "gateway", "state": {"waiting": {"reason": "CrashLoopBackOff"}}}
    assert not vllm_up({"status": {"containerStatuses": [{"name": "vllm", "ready": True}, gone]}})
    # A replica of a Deployment from before the gateway is left as it is until the roll-out replaces it.
    assert fronted({"spec": {"containers": [{"name": "vllm"}, {"name": "gateway"}]}})
    assert not fronted({"spec": {"containers": [{"name": "vllm"}]}})


def test_a_refused_job_is_stalled_and_one_being_loaded_is_not() -> None:
    from mmrl_operator.core.shared_serving import server_refusal

    assert server_refusal("s", (False, "RankTooLarge", "m")) == ("RankTooLarge", "m")
    assert server_refusal("s", (False, "ServerNotFound", "m")) == ("ServerNotFound", "m")
    assert server_refusal("s", (False, "AdapterLoading", "m")) is None
    assert server_refusal("s", (True, "AdapterServed", "m")) is None
    assert server_refusal(None, (False, "Deploying", "m")) is None  # a dedicated server's reasons are its own


def test_an_adapter_that_fails_to_load_pass_after_pass_is_quarantined_and_stays_refused() -> None:
    """Counted only while it loads nowhere and a load failed; at QUARANTINE_AFTER its files are refused for good (the
    job's InferenceReady says Quarantined), and the job's next export, other files, is tried again."""
    bad = claim("geo-v2", "2026-10-01T09:00:00Z", 0.7).model_copy(update={"loaded_on": []})
    entry = bad
    for passes in range(1, QUARANTINE_AFTER):
        (entry,), stuck = quarantine([entry.model_copy(update={"error": "r1: HTTP 409: digest differs"})])
        assert (entry.failed_passes, stuck) == (passes, [])
    (loaded,), _ = quarantine([entry.model_copy(update={"loaded_on": ["r1"], "error": ""})])
    assert loaded.failed_passes == 0  # loaded somewhere: the count starts again
    (unreached,), _ = quarantine([entry.model_copy(update={"error": ""})])
    assert unreached.failed_passes == 0  # no replica answered: nothing failed, nothing counted
    kept, (refusal,) = quarantine([entry.model_copy(update={"error": "r1: HTTP 409: digest differs"})])
    assert kept == [] and (refusal.job, refusal.reason, refusal.digest) == ("geo-v2", "Quarantined", bad.digest)
    assert "digest differs" in refusal.message and f"{QUARANTINE_AFTER} passes in a row" in refusal.message

    # The next passes refuse the same files again, before any slot is counted; other files of the job are taken.
    j = job("geo-v2", servedModelName="geo-v2", alias="geo-prod", promoteWhen={"heldOutRewardAtLeast": 0.1})
    evaluation = {"heldOutReward": 0.7, "baselineReward": 0.0, "step": 10}
    same = candidate(j, trained(j, evaluation=evaluation, digest=bad.digest), server())
    assert isinstance(same, Candidate)
    held, refused = held_set(server(), [], {"geo-v2": same}, NOW, [refusal])
    assert (held, refused) == ([], [refusal])
    other = candidate(j, trained(j, evaluation=evaluation, digest="f" * 64), server())
    assert isinstance(other, Candidate)
    held, refused = held_set(server(), [], {"geo-v2": other}, NOW, [refusal])
    assert [e.digest for e in held] == ["f" * 64] and refused == []
