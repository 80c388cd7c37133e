"""CHAT's fast path (docs/architecture.md) decides as the general path does.

The driver hands a CHAT to ``Mesh.receive_chat`` and publishes the event it returns, or, when
it returns None, hands the same frames to ``Mesh.receive``; a node's ``chat()`` sends the frames
``Mesh.chat_frames`` gives.  Here two meshes in the same state take the same input, one the
driver's way, the other through the general path alone (the decoder, ``handle``, a ``Notify``):
the events, counters, blame, sessions and actions must be the same, for honest and hostile
input alike (a CHAT before the handshake, from another address, from a stranger, too long,
not UTF-8, after the peer's incarnation was cut, from a SUSPECT peer, in the wrong frames)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_traffic_stats import _FakeTransport

from huddle.driver import MeshDriver
from huddle.errors import LocalProtocolError
from huddle.ids import NodeId
from huddle.protocol import Mesh, Notify, Send
from huddle.protocol.events import ChatReceived
from huddle.wire import MAX_BODY, Chat, Group, Helo, encode, encode_parts

GROUP = "g"
HOME = "10.0.0.2"  # the honest members' address
EVIL = "10.0.0.66"  # another machine using their UUIDs
ALIVE = NodeId(b"\x0a" * 16)
SUSPECT = NodeId(b"\x0b" * 16)
HANDSHAKING = NodeId(b"\x0c" * 16)  # said HELO, no BOUT yet
CUT = NodeId(b"\x0d" * 16)  # its incarnation ended (a key removed from the allow-list, say)
STRANGER = NodeId(b"\x0e" * 16)


def _mesh() -> Mesh:
    mesh = Mesh(NodeId(b"\x01" * 16), name="alice", group=GROUP, endpoint="tcp://10.0.0.1:5000",
                incarnation="11" * 8, now=0.0)
    for i, uuid in enumerate((ALIVE, SUSPECT, HANDSHAKING, CUT)):
        helo = Helo(uuid, endpoint=f"tcp://{HOME}:{6000 + i}", name=f"peer{i}", incarnation="22" * 8)
        mesh.receive(encode(helo), 0.0, HOME)
        if uuid is not HANDSHAKING:
            mesh.receive(encode(Group(uuid, group=GROUP)), 0.0, HOME)
    conn = mesh.conn_of(SUSPECT)
    assert conn is not None
    mesh.not_responding(conn, 0.5)
    assert mesh.end_incarnation(CUT, "its key was removed from the allow-list", 0.5)
    mesh.take_actions()
    return mesh


def _general_only(mesh: Mesh) -> Mesh:
    """The same mesh with the fast path switched off: every CHAT is decoded and handled."""
    mesh.receive_chat = lambda frames, now, source="": None  # type: ignore[method-assign]
    return mesh


def _state(mesh: Mesh, now: float) -> dict[str, Any]:
    return {"stats": mesh.stats.as_dict(), "blamed": dict(mesh.blamed), "seen": mesh.seen(now, 1e9),
            "peers": mesh.peers(now), "alive": sorted(mesh.alive_peers())}


def _driver_way(mesh: Mesh, frames: list[bytes], now: float, source: str) -> list[object]:
    """What MeshDriver.on_frames does with one message: the events published, then the actions."""
    event = mesh.receive_chat(frames, now, source)
    if event is not None:
        assert not mesh.take_actions()  # the fast path queues nothing
        return [event]
    mesh.receive(frames, now, source)
    return [a.event if isinstance(a, Notify) else a for a in mesh.take_actions()]


def _general_way(mesh: Mesh, frames: list[bytes], now: float, source: str) -> list[object]:
    mesh.receive(frames, now, source)
    return [a.event if isinstance(a, Notify) else a for a in mesh.take_actions()]


SENDERS = st.sampled_from([bytes(u) for u in (ALIVE, SUSPECT, HANDSHAKING, CUT, STRANGER)]
                          + [b"", b"\x0a" * 15, b"\x0a" * 17])
BODIES = st.one_of(
    st.text(max_size=40).map(lambda t: t.encode("utf-8", "surrogatepass")),  # lone surrogates: not UTF-8
    st.binary(max_size=40),
    st.sampled_from([b"", b"x" * MAX_BODY, b"x" * (MAX_BODY + 1), "\u00e9".encode() * (MAX_BODY // 2),
                     b"\xff", b"ok\xc3"]),
)
KINDS = st.sampled_from([b"CHAT", b"CHAT", b"CHAT", b"CHA", b"CHATS", b"chat", b"BEAT"])
SOURCES = st.sampled_from([HOME, HOME, EVIL, ""])
MESSAGES = st.tuples(SENDERS, KINDS, BODIES, SOURCES, st.sampled_from([3, 3, 3, 2, 4]))


def _frames(sender: bytes, kind: bytes, body: bytes, count: int) -> list[bytes]:
    frames = [sender, kind, body, b"more"]
    return frames[:count]


@settings(max_examples=300, deadline=None)
@given(st.lists(MESSAGES, min_size=1, max_size=12))
def test_the_fast_path_and_the_general_path_decide_and_count_alike(
        messages: list[tuple[bytes, bytes, bytes, str, int]]) -> None:
    fast, general = _mesh(), _general_only(_mesh())
    now = 1.0
    for sender, kind, body, source, count in messages:
        now += 0.01
        frames = _frames(sender, kind, body, count)
        assert _driver_way(fast, frames, now, source) == _general_way(general, list(frames), now, source)
        assert _state(fast, now) == _state(general, now)


def test_an_alive_peers_chat_takes_the_fast_path_and_is_counted() -> None:
    mesh = _mesh()
    before = mesh.stats.as_dict()
    event = mesh.receive_chat([bytes(ALIVE), b"CHAT", "h\u00e9".encode()], 2.0, HOME)
    assert event == ChatReceived(ALIVE, "peer0", "h\u00e9", 2.0)
    after = mesh.stats.as_dict()
    assert after["received"] == before["received"] + 1
    assert after["chats_received"] == before["chats_received"] + 1
    row = next(r for r in mesh.seen(2.0, 1e9) if r.uuid == ALIVE)
    assert row.heard == 2.0 and row.msgs_in >= 2 and row.bytes_in >= 3


@pytest.mark.parametrize(("sender", "body", "source", "counter"), [
    (HANDSHAKING, b"hi", HOME, "dropped_unintroduced"),  # before its handshake is done
    (STRANGER, b"hi", HOME, "dropped_unintroduced"),  # no session at all
    (CUT, b"hi", HOME, "dropped_unintroduced"),  # its incarnation was cut
    (ALIVE, b"hi", EVIL, "foreign_frames"),  # its UUID, another connection's address
    (ALIVE, b"x" * (MAX_BODY + 1), HOME, "decode_errors"),  # too long
    (ALIVE, b"\xff\xfe", HOME, "decode_errors"),  # not UTF-8
])
def test_what_the_fast_path_leaves_alone_the_general_path_refuses_and_counts(
        sender: NodeId, body: bytes, source: str, counter: str) -> None:
    mesh = _mesh()
    before = mesh.stats.as_dict()
    frames = [bytes(sender), b"CHAT", body]
    assert mesh.receive_chat(frames, 2.0, source) is None
    assert mesh.stats.as_dict() == before  # nothing counted: the general path does that
    assert mesh.receive(frames, 2.0, source) is False
    assert mesh.stats.as_dict()[counter] == before[counter] + 1
    assert mesh.stats.as_dict()["received"] == before["received"] + 1
    assert not [a for a in mesh.take_actions() if isinstance(a, Notify)]


def test_a_suspect_peers_chat_goes_the_general_way_and_makes_it_alive() -> None:
    mesh = _mesh()
    frames = [bytes(SUSPECT), b"CHAT", b"back"]
    assert mesh.receive_chat(frames, 2.0, HOME) is None
    assert mesh.receive(frames, 2.0, HOME) is True
    events = [a.event for a in mesh.take_actions() if isinstance(a, Notify)]
    assert [type(e).__name__ for e in events] == ["PeerStateChanged", "ChatReceived"]
    assert mesh.receive_chat(frames, 2.1, HOME) == ChatReceived(SUSPECT, "peer1", "back", 2.1)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(max_size=MAX_BODY + 2), st.sampled_from(["\ud800", "x" * MAX_BODY, "x" * (MAX_BODY + 1),
                                                                    "\u00e9" * (MAX_BODY // 2 + 1)])),
       st.sampled_from([None, ALIVE, SUSPECT, HANDSHAKING, STRANGER]))
def test_chat_frames_are_what_chat_sends(text: str, to: NodeId | None) -> None:
    fast, general = _mesh(), _mesh()
    try:
        expected = general.chat(text, 2.0, to)
    except LocalProtocolError:
        with pytest.raises(LocalProtocolError):
            fast.chat_frames(text, to)
        assert fast.stats.sent == general.stats.sent
        return
    sends = [a for a in general.take_actions() if isinstance(a, Send)]
    frames, conns = fast.chat_frames(text, to)
    assert len(conns) == expected
    assert conns == [s.conn for s in sends]
    assert all(frames == encode_parts(s.message) for s in sends)
    assert frames == encode_parts(Chat(fast.uuid, text))
    assert fast.stats.sent == general.stats.sent
    assert not fast.take_actions()


def test_the_driver_publishes_fast_chats_counts_their_octets_and_sends_chats_directly() -> None:
    published: list[object] = []
    mesh = _mesh()
    driver = MeshDriver(time.monotonic, published.append)
    transport = _FakeTransport()  # refuses connection 9 only: none here
    driver.attach(mesh, transport)  # type: ignore[arg-type]
    good = [bytes(ALIVE), b"CHAT", b"hello"]
    foreign = [bytes(ALIVE), b"CHAT", b"evil"]
    early = [bytes(HANDSHAKING), b"CHAT", b"early"]
    received = mesh.stats.received
    driver.on_frames([good, foreign, early, good], [HOME, EVIL, HOME, HOME])
    assert [(type(e).__name__, getattr(e, "text", None)) for e in published] == [
        ("ChatReceived", "hello"), ("ChatReceived", "hello")]
    assert mesh.stats.chats_received == 2 and mesh.stats.foreign_frames == 1
    assert mesh.stats.dropped_unintroduced == 1 and mesh.stats.received == received + 4
    assert driver.traffic.received[b"CHAT"] == 9 + 8 + 9 + 9  # every message's octets, refused or not
    assert driver.stats.receive_failures == 0

    sent = mesh.stats.sent
    assert driver.send_chat("hi", to=ALIVE) == 1
    conn = mesh.conn_of(ALIVE)
    assert transport.sent == [(conn, [b"CHAT", b"hi"])]
    assert driver.traffic.sent[b"CHAT"] == 6
    assert driver.send_chat("all") == 2  # ALIVE and SUSPECT (admitted)
    assert driver.traffic.sent[b"CHAT"] == 6 + 2 * 7
    assert mesh.stats.sent == sent + 3
    assert not mesh.take_actions()
    with pytest.raises(LocalProtocolError):
        driver.send_chat("no", to=HANDSHAKING)


class _Connecting(_FakeTransport):
    def connect(self, conn: int, endpoint: str) -> bool:
        return True

    def disconnect(self, conn: int, flush: bool = False) -> None:
        pass


def test_a_fast_chat_is_published_after_what_the_messages_before_it_in_its_batch_caused() -> None:
    published: list[object] = []
    mesh = _mesh()
    driver = MeshDriver(time.monotonic, published.append)
    transport = _Connecting()
    driver.attach(mesh, transport)  # type: ignore[arg-type]
    newcomer = NodeId(b"\x0f" * 16)
    helo = Helo(newcomer, endpoint=f"tcp://{HOME}:7000", name="new", incarnation="33" * 8)
    batch = [encode(helo), encode(Group(newcomer, group=GROUP)), [bytes(newcomer), b"CHAT", b"first words"],
             [bytes(ALIVE), b"CHAT", b"hello"]]
    driver.on_frames(batch, [HOME] * len(batch))
    kinds = [type(e).__name__ for e in published]
    assert kinds.index("PeerJoined") < kinds.index("ChatReceived")  # the BOUT admitted it before it spoke
    chats = [e.text for e in published if isinstance(e, ChatReceived)]
    assert chats == ["first words", "hello"]
    assert driver.stats.receive_failures == 0 and driver.stats.action_failures == 0
    assert transport.sent  # the HELO's answer went out
