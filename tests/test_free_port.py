"""The tests' and benchmarks' free ports (huddle.procs.free_port) are drawn below the kernel's
ephemeral range: a port the kernel picked (bind to 0) lies in that range, where a node dialling
another could take it as its own outgoing port before the node meant to listen on it started
(CI saw exactly that: "cannot bind the ROUTER ... Address already in use")."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

import huddle.procs as procs
from huddle.procs import free_port


def test_a_free_port_is_below_the_ephemeral_range_bindable_and_not_handed_out_twice() -> None:
    lo, _hi = (int(x) for x in Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split())
    ports = [free_port() for _ in range(200)] + [free_port(socket.SOCK_DGRAM) for _ in range(50)]
    assert len(set(ports)) == len(ports)
    assert all(1024 <= p < lo for p in ports), (lo, min(ports), max(ports))
    for kind, port in ((socket.SOCK_STREAM, ports[0]), (socket.SOCK_DGRAM, ports[-1])):
        with socket.socket(socket.AF_INET, kind) as s:
            s.bind(("127.0.0.1", port))


def test_a_port_in_use_is_passed_over(monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as busy, socket.socket() as probe:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        probe.bind(("127.0.0.1", 0))
        taken, free = busy.getsockname()[1], probe.getsockname()[1]
        probe.close()  # now free
        draws = iter([taken, taken, free])
        monkeypatch.setattr(procs.random, "randrange", lambda lo, hi: next(draws))
        monkeypatch.setattr(procs, "_ephemeral_range", lambda: (65000, 65535))
        assert procs.free_port() == free
