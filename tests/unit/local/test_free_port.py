"""free_port: a port for a server, never from the kernel's range for outgoing connections' local ports."""

from __future__ import annotations

import socket

from mmrl_local.cluster import controlplane


def test_ports_come_from_below_the_ephemeral_range_and_can_be_bound() -> None:
    top = controlplane._ephemeral_start()
    for _ in range(50):
        port = controlplane.free_port()
        assert controlplane._LISTEN_PORTS_FROM <= port < top
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", port))


def test_a_port_something_listens_on_is_skipped(monkeypatch) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        with socket.socket() as probe:  # a second pick that is free
            probe.bind(("127.0.0.1", 0))
            free = probe.getsockname()[1]
        picks = iter([busy, free])
        monkeypatch.setattr(controlplane.random, "randrange", lambda a, b: next(picks))
        assert controlplane.free_port() == free
