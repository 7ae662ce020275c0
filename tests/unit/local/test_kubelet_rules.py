"""The local kubelet's pure parts: the node status it reports and how probe thresholds decide."""

from __future__ import annotations

import http.server
import threading

from mmrl_local.cluster import hyperpod as hp
from mmrl_local.node.kubelet import node_status
from mmrl_local.node.probes import ProbeState, run_http, run_tcp


def node(annotations: dict | None = None, conditions: list | None = None) -> dict:
    return {
        "metadata": {"name": "hyperpod-i-1", "annotations": annotations or {}},
        "status": {"conditions": conditions},
    }


def ready_of(status: dict) -> dict:
    return next(c for c in status["conditions"] if c["type"] == "Ready")


def test_a_node_reports_ready_and_keeps_the_transition_time_while_nothing_changes() -> None:
    first = ready_of(node_status(node(), "2026-01-01T00:00:00Z", 10250))
    assert (first["status"], first["reason"]) == ("True", "KubeletReady")
    later = ready_of(node_status(node(conditions=[first]), "2026-01-01T00:00:10Z", 10250))
    assert later["lastTransitionTime"] == "2026-01-01T00:00:00Z" and later["lastHeartbeatTime"].endswith("10Z")


def test_a_not_ready_annotation_makes_the_node_report_not_ready_with_that_reason() -> None:
    was = ready_of(node_status(node(), "2026-01-01T00:00:00Z", 10250))
    down = node({hp.NOT_READY_ANNOTATION: "NodeReplacement"}, [was])
    now = ready_of(node_status(down, "2026-01-01T00:00:05Z", 10250))
    assert (now["status"], now["reason"], now["lastTransitionTime"]) == (
        "False",
        "NodeReplacement",
        "2026-01-01T00:00:05Z",
    )


def test_probe_thresholds_and_period() -> None:
    probe = ProbeState({"periodSeconds": 5, "failureThreshold": 2, "successThreshold": 1, "initialDelaySeconds": 10})
    probe.started = 100.0
    assert not probe.due(105.0) and probe.due(110.0)
    assert probe.record(False, 110.0) is None  # one failure of two: no verdict yet
    assert not probe.due(112.0) and probe.due(115.0)
    assert probe.record(True, 115.0) is True
    assert probe.record(False, 120.0) is True and probe.record(False, 125.0) is False  # two in a row


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/v1/models" else 503)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_http_and_tcp_probes_reach_the_pod_ip_and_resolve_named_ports() -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        assert run_http({"path": "/v1/models", "port": "http"}, "127.0.0.1", {"http": port}, 2)
        assert not run_http({"path": "/health", "port": port}, "127.0.0.1", {}, 2)
        assert run_tcp({"port": port}, "127.0.0.1", {}, 2)
    finally:
        server.shutdown()
        server.server_close()
    assert not run_tcp({"port": port}, "127.0.0.1", {}, 1)


def test_the_node_points_the_apiserver_at_the_log_endpoint_on_loopback() -> None:
    status = node_status(node(), "2026-01-01T00:00:00Z", 41234)
    assert status["daemonEndpoints"] == {"kubeletEndpoint": {"Port": 41234}}
    assert {"type": "InternalIP", "address": "127.0.0.1"} in status["addresses"]
