"""The driver's octet counters by message type (``stats.traffic`` of ``GET /api/v1/node``)."""

from __future__ import annotations

import time

from huddle.driver import MeshDriver
from huddle.ids import NodeId
from huddle.protocol import Send
from huddle.transport.stats import OTHER_TRAFFIC, TRAFFIC_TYPES, TrafficStats
from huddle.wire import Beat, Bulk, Chat, LogRecord, Xmsg, decode, encode_parts
from huddle.wire import framing as wire_messages

ME = NodeId(bytes(range(16)))
PEER = NodeId(bytes(range(16, 32)))


class _FakeMesh:
    def __init__(self, actions: list[object]) -> None:
        self.actions = actions
        self.received: list[list[bytes]] = []

    def take_actions(self) -> list[object]:
        actions, self.actions = self.actions, []
        return actions

    def receive(self, frames: list[bytes], now: float, source: str) -> None:
        self.received.append(frames)

    def receive_chat(self, frames: list[bytes], now: float, source: str) -> None:
        return None  # CHAT's fast path takes nothing here: every message goes to receive()


class _FakeTransport:
    """Accepts every message except those on connection 9 (a peer whose queues are full)."""

    def __init__(self) -> None:
        self.sent: list[tuple[int, list[bytes]]] = []

    def send(self, conn: int, frames: list[bytes]) -> bool:
        if conn == 9:
            return False
        self.sent.append((conn, frames))
        return True


def _driver(actions: list[object]) -> tuple[MeshDriver, _FakeMesh, _FakeTransport]:
    driver = MeshDriver(time.monotonic, lambda event: None)
    mesh, transport = _FakeMesh(actions), _FakeTransport()
    driver.mesh = mesh  # type: ignore[assignment]
    driver.transport = transport  # type: ignore[assignment]
    return driver, mesh, transport


def test_every_type_the_codec_speaks_has_its_own_counter() -> None:
    spoken = set(wire_messages._DECODERS) | set(wire_messages._BINARY_DECODERS) | {b"BULK"}
    assert spoken == set(TRAFFIC_TYPES)


def test_sent_octets_are_counted_by_type_per_accepted_message() -> None:
    xmsg = Xmsg(ME, (LogRecord(ME, 1, 1.0, "k", '{"a": 1}'),))
    beat = Beat(ME)
    bulk = Bulk(ME, b"h", b"d" * 1000)
    # One XMSG to three peers (encoded once), one of which is full; a BEAT; a BULK.
    node, _, transport = _driver([Send(1, xmsg), Send(2, xmsg), Send(9, xmsg), Send(1, beat),
                                          Send(2, bulk)])
    node.execute()
    assert len(transport.sent) == 4
    size = {kind: sum(map(len, encode_parts(m))) for kind, m in ((b"XMSG", xmsg), (b"BEAT", beat), (b"BULK", bulk))}
    assert size[b"BULK"] == 4 + 1 + 1000
    sent = node.traffic.sent
    assert sent[b"XMSG"] == 2 * size[b"XMSG"]  # the full peer's copy was not accepted: not counted
    assert sent[b"BEAT"] == size[b"BEAT"] == 4
    assert sent[b"BULK"] == size[b"BULK"]
    assert sum(sent.values()) == sum(size.values()) + size[b"XMSG"]
    shown = node.traffic.as_dict()
    assert shown["sent"]["XMSG"] == 2 * size[b"XMSG"] and shown["received"]["XMSG"] == 0
    assert set(shown["sent"]) == {k.decode() for k in (*TRAFFIC_TYPES, OTHER_TRAFFIC)}


def test_received_octets_are_counted_by_type_and_unknown_types_as_other() -> None:
    node, mesh, _ = _driver([])
    chat = [bytes(ME), b"CHAT", b"hello"]
    bulk = [bytes(ME), b"BULK", b"h", memoryview(b"x" * 300)]  # a BULK's data arrives as a memoryview
    made_up = [[bytes(ME), f"Z{i:03d}".encode(), b"?" * 10] for i in range(500)]
    short = [b"only-a-sender"]
    assert isinstance(decode(chat), Chat)
    batch: list[list[bytes]] = [chat, bulk, *made_up, short]  # type: ignore[list-item]
    node.on_frames(batch, ["127.0.0.1"] * len(batch))
    assert len(mesh.received) == len(batch)
    received = node.traffic.received
    assert received[b"CHAT"] == 4 + 5
    assert received[b"BULK"] == 4 + 1 + 300
    assert received[OTHER_TRAFFIC] == 500 * (4 + 10)  # the sender-only message carries no octets after it
    assert len(received) == len(TRAFFIC_TYPES) + 1  # made-up types did not grow the table
    assert node.stats.receive_failures == 0


def test_a_fresh_table_counts_nothing() -> None:
    t = TrafficStats()
    assert set(t.sent) == set(t.received) == {*TRAFFIC_TYPES, OTHER_TRAFFIC}
    assert not any(t.sent.values()) and not any(t.received.values())
