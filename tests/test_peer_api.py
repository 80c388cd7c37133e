"""``huddle.Peer`` (docs/peer-api.md): a Zyre-style peer in-process, on huddle's mesh or on ZRE.

The roster and the mesh side's payloads are pure and tested alone; two Peers on the mesh run
in one process (their nodes on loopback, found by seed, secured with the session's group
file); a Peer with ``zre=True`` meets another and a pyre node with beacons pinned to
127.255.255.255 as tests/test_zre_interop.py pins them.  Nothing leaves 127.0.0.0/8.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import re
import socket
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pyre
import pytest
import zmq
from conftest import group_key, load_group_file, wait_for_async
from hypothesis import given
from hypothesis import strategies as st
from pyre import zbeacon
from pyre.pyre_event import PyreEvent

import huddle
from huddle import NodeConfig
from huddle.discovery.interfaces import LOOPBACK
from huddle.embed.events import MAX_FRAME, EventType, PeerEvent, Roster
from huddle.embed.mesh import PeerFeature
from huddle.embed.wire import PREFIX, pack, unpack
from huddle.errors import DecodeError, NoSuchPeer, TooLarge
from huddle.ids import NodeId
from huddle.procs import free_port
from huddle.protocol.events import MessageReceived, PeerJoined, PeerLeft, PeerStateChanged
from huddle.zre.codec import Beacon, MsgId, ZreMessage, decode, encode, encode_beacon
from huddle.zre.driver import ZreDriver

T = TypeVar("T")
DOCS = Path(__file__).resolve().parent.parent / "docs" / "peer-api.md"


# ---------------------------------------------------------------- the roster and the payloads (pure)


def test_a_peer_enters_once_then_joins_each_group_its_hello_named() -> None:
    seen: list[PeerEvent] = []
    mine = ["chat"]
    roster = Roster(seen.append, lambda: mine)
    assert roster.enter("aa", "bob", ["chat", "ops"], {"X-A": "1"})
    assert not roster.enter("aa", "bob", ["other"], {})  # a second HELLO: nothing new
    assert [(e.type, e.group) for e in seen] == [(EventType.ENTER, ""), (EventType.JOIN, "chat"),
                                                (EventType.JOIN, "ops")]
    assert seen[0].headers == {"X-A": "1"} and seen[0].name == "bob"
    roster.join("aa", "chat")  # in it already: no event
    roster.join("zz", "chat")  # never entered: no event
    assert roster.shout("aa", "chat", (b"hi",)) and not roster.shout("aa", "ops", (b"x",))  # ops is not mine
    assert not roster.whisper("zz", (b"x",))
    roster.leave("aa", "ops")
    roster.evasive("aa")
    roster.exit("aa")
    roster.exit("aa")  # gone already: no second EXIT
    assert [e.type for e in seen[3:]] == [EventType.SHOUT, EventType.LEAVE, EventType.EVASIVE, EventType.EXIT]
    assert seen[3].data == b"hi" and roster.known == {}


def test_the_mesh_payloads_round_trip_and_refuse_what_a_peer_does_not_send() -> None:
    for msg in (ZreMessage(MsgId.HELLO, groups=("a", "b"), name="n", headers=(("k", "v"),)),
                ZreMessage(MsgId.SHOUT, group="g", content=(b"1", b"", b"\xff")), ZreMessage(MsgId.WHISPER, content=(b"x",)),
                ZreMessage(MsgId.JOIN, group="g"), ZreMessage(MsgId.LEAVE, group="g")):
        assert unpack(pack(msg)) == msg
    with pytest.raises(DecodeError, match="does not send PING"):
        unpack(pack(ZreMessage(MsgId.PING)))
    with pytest.raises(DecodeError, match="after"):
        unpack(pack(ZreMessage(MsgId.JOIN, group="g")) + b"x")


@given(st.binary(max_size=300))
def test_any_payload_decodes_or_raises_decode_error(data: bytes) -> None:
    for payload in (data, PREFIX + data):
        with contextlib.suppress(DecodeError):
            unpack(payload)


class _FakeHost:
    """What the Peer's feature uses of its node: sending an addressed message (recorded here)."""

    def __init__(self) -> None:
        self.sent: list[tuple[NodeId, ZreMessage]] = []

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        self.sent.append((peer, unpack(payload)))
        return len(self.sent)


