"""Node verdicts over HyperPod's labels and taint, and over plain Kubernetes signals."""

from __future__ import annotations

import pytest

from mmrl_api import constants as c
from mmrl_operator.core.health import health_signature, node_verdict
from tests.support.factories import node


@pytest.mark.parametrize(
    ("health", "severity", "reason"),
    [
        ("Schedulable", "healthy", "Healthy"),
        ("Unschedulable", "degraded", "Unschedulable"),
        ("UnschedulablePendingReboot", "stop", "PendingReboot"),
        ("UnschedulablePendingReplacement", "stop", "PendingReplacement"),
    ],
)
def test_health_label_values(health: str, severity: str, reason: str) -> None:
    v = node_verdict("n", node("n", health))
    assert (v.severity, v.reason) == (severity, reason)


def test_deep_health_check_in_progress_is_no_fault_even_with_its_unschedulable_label_and_taint() -> None:
    checking = node("n", "Unschedulable", **{c.HYPERPOD_DEEP_HEALTH_LABEL: "InProgress"})
    checking["spec"] = {"taints": [{"key": c.HYPERPOD_TAINT_KEY, "value": "Unschedulable", "effect": "NoSchedule"}]}
    running = node_verdict("n", checking)
    assert (running.severity, running.reason, running.fault) == ("healthy", "HealthCheckInProgress", False)
    passed = node_verdict("n", node("n", "Schedulable", **{c.HYPERPOD_DEEP_HEALTH_LABEL: "Passed"}))
    assert (passed.severity, passed.reason) == ("healthy", "Healthy")
    failed = node_verdict("n", node("n", "Schedulable", **{c.HYPERPOD_DEEP_HEALTH_LABEL: "Failed"}))
    assert failed.stop


def test_a_check_in_progress_does_not_hide_a_replacement_or_a_reported_fault() -> None:
    checking = {c.HYPERPOD_DEEP_HEALTH_LABEL: "InProgress"}
    assert node_verdict("n", node("n", "UnschedulablePendingReplacement", **checking)).stop
    faulty = node_verdict("n", node("n", "Unschedulable", **checking, **{c.HYPERPOD_FAULT_TYPES_LABEL: "GpuXid"}))
    assert faulty.reason == "FaultReported"


def test_fault_labels_degrade_and_every_verdict_quotes_them() -> None:
    labels = {c.HYPERPOD_FAULT_TYPES_LABEL: "GpuXid", c.HYPERPOD_FAULT_REASONS_LABEL: "Xid79"}
    v = node_verdict("n", node("n", **labels))
    assert v.severity == "degraded" and v.message.endswith("(HyperPod fault-types=GpuXid, fault-reasons=Xid79)")
    stop = node_verdict("n", node("n", "UnschedulablePendingReboot", **labels))
    assert stop.reason == "PendingReboot" and "fault-reasons=Xid79" in stop.message


def test_the_singular_fault_label_keys_of_the_node_labels_page_are_read_too() -> None:
    (type_key, singular_type), (_, singular_reason) = c.HYPERPOD_FAULT_TYPE_KEYS, c.HYPERPOD_FAULT_REASON_KEYS
    assert type_key == c.HYPERPOD_FAULT_TYPES_LABEL
    v = node_verdict("n", node("n", **{singular_type: "NvidiaGpu", singular_reason: "XidError"}))
    assert v.reason == "FaultReported" and "fault-types=NvidiaGpu, fault-reasons=XidError" in v.message


def test_taint_alone_degrades() -> None:
    n = node("n")
    n["spec"] = {"taints": [{"key": c.HYPERPOD_TAINT_KEY, "value": "Unschedulable", "effect": "NoSchedule"}]}
    assert node_verdict("n", n).severity == "degraded"


def test_not_ready_and_deleted_stop_with_or_without_hyperpod() -> None:
    plain = {"metadata": {"name": "n", "labels": {}}, "status": {"conditions": [{"type": "Ready", "status": "False"}]}}
    assert node_verdict("n", plain, hyperpod=False).reason == "NotReady"
    assert node_verdict("n", None, hyperpod=False).reason == "NodeDeleted"


def test_hyperpod_labels_ignored_when_hyperpod_mode_is_off() -> None:
    assert node_verdict("n", node("n", "UnschedulablePendingReplacement"), hyperpod=False).severity == "healthy"


def test_signature_ignores_heartbeats_and_tracks_every_input_of_the_verdict() -> None:
    a = node("n")
    beat = node("n")
    beat["status"]["conditions"][0]["lastHeartbeatTime"] = "2026-12-02T10:00:00Z"
    assert health_signature(a) == health_signature(beat)
    for changed in (
        node("n", "UnschedulablePendingReboot"),
        node("n", ready=False),
        node("n", **{c.HYPERPOD_FAULT_TYPES_LABEL: "GpuXid"}),
        node("n", **{c.HYPERPOD_FAULT_REASON_KEYS[1]: "Xid79"}),
        node("n", **{c.HYPERPOD_DEEP_HEALTH_LABEL: "InProgress"}),
        None,
    ):
        assert health_signature(changed) != health_signature(a)
