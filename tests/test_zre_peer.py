"""A ZRE peer's machine (huddle.zre.peer): its transition table, sequences with the 16-bit
wrap, evasive and expired peers, HELLO, groups and headers, Zyre's extra ids; and the
driver's doors fed hostile input in-process (huddle.zre.driver: bounded, counted)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest

from huddle.discovery.interfaces import LOOPBACK
from huddle.errors import LocalProtocolError
from huddle.zre.codec import Beacon, MsgId, ZreMessage, encode, encode_beacon
from huddle.zre.driver import ZreDriver, ZreLimits
from huddle.zre.peer import TRANSITIONS, Heard, PeerState, Timeouts, ZrePeer

HELLO = ZreMessage(MsgId.HELLO, 1, endpoint="tcp://127.0.0.1:1", groups=("g",), name="z", headers=(("X-A", "1"),))


def entered(now: float = 0.0) -> ZrePeer:
    peer = ZrePeer(b"u" * 16, "tcp://127.0.0.1:1", now)
    assert peer.received(HELLO, now) is Heard.ENTERED
    return peer


def test_every_move_not_in_the_table_is_refused() -> None:
    for a, b in itertools.product(PeerState, PeerState):
        peer = ZrePeer(b"u" * 16, "e", 0.0)
        peer.state = a
        if (a, b) in TRANSITIONS:
            peer.move(b)
            assert peer.state is b
        else:
            with pytest.raises(LocalProtocolError):
                peer.move(b)
    assert (PeerState.GONE, PeerState.READY) not in TRANSITIONS  # a gone peer comes back as a new one


def test_hello_enters_with_its_groups_headers_and_name() -> None:
    peer = entered()
    assert peer.state is PeerState.READY and peer.name == "z"
    assert peer.groups == {"g"} and peer.headers == {"X-A": "1"}
    assert peer.received(ZreMessage(MsgId.JOIN, 2, group="h", status=1), 1.0) is Heard.MESSAGE
    assert peer.groups == {"g", "h"} and peer.status == 1
    assert peer.received(ZreMessage(MsgId.LEAVE, 3, group="g", status=2), 1.0) is Heard.MESSAGE
    assert peer.groups == {"h"} and peer.status == 2


def test_a_message_before_hello_loses_the_peer() -> None:
    peer = ZrePeer(b"u" * 16, "e", 0.0)
    assert peer.received(ZreMessage(MsgId.PING, 1), 0.0) is Heard.LOST
    assert peer.state is PeerState.GONE


def test_a_gap_in_the_sequence_loses_the_peer() -> None:
    peer = entered()
    assert peer.received(ZreMessage(MsgId.PING, 3), 0.0) is Heard.LOST
    assert peer.state is PeerState.GONE
    assert peer.received(ZreMessage(MsgId.PING, 4), 0.0) is Heard.LOST  # gone stays gone


def test_the_sequence_wraps_at_65536_both_ways() -> None:
    peer = entered()
    peer.wanted = 65534
    assert peer.received(ZreMessage(MsgId.PING, 65535), 0.0) is Heard.MESSAGE
    assert peer.received(ZreMessage(MsgId.PING, 0), 0.0) is Heard.MESSAGE
    assert peer.received(ZreMessage(MsgId.PING, 1), 0.0) is Heard.MESSAGE
    peer.sent = 65535
    assert peer.next_sequence() == 0 and peer.next_sequence() == 1


def test_pyres_wrap_at_65535_is_let_through() -> None:
    """zeromq-pyre 0.3.4 sends 0 after 65 534 (its modulo is 65 535)."""
    peer = entered()
    peer.wanted = 65534
    assert peer.received(ZreMessage(MsgId.PING, 0), 0.0) is Heard.MESSAGE
    assert peer.received(ZreMessage(MsgId.PING, 1), 0.0) is Heard.MESSAGE


def test_zyres_extra_ids_are_ignored_without_losing_the_peer() -> None:
    peer = entered()
    for seq, msg in enumerate((ZreMessage(MsgId.ELECT, 0, group="g", challenger_id="c"),
                               ZreMessage(MsgId.LEADER, 0, group="g", leader_id="l"),
                               ZreMessage(MsgId.GOODBYE, 0)), start=2):
        assert peer.received(ZreMessage(msg.id, seq, group=msg.group), 0.0) is Heard.IGNORED
    assert peer.state is PeerState.READY
    assert peer.received(ZreMessage(MsgId.PING, 5), 0.0) is Heard.MESSAGE


def test_evasive_after_5_s_pinged_once_then_expired_after_30_s() -> None:
    peer = entered(0.0)
    assert not peer.tick(4.9)
    assert peer.tick(5.0) and peer.state is PeerState.EVASIVE
    assert not peer.tick(6.0)  # pinged once
    assert peer.received(ZreMessage(MsgId.PING_OK, 2), 7.0) is Heard.MESSAGE
    assert peer.state is PeerState.READY
    assert peer.tick(12.0) and not peer.tick(36.9)
    assert not peer.tick(37.0) and peer.state is PeerState.GONE
    known = ZrePeer(b"v" * 16, "e", 0.0, Timeouts(evasive=1.0, expired=2.0))
    assert not known.tick(1.5) and known.state is PeerState.KNOWN  # no HELLO yet: not pinged
    known.tick(2.0)
    assert known.state is PeerState.GONE


# ---- the driver's doors, in-process (its DEALERs dial 127.0.0.1 only) ----

@pytest.fixture
def driver() -> Iterator[ZreDriver]:
    shouts: list[tuple[str, tuple[bytes, ...]]] = []
    d = ZreDriver(uuid=b"\x07" * 16, name="me", group="g", headers={}, interface=LOOPBACK, port=1,
                  on_shout=lambda peer, group, content: shouts.append((group, content)), limits=ZreLimits(peers=8),
                  clock=lambda: 0.0)
    d.endpoint = "tcp://127.0.0.1:9"
    d.shouts = shouts  # type: ignore[attr-defined]
    yield d
    d.close()


def test_a_flood_of_beacons_with_fresh_uuids_is_bounded_and_counted(driver: ZreDriver) -> None:
    for i in range(2000):
        driver.beacon(encode_beacon(Beacon(i.to_bytes(16, "big"), 40000)), "127.0.0.1")
    assert len(driver.links) == 8
    assert driver.counters["peers_full"] == 2000 - 8


def test_hostile_beacons_are_counted_and_change_nothing(driver: ZreDriver) -> None:
    for data in (b"", b"ZRE", bytes(22), b"ZRE\x02" + bytes(18), b"x" * 500):
        driver.beacon(data, "127.0.0.1")
    driver.beacon(encode_beacon(Beacon(b"\x01" * 16, 40000)), "10.1.2.3")  # not the interface's network
    driver.beacon(encode_beacon(Beacon(b"\x07" * 16, 40000)), "127.0.0.1")  # its own
    assert not driver.links
    assert driver.counters["beacon_malformed"] == 5 and driver.counters["beacon_foreign"] == 1


def test_hostile_messages_are_counted_and_change_nothing(driver: ZreDriver) -> None:
    someone = b"\x01" + b"\x02" * 16
    driver.message([b"short", *encode(HELLO)])
    driver.message([b"\x02" + b"\x02" * 16, *encode(HELLO)])
    driver.message([someone, b"\xaa\xa1\x0b\x02\x00\x01"])
    driver.message([someone, *encode(ZreMessage(MsgId.PING, 1))])  # unknown peer, not a HELLO
    far = ZreMessage(MsgId.HELLO, 1, endpoint="tcp://10.0.0.1:5000")
    driver.message([someone, *encode(far)])  # a HELLO naming an endpoint off the interface's network
    assert not driver.links
    assert driver.counters["identity_malformed"] == 2 and driver.counters["message_malformed"] == 1
    assert driver.counters["unknown_peer"] == 2


def test_out_of_sequence_loses_the_peer_and_a_shout_is_handed_over(driver: ZreDriver) -> None:
    someone = b"\x01" + b"\x02" * 16
    driver.message([someone, *encode(HELLO)])
    assert driver.links[b"\x02" * 16].peer.state is PeerState.READY
    driver.message([someone, *encode(ZreMessage(MsgId.SHOUT, 2, group="g", content=(b"hi",)))])
    assert driver.shouts == [("g", (b"hi",))]  # type: ignore[attr-defined]
    driver.message([someone, *encode(ZreMessage(MsgId.ELECT, 3, group="g", challenger_id="x"))])
    assert driver.links[b"\x02" * 16].peer.state is PeerState.READY
    driver.message([someone, *encode(ZreMessage(MsgId.PING, 9))])
    assert not driver.links
    assert driver.counters["sequence_lost"] == 1 and driver.counters["ignored_elect"] == 1


def test_a_leaving_beacon_forgets_the_peer(driver: ZreDriver) -> None:
    driver.beacon(encode_beacon(Beacon(b"\x03" * 16, 40000)), "127.0.0.1")
    assert b"\x03" * 16 in driver.links
    driver.beacon(encode_beacon(Beacon(b"\x03" * 16, 0)), "127.0.0.1")
    assert not driver.links and driver.counters["peers_left"] == 1
