"""What arrives through a naming broker cannot take a node down.

Anyone who reaches a broker can publish through it.  The decoder returns a
message or raises DecodeError for any bytes; the sans-I/O state bounds what
messages may make the node do (per second, peers remembered, broker endpoints
connected); and a real node, fed a poisoned welcome and a batch of malformed
announcements through a real broker, goes on counting, finds an honest node
announced afterwards, and stays up within a stated footprint.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator

import pytest
import zmq
from conftest import Broker, Cluster, free_port, get, wait_for
from hostile_kit import footprint, node_stats
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle.errors import DecodeError
from huddle.ids import NodeId
from huddle.limits import NamingLimits
from huddle.transport.naming import (
    WELCOME,
    Announcement,
    AnnounceNow,
    ConnectPub,
    Heard,
    NamingState,
    PeerFound,
    Welcome,
    announcement_topic,
    decode,
)

GROUP = "g"
TOPIC = announcement_topic(GROUP)
ME = NodeId(b"\x01" * 16)
BROKERS = ("tcp://127.0.0.1:7001",)


def ann(uuid: str = "ab" * 16, group: str = GROUP, endpoint: str = "tcp://127.0.0.1:6000", **extra: object) -> bytes:
    return json.dumps({"v": 1, "uuid": uuid, "group": group, "name": "n", "endpoint": endpoint, **extra}).encode()


def welcome(sub: object = "tcp://127.0.0.1:7002", **extra: object) -> bytes:
    return json.dumps({"v": 1, "sub": sub, "pub_port": 7001, **extra}).encode()


# Each of these is refused by the decoder (and so counted as malformed by the state).
MALFORMED: list[list[bytes]] = [
    [WELCOME, welcome("tcp://127.0.0.1:-5")],  # the poisoned welcome that once stopped discovery
    [WELCOME, welcome("tcp://127.0.0.1:0")],
    [WELCOME, welcome("tcp://127.0.0.1:65536")],
    [WELCOME, welcome("tcp://127.0.0.1:\uff15")],  # a digit, but not an ASCII one
    [WELCOME, welcome("udp://127.0.0.1:5")],
    [WELCOME, welcome("tcp://*:5", pub_port=None)],
    [WELCOME, welcome("tcp://*:5", pub_port=1e999)],  # json: Infinity
    [WELCOME, welcome(5)],
    [WELCOME, welcome("tcp://" + "a" * 400 + ":5")],
    [TOPIC, ann(uuid="zz" * 16)],
    [TOPIC, ann(uuid="ab" * 15)],
    [TOPIC, ann(uuid=["ab"])],  # type: ignore[arg-type]
    [TOPIC, ann(endpoint="tcp://127.0.0.1:99999")],
    [TOPIC, ann(endpoint="tcp://*:5000")],
    [TOPIC, ann(endpoint="tcp://0.0.0.0:5000")],
    [TOPIC, ann(endpoint="tcp://:5000")],
    [TOPIC, ann(endpoint="ipc:///tmp/x")],
    [TOPIC, ann(group=["g"])],  # type: ignore[arg-type]
    [TOPIC, ann(v=2)],
    [TOPIC, ann(v=True)],
    [TOPIC, ann(name={"deep": [[[]]]})],
    [TOPIC, b"\xff\xfe not UTF-8"],
    [TOPIC, b"[" * 3000 + b"]" * 3000],  # nested deeper than the parser recurses
    [TOPIC, b'{"v": 1, "pad": "' + b"x" * 5000 + b'"}'],  # over 4096 octets
    [TOPIC, b"[1, 2]"],
    [TOPIC, b"not json"],
    [b"huddle.other", ann()],
    [TOPIC],
    [TOPIC, ann(), b"a third frame"],
]


@pytest.mark.parametrize("frames", MALFORMED, ids=range(len(MALFORMED)))
def test_the_decoder_refuses_malformed_naming_messages(frames: list[bytes]) -> None:
    with pytest.raises(DecodeError):
        decode(frames, TOPIC)


def test_the_decoder_takes_what_brokers_and_nodes_send() -> None:
    assert decode([WELCOME, welcome()], TOPIC) == Welcome("127.0.0.1", 7002, 7001)
    assert decode([WELCOME, welcome("tcp://0.0.0.0:7002")], TOPIC) == Welcome("0.0.0.0", 7002, 7001)
    assert decode([WELCOME, welcome("tcp://[::1]:7002")], TOPIC) == Welcome("::1", 7002, 7001)
    msg = decode([TOPIC, ann(group="other")], TOPIC)
    assert msg == Announcement(NodeId(b"\xab" * 16), "other", "n", "tcp://127.0.0.1:6000")


@settings(max_examples=300, deadline=None)
@given(st.lists(st.binary(max_size=64), max_size=4),
       st.dictionaries(st.sampled_from(["v", "uuid", "group", "name", "endpoint", "sub", "pub_port"]),
                       st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=40),
                                    lambda inner: st.lists(inner, max_size=3)
                                    | st.dictionaries(st.text(max_size=5), inner, max_size=3), max_leaves=8)),
       st.sampled_from([WELCOME, TOPIC, b"x"]))
def test_the_decoder_returns_a_message_or_raises_decode_error(raw: list[bytes], fields: dict[str, object],
                                                              topic: bytes) -> None:
    for frames in (raw, [topic, json.dumps(fields).encode()], [topic, *raw[:1]]):
        with contextlib.suppress(DecodeError):  # anything else fails the test
            decode(frames, TOPIC)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.one_of(st.integers(), st.text(max_size=8), st.none(), st.floats()))
def test_the_decoder_on_any_endpoint_text(endpoint: str, pub_port: object) -> None:
    for frames in ([WELCOME, json.dumps({"v": 1, "sub": endpoint, "pub_port": pub_port}).encode()],
                   [TOPIC, ann(endpoint=endpoint)]):
        try:
            msg = decode(frames, TOPIC)
        except DecodeError:
            continue
        if isinstance(msg, Welcome):
            assert 1 <= msg.port <= 65535
        else:
            assert msg.endpoint.startswith("tcp://")


# ------------------------------------------------------------------------ the state (sans-I/O)


def state(**limits: object) -> NamingState:
    return NamingState(ME, GROUP, BROKERS, NamingLimits(**limits))  # type: ignore[arg-type]


def test_malformed_messages_are_counted_and_change_nothing() -> None:
    s = state()
    for i, frames in enumerate(MALFORMED):
        assert s.receive(frames, now=i * 0.01) == []
    assert s.stats.malformed == len(MALFORMED)
    assert s.pub_endpoints == set() and s.peers == 0 and s.stats.found == s.stats.welcomes == 0


def test_welcomes_connect_the_publisher_to_at_most_max_brokers_endpoints() -> None:
    s = state(max_brokers=2)
    assert s.receive([WELCOME, welcome("tcp://0.0.0.0:7002")], 0.0) == [ConnectPub("tcp://127.0.0.1:7002"),
                                                                         AnnounceNow()]
    assert s.receive([WELCOME, welcome("tcp://0.0.0.0:7002")], 0.1) == [AnnounceNow()]  # the same broker again
    assert s.receive([WELCOME, welcome("tcp://127.0.0.2:7003")], 0.2) == [ConnectPub("tcp://127.0.0.2:7003"),
                                                                          AnnounceNow()]
    assert s.receive([WELCOME, welcome("tcp://127.0.0.3:7004")], 0.3) == []
    assert s.stats.welcomes_refused == 1 and s.stats.welcomes == 3
    assert s.pub_endpoints == {"tcp://127.0.0.1:7002", "tcp://127.0.0.2:7003"}


def test_announcements_find_peers_and_hear_ourselves() -> None:
    s = state()
    peer = NodeId(b"\xab" * 16)
    assert s.receive([TOPIC, ann(uuid=ME.hex())], 0.0) == [Heard()]
    assert s.receive([TOPIC, ann()], 0.1) == [PeerFound(peer, "tcp://127.0.0.1:6000"), AnnounceNow()]
    assert s.receive([TOPIC, ann()], 1.1) == [PeerFound(peer, "tcp://127.0.0.1:6000")]  # known: no prompt
    assert s.receive([TOPIC, ann(group="other")], 1.2) == []
    assert (s.stats.heard, s.stats.found, s.stats.other_group) == (1, 2, 1)


def test_a_flood_of_new_peers_stops_at_max_peers_until_they_expire() -> None:
    s = state(max_peers=3, peer_expiry=10.0, messages_per_second=1000)
    uuids = [f"{i:032x}" for i in range(2, 12)]
    for i, u in enumerate(uuids):
        s.receive([TOPIC, ann(uuid=u)], now=i * 0.01)
    assert s.peers == 3 and s.stats.found == 3 and s.stats.peers_refused == 7
    assert s.receive([TOPIC, ann(uuid=uuids[0])], 0.5)  # a remembered peer is still found
    assert s.receive([TOPIC, ann(uuid=uuids[5])], 10.2)[0] == PeerFound(NodeId.from_hex(uuids[5]),
                                                                        "tcp://127.0.0.1:6000")
    # uuids[1] and [2] were not heard for 10 s: forgotten, so there was room; uuids[0] was heard at 0.5
    assert s.peers == 2


def test_messages_past_the_rate_are_dropped_unread() -> None:
    s = state(messages_per_second=10)
    for i in range(100):  # 100 messages in a tenth of a second: the bucket's 10, and one more refilled
        s.receive([TOPIC, b"garbage"], now=i * 0.001)
    assert s.stats.malformed == 10 and s.stats.rate_limited == 90
    assert s.receive([TOPIC, ann()], now=1.0)  # a second later: handled again
    assert s.stats.found == 1


# ------------------------------------------------------------------------ a real node


@pytest.fixture
def raw_pub(broker: Broker) -> Iterator[zmq.Socket[bytes]]:
    """A PUB socket publishing through the broker, as any device that reaches it can."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(f"tcp://127.0.0.1:{broker.sub_port}")
    try:
        yield pub
    finally:
        pub.close(0)
        ctx.term()


