"""shared/ports.py: the one free-port helper of the tests, benchmarks and launchers."""

from __future__ import annotations

import socket

from shared import ports
from shared.ports import free_port


def test_free_ports_bind_and_are_never_handed_out_twice() -> None:
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))  # free when handed out


def test_a_taken_port_is_not_handed_out(monkeypatch) -> None:
    with socket.socket() as held, socket.socket() as probe:
        held.bind(("127.0.0.1", 0))
        held.listen()
        probe.bind(("127.0.0.1", 0))
        taken, other = held.getsockname()[1], probe.getsockname()[1]
        probe.close()
        offered = iter([taken, other])
        monkeypatch.setattr(ports, "_ephemeral_low", lambda: 65_000)
        monkeypatch.setattr(ports.random, "randrange", lambda low, high: next(offered))
        assert free_port() == other