def test_the_mesh_feature_greets_answers_a_second_hello_once_and_counts_strangers() -> None:
    async def main() -> None:
        seen: list[PeerEvent] = []
        groups = ["chat"]
        feature = PeerFeature("me", {"X-A": "1"}, groups, Roster(seen.append, lambda: groups))
        host, tasks = _FakeHost(), []
        async with contextlib.AsyncExitStack() as stack:
            await feature.start(stack, lambda coro: tasks.append(asyncio.ensure_future(coro)), host)  # type: ignore[arg-type]
            other = NodeId.random()
            hello = pack(ZreMessage(MsgId.HELLO, groups=("chat",), name="other"))
            feature._admitted(PeerJoined(other, "other", "tcp://127.0.0.1:1", 0.0))
            await until(lambda: host.sent, 5, "its HELLO")
            assert host.sent[0][1] == ZreMessage(MsgId.HELLO, groups=("chat",), name="me", headers=(("X-A", "1"),))
            stranger = NodeId.random()
            assert feature._received(MessageReceived(stranger, 1, pack(ZreMessage(MsgId.SHOUT, group="chat",
                                                                                   content=(b"x",)))))
            assert feature.counters["unknown_peer"] == 1 and seen == []
            assert not feature._received(MessageReceived(other, 1, b"not a Peer's"))  # left to the API's stream
            for n in range(3):  # the first enters; the second is answered with a HELLO; the third is not
                assert feature._received(MessageReceived(other, 2 + n, hello))
            await until(lambda: len(host.sent) == 2, 5, "the one answer")
            assert feature.counters["hello_again"] == 2 and [e.type for e in seen] == [EventType.ENTER, EventType.JOIN]
            feature.change("ops", join=True)
            await until(lambda: len(host.sent) == 3, 5, "the JOIN")
            assert host.sent[2] == (other, ZreMessage(MsgId.JOIN, group="ops")) and groups == ["chat", "ops"]
            feature._state(PeerStateChanged(other, "other", "suspect", 1.0))
            feature._gone(PeerLeft(other, "other", "gone", 2.0))
            assert [e.type for e in seen[2:]] == [EventType.EVASIVE, EventType.EXIT] and feature.roster.known == {}
            for task in tasks:
                task.cancel()

    run(main)


def test_the_zre_driver_joins_several_groups_and_tells_each_move_of_its_peers() -> None:
    """The driver (zre/driver.py) with ``join`` / ``leave`` and ``on_peer``; the peer is a ROUTER of the test's."""
    moves: list[tuple[str, str]] = []
    now = [0.0]
    driver = ZreDriver(uuid=b"\x07" * 16, name="me", group="", headers={}, interface=LOOPBACK, port=1,
                       on_shout=lambda peer, group, content: None, clock=lambda: now[0],
                       on_peer=lambda peer, what, group: moves.append((what, group)))
    driver.endpoint = "tcp://127.0.0.1:9"
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    try:
        driver.join("chat")
        driver.join("chat")  # in it already: nothing
        someone = b"\x01" + b"\x02" * 16
        driver.message([someone, *encode(ZreMessage(MsgId.HELLO, 1, endpoint=f"tcp://127.0.0.1:{port}",
                                                    groups=("a",), name="them"))])
        driver.join("ops")
        driver.leave("chat")
        heard = []
        while len(heard) < 3 and router.poll(5000):
            heard.append(decode(router.recv_multipart()[1:]))
        assert [(m.id, m.groups or m.group, m.status) for m in heard] == [
            (MsgId.HELLO, ("chat",), 1), (MsgId.JOIN, "ops", 2), (MsgId.LEAVE, "chat", 3)]
        driver.message([someone, *encode(ZreMessage(MsgId.JOIN, 2, group="b", status=1))])
        driver.message([someone, *encode(ZreMessage(MsgId.LEAVE, 3, group="a", status=2))])
        now[0] = 6.0
        driver.tick()
        driver.beacon(encode_beacon(Beacon(b"\x02" * 16, 0)), "127.0.0.1")
        assert moves == [("enter", ""), ("join", "b"), ("leave", "a"), ("evasive", ""), ("exit", "")]
        assert driver.groups == ["ops"]
    finally:
        driver.close()
        router.close(linger=0)
        ctx.term()


# ---------------------------------------------------------------- helpers


def mesh_config(tmp_path: Path, name: str, seeds: tuple[str, ...] = ()) -> NodeConfig:
    """A node on loopback, found by seed (no beacons), its API on a free port, secured with the group file."""
    return NodeConfig().with_overrides(group="test", data_dir=tmp_path / name, interface="lo", beacon=False,
                                       api="127.0.0.1:0", seeds=seeds, log_level="warning",
                                       group_secret=load_group_file(group_key("test")))


