"""Incoming mesh connections without a verified HELO (protocol.md 8.6; transport/accepted.py):
bounded per address and in total, closed after the handshake timeout, silent ones first.

The bookkeeping is tested alone with the time passed in; real nodes then meet ~400 raw
connections that complete ZeroMQ's greeting and say nothing more, under a descriptor limit
of 256: a new member still joins, the API answers, the idle connections are closed."""

from __future__ import annotations

import asyncio
import os
import resource
import socket
import time
from pathlib import Path

import pytest
import zmq
from conftest import Cluster, free_port, get, wait_for
from hostile_kit import footprint, node_stats, still_serving

from huddle.ids import NodeId
from huddle.limits import MeshLimits
from huddle.security import GroupSecret
from huddle.transport.accepted import AcceptedConns, peer_of, shut, silence_of
from huddle.transport.zmq_transport import ZmqTransport

LIMITS = MeshLimits(max_unproven_connections=6, max_unproven_connections_per_address=4)


def no_silence(fd: int, age: float) -> float:
    return 0.0


# ------------------------------------------------------------------ the bookkeeping


def test_connections_over_the_per_address_cap_are_refused_at_accept() -> None:
    conns = AcceptedConns(LIMITS, grace=5.0)
    assert all(conns.accepted(fd, "10.0.0.1", 0.0, {}) for fd in range(10, 14))
    assert not conns.accepted(14, "10.0.0.1", 0.0, {})  # a fifth unproven one from that address
    assert conns.accepted(14, "10.0.0.1", 0.0, {"10.0.0.1": 1})  # one of them proved itself: room for one
    assert conns.stats.refused == 1 and len(conns) == 5


def test_connections_over_the_total_cap_are_refused_whatever_their_address() -> None:
    conns = AcceptedConns(LIMITS, grace=5.0)
    for i in range(6):
        assert conns.accepted(10 + i, f"10.0.0.{i}", 0.0, {})
    assert not conns.accepted(20, "10.0.0.9", 0.0, {})
    # Connections of bound sessions are not unproven: they never count against the caps.
    bound = {f"10.0.0.{i}": 1 for i in range(6)}
    assert conns.accepted(20, "10.0.0.9", 0.0, bound)
    assert conns.unproven(bound) == 1


def test_only_the_excess_past_the_handshake_timeout_is_closed_the_silent_first() -> None:
    conns = AcceptedConns(LIMITS, grace=5.0)
    for fd in (10, 11, 12):
        conns.accepted(fd, "10.0.0.1", 0.0, {})
    conns.accepted(13, "10.0.0.1", 4.0, {})  # younger than the handshake timeout at t=6
    conns.accepted(20, "10.0.0.2", 0.0, {})
    silence = {10: 0.2, 11: 5.5, 12: 0.4, 13: 2.0, 20: 6.0}
    bound = {"10.0.0.1": 2, "10.0.0.2": 1}
    assert not conns.to_close(4.9, bound, lambda fd, age: silence[fd])  # none past the timeout yet
    # 10.0.0.1: four connections, two bound sessions: two go, the most silent of the old ones;
    # the young one stays.  10.0.0.2: as many connections as sessions: none goes.
    assert sorted(conns.to_close(6.0, bound, lambda fd, age: silence[fd])) == [11, 12]
    assert not conns.to_close(6.0, {"10.0.0.1": 4, "10.0.0.2": 1}, lambda fd, age: silence[fd])


def test_a_sweep_is_due_once_a_second_while_connections_are_tracked() -> None:
    conns = AcceptedConns(LIMITS, grace=5.0)
    assert not conns.due(100.0)
    conns.accepted(10, "10.0.0.1", 100.0, {})
    assert not conns.due(100.5) and conns.due(101.0)
    conns.to_close(101.0, {}, no_silence)
    assert not conns.due(101.5) and conns.due(102.0)
    assert conns.gone(10) and not conns.gone(10)
    assert not conns.due(200.0) and conns.stats.open == 0


def test_a_reused_descriptor_replaces_the_connection_whose_end_was_not_reported() -> None:
    conns = AcceptedConns(LIMITS, grace=5.0)
    conns.accepted(10, "10.0.0.1", 0.0, {})
    conns.accepted(10, "10.0.0.2", 1.0, {})
    assert len(conns) == 1 and conns.address_of(10) == "10.0.0.2"
    assert conns.unproven({}) == 1


