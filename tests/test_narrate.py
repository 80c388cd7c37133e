"""What a node says in its log (host/narrate.py, protocol/seeds.py, transport/zap.py): one line
at INFO per peer joined, suspect, failed or left, per silent seed, per refusal; bounded under a
flood; and a ``--seed`` nobody answers said by a running node within seconds."""

from __future__ import annotations

import itertools
import logging
import signal
from pathlib import Path

import pytest
import zmq
from conftest import security_flags, wait_for
from test_mesh_parts import FakePort

from huddle import NodeId
from huddle.host.narrate import Narrator
from huddle.procs import NodeProcess
from huddle.protocol.events import CutOff, PeerJoined, PeerLeft, PeerRefused, PeerStateChanged, SeedSilent
from huddle.protocol.seeds import SEED_SAY_EVERY, SEED_SILENT_AFTER, Seeds
from huddle.protocol.session import Timing
from huddle.render import event_text
from huddle.security import GroupSecret, NodeIdentity
from huddle.transport.zap import CurveGuard, MeshSecurity

BOB = NodeId.from_hex("35c9e1d4" + "0" * 24)


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.INFO]


def test_a_peer_joined_suspect_failed_and_left_each_one_line(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "huddle")
    n = Narrator()
    routes = dict((kinds[0], fn) for kinds, fn in n.subscriptions())
    events: list[object] = [
        PeerJoined(BOB, "bob", "tcp://127.0.0.1:6001", 1.0),
        PeerStateChanged(BOB, "bob", "suspect", 2.0),
        PeerStateChanged(BOB, "bob", "alive", 2.5),
        PeerLeft(BOB, "bob", "timeout", 4.0),
        PeerJoined(BOB, "bob", "tcp://127.0.0.1:6001", 5.0),
        PeerLeft(BOB, "bob", "left: shutting down", 6.0),
        PeerJoined(BOB, "bob", "tcp://127.0.0.1:6001", 7.0),
        PeerLeft(BOB, "bob", "left", 8.0),
        PeerJoined(BOB, "bob", "tcp://127.0.0.1:6001", 9.0),
        PeerLeft(BOB, "bob", "evicted: the table is full", 10.0),
        CutOff(True, 10.0),
        CutOff(False, 11.0),
    ]
    for e in events:
        assert routes[type(e)](e) is False  # heard, never consumed
    assert lines(caplog) == [
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 joined",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 is suspect (missed heartbeats)",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 is back",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 failed: gone silent (timeout)",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 joined",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 left (said goodbye: shutting down)",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 joined",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 left (said goodbye: no reason given)",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 joined",
        "peer bob (35c9e1d4) at tcp://127.0.0.1:6001 is gone: evicted: the table is full",
        "cut off: no peer left (the node keeps looking for its group)",
        "reconnected to the group",
    ]
    assert not n._where  # a peer gone leaves nothing behind


def test_refusals_in_words_and_a_flood_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "huddle")
    now = [0.0]
    n = Narrator(clock=lambda: now[0], burst=3)
    n.refused(PeerRefused(BOB, "tcp://127.0.0.1:6001", "group mismatch: peer is in 'a', this node is in 'b'",
                          True, 1.0))
    n.refused(PeerRefused(None, "tcp://127.0.0.1:6002", "incompatible protocol version 9", False, 1.0))
    assert lines(caplog) == [
        "refused node 35c9e1d4 at tcp://127.0.0.1:6001: group mismatch: peer is in 'a', this node is in 'b'",
        "a node at tcp://127.0.0.1:6002 refused us: incompatible protocol version 9",
    ]
    caplog.clear()
    for k in range(10_000):  # a flood of joins, refusals: a bounded number of lines, the rest counted
        n.joined(PeerJoined(NodeId.random(), f"n{k}", "tcp://127.0.0.1:7000", 1.0))
        n.refused(PeerRefused(None, "tcp://127.0.0.1:7000", "x", True, 1.0))
    assert len(lines(caplog)) == 3 + 2  # the peers' kind had 1 left, the refusals' 2 (burst 3)
    assert n.left_out == 20_000 - 5
    now[0] = 61.0
    n.refused(PeerRefused(None, "tcp://127.0.0.1:7000", "x", True, 62.0))
    assert lines(caplog)[-1].endswith("(9998 more like this left out before)")