_BACKLOG: dict[int, list[PeerEvent]] = {}  # per Peer (its id()): the events read and not yet asked for


@pytest.fixture(autouse=True)
def _fresh_backlog() -> None:
    _BACKLOG.clear()


async def next_event(peer: huddle.Peer, kind: EventType, timeout: float = 20.0,
                     match: Callable[[PeerEvent], bool] = lambda e: True) -> PeerEvent:
    """The first event of ``kind`` (that ``match`` accepts) not asked for yet, in order; a deadline.
    The events read on the way are kept for the next asks."""
    backlog = _BACKLOG.setdefault(id(peer), [])
    for at, event in enumerate(backlog):
        if event.type is kind and match(event):
            return backlog.pop(at)

    async def find() -> PeerEvent:
        while True:
            event = await peer.recv()
            if event.type is kind and match(event):
                return event
            backlog.append(event)
    try:
        return await asyncio.wait_for(find(), timeout)
    except TimeoutError:
        raise AssertionError(f"{peer.name}: no {kind.value} within {timeout} s") from None


until = wait_for_async  # a condition (a pyre node's events: its own threads) polled until a deadline


def run(main: Callable[[], Awaitable[None]], timeout: float = 90.0) -> None:
    asyncio.run(asyncio.wait_for(main(), timeout))


# ---------------------------------------------------------------- two Peers on huddle's mesh


def test_two_peers_on_the_mesh_enter_join_shout_whisper_leave_and_exit(tmp_path: Path) -> None:
    async def main() -> None:
        alice = huddle.Peer("alice", config=mesh_config(tmp_path, "alice"))
        alice.set_header("X-ROLE", "scorer")
        alice.join("chat")
        alice.join("ops")  # several groups on one node
        await alice.start()
        seed = alice.endpoint.removeprefix("tcp://")
        bob = huddle.Peer("bob", config=mesh_config(tmp_path, "bob", (seed,)))
        bob.join("chat")
        await bob.start()
        try:
            entered = await next_event(bob, EventType.ENTER)
            assert entered.peer == alice.uuid and entered.name == "alice" and entered.headers == {"X-ROLE": "scorer"}
            assert {(await next_event(bob, EventType.JOIN)).group for _ in range(2)} == {"chat", "ops"}
            assert (await next_event(alice, EventType.ENTER)).peer == bob.uuid
            assert (await next_event(alice, EventType.JOIN)).group == "chat"
            assert bob.peers() == [alice.uuid] and bob.peer_groups() == ["chat", "ops"]
            assert bob.peer_header(alice.uuid, "X-ROLE") == "scorer" and bob.peer_header(alice.uuid, "nope") is None
            assert bob.peer_address(alice.uuid) == alice.endpoint
            assert bob.peers_by_group("ops") == [alice.uuid] and alice.peers_by_group("ops") == []
            # SHOUT: to the group's members, several frames kept as frames.
            assert await alice.shout("chat", [b"hello", b"\x00\xff"]) == 1
            shout = await next_event(bob, EventType.SHOUT)
            assert (shout.peer, shout.group, shout.frames) == (alice.uuid, "chat", (b"hello", b"\x00\xff"))
            assert await alice.shout("ops", "nobody else is in ops") == 0
            # WHISPER both ways.
            await bob.whisper(alice.uuid, "psst")
            whisper = await next_event(alice, EventType.WHISPER)
            assert (whisper.peer, whisper.name, whisper.data) == (bob.uuid, "bob", b"psst")
            await alice.whisper(bob.uuid, b"back")
            assert (await next_event(bob, EventType.WHISPER)).data == b"back"
            # JOIN after start, LEAVE, and a SHOUT to a group bob is no longer in reaches no one.
            bob.join("ops")
            assert (await next_event(alice, EventType.JOIN, match=lambda e: e.group == "ops")).peer == bob.uuid
            bob.leave("chat")
            assert (await next_event(alice, EventType.LEAVE)).group == "chat"
            assert await alice.shout("chat", b"gone?") == 0
            assert await alice.shout("ops", b"ops!") == 1
            assert (await next_event(bob, EventType.SHOUT)).frames == (b"ops!",)
            assert alice.counters["malformed"] == 0 and bob.counters["unknown_peer"] == 0
        finally:
            await bob.stop()
        exited = await next_event(alice, EventType.EXIT)
        assert exited.peer == bob.uuid and alice.peers() == []
        await alice.stop()

    run(main)


