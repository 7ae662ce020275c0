"""One request to the apiserver that can cost its caller only so much: a wall-clock deadline for all of it (connect,
TLS handshake, headers, body) and a cap on the size of the body.

The apiserver's service proxy passes on whatever the pod behind a Service sends, as slowly as it sends it. A socket
timeout bounds only the wait for the *next* byte, so a server that sends one byte a second holds its reader for as
long as it likes, and one that sends 400 MiB fills the reader's memory. Here a watchdog shuts the connection down
when the deadline passes, whatever the request is doing then, and the body is read in pieces and refused as soon as
it passes the cap (or before a byte of it is read, when Content-Length already says so). The connection is this
request's own, made from the API client's configuration (server, CA, client certificate, bearer token), never one of
the client's pooled ones, so shutting it down touches nothing else. An HTTP proxy between us and the apiserver
(`proxy-url` in a kubeconfig) is not supported here.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import socket
import ssl
import threading
import time
from typing import Any
from urllib.parse import urlsplit

MAX_BODY = 1 << 20  # 1 MiB: a /v1/models listing or a chat answer is a few KiB
_PIECE = 64 << 10


class ResponseTooLarge(Exception):
    """The answer's body is larger than the caller accepts; the rest of it was not read."""


class DeadlineExceeded(TimeoutError):
    """The whole request (connect, headers and body) did not finish in time; its connection was shut down."""


def _size(n: int) -> str:
    return f"{n / (1 << 20):g} MiB" if n >= 1 << 20 else f"{n} bytes"


class _Watchdog:
    """Shuts the request's socket down at the deadline, so a blocked connect, handshake or read returns at once."""

    def __init__(self, seconds: float) -> None:
        self.seconds, self.end = seconds, time.monotonic() + seconds
        self.expired = False
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None  # a duplicate of the request's socket: shutdown acts on both
        self._timer = threading.Timer(seconds, self._expire)
        self._timer.daemon = True
        self._timer.start()

    def left(self) -> float:
        remaining = self.end - time.monotonic()
        if remaining <= 0:
            raise self.error()
        return remaining

    def error(self) -> DeadlineExceeded:
        return DeadlineExceeded(f"no complete answer within {self.seconds:g}s")

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sock = sock.dup()
            if self.expired:
                self._shutdown()

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            self._shutdown()

    def _shutdown(self) -> None:
        if self._sock is not None:
            with contextlib.suppress(OSError):  # already closed by the request itself
                self._sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._timer.cancel()
        with self._lock:
            if self._sock is not None:
                self._sock.close()


def _tls_context(cfg: Any) -> ssl.SSLContext:
    """The same trust and identity the kubernetes client's own connections use."""
    ctx = ssl.create_default_context(cafile=cfg.ssl_ca_cert, cadata=cfg.ca_cert_data)
    if not cfg.verify_ssl:
        ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    elif cfg.assert_hostname is False:
        ctx.check_hostname = False
    if cfg.cert_file:
        ctx.load_cert_chain(cfg.cert_file, cfg.key_file)
    return ctx


def _connect(cfg: Any, url: str, watchdog: _Watchdog) -> http.client.HTTPConnection:
    parts = urlsplit(url)
    tls = parts.scheme == "https"
    host, port = parts.hostname or "localhost", parts.port or (443 if tls else 80)
    sock = socket.create_connection((host, port), timeout=watchdog.left())
    try:
        watchdog.watch(sock)
        if tls:
            sock = _tls_context(cfg).wrap_socket(sock, server_hostname=cfg.tls_server_name or host)
    except BaseException:
        sock.close()
        raise
    conn = http.client.HTTPConnection(host, port)  # handed the socket: it never connects by itself
    conn.sock = sock
    return conn


def read_capped(response: http.client.HTTPResponse, limit: int) -> bytes:
    """The body, or ResponseTooLarge as soon as it is known to pass `limit` (nothing more is read then)."""
    declared = response.getheader("Content-Length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise ResponseTooLarge(f"the answer is {_size(int(declared))}, more than the {_size(limit)} accepted")
    pieces, size = [], 0
    while piece := response.read1(_PIECE):
        size += len(piece)
        if size > limit:
            raise ResponseTooLarge(f"the answer is larger than the {_size(limit)} accepted")
        pieces.append(piece)
    return b"".join(pieces)


def request(
    api_client: Any,
    method: str,
    path: str,
    body: dict[str, Any] | None = None,
    deadline: float = 5.0,
    limit: int = MAX_BODY,
    headers: dict[str, str] | None = None,
) -> bytes:
    """`method` on an apiserver path with the client's credentials (and `headers`, which the apiserver's proxies
    pass on to the pod); the body of a 2xx answer. Raises
    DeadlineExceeded, ResponseTooLarge, OSError, or ApiException (with the first `limit` bytes of the apiserver's
    answer as its body) for any other status."""
    from kubernetes.client.exceptions import ApiException

    cfg = api_client.configuration
    if cfg.proxy:
        raise ConnectionError("an HTTP proxy to the apiserver (kubeconfig proxy-url) is not supported here")
    sent = {"Accept": "application/json", **(headers or {})}
    if body is not None:
        sent["Content-Type"] = "application/json"
    _method, url, sent, payload, _post = api_client.param_serialize(
        method=method, resource_path=path, header_params=sent, body=body, auth_settings=["BearerToken"]
    )
    data = json.dumps(payload).encode() if payload is not None else None
    watchdog = _Watchdog(deadline)
    conn: http.client.HTTPConnection | None = None
    try:
        conn = _connect(cfg, url, watchdog)
        parts = urlsplit(url)
        conn.request(method, parts.path + (f"?{parts.query}" if parts.query else ""), body=data, headers=sent)
        response = conn.getresponse()
        content = read_capped(response, limit)
        if watchdog.expired:  # a body without a length ends at EOF, which the shutdown also produces
            raise watchdog.error()
    except (OSError, http.client.HTTPException, ValueError) as exc:
        if watchdog.expired:
            raise watchdog.error() from exc
        raise
    finally:
        watchdog.close()
        if conn is not None:
            conn.close()
    if not 200 <= response.status < 300:
        raise ApiException(status=response.status, reason=response.reason, body=content.decode(errors="replace"))
    return content
