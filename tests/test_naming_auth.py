"""Naming-broker announcements authenticated with the group secret (protocol.md 9.2).

In a secured group a node's announcements carry a timestamp and an HMAC-SHA256 with the
group's naming key; the broker (which does not hold the key) forwards them as before, and a
node ignores and counts an announcement without a valid MAC (``unauthenticated``) or stamped
more than ``naming.max-age`` from its clock (``stale``).  Open groups: unchanged.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
import zmq
from conftest import Broker, Cluster, wait_for
from hostile_kit import node_stats

from huddle.ids import NodeId
from huddle.limits import NamingLimits
from huddle.security import GroupSecret
from huddle.transport.naming import (
    AnnounceNow,
    Heard,
    NamingState,
    PeerFound,
    announcement_body,
    announcement_topic,
)

GROUP = "derby"
TOPIC = announcement_topic(GROUP)
SECRET = GroupSecret.new(GROUP)
OTHER = GroupSecret.new(GROUP)  # the same group's name, another secret
ME = NodeId(b"\x01" * 16)
PEER = NodeId(b"\x02" * 16)
NOW = 1_800_000_000.0
EP = "tcp://127.0.0.1:6000"


def state(key: bytes | None = SECRET.naming_key()) -> NamingState:
    return NamingState(ME, GROUP, ("tcp://127.0.0.1:7001",), NamingLimits(), key)


def body(key: bytes | None, uuid: NodeId = PEER, wall: float = NOW, endpoint: str = EP) -> bytes:
    return announcement_body(uuid, GROUP, "n", endpoint, key=key, wall=wall)


def test_an_announcement_with_the_groups_mac_finds_a_peer() -> None:
    s = state()
    assert s.receive([TOPIC, body(SECRET.naming_key())], 0.0, NOW + 1) == [PeerFound(PEER, EP), AnnounceNow()]
    assert s.receive([TOPIC, body(SECRET.naming_key(), uuid=ME)], 0.1, NOW + 1) == [Heard()]
    assert s.stats.unauthenticated == s.stats.stale == 0


def test_forged_announcements_are_ignored_and_counted() -> None:
    s = state()
    good = json.loads(body(SECRET.naming_key()))
    moved = json.dumps(good | {"endpoint": "tcp://127.0.0.1:6666"}).encode()  # the MAC of another endpoint
    forged = [body(None), body(OTHER.naming_key()), moved, body(None, uuid=ME)]
    for i, raw in enumerate(forged):
        assert s.receive([TOPIC, raw], i * 0.01, NOW) == []
    assert s.stats.unauthenticated == len(forged) and s.stats.found == s.stats.heard == 0 and s.peers == 0


@pytest.mark.parametrize("age", [-61.0, 61.0, 3600.0])
def test_an_announcement_stamped_too_far_from_now_is_stale(age: float) -> None:
    s = state()
    assert s.receive([TOPIC, body(SECRET.naming_key(), wall=NOW - age)], 0.0, NOW) == []
    assert s.stats.stale == 1 and s.peers == 0
    assert s.receive([TOPIC, body(SECRET.naming_key(), wall=NOW - 59)], 0.0, NOW) != []  # within naming.max-age


def test_open_groups_take_announcements_as_before() -> None:
    s = state(key=None)
    assert s.receive([TOPIC, body(None)], 0.0, NOW)[0] == PeerFound(PEER, EP)
    assert s.receive([TOPIC, body(SECRET.naming_key(), uuid=NodeId(b"\x03" * 16))], 0.0, NOW) != []


# ------------------------------------------------------------------------ real nodes


class Decoy:
    """A ROUTER on loopback that counts the connections a node's mesh makes to it."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
        self.sock = ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        port = self.sock.bind_to_random_port("tcp://127.0.0.1")
        self.endpoint = f"tcp://127.0.0.1:{port}"
        self.monitor = self.sock.get_monitor_socket(zmq.EVENT_ACCEPTED)
        self.accepted = 0

    def poll(self) -> int:
        while self.monitor.poll(0):
            self.monitor.recv_multipart()
            self.accepted += 1
        return self.accepted


@pytest.mark.processes
def test_a_forged_announcement_through_a_broker_is_ignored(cluster: Cluster, broker: Broker) -> None:
    join = ("--join", SECRET.code, "--naming", broker.endpoint)
    a = cluster.start("a", *join, beacon=False, group=GROUP)
    b = cluster.start("b", *join, beacon=False, group=GROUP)
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to find each other through the broker")
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    pub.connect(f"tcp://127.0.0.1:{broker.sub_port}")
    forged_to, genuine_to = Decoy(ctx), Decoy(ctx)
    try:
        forged = [body(None, uuid=NodeId(uuid.uuid4().bytes), endpoint=forged_to.endpoint, wall=time.time()),
                  body(OTHER.naming_key(), uuid=NodeId(uuid.uuid4().bytes), endpoint=forged_to.endpoint,
                       wall=time.time()),
                  body(SECRET.naming_key(), uuid=NodeId(uuid.uuid4().bytes), endpoint=forged_to.endpoint,
                       wall=time.time() - 600)]  # a recording, replayed 10 minutes on

        def counted() -> bool:  # the broker forwards once a's subscription reached it
            for raw in forged:
                pub.send_multipart([TOPIC, raw])
            s = node_stats(a.api)["naming"]
            return s["unauthenticated"] >= 2 and s["stale"] >= 1
        wait_for(counted, 10, "a to count the forged announcements", interval=0.2)
        # One with the group's MAC, sent after them: once a dials it, a has handled the forged ones.
        genuine = body(SECRET.naming_key(), uuid=NodeId(uuid.uuid4().bytes), endpoint=genuine_to.endpoint,
                       wall=time.time())
        pub.send_multipart([TOPIC, genuine])
        wait_for(lambda: genuine_to.poll() >= 1, 10, "a to dial the genuinely announced endpoint")
        assert forged_to.poll() == 0  # no node dialled where the forged announcements pointed
        stats = node_stats(a.api)["naming"]
        assert stats["errors"] == 0 and stats["malformed"] == 0, stats
    finally:
        for sock in (pub, forged_to.sock, forged_to.monitor, genuine_to.sock, genuine_to.monitor):
            sock.close(0)
        ctx.term()
