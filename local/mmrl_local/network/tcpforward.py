"""``python -m mmrl_local.network.tcpforward FD HOST PORT``: relay every connection accepted on an inherited listening
socket to HOST:PORT, byte for byte (TLS passes through untouched).

This is the one Service a local pod needs before any other: ``kubernetes``. On a cluster kube-proxy forwards the
Service's address to the apiserver; here the apiserver listens on loopback only, which a pod in its own network
namespace cannot reach, so ``podnet`` binds a socket on the run's bridge address and hands it to this relay. The
parent binds, so the port is known before this process starts and no other process can take it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import sys

CHUNK = 1 << 16
log = logging.getLogger("mmrl_local.network.tcpforward")


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        pass
    finally:
        with contextlib.suppress(ConnectionError, OSError):
            writer.close()


async def _relay(host: str, port: int, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    try:
        server_r, server_w = await asyncio.open_connection(host, port)
    except OSError:
        client_w.close()
        return
    await asyncio.gather(_pipe(client_r, server_w), _pipe(server_r, client_w))


async def _connection(host: str, port: int, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
    """One connection; whatever goes wrong with it is logged and ends only it: the relay serves the next."""
    try:
        await _relay(host, port, client_r, client_w)
    except Exception:
        log.exception("relay of a connection to %s:%s failed", host, port)
        with contextlib.suppress(ConnectionError, OSError):
            client_w.close()


async def serve(listener: socket.socket, host: str, port: int) -> None:
    server = await asyncio.start_server(lambda r, w: _connection(host, port, r, w), sock=listener)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: python -m mmrl_local.network.tcpforward FD HOST PORT", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    listener = socket.socket(fileno=int(argv[0]))
    asyncio.run(serve(listener, argv[1], int(argv[2])))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