def test_the_descriptor_helpers_see_and_end_a_real_connection() -> None:
    """peer_of, silence_of and shut borrow a descriptor they neither duplicate nor close."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port))
        accepted, _ = server.accept()
        with client, accepted:
            fd = accepted.fileno()
            before = len(os.listdir("/proc/self/fd"))
            assert peer_of(fd, {port}) == "127.0.0.1"
            assert peer_of(fd, {port + 1}) is None  # not accepted on a port of ours
            client.sendall(b"x")
            accepted.recv(1)
            assert silence_of(fd, 99.0) < 1.0
            assert len(os.listdir("/proc/self/fd")) == before
            assert not shut(fd, "127.0.0.2", {port})  # not that peer's: left alone
            assert shut(fd, "127.0.0.1", {port})
            client.settimeout(5)
            assert client.recv(1) == b""  # the peer sees the end
            assert accepted.fileno() == fd  # still open: the descriptor is its owner's to close


def test_a_descriptor_that_is_no_longer_a_connection_is_left_alone(tmp_path: Path) -> None:
    """A number the monitor reported may have been reused for a file, a pipe or a local socket
    by the time it is read: nothing is done to it, and it stays open."""
    path = tmp_path / "f"
    path.write_bytes(b"x")
    fd = os.open(path, os.O_RDONLY)
    r, w = os.pipe()
    a, b = socket.socketpair()
    try:
        for n in (fd, r, a.fileno()):
            assert peer_of(n, {1}) is None
            assert not shut(n, "127.0.0.1", {1})
            assert silence_of(n, 3.0) == 3.0
        os.fstat(fd)  # still open
        os.fstat(r)
        a.sendall(b"y")
        assert b.recv(1) == b"y"
    finally:
        for n in (fd, r, w):
            os.close(n)
        a.close()
        b.close()


# ------------------------------------------------------------------ real nodes

# ZMTP 3.0 with the NULL mechanism: the 64-octet greeting, then a READY command (Socket-Type DEALER).
GREETING = b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x00" + b"NULL".ljust(20, b"\x00") + b"\x00" + b"\x00" * 31
_READY_BODY = b"\x05READY" + b"\x0bSocket-Type" + (6).to_bytes(4, "big") + b"DEALER"
READY = b"\x04" + bytes([len(_READY_BODY)]) + _READY_BODY


def idle_zmtp(port: int, n: int) -> list[socket.socket]:
    """``n`` TCP connections to 127.0.0.1:``port`` that complete ZeroMQ's greeting (ours sent
    whole; the node's answer left unread) and then say nothing.  Those not connected within
    10 s in all are left out (a node that stopped accepting: its backlog full)."""
    out = []
    deadline = time.monotonic() + 10
    for _ in range(n):
        if time.monotonic() > deadline:
            break
        s = socket.socket()
        s.settimeout(2)
        try:
            s.connect(("127.0.0.1", port))
            s.sendall(GREETING + READY)
        except OSError:
            s.close()  # the node's backlog is full for a moment: the next one tries again
            continue
        s.setblocking(False)
        out.append(s)
    return out


def closed_by_peer(s: socket.socket) -> bool:
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                return True
    except BlockingIOError:
        return False
    except OSError:  # reset
        return True


@pytest.mark.processes
def test_silent_connections_to_the_mesh_port_do_not_pin_a_node_at_its_descriptor_limit(
        cluster: Cluster, tmp_path: Path) -> None:
    port = free_port()
    # Open (--open): the silent connections greet the mesh socket in NULL ZMTP; the secured case
    # is test_in_a_secured_group_a_silent_member_connection_is_closed_too.
    cluster.secure = False
    alice = cluster.start("alice", "--port", str(port), beacon=False)
    resource.prlimit(alice.proc.pid, resource.RLIMIT_NOFILE, (256, 256))
    idle = idle_zmtp(port, 400)
    try:
        assert len(idle) > 300
        stats = wait_for(lambda: node_stats(alice.api)["mesh_connections"]["refused"] > 0 and
                         node_stats(alice.api)["mesh_connections"], 10, "connections over the cap refused")
        assert stats["open"] <= MeshLimits().max_unproven_connections_per_address
        assert get(alice.api, "/api/v1/node")["name"] == "alice"  # the API answers during the flood
        assert footprint(alice).fds < 256
        # A new member joins while the silent connections are held (or as soon as they are closed).
        bob = cluster.start("bob", "--seed", f"127.0.0.1:{port}", beacon=False)
        still_serving(cluster, [alice, bob], timeout=15)
        # Past the handshake timeout (5 s) the silent ones are closed by the node, bob's stays.
        wait_for(lambda: sum(map(closed_by_peer, idle)) == len(idle), 15, "every silent connection closed")
        final = node_stats(alice.api)["mesh_connections"]
        assert final["closed_idle"] + final["refused"] >= len(idle)
        assert final["closed_idle"] > 0
        assert final["open"] <= 2, final  # bob's connection (and perhaps a reconnection of it)
        assert footprint(alice).fds < 100
        still_serving(cluster, [alice, bob])
    finally:
        for s in idle:
            s.close()


def test_an_honest_connection_closed_by_mistake_only_costs_its_dealer_a_reconnect() -> None:
    """A transport whose mesh binds no session to the address (so the one connection there is
    excess) closes it past the handshake timeout, as a sweep does: the DEALER on the other end
    reconnects by itself and its messages go on arriving."""

    async def run() -> None:
        got: list[bytes] = []
        transport = ZmqTransport(NodeId(os.urandom(16)), on_frames=lambda batch, sources: got.extend(
            f[1] for f in batch))
        transport.accepted.grace = 0.3
        port = transport.bind("127.0.0.1", 0, (40000, 60000))
        transport.start(asyncio.get_running_loop())
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.RECONNECT_IVL, 100)
        try:
            dealer.connect(f"tcp://127.0.0.1:{port}")
            deadline = time.monotonic() + 15
            stats = transport.accepted.stats
            since: int | None = None  # messages received when a second connection was accepted
            while since is None or len(got) < since + 5:
                assert time.monotonic() < deadline, (stats, len(got), since)
                dealer.send_multipart([b"BEAT", b"x"])  # every 50 ms, as a peer's heartbeats
                await asyncio.sleep(0.05)
                transport.poll()  # a turn of the timer loop: the sweep
                if since is None and stats.closed_idle and stats.accepted >= 2:
                    since = len(got)
            assert stats.closed_idle >= 1 and stats.accepted >= 2  # closed, and connected again
        finally:
            dealer.close()
            ctx.term()
            transport.close()

    asyncio.run(run())


@pytest.mark.processes
def test_in_a_secured_group_a_silent_member_connection_is_closed_too(cluster: Cluster, tmp_path: Path) -> None:
    """Secure mode: the ROUTER's one monitor is the guard's, which hands the connection events
    on.  A connection with the group's client key (a member's, or a stolen one) that completes
    the CURVE handshake and sends no HELO is closed after the handshake timeout."""
    path = tmp_path / "test.key"
    secret = GroupSecret.new("test")
    secret.save(path)
    a_port = free_port()
    alice = cluster.start("alice", "--group-key", str(path), "--port", str(a_port), beacon=False)
    bob = cluster.start("bob", "--group-key", str(path), "--seed", f"127.0.0.1:{a_port}", beacon=False)
    still_serving(cluster, [alice, bob])
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        silent = ctx.socket(zmq.DEALER)
        silent.linger = 0
        client = secret.curve_client()
        silent.curve_serverkey = secret.curve_server().public
        silent.curve_publickey, silent.curve_secretkey = client.public, client.secret
        silent.connect(f"tcp://127.0.0.2:0;127.0.0.1:{a_port}")  # from an address no member uses
        wait_for(lambda: node_stats(alice.api)["mesh_connections"]["closed_idle"] >= 1, 15,
                 "the silent member connection closed")
        stats = node_stats(alice.api)
        assert stats["security"]["admitted_handshakes"] >= 2  # bob's, and the silent one's
        assert stats["mesh_connections"]["refused"] == 0
        still_serving(cluster, [alice, bob])
    finally:
        ctx.destroy(linger=0)
