"""The operator's job store: the newest copy of each job, never older than what it was last given."""

from __future__ import annotations

from mmrl_operator.runtime.jobstore import JobStore


def body(rv: str, phase: str = "Running") -> dict:
    meta = {"name": "geo", "namespace": "team", "resourceVersion": rv, "managedFields": [{"manager": "x"}]}
    return {"metadata": meta, "spec": {}, "status": {"phase": phase}}


def test_the_newest_copy_wins_whatever_order_it_arrives_in() -> None:
    store = JobStore()
    assert store.get("team", "geo") is None
    store.seen(body("7", "Serving"))  # our own write's answer
    store.seen(body("5", "Running"))  # the watch event of an earlier write, delivered after it
    assert store.get("team", "geo")["status"]["phase"] == "Serving"
    store.seen(body("9", "Failed"))
    assert store.get("team", "geo")["status"]["phase"] == "Failed"


def test_a_copy_has_no_managed_fields_and_changing_it_changes_nothing_held() -> None:
    store = JobStore()
    store.seen(body("3"))
    got = store.get("team", "geo")
    assert "managedFields" not in got["metadata"]
    got["metadata"]["resourceVersion"] = "99"
    assert store.get("team", "geo")["metadata"]["resourceVersion"] == "3"


def test_invalidated_and_forgotten_jobs_are_read_from_the_apiserver_again() -> None:
    store = JobStore()
    store.seen(body("3"))
    store.invalidate(("team", "geo"))
    assert store.get("team", "geo") is None and len(store) == 0
    store.seen(body("2"))  # after an invalidation any copy is taken again
    assert store.get("team", "geo")["metadata"]["resourceVersion"] == "2"
    store.forget(("team", "geo"))
    assert store.get("team", "geo") is None