def naming(api: str) -> dict[str, int]:
    result: dict[str, int] = node_stats(api)["naming"]
    return result


@pytest.mark.processes
def test_a_poisoned_welcome_and_malformed_announcements_do_not_stop_discovery(
        cluster: Cluster, broker: Broker, raw_pub: zmq.Socket[bytes]) -> None:
    a = cluster.start("a", "--naming", broker.endpoint, beacon=False, group=GROUP)
    b = cluster.start("b", "--naming", broker.endpoint, beacon=False, group=GROUP)
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    before = footprint(a)

    def sent_and_counted() -> bool:  # the broker forwards once our PUB's subscriptions reached it
        for frames in MALFORMED:
            raw_pub.send_multipart(frames)
        return naming(a.api)["malformed"] >= len(MALFORMED) - 3  # the broker forwards only 2-frame messages
    wait_for(sent_and_counted, 10, "the poisoned welcome and the batch to be counted", interval=0.3)

    # The receive loop is alive: it goes on counting ...
    counted = naming(a.api)["malformed"]
    raw_pub.send_multipart([WELCOME, welcome("tcp://127.0.0.1:-5")])
    wait_for(lambda: naming(a.api)["malformed"] > counted, 10, "a's naming counters to move after the poison")
    # ... and an honest node announced through the broker afterwards is found by a.
    found = naming(a.api)["found"]
    c = cluster.start("c", "--naming", broker.endpoint, beacon=False, group=GROUP)
    wait_for(lambda: naming(a.api)["found"] > found, 10, "a to find c through the broker")
    wait_for(lambda: cluster.mesh_complete([a, b, c]), 20, "a, b and c to mesh")
    stats = naming(a.api)
    assert stats["errors"] == 0 and stats["welcomes_refused"] == 0, stats
    after = footprint(a)
    assert after.rss_mib < before.rss_mib + 30 and after.fds <= before.fds + 10, (before, after)
    assert get(b.api, "/api/v1/node")["stats"]["naming"]["malformed"] >= len(MALFORMED) - 3


