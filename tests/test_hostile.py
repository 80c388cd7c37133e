"""A hostile or broken peer: garbage frames, unknown types, a HELO of another
version, a flood from an unknown sender.  The node stays up, keeps serving its
peers, and counts what it dropped."""

from __future__ import annotations

import json
import os
import time
import uuid as uuidlib

import pytest
import zmq
from conftest import Cluster, free_port, get, http, wait_for

pytestmark = pytest.mark.processes


def stats(api: str) -> dict[str, int]:
    result: dict[str, int] = get(api, "/api/v1/node")["stats"]
    return result


@pytest.fixture
def pair(cluster: Cluster) -> Cluster:
    # Open (--open): these tests speak raw NULL ZMTP to the mesh socket.
    nodes = [cluster.start(n, secure=False) for n in ("alice", "bob")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    return cluster


def dealer(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, identity: bytes | None) -> zmq.Socket[bytes]:
    sock = ctx.socket(zmq.DEALER)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 2000)
    sock.setsockopt(zmq.SNDHWM, 0)
    sock.connect(endpoint)
    return sock


def test_garbage_and_unknown_types_are_dropped_and_counted(pair: Cluster) -> None:
    alice = pair.nodes[0]
    endpoint = get(alice.api, "/api/v1/node")["endpoint"]
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        evil = dealer(ctx, endpoint, uuidlib.uuid4().bytes)
        anonymous = dealer(ctx, endpoint, None)  # ZeroMQ gives it a 5-octet routing id
        bad = [
            [b"WHAT", b"?"],
            [b"CHAT"],
            [b"CHAT", b"\xff\xfe\xfd"],
            [b"HELO", b"{not json"],
            [b"HELO", b'{"version": 1}'],
            [b"TIME", b"soon"],
            [b"XMSG", b"<add/>"],
            [b"CHAT", b"x" * (3 * 1024 * 1024 // 2)],
            [b"", b"", b"", b""],
            [b"BULK", b"", b"a BULK without a head"],
            [b"BULK", b"\xaa\xa0\x10" + bytes(16)],  # no data frame
        ]
        for frames in bad:
            evil.send_multipart(frames)
        anonymous.send_multipart([b"CHAT", b"hello"])
        # Far beyond the limit: ZeroMQ drops the connection before buffering it.
        dealer(ctx, endpoint, uuidlib.uuid4().bytes).send_multipart([b"CHAT", b"x" * (64 * 1024 * 1024)])
        evil.send_multipart([b"CHAT", b"valid, but you never said HELO"])
        wait_for(lambda: stats(alice.api)["decode_errors"] >= len(bad) + 1, 10, "decode errors to be counted")
        wait_for(lambda: stats(alice.api)["dropped_unintroduced"] >= 1, 10, "unintroduced chat to be dropped")
    finally:
        ctx.destroy(linger=0)
    assert pair.mesh_complete(pair.nodes)
    assert http(alice.api, "/api/v1/chat", {"text": "still here"}) == (202, {"sent_to": 1})


def test_helo_of_another_version_is_refused_with_a_clear_reason(pair: Cluster) -> None:
    alice = pair.nodes[0]
    endpoint = get(alice.api, "/api/v1/node")["endpoint"]
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        # A "future" node: its ROUTER listens where its HELO says, to hear the refusal.
        inbox = ctx.socket(zmq.ROUTER)
        port = free_port()
        inbox.bind(f"tcp://127.0.0.1:{port}")
        uuid = uuidlib.uuid4().bytes
        out = dealer(ctx, endpoint, uuid)
        helo = {"version": 2, "endpoint": f"tcp://127.0.0.1:{port}", "name": "future",
                "incarnation": os.urandom(8).hex(), "reply": False, "peers": 0}
        out.send_multipart([b"HELO", json.dumps(helo).encode()])
        assert inbox.poll(10_000), "no answer to an incompatible HELO"
        sender, kind, body = inbox.recv_multipart()
        assert kind == b"GBYE"
        # From alice's own DEALER: her UUID and that DEALER's 8 octets (protocol.md 2.1)
        assert len(sender) == 24 and sender[:16] == bytes.fromhex(get(alice.api, "/api/v1/node")["uuid"].replace("-", ""))
        assert "incompatible protocol version 2" in body.decode() and "version 1" in body.decode()
    finally:
        ctx.destroy(linger=0)
    assert stats(alice.api)["refused"] == 1
    assert [p["name"] for p in get(alice.api, "/api/v1/peers")] == ["bob"]


def test_flood_from_an_unknown_sender_does_not_hurt_the_mesh(pair: Cluster) -> None:
    alice, bob = pair.nodes
    endpoint = get(alice.api, "/api/v1/node")["endpoint"]
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    flood = 100_000
    try:
        sock = dealer(ctx, endpoint, uuidlib.uuid4().bytes)
        start = time.monotonic()
        for i in range(flood):
            sock.send_multipart([b"CHAT", b"spam %d" % i])
        wait_for(lambda: stats(alice.api)["dropped_unintroduced"] >= flood, 60, "the flood to be counted")
        elapsed = time.monotonic() - start
    finally:
        ctx.destroy(linger=0)
    assert elapsed < 60
    # Bob was never declared suspect or gone, and chat still flows both ways.
    assert pair.mesh_complete(pair.nodes)
    assert all(p["state"] == "alive" for p in get(alice.api, "/api/v1/peers"))
    assert http(bob.api, "/api/v1/chat", {"text": "after the flood"}) == (202, {"sent_to": 1})
    wait_for(lambda: stats(alice.api)["chats_received"] >= 1, 10, "bob's chat to reach alice")