def test_a_silent_seed_is_said_once_then_every_minute_and_again_after_answering() -> None:
    said: list[SeedSilent] = []
    port = FakePort()
    seeds = Seeds(Timing(), port, notify=said.append, mesh_time=lambda now: now + 100.0)
    seeds.add("tcp://127.0.0.1:9", 0.0)
    now = 0.0
    while now < 2 * SEED_SAY_EVERY + 20:
        seeds.retry(now, lambda endpoint: False)
        now += 0.5
    first = said[0]
    assert first.endpoint == "tcp://127.0.0.1:9" and SEED_SILENT_AFTER <= first.silent < SEED_SILENT_AFTER + 1
    assert first.time == first.silent + 100.0 and first.tries >= 2  # mesh time; a few HELOs by then
    times = [e.time - 100.0 for e in said]
    assert len(said) == 3 and all(b - a >= SEED_SAY_EVERY for a, b in itertools.pairwise(times))
    assert all(b - a < SEED_SAY_EVERY + 12 for a, b in itertools.pairwise(times))  # within a retry
    peer = NodeId.random()
    assert seeds.adopt(peer, "tcp://127.0.0.1:9") is not None  # it answered
    said.clear()
    for _ in range(40):
        seeds.retry(now, lambda endpoint: False)
        now += 0.5
    assert said == []  # answered: silent no more


def test_seeds_without_a_listener_say_nothing_and_keep_retrying() -> None:
    port = FakePort()
    seeds = Seeds(Timing(), port)
    seeds.add("tcp://127.0.0.1:9", 0.0)
    for k in range(20):
        seeds.retry(k * 1.0, lambda endpoint: False)
    assert len(port.take("hello")) >= 4


def test_a_refused_handshake_is_said_in_words_with_its_address(caplog: pytest.LogCaptureFixture,
                                                               ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    caplog.set_level(logging.INFO, "huddle")
    security = MeshSecurity(GroupSecret.new("derby"), NodeIdentity.generate(), allow_list=None)
    assert security.setup is not None
    guard = CurveGuard(ctx, security.setup, max_addresses=8)
    try:
        reply = guard._judge([b"1.0", b"1", b"huddle", b"127.0.0.1", b"", b"CURVE", b"\x07" * 32])
        assert reply[2] == b"400"
        guard._refused("no-curve", "")
    finally:
        guard.close()
    assert lines(caplog) == [
        "refused a mesh connection: 127.0.0.1 knows the group secret but its key is not admitted "
        "(not on the allow-list) (key-not-admitted; 1 refused so far)",
        "refused a mesh connection: a node has no group secret (an open node, or a plain ZeroMQ socket) "
        "(no-curve; 2 refused so far)",
    ]


@pytest.mark.processes
def test_a_node_says_where_it_is_and_that_its_seed_does_not_answer(tmp_path: Path) -> None:
    node = NodeProcess("alone", tmp_path / "alone", "--no-beacon", "--seed", "127.0.0.1:9",
                       *security_flags("test", ()), group="test")
    try:
        node.wait_api()
        said = wait_for(lambda: "seed tcp://127.0.0.1:9 does not answer" in node.log_path.read_text(), 10,
                        "the silent seed said")
        assert said
        start = node.log_path.read_text()
        assert f"data in {tmp_path / 'alone'}" in start and f"api {node.api}" in start
        node.signal(signal.SIGTERM)
        assert node.wait(15) == 0
        assert "stopped cleanly" in node.log_path.read_text()
    finally:
        node.signal(signal.SIGKILL)
        node.proc.wait(10)


def test_tail_shows_a_silent_seed_in_words() -> None:
    shown = event_text(SeedSilent("tcp://127.0.0.1:9", 3.5, 3, 10.0).to_json())
    assert shown == "! seed tcp://127.0.0.1:9 does not answer (3 tries in 4 s)"
