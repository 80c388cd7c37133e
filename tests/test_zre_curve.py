"""ZRE over CURVE, as Zyre speaks it with a secret key (docs/zre.md, "CURVE"): v3 beacons carrying
the node's CURVE public key, the HELLO's ``X-PUBLICKEY``, a CURVE ROUTER and CURVE DEALERs, TCP
messages still version 2, beacons of the other version dropped.

In-process ZRE drivers on loopback (beacons to 127.255.255.255, connections to 127.0.0.1), then
the ``zre`` package 0.2.0 (PyPI: ``set_zcert`` gives it CURVE and v3 beacons) against a secured
huddle node, which speaks CURVE by default."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import zmq
from conftest import Cluster, get, http, wait_for, wait_for_async
from test_zre_interop import zre_event
from zmq.utils import z85
from zre.node import ZreNode

from huddle.discovery.interfaces import LOOPBACK
from huddle.procs import NodeProcess, free_port
from huddle.security import CurveKeypair, NodeIdentity
from huddle.zre.codec import Beacon, MsgId, ZreMessage, encode, encode_beacon
from huddle.zre.driver import PUBLIC_KEY_HEADER, ZreDriver, ZreLimits, key_from_header
from huddle.zre.peer import PeerState

GROUP = "test"


def keypair() -> CurveKeypair:
    return NodeIdentity.generate().curve()


def make(name: str, port: int, curve: CurveKeypair | None, heard: list[tuple[str, bytes]],
         limits: ZreLimits | None = None) -> ZreDriver:
    return ZreDriver(uuid=bytes([len(name)]) * 15 + name[0].encode(), name=name, group=GROUP, headers={},
                     interface=LOOPBACK, port=port, on_shout=lambda peer, group, c: heard.append((peer.name, c[0])),
                     on_whisper=lambda peer, c: heard.append((f"whisper:{peer.name}", c[0])), curve=curve,
                     interval=0.1, limits=limits or ZreLimits())


@contextlib.asynccontextmanager
async def running(*drivers: ZreDriver) -> AsyncIterator[None]:
    tasks = []
    try:
        for d in drivers:
            await d.start()
            tasks.append(asyncio.create_task(d.run()))
        yield
    finally:
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        for d in drivers:
            d.close()


def ready(d: ZreDriver, name: str) -> bool:
    return any(lk.peer.name == name and lk.peer.state is PeerState.READY for lk in d.links.values())


def test_two_curve_nodes_meet_and_talk_and_a_plain_one_meets_neither() -> None:
    port = free_port(socket.SOCK_DGRAM)
    heard_a: list[tuple[str, bytes]] = []
    heard_b: list[tuple[str, bytes]] = []
    heard_p: list[tuple[str, bytes]] = []
    a, b = make("ann", port, keypair(), heard_a), make("bob", port, keypair(), heard_b)
    plain = make("pia", port, None, heard_p)

    async def main() -> None:
        async with running(a, b, plain):
            await wait_for_async(lambda: ready(a, "bob") and ready(b, "ann"), 20, "the CURVE nodes' HELLOs")
            assert a.shout(GROUP, [b"over curve"]) == 1
            assert a.whisper(b.uuid, [b"psst"])
            await wait_for_async(lambda: ("ann", b"over curve") in heard_b and ("whisper:ann", b"psst") in heard_b,
                                 20, "the SHOUT and the WHISPER over CURVE")
            # Each hears the other's beacons: v3 and v2 do not mix (both sides count what they drop).
            await wait_for_async(lambda: a.counters["beacon_other_version"] and plain.counters["beacon_other_version"],
                                 20, "the beacons of the other version dropped")
            assert not any(lk.peer.name == "pia" for lk in a.links.values())
            assert not plain.links and heard_p == []
            assert a.describe()["curve"] is True and plain.describe()["curve"] is False

    asyncio.run(main())


def test_a_curve_router_reads_nothing_from_a_client_in_clear_or_with_a_wrong_server_key() -> None:
    port = free_port(socket.SOCK_DGRAM)
    heard: list[tuple[str, bytes]] = []
    node = make("ann", port, keypair(), heard)

    async def main() -> None:
        async with running(node):
            hello = encode(ZreMessage(MsgId.HELLO, 1, endpoint="tcp://127.0.0.1:9", groups=(GROUP,), name="eve",
                                      headers=((PUBLIC_KEY_HEADER, z85.encode(keypair().public).decode()),)))
            shout = encode(ZreMessage(MsgId.SHOUT, 2, group=GROUP, content=(b"sneaked",)))
            ctx = zmq.Context()
            clear = ctx.socket(zmq.DEALER)  # no CURVE: the handshake fails, nothing is read
            wrong = ctx.socket(zmq.DEALER)  # CURVE with another server key: the same
            right = ctx.socket(zmq.DEALER)  # CURVE with the node's key (its beacons broadcast it): read
            own = keypair()
            for sock, ident in ((clear, b"\x0a"), (wrong, b"\x0b"), (right, b"\x0c")):
                sock.setsockopt(zmq.IDENTITY, b"\x01" + ident * 16)
                sock.setsockopt(zmq.LINGER, 0)
                if sock is not clear:
                    sock.setsockopt(zmq.CURVE_SERVERKEY, keypair().public if sock is wrong else node.curve.public)  # type: ignore[union-attr]
                    sock.setsockopt(zmq.CURVE_PUBLICKEY, own.public)
                    sock.setsockopt(zmq.CURVE_SECRETKEY, own.secret)
                sock.connect(node.endpoint)
                sock.send_multipart(hello)
                sock.send_multipart(shout)
            try:
                await wait_for_async(lambda: heard == [("eve", b"sneaked")], 20, "the CURVE client's SHOUT")
                await asyncio.sleep(0)  # the ROUTER read the other two's attempts long before (none got through)
                assert set(node.links) == {b"\x0c" * 16}
                assert node.counters["message_malformed"] == 0 and node.counters["unknown_peer"] == 0
            finally:
                for sock in (clear, wrong, right):
                    sock.close(linger=0)
                ctx.term()

    asyncio.run(main())


@pytest.fixture
def curve_driver() -> Any:
    d = ZreDriver(uuid=b"\x07" * 16, name="me", group=GROUP, headers={}, interface=LOOPBACK, port=1,
                  on_shout=lambda peer, group, content: None, limits=ZreLimits(peers=8), clock=lambda: 0.0,
                  curve=keypair())
    d.endpoint = "tcp://127.0.0.1:9"
    yield d
    d.close()


def test_hostile_v3_beacons_and_keyless_hellos_are_counted_and_bounded(curve_driver: ZreDriver) -> None:
    d = curve_driver
    key = keypair().public
    for data in (b"ZRE\x03" + bytes(18), b"ZRE\x03" + bytes(50) + b"\x00" * 10, b"ZRE\x01" + bytes(50),
                 b"ZRE\x03" + bytes(51)):
        d.beacon(data, "127.0.0.1")  # cut short, too long, versions and sizes that do not agree
    d.beacon(encode_beacon(Beacon(b"\x01" * 16, 40000)), "127.0.0.1")  # v2 to a CURVE node
    assert not d.links
    assert d.counters["beacon_malformed"] == 4 and d.counters["beacon_other_version"] == 1
    # A HELLO from a peer not heard by beacon: dialled back only with the key its X-PUBLICKEY gives ...
    for text in ("not z85 at all, and not forty long", "~" * 40, "#" * 40, "é" * 40):
        hello = ZreMessage(MsgId.HELLO, 1, endpoint="tcp://127.0.0.1:7", headers=((PUBLIC_KEY_HEADER, text),))
        d.message([b"\x01" + b"\xee" * 16, *encode(hello)])
    assert d.counters["hello_key_malformed"] == 4 and not d.links
    # ... or, without one (the zre package sends none), with its beacon's key once that comes: parked.
    d.message([b"\x01" + b"\xee" * 16, *encode(ZreMessage(MsgId.HELLO, 1, endpoint="tcp://127.0.0.1:7", name="z"))])
    assert not d.links and d.counters["hello_parked"] == 1
    d.beacon(encode_beacon(Beacon(b"\xee" * 16, 7, key)), "127.0.0.1")
    assert d.links[b"\xee" * 16].peer.state is PeerState.READY and d.links[b"\xee" * 16].peer.name == "z"
    for i in range(500):  # a flood of keyless HELLOs, then of v3 beacons, with fresh UUIDs: bounded
        hello = encode(ZreMessage(MsgId.HELLO, 1, endpoint="tcp://127.0.0.1:7"))
        d.message([b"\x01" + i.to_bytes(16, "big"), *hello])
    assert len(d._parked) == 7 and d.counters["peers_full"] == 500 - 7
    for i in range(500, 1000):
        d.beacon(encode_beacon(Beacon(i.to_bytes(16, "big"), 40000, key)), "127.0.0.1")
    assert len(d.links) == 8 and d.counters["peers_full"] == 1000 - 7 - 7
    d._clock = lambda: 100.0  # parked HELLOs expire as silent peers do
    d.tick()
    assert not d._parked


def test_the_public_key_header_is_z85_of_the_beacons_key() -> None:
    pair = keypair()
    d = ZreDriver(uuid=b"\x07" * 16, name="me", group=GROUP, headers={"X-A": "1"}, interface=LOOPBACK, port=1,
                  on_shout=lambda peer, group, content: None, curve=pair)
    try:
        assert key_from_header(d.headers[PUBLIC_KEY_HEADER]) == pair.public and d.headers["X-A"] == "1"
        assert key_from_header("") is None and key_from_header("ab") is None
    finally:
        d.close()


# ---- the zre package (PyPI) with CURVE against a secured huddle node ----

def test_the_zre_package_with_curve_and_a_secured_node_talk_over_curve(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``zre`` 0.2.0 with ``set_zcert``: v3 beacons, a CURVE ROUTER, CURVE DEALERs with the key of the
    beacon it heard (its node.py ``_handle_beacon``, ``_curve_client_args``); it drops v2 beacons."""
    monkeypatch.setattr(ZreNode, "_interface_broadcast", lambda self: "127.255.255.255")
    port = free_port(socket.SOCK_DGRAM)
    cluster = Cluster(tmp_path)

    async def run(node: NodeProcess) -> None:
        pair = zmq.curve_keypair()  # Z85 text, as Zyre's zcert gives them
        z = ZreNode("z1")
        z.set_interface("127.0.0.1")
        z.set_port(port)
        z.set_zcert(pair[0], pair[1])
        await z.start()
        await z.join(GROUP)
        loop = asyncio.create_task(z.run())
        events: list[dict[str, Any]] = []

        until = functools.partial(zre_event, z, events)

        def peers() -> list[dict[str, Any]]:
            found: list[dict[str, Any]] = get(node.api, "/api/v1/zre/peers")["peers"]
            return [p for p in found if p["name"] == "z1" and p["state"] == "ready" and GROUP in p["groups"]]

        try:
            await until(lambda e: e["type"] == "ENTER" and e["peer_name"] == "h1", "its ENTER of the node")
            await until(lambda e: e["type"] == "JOIN" and e["group"] == GROUP, "its JOIN of the node")
            seen = await asyncio.to_thread(wait_for, peers, 20, "the node's view of the zre node")
            assert key_from_header(seen[0]["headers"].get(PUBLIC_KEY_HEADER, "")) is None  # zre sends none
            await z.shout(GROUP, b"from zre over curve")
            shouts = await asyncio.to_thread(wait_for, lambda: [
                e for e in get(node.api, "/api/v1/log?limit=1000")["events"] if e["kind"] == "zre.shout"], 20,
                "its SHOUT in the log")
            assert shouts[0]["body"]["frames"] == ["from zre over curve"]
            status, _ = await asyncio.to_thread(http, node.api, "/api/v1/events", {"kind": "note", "body": 1})
            assert status == 201
            heard = await until(lambda e: e["type"] == "SHOUT", "the node's SHOUT")
            assert heard["payload"] == b"note"
            assert (await asyncio.to_thread(http, node.api, "/api/v1/zre/whisper", {"to": "z1", "text": "psst"}))[0] \
                == 202
            whispered = await until(lambda e: e["type"] == "WHISPER", "the node's WHISPER")
            assert whispered["payload"] == b"psst"
            info = get(node.api, "/api/v1/zre/peers")
            assert info["curve"] is True and info["public_key"] == curve_hex_of(node)
        finally:
            await z.stop()
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop

    try:
        node = cluster.start("h1", "--zre", "--zre-port", str(port))  # secured: the session's group key
        assert get(node.api, "/api/v1/node")["features"]["zre"]["curve"] is True
        asyncio.run(run(node))
    finally:
        cluster.close()


def curve_hex_of(node: NodeProcess) -> str:
    """The node's CURVE public key as its identity gives it (the Ed25519 key of GET /api/v1/node)."""
    from nacl.signing import VerifyKey

    return bytes(VerifyKey(bytes.fromhex(get(node.api, "/api/v1/node")["public_key"])).to_curve25519_public_key()).hex()
