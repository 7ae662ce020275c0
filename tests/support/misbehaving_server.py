"""An HTTP server that answers every request the way a broken or hostile inference server might: one byte at a
time, or with far more than anyone asked for. It records, per connection, how many bytes it got out before the
client hung up, which is what tells a bounded reader from one that reads everything.

``python tests/support/misbehaving_server.py PORT MODE [HOST]`` serves on HOST (default: every interface, as vLLM
does in its pod) and prints the port it got (PORT 0: any free one); ``start(MODE)`` serves on 127.0.0.1 in this
process. MODEs:

- ``models``: a normal `/v1/models` answer listing ``geo-lora``.
- ``trickle-headers``: the status line, headers and body one byte at a time, ``TRICKLE_GAP`` apart.
- ``trickle-body``: headers at once, then the body one byte at a time.
- ``huge``: ``HUGE`` bytes of JSON with a Content-Length that says so.
- ``huge-chunked``: the same without a length, in chunks (the client cannot know the size up front).
- ``unavailable``: 503 with a Kubernetes Status body, as the apiserver answers when a Service has no endpoints.
- ``retry-after``: 503 asking the client to come back in an hour (``Retry-After: 3600``).
- ``hold``: read the request and send nothing until ``release`` is set.
"""

from __future__ import annotations

import json
import socket
import socketserver
import sys
import threading
import time
from dataclasses import dataclass, field

TRICKLE_GAP = 0.05
HUGE = 400 << 20
MODELS = json.dumps({"object": "list", "data": [{"id": "geo-lora", "object": "model"}]}).encode()


@dataclass
class Record:
    """What the server managed to send on each connection, and whether the client hung up before the end."""

    sent: list[int] = field(default_factory=list)
    cut: list[bool] = field(default_factory=list)
    held: int = 0
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)


def _answer(mode: str) -> tuple[bytes, bytes]:
    """(headers, body) for modes that send a body of known content."""
    if mode == "models":
        body = MODELS
    elif mode == "unavailable":
        body = json.dumps({"kind": "Status", "message": 'no endpoints available for service "geo-inference"'}).encode()
        return f"HTTP/1.1 503 Service Unavailable\r\nContent-Length: {len(body)}\r\n\r\n".encode(), body
    elif mode == "retry-after":
        body = b'{"error_code": "TEMPORARILY_UNAVAILABLE", "message": "come back later"}'
        head = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3600\r\nConnection: close\r\n"
        return f"{head}Content-Length: {len(body)}\r\n\r\n".encode(), body
    else:
        body = b'{"object": "list", "data": [], "pad": "' + b"a" * 10_000 + b'"}'
    head = f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n".encode()
    return head, body


def _huge_pieces(chunked: bool):  # type: ignore[no-untyped-def]
    opening, closing, piece = b'{"object": "list", "data": [], "pad": "', b'"}', b"a" * (1 << 20)
    pad = HUGE - len(opening) - len(closing)
    parts = [opening] + [piece] * (pad // len(piece)) + [b"a" * (pad % len(piece)), closing]
    for part in parts:
        yield (f"{len(part):x}\r\n".encode() + part + b"\r\n") if chunked else part
    if chunked:
        yield b"0\r\n\r\n"


def serve_one(conn: socket.socket, mode: str, record: Record) -> None:
    request = b""
    while b"\r\n\r\n" not in request:
        got = conn.recv(65536)
        if not got:
            return
        request += got
    sent, cut = 0, False
    try:
        if mode == "hold":
            with record.lock:
                record.held += 1
            record.release.wait()
            head, body = _answer("models")
            conn.sendall(head + body)
            sent = len(head) + len(body)
        elif mode.startswith("trickle"):
            head, body = _answer(mode)
            if mode == "trickle-body":
                conn.sendall(head)
                sent = len(head)
            for byte in (head + body)[sent:]:
                conn.sendall(bytes([byte]))
                sent += 1
                time.sleep(TRICKLE_GAP)
        elif mode.startswith("huge"):
            chunked = mode == "huge-chunked"
            length = "Transfer-Encoding: chunked" if chunked else f"Content-Length: {HUGE}"
            conn.sendall(f"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n{length}\r\n\r\n".encode())
            for part in _huge_pieces(chunked):
                conn.sendall(part)
                sent += len(part)
        else:
            head, body = _answer(mode)
            conn.sendall(head + body)
            sent = len(head) + len(body)
    except OSError:
        cut = True  # the client shut the connection: what a bounded reader does
    with record.lock:
        record.sent.append(sent)
        record.cut.append(cut)


def start(mode: str, host: str = "127.0.0.1", port: int = 0) -> tuple[socketserver.ThreadingTCPServer, Record]:
    """Serve `mode` on a thread; returns the server (`server_address`, `shutdown()`) and what it records."""
    record = Record()

    class Handler(socketserver.BaseRequestHandler):
        def handle(self) -> None:
            serve_one(self.request, mode, record)

    socketserver.ThreadingTCPServer.allow_reuse_address = True
    server = socketserver.ThreadingTCPServer((host, port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, record


if __name__ == "__main__":
    srv, _ = start(sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "0.0.0.0", int(sys.argv[1]))
    print(srv.server_address[1], flush=True)
    threading.Event().wait()
