"""A probe that cannot even be run (a path the URL refuses, a host name no resolver takes) fails as a probe, logged with
its traceback, instead of raising into the pod's supervision loop (which would fail the pod); a server that
answers with something that is not HTTP fails the probe quietly, as a refused connection does."""

from __future__ import annotations

import logging
import socket
import threading

import pytest

from mmrl_local.node.probes import ProbeState


def probe_errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "mmrl_local.node.probes" and r.exc_info]


@pytest.mark.parametrize(
    "spec",
    [
        {"httpGet": {"path": "/ready now", "port": 8000}},  # a space: http.client refuses the URL
        {"tcpSocket": {"host": "x" * 64 + ".example", "port": 80}},  # a DNS label over 63 bytes: UnicodeError
    ],
)
def test_a_probe_that_cannot_be_run_fails_and_is_logged(spec: dict, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="mmrl_local.node.probes")
    probe = ProbeState({**spec, "failureThreshold": 1, "timeoutSeconds": 1})
    ok = probe.check("127.0.0.1", None, {}, {})
    assert ok is False and probe.record(ok, 1.0) is False
    [record] = probe_errors(caplog)
    assert not isinstance(record.exc_info[1], OSError)  # what used to escape the probe
    assert "counted as a failure" in record.getMessage()


def test_a_server_that_does_not_speak_http_fails_the_probe_quietly(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="mmrl_local.node.probes")
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]

    def garbage() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.recv(4096)
            conn.sendall(b"this is not HTTP\r\n\r\n")

    server = threading.Thread(target=garbage, daemon=True)
    server.start()
    try:
        assert ProbeState({"httpGet": {"path": "/", "port": port}}).check("127.0.0.1", None, {}, {}) is False
    finally:
        server.join(10)
        listener.close()
    assert probe_errors(caplog) == []
