"""The local kubelet's log endpoint: what `kubectl logs` (pods/log) reaches on a real node.

The apiserver answers GET .../pods/NAME/log by calling the node's kubelet at `https://<InternalIP>:<daemonEndpoints
.kubeletEndpoint.Port>/containerLogs/<namespace>/<pod>/<container>` (with `follow`, `tailLines`, `previous`, ...).
The local kubelet's nodes advertise 127.0.0.1 and this server's port, and the control plane prefers InternalIP, so
`kubectl logs` and the API's pods/log work for the pods it runs: the server sends the container's output file,
and with `follow=true` keeps sending what is appended until the container's pod is gone or the client leaves.
"""

from __future__ import annotations

import logging
import ssl
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

from mmrl_local.common import certs

log = logging.getLogger("mmrl_local.node.kubelet_logs")

# (namespace, pod, container) -> the container's output file, or None when the kubelet runs no such container.
Resolver = Callable[[str, str, str], Path | None]


def tail(data: bytes, lines: int | None) -> bytes:
    if lines is None:
        return data
    if lines <= 0:
        return b""
    return b"".join(data.splitlines(keepends=True)[-lines:])


class _Server(ThreadingHTTPServer):
    def handle_error(self, request: object, client_address: object) -> None:
        """A request whose handler raised: logged with its traceback (not printed to stderr); the server goes on."""
        log.exception("log request from %s failed", client_address)


class LogServer:
    def __init__(self, resolve: Resolver, workdir: Path, *, poll: float = 0.5) -> None:
        self.resolve, self.poll = resolve, poll
        self._stop = threading.Event()
        cert, key = certs.self_signed(workdir / "kubelet-tls", "mmrl-local-kubelet")
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt: str, *args: object) -> None:
                log.debug(fmt, *args)

            def do_GET(self) -> None:
                server.handle(self)

        self.httpd = _Server(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="kubelet-logs", daemon=True)

    def start(self) -> LogServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._stop.set()
        self.httpd.shutdown()
        self.httpd.server_close()

    def handle(self, req: BaseHTTPRequestHandler) -> None:
        url = urlparse(req.path)
        parts = url.path.strip("/").split("/")
        if len(parts) != 4 or parts[0] != "containerLogs":
            req.send_error(404, "only /containerLogs/<namespace>/<pod>/<container> is served")
            return
        path = self.resolve(parts[1], parts[2], parts[3])
        if path is None:
            req.send_error(404, f"container {parts[3]} of pod {parts[1]}/{parts[2]} is not running here")
            return
        query = parse_qs(url.query)
        follow = query.get("follow", ["false"])[0] == "true"
        lines = int(query["tailLines"][0]) if "tailLines" in query else None
        req.send_response(200)
        req.send_header("Content-Type", "text/plain")
        req.send_header("Connection", "close")
        req.end_headers()
        try:
            with open(path, "rb") as fh:
                req.wfile.write(tail(fh.read(), lines))
                req.wfile.flush()
                while follow and not self._stop.is_set() and self.resolve(parts[1], parts[2], parts[3]) is not None:
                    time.sleep(self.poll)
                    more = fh.read()
                    if more:
                        req.wfile.write(more)
                        req.wfile.flush()
        except FileNotFoundError:
            pass  # not started yet: nothing written
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client went away