@pytest.mark.processes
def test_a_flood_of_announcements_is_bounded_per_second_and_in_peers(
        cluster: Cluster, broker: Broker, raw_pub: zmq.Socket[bytes]) -> None:
    # Open (--open): the raw publisher's announcements carry no MAC, which a secured group drops
    # before counting them (tests/test_naming_auth.py); this test bounds what an open group takes.
    cluster.secure = False
    limits = ["--limit", "naming.max-peers=8", "--limit", "naming.messages-per-second=100"]
    a = cluster.start("a", "--naming", broker.endpoint, *limits, beacon=False, group=GROUP)
    b = cluster.start("b", "--naming", broker.endpoint, beacon=False, group=GROUP)
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    before = footprint(a)
    nowhere = f"tcp://127.0.0.1:{free_port()}"  # nobody listens there: the mesh's connections fail at once

    def flooded() -> bool:  # at most 40 rounds of 100 announcements of new (fake) nodes
        for _ in range(100):
            raw_pub.send_multipart([TOPIC, ann(uuid=os.urandom(16).hex(), endpoint=nowhere)])
        s = naming(a.api)
        return s["rate_limited"] > 0 and s["peers_refused"] > 0
    wait_for(flooded, 20, "the flood to be rate-limited and the peers refused", interval=0.05)
    assert naming(a.api)["errors"] == 0
    after = footprint(a)
    assert after.rss_mib < before.rss_mib + 50 and after.fds <= before.fds + 40, (before, after)
    # the honest mesh is unaffected
    status = get(a.api, "/api/v1/node")
    assert status["stats"]["naming"]["announced"] >= 1
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b still meshed")