def test_hostile_calls_and_payloads_are_refused_and_the_peer_stays_up(tmp_path: Path) -> None:
    async def main() -> None:
        async with huddle.Peer("carol", config=mesh_config(tmp_path, "carol")) as carol:
            seed = carol.endpoint.removeprefix("tcp://")
            async with huddle.Peer("dave", config=mesh_config(tmp_path, "dave", (seed,))) as dave:
                await next_event(carol, EventType.ENTER)
                await next_event(dave, EventType.ENTER)
                with pytest.raises(TooLarge, match="at most"):
                    await carol.shout("chat", b"x" * (MAX_FRAME + 1))
                with pytest.raises(TooLarge, match="frames"):
                    await carol.shout("chat", [b"x"] * 17)
                with pytest.raises(NoSuchPeer, match=r"no peer 'f+' has entered"):
                    await carol.whisper("f" * 32, b"hi")
                with pytest.raises(NoSuchPeer):
                    carol.peer_header("nobody", "X")
                with pytest.raises(huddle.LocalProtocolError, match="before the Peer starts"):
                    carol.set_header("X-LATE", "1")
                with pytest.raises(ValueError, match="group"):
                    carol.join("g" * 256)
                # Malformed payloads with the Peer's prefix, straight onto the mesh: counted, dropped.
                assert dave.node is not None and carol.node is not None
                for junk in (PREFIX, PREFIX + b"\x05", PREFIX + b"\x01\x00\x00\x00\x09abc",
                             pack(ZreMessage(MsgId.PING))):
                    assert carol.node.uuid is not None
                    dave.node.send_to(carol.node.uuid, junk)
                await until(lambda: carol.counters["malformed"] == 4, 20, "the refusals counted")
                await dave.whisper(carol.uuid, b"still here")
                assert (await next_event(carol, EventType.WHISPER)).data == b"still here"

    run(main)


def test_a_flood_of_shouts_and_oversized_payloads_is_bounded_and_counted(tmp_path: Path) -> None:
    """A program that does not read: its events stop at ``events``, the rest counted; a payload
    with a frame past ZRE's bound is refused as malformed; the Peer still hears what comes next."""
    async def main() -> None:
        async with huddle.Peer("gina", config=mesh_config(tmp_path, "gina"), events=50) as gina:
            gina.join("chat")
            seed = gina.endpoint.removeprefix("tcp://")
            async with huddle.Peer("hal", config=mesh_config(tmp_path, "hal", (seed,))) as hal:
                await next_event(hal, EventType.JOIN)  # hal sees gina in "chat": its SHOUTs go to her
                for n in range(500):
                    assert await hal.shout("chat", str(n)) == 1
                await until(lambda: gina.dropped >= 500 - 50 + 1, 30, "the events past the bound dropped")  # + ENTER
                assert gina.waiting == 50
                assert hal.node is not None and gina.node is not None and gina.node.uuid is not None
                huge = PREFIX + b"\x01" + (300 * 1024).to_bytes(4, "big") + bytes(300 * 1024)
                hal.node.send_to(gina.node.uuid, huge)
                await until(lambda: gina.counters["malformed"] == 1, 20, "the oversized payload refused")
                kept = [await gina.recv() for _ in range(50)]  # the program reads again: the first 50 were kept
                assert [e.type for e in kept[:2]] == [EventType.ENTER, EventType.SHOUT] and kept[1].data == b"0"
                await hal.whisper(gina.uuid, b"after the flood")
                assert (await next_event(gina, EventType.WHISPER)).data == b"after the flood"

    run(main)


def test_a_mesh_peer_needs_its_nodes_config() -> None:
    with pytest.raises(huddle.LocalProtocolError, match="needs its node's config"):
        huddle.Peer("lost")


# ---------------------------------------------------------------- on ZRE: another Peer, and pyre


def _loopback_socket(self: Any) -> None:
    """pyre's interface lookup, pinned to loopback (as tests/test_zre_interop.py pins it)."""
    self.address = ipaddress.IPv4Address("127.0.0.1")
    self.network_address = ipaddress.IPv4Address("127.0.0.0")
    self.broadcast_address = ipaddress.IPv4Address("127.255.255.255")
    self.interface_name = "lo"


def pyre_events(node: pyre.Pyre, into: list[PyreEvent]) -> list[PyreEvent]:
    sock = node.socket()
    while sock.poll(0, zmq.POLLIN):
        into.append(PyreEvent(node))
    return into


