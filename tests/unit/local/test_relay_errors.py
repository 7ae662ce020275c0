"""The apiserver relay (``tcpforward``) survives a connection that fails in an unexpected way: the failure is
logged with its traceback, that client's connection is closed, and the next connection is relayed."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import Iterator

import pytest

from mmrl_local.network import tcpforward


@pytest.fixture
def echo_port() -> Iterator[int]:
    """A real upstream: echoes what each connection sends."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve() -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            with conn:
                while data := conn.recv(4096):
                    conn.sendall(data)

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1]
    stop.set()
    thread.join(10)
    listener.close()


def test_one_failing_connection_is_logged_and_the_next_is_relayed(
    echo_port: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="mmrl_local.network.tcpforward")
    real_open = asyncio.open_connection
    calls: list[int] = []

    async def fails_once(*args: object, **kwargs: object) -> object:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("a bug in the relay")  # not an OSError: nothing in the relay expects it
        return await real_open(*args, **kwargs)

    monkeypatch.setattr(tcpforward.asyncio, "open_connection", fails_once)
    listener = socket.create_server(("127.0.0.1", 0))
    relay_port = listener.getsockname()[1]
    loop = asyncio.new_event_loop()
    task = loop.create_task(tcpforward.serve(listener, "127.0.0.1", echo_port))

    def run() -> None:
        with contextlib.suppress(asyncio.CancelledError):  # how the test stops it
            loop.run_until_complete(task)
        rest = asyncio.all_tasks(loop)  # connections still being relayed: end them before the loop closes
        for pending in rest:
            pending.cancel()
        loop.run_until_complete(asyncio.gather(*rest, return_exceptions=True))
        loop.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        with socket.create_connection(("127.0.0.1", relay_port), timeout=10) as first:
            assert first.recv(4096) == b""  # closed by the relay
        with socket.create_connection(("127.0.0.1", relay_port), timeout=10) as second:
            second.sendall(b"still relaying")
            assert second.recv(4096) == b"still relaying"
    finally:
        loop.call_soon_threadsafe(task.cancel)
        thread.join(10)
    [record] = [r for r in caplog.records if r.name == "mmrl_local.network.tcpforward"]
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
