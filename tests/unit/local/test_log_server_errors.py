"""The kubelet's log endpoint survives a request whose handler raises: the error is logged with its traceback
(not printed to stderr) and the next request is served."""

from __future__ import annotations

import http.client
import logging
import ssl
from pathlib import Path

import pytest

from mmrl_local.node.kubelet_logs import LogServer


def get(port: int, path: str) -> tuple[int, bytes]:
    context = ssl.create_default_context()
    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
    conn = http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=context)
    try:
        conn.request("GET", path)
        resp = conn.getresponse()
        return resp.status, resp.read()
    finally:
        conn.close()


def test_a_request_that_raises_is_logged_and_the_next_is_served(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="mmrl_local.node.kubelet_logs")
    output = tmp_path / "main.log"
    output.write_bytes(b"hello from the container\n")
    asked: list[str] = []

    def resolve(namespace: str, pod: str, container: str) -> Path | None:
        asked.append(pod)
        if len(asked) == 1:
            raise RuntimeError("the kubelet's bookkeeping broke")
        return output

    server = LogServer(resolve, tmp_path).start()
    try:
        with pytest.raises((http.client.RemoteDisconnected, ConnectionError)):
            get(server.port, "/containerLogs/ns/broken/main")
        assert get(server.port, "/containerLogs/ns/fine/main") == (200, b"hello from the container\n")
    finally:
        server.close()
    [record] = [r for r in caplog.records if r.name == "mmrl_local.node.kubelet_logs"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