def test_a_zre_peer_meets_another_and_a_pyre_node(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(zbeacon.ZBeacon, "_prepare_socket", _loopback_socket)
    port = free_port(socket.SOCK_DGRAM)

    async def main() -> None:
        py = pyre.Pyre("py")
        py.set_port(str(port).encode())
        py.set_header("X-FROM", "pyre")
        py.start()
        py.join("chat")
        seen: list[PyreEvent] = []
        stopped: list[pyre.Pyre] = []  # pyre's stop waits for its actor: called once

        def saw(kind: str, name: str) -> PyreEvent | None:
            return next((e for e in pyre_events(py, seen) if e.type == kind and e.peer_name == name), None)

        erin = huddle.Peer("erin", zre=True, zre_port=port, interface="127.0.0.1")
        erin.set_header("X-ROLE", "bench")
        erin.join("chat")
        frank = huddle.Peer("frank", zre=True, zre_port=port, interface="127.0.0.1")
        frank.join("chat")
        frank.join("ops")
        try:
            await erin.start()
            await frank.start()
            # Two Peers on ZRE: ENTER (with headers), JOIN of both of frank's groups, SHOUT, WHISPER.
            entered = await next_event(frank, EventType.ENTER, match=lambda e: e.name == "erin")
            assert entered.peer == erin.uuid and entered.headers["X-ROLE"] == "bench"
            await next_event(erin, EventType.JOIN, match=lambda e: e.peer == frank.uuid and e.group == "ops")
            assert await erin.shout("chat", [b"one", b"two"]) >= 1
            shout = await next_event(frank, EventType.SHOUT, match=lambda e: e.peer == erin.uuid)
            assert shout.group == "chat" and shout.frames == (b"one", b"two")
            await frank.whisper(erin.uuid, "psst")
            assert (await next_event(erin, EventType.WHISPER)).data == b"psst"
            frank.leave("ops")
            assert (await next_event(erin, EventType.LEAVE)).group == "ops"
            # pyre sees erin enter and join; erin sees pyre, its header, and their SHOUTs cross.
            enter = await until(lambda: saw("ENTER", "erin"), 20, "pyre's ENTER of erin")
            assert enter.headers["X-ROLE"] == "bench"
            await until(lambda: saw("JOIN", "erin"), 20, "pyre's JOIN of erin")
            py_enter = await next_event(erin, EventType.ENTER, match=lambda e: e.name == "py")
            assert erin.peer_header(py_enter.peer, "X-FROM") == "pyre" and py_enter.peer == py.uuid().hex
            assert erin.peer_address(frank.uuid) == frank.endpoint
            await next_event(erin, EventType.JOIN, match=lambda e: e.peer == py_enter.peer)
            assert await erin.shout("chat", b"to pyre") == 2
            heard = await until(lambda: [e for e in pyre_events(py, seen) if e.type == "SHOUT" and e.msg == [b"to pyre"]],
                                20, "pyre's SHOUT from erin")
            assert heard[0].group == "chat" and heard[0].peer_name == "erin"
            py.shout("chat", b"from pyre")
            assert (await next_event(erin, EventType.SHOUT, match=lambda e: e.name == "py")).data == b"from pyre"
            py.whisper(uuid.UUID(erin.uuid), b"whisper from pyre")
            assert (await next_event(erin, EventType.WHISPER, match=lambda e: e.name == "py")).data == (
                b"whisper from pyre")
            with pytest.raises(NoSuchPeer):
                await erin.whisper("0" * 32, b"x")
            with pytest.raises(TooLarge):
                await erin.shout("chat", b"x" * (MAX_FRAME + 1))
            # frank stops: a leaving beacon, erin sees it EXIT at once; pyre stops, the same.
            frank_id = frank.uuid
            await frank.stop()
            assert (await next_event(erin, EventType.EXIT, match=lambda e: e.name == "frank")).peer == frank_id
            stopped.append(py)
            py.stop()
            await next_event(erin, EventType.EXIT, match=lambda e: e.name == "py")
        finally:
            await frank.stop()
            await erin.stop()
            if not stopped:
                py.stop()

    run(main)


# ---------------------------------------------------------------- the documented example


def test_the_documented_example_runs_on_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """docs/peer-api.md's first python block, run as written (it stays on 127.0.0.1)."""
    block = re.search(r"```python\n(?P<code>.*?)```", DOCS.read_text(), re.DOTALL)
    assert block, "docs/peer-api.md has no python example"
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "example"}
    exec(compile(block["code"], str(DOCS), "exec"), namespace)  # the docs' own example
    heard = asyncio.run(asyncio.wait_for(namespace["main"](), 90))
    assert heard == ["ENTER bob", "JOIN bob chat", "SHOUT bob chat hello, alice"]
