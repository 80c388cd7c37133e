"""The sans-I/O mesh, driven on a simulated network and clock (no sockets, no sleeping)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle import NodeId
from huddle.errors import LocalProtocolError
from huddle.protocol import (
    ChatReceived,
    ClockSynced,
    Connect,
    Mesh,
    Notify,
    PeerJoined,
    PeerLeft,
    PeerRefused,
    PeerStateChanged,
    Send,
    Timing,
)
from huddle.sim import SimNetwork, SimNode
from huddle.wire import Beat, Chat, Gbye, Group, Helo, Members, Peer, encode


def alive(node: SimNode, net: SimNetwork) -> set[str]:
    return {p.name for p in node.mesh.peers(net.local(node)) if p.state in ("alive", "suspect")}


def meshed(net: SimNetwork, *nodes: SimNode) -> bool:
    names = {n.mesh.name for n in nodes}
    return all(alive(n, net) == names - {n.mesh.name} for n in nodes)


def events_of(node: SimNode, kind: type) -> list:  # type: ignore[type-arg]
    return [e for e in node.events if isinstance(e, kind)]


def pair(net: SimNetwork, group: str = "") -> tuple[SimNode, SimNode]:
    a = net.add("alice", group, uuid=NodeId(b"\x01" * 16))
    b = net.add("bob", group, uuid=NodeId(b"\x02" * 16))
    a.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, a, b))
    return a, b


def test_introduction_follows_the_alice_bob_charlie_dialogue() -> None:
    net = SimNetwork()
    alice, bob = pair(net)
    charlie = net.add("charlie", uuid=NodeId(b"\x03" * 16))
    net.trace = []
    charlie.mesh.discovered(alice.mesh.uuid, alice.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, alice, bob, charlie))
    net.run(1.0)
    intro = [(src, dst, m) for src, dst, m in net.trace if isinstance(m, (Helo, Peer, Members))]
    said = [(src, dst, type(m).__name__, getattr(m, "reply", None)) for src, dst, m in intro]
    assert said[:2] == [("charlie", "alice", "Helo", False), ("alice", "charlie", "Helo", True)]
    # Alice, admitting Charlie who knows nobody, sends him her member list (Bob); Charlie dials Bob.
    assert ("alice", "charlie", "Members", False) in said
    lists = [m for s, d, m in intro if isinstance(m, Members) and (s, d) == ("alice", "charlie")]
    assert [u for u, _, _ in lists[0].members] == [bob.mesh.uuid]
    assert said.index(("alice", "charlie", "Members", False)) < said.index(("charlie", "bob", "Helo", False))
    assert ("bob", "charlie", "Helo", True) in said
    # No PEER any more: each member would have told every other (N² messages per join).
    assert not [m for _, _, m in intro if isinstance(m, Peer)]
    helos = [(s, d) for s, d, m in intro if isinstance(m, Helo)]
    assert len(helos) == 4, helos
    # Every HELO is followed by the sender's BOUT (a reply is mandatory).
    bouts = [(s, d) for s, d, m in net.trace if isinstance(m, Group)]
    assert sorted(bouts) == sorted(helos)


def test_eight_nodes_on_a_chain_of_seeds_form_a_full_mesh() -> None:
    net = SimNetwork()
    nodes = [net.add(f"n{i}", "g") for i in range(8)]
    for prev, node in itertools.pairwise(nodes):
        node.mesh.add_seed(prev.mesh.endpoint, net.now)
    assert net.settle(2.0, lambda: meshed(net, *nodes))
    for node in nodes:
        assert len(events_of(node, PeerJoined)) == 7  # reported once each


def test_group_mismatch_refuses_and_does_not_reconnect_in_a_loop() -> None:
    net = SimNetwork()
    alice = net.add("alice", "derby")
    mallory = net.add("mallory", "chess")
    net.trace = []
    alice.mesh.add_seed(mallory.mesh.endpoint, net.now)
    net.run(30.0)
    assert alive(alice, net) == set() and alive(mallory, net) == set()
    refused = events_of(alice, PeerRefused)
    assert len(refused) == 1 and "group mismatch" in refused[0].reason and refused[0].by_us
    assert "'chess'" in refused[0].reason and "'derby'" in refused[0].reason
    helos = [m for s, d, m in net.trace if isinstance(m, Helo) and s == "alice"]
    assert len(helos) == 1, "a refused seed must not be retried"
    # A beacon or an introduction naming the refused node does not restart it either.
    alice.mesh.discovered(mallory.mesh.uuid, mallory.mesh.endpoint, net.now)
    net.run(5.0)
    assert len([m for s, d, m in net.trace if isinstance(m, Helo) and s == "alice"]) == 1
    gbyes = [m for s, d, m in net.trace if isinstance(m, Gbye)]
    assert gbyes and all("group mismatch" in g.reason for g in gbyes)


def test_groups_do_not_mix_even_the_empty_group() -> None:
    net = SimNetwork()
    a = net.add("a", "")
    b = net.add("b", "x")
    c = net.add("c", "")
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    c.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    net.run(3.0)
    assert alive(a, net) == {"c"} and alive(c, net) == {"a"} and alive(b, net) == set()


def test_silent_peer_becomes_suspect_then_gone() -> None:
    net = SimNetwork()
    alice, bob = pair(net)
    crashed_at = net.now
    net.crash(bob)
    assert net.settle(10.0, lambda: bool(events_of(alice, PeerLeft)))
    left = events_of(alice, PeerLeft)[0]
    assert left.reason == "timeout"
    elapsed = net.now - crashed_at
    assert 4.0 <= elapsed <= 5.2, elapsed  # gone_after 5 s of silence; last beat <= 1 s before the crash
    states = [e.state for e in events_of(alice, PeerStateChanged)]
    assert states == ["suspect"]
    assert [p.state for p in alice.mesh.peers(net.now)] == ["gone"]
    net.run(61.0)
    assert alice.mesh.peers(net.now) == []  # gone peers are listed for a while, then not at all


def test_suspect_peer_that_speaks_again_is_alive() -> None:
    net = SimNetwork()
    alice, bob = pair(net)
    net.partition(alice, bob)
    assert net.settle(4.0, lambda: [p.state for p in alice.mesh.peers(net.now)] == ["suspect"])
    net.heal()
    assert net.settle(2.0, lambda: [p.state for p in alice.mesh.peers(net.now)] == ["alive"])
    assert [e.state for e in events_of(alice, PeerStateChanged)] == ["suspect", "alive"]
    assert not events_of(alice, PeerLeft)


def test_graceful_leave_is_seen_at_once() -> None:
    net = SimNetwork()
    alice, bob = pair(net)
    net.stop(bob)
    net.run(0.01)
    assert [(e.name, e.reason) for e in events_of(alice, PeerLeft)] == [("bob", "left")]
    assert alive(alice, net) == set()


def test_restarted_peer_with_same_uuid_is_readmitted_at_its_new_endpoint() -> None:
    net = SimNetwork()
    alice, bob = pair(net)
    net.crash(bob)
    net.run(1.0)
    bob2 = net.add("bob", uuid=bob.mesh.uuid, endpoint=net.same_host(bob))  # same data dir: same UUID, new port
    bob2.mesh.discovered(alice.mesh.uuid, alice.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: alive(alice, net) == {"bob"} and alive(bob2, net) == {"alice"})
    assert [e.reason for e in events_of(alice, PeerLeft)] == ["restarted"]
    joined = events_of(alice, PeerJoined)
    assert [j.endpoint for j in joined] == [bob.mesh.endpoint, bob2.mesh.endpoint]
    assert alice.mesh.peers(net.now)[0].endpoint == bob2.mesh.endpoint


def test_network_that_returns_heals_by_itself() -> None:
    """Both sides declare each other gone; when the link returns, discovery reconnects them."""
    net = SimNetwork()
    alice, bob = pair(net)
    net.partition(alice, bob)
    assert net.settle(7.0, lambda: not alive(alice, net) and not alive(bob, net))
    net.heal()
    # A beacon arrives again (as the beacon service reports it every second).
    bob.mesh.discovered(alice.mesh.uuid, alice.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, alice, bob))


def test_one_sided_forgetting_heals() -> None:
    """Alice forgot Bob but Bob still counts Alice alive: her new HELO must be answered."""
    net = SimNetwork()
    alice, bob = pair(net)
    alice.mesh._sessions.clear()  # as if Alice had been frozen and expired Bob
    alice.mesh.discovered(bob.mesh.uuid, bob.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, alice, bob))
    assert not events_of(bob, PeerLeft)


def test_partition_heals_with_seeds_only() -> None:
    net = SimNetwork()
    alice = net.add("alice")
    bob = net.add("bob")
    alice.mesh.add_seed(bob.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, alice, bob))
    net.partition(alice, bob)
    assert net.settle(7.0, lambda: not alive(alice, net))
    net.run(20.0)
    net.heal()
    assert net.settle(12.0, lambda: meshed(net, alice, bob))  # seed retry backoff is capped at 10 s


def test_seed_that_is_not_up_yet_is_retried() -> None:
    net = SimNetwork()
    alice = net.add("alice", endpoint="tcp://10.0.0.9:6000")
    alice.mesh.add_seed("tcp://10.0.0.9:7000", net.now)
    net.run(15.0)
    bob = net.add("bob", endpoint="tcp://10.0.0.9:7000")
    assert net.settle(11.0, lambda: meshed(net, alice, bob))


def test_lone_node_takes_the_clock_of_the_first_peer() -> None:
    net = SimNetwork(latency=0.002)
    a = net.add("a", uuid=NodeId(b"\x01" * 16), skew=0.0)
    b = net.add("b", uuid=NodeId(b"\x02" * 16), skew=100.0)  # b's clock is 100 s ahead
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: bool(events_of(b, ClockSynced)))
    # Two lone nodes: the larger UUID (b) follows the smaller (a); a keeps its clock.
    assert not events_of(a, ClockSynced)
    assert abs(b.mesh.mesh_time(net.local(b)) - a.mesh.mesh_time(net.local(a))) < 1e-6
    sync = events_of(b, ClockSynced)[0]
    assert sync.rtt == pytest.approx(0.004, abs=1e-6)
    c = net.add("c", uuid=NodeId(b"\x00" * 16), skew=-50.0)  # smallest UUID, but it joins a group
    c.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: bool(events_of(c, ClockSynced)))
    times = [n.mesh.mesh_time(net.local(n)) for n in (a, b, c)]
    assert max(times) - min(times) < 1e-6
    assert len(events_of(b, ClockSynced)) == 1  # b had a peer when c came: it does not re-sync


def test_rtt_is_measured() -> None:
    net = SimNetwork(latency=0.003)
    alice, _bob = pair(net)
    net.run(0.5)
    assert alice.mesh.peers(net.now)[0].rtt == pytest.approx(0.006, abs=1e-6)


def test_chat_to_all_and_to_one() -> None:
    net = SimNetwork()
    nodes = [net.add(n) for n in ("a", "b", "c")]
    for n in nodes[1:]:
        n.mesh.discovered(nodes[0].mesh.uuid, nodes[0].mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, *nodes))
    a, b, c = nodes
    assert a.mesh.chat("to everyone", net.now) == 2
    assert a.mesh.chat("just bob", net.now, to=b.mesh.uuid) == 1
    net.run(0.1)
    assert [e.text for e in events_of(b, ChatReceived)] == ["to everyone", "just bob"]
    assert [e.text for e in events_of(c, ChatReceived)] == ["to everyone"]
    assert events_of(b, ChatReceived)[0].name == "a"
    with pytest.raises(LocalProtocolError, match="no alive peer"):
        a.mesh.chat("x", net.now, to=NodeId(b"\x09" * 16))


def test_frames_from_unintroduced_senders_are_dropped_and_counted() -> None:
    net = SimNetwork()
    alice, _bob = pair(net)
    stranger = NodeId(b"\x07" * 16)
    for _ in range(100):
        net.deliver_raw(alice.mesh.endpoint, encode(Chat(stranger, "let me in")))
    net.deliver_raw(alice.mesh.endpoint, encode(Peer(stranger, NodeId(b"\x08" * 16), "tcp://10.1.1.1:1")))
    net.deliver_raw(alice.mesh.endpoint, [b"garbage"])
    net.run(0.1)
    assert alice.mesh.stats.dropped_unintroduced == 101
    assert alice.mesh.stats.decode_errors == 1
    assert not events_of(alice, ChatReceived)
    assert alive(alice, net) == {"bob"}


def test_helo_of_another_version_is_refused_with_a_reason() -> None:
    mesh = Mesh(NodeId(b"\x01" * 16), name="a", group="", endpoint="tcp://10.0.0.1:5000",
                incarnation="00" * 8, now=0.0)
    future = Helo(NodeId(b"\x05" * 16), endpoint="tcp://10.0.0.5:5000", name="z",
                  incarnation="11" * 8, version=2)
    assert mesh.receive(encode(future), 1.0) is False
    actions = mesh.take_actions()
    assert Connect(1, "tcp://10.0.0.5:5000") in actions
    byes = [a.message for a in actions if isinstance(a, Send)]
    assert len(byes) == 1 and isinstance(byes[0], Gbye)
    assert "incompatible protocol version 2" in byes[0].reason and "version 1" in byes[0].reason
    refused = [a.event for a in actions if isinstance(a, Notify)]
    assert isinstance(refused[0], PeerRefused) and refused[0].by_us
    # The same incarnation trying again is not answered again.
    mesh.receive(encode(future), 2.0)
    assert mesh.take_actions() == []
    assert mesh.peers(2.0) == []


def test_timing_is_validated() -> None:
    with pytest.raises(ValueError, match="gone_after"):
        Timing(heartbeat_interval=5.0, gone_after=5.0)
    with pytest.raises(ValueError, match="suspect_after"):
        Timing(suspect_after=6.0, gone_after=5.0)


def test_custom_timing_is_honoured() -> None:
    net = SimNetwork()
    fast = Timing(heartbeat_interval=0.1, suspect_after=0.25, gone_after=0.5)
    a = net.add("a", timing=fast)
    b = net.add("b", timing=fast)
    a.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, a, b))
    net.crash(b)
    start = net.now
    assert net.settle(2.0, lambda: bool(events_of(a, PeerLeft)))
    assert net.now - start <= 0.6


def test_full_send_buffer_makes_the_peer_suspect_until_heard_again() -> None:
    net = SimNetwork()
    alice, bob = pair(net)
    conn = alice.mesh.conn_of(bob.mesh.uuid)
    assert conn is not None
    alice.mesh.not_responding(conn, net.now)
    alice.mesh.take_actions()
    assert [p.state for p in alice.mesh.peers(net.now)] == ["suspect"]
    net.run(1.5)  # bob's next BEAT arrives
    assert [p.state for p in alice.mesh.peers(net.now)] == ["alive"]


def test_fifty_nodes_mesh_and_do_not_flap() -> None:
    net = SimNetwork(latency=0.002)
    nodes = [net.add(f"n{i:02}", "big") for i in range(50)]
    for i, node in enumerate(nodes[1:], 1):
        node.mesh.discovered(nodes[i // 2].mesh.uuid, nodes[i // 2].mesh.endpoint, net.now)
    assert net.settle(5.0, lambda: meshed(net, *nodes))
    net.run(60.0)
    assert meshed(net, *nodes)
    for node in nodes:
        assert not events_of(node, PeerLeft)
        assert not events_of(node, PeerStateChanged)
        assert len(events_of(node, PeerJoined)) == 49


@settings(max_examples=40, deadline=None)
@given(st.integers(2, 9), st.randoms(use_true_random=False), st.floats(0.0005, 0.05))
def test_any_discovery_order_gives_a_full_mesh(n: int, rnd: random.Random, latency: float) -> None:
    net = SimNetwork(latency=latency, seed=rnd.randint(0, 2**32))
    nodes = [net.add(f"n{i}", "g") for i in range(n)]
    # Each node learns of one random other node, by a random mechanism, at a random time.
    for i, node in enumerate(nodes):
        other = nodes[rnd.choice([j for j in range(n) if j != i])]
        if rnd.random() < 0.5:
            node.mesh.add_seed(other.mesh.endpoint, net.now)
        else:
            node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.now)
        net.run(rnd.random() * 0.05)
    # Discovery knowledge may form several islands; beacons (everyone hears everyone) join them.
    for node in nodes:
        for other in nodes:
            if other is not node:
                node.mesh.discovered(other.mesh.uuid, other.mesh.endpoint, net.now)
    assert net.settle(3.0, lambda: meshed(net, *nodes))
    for node in nodes:
        assert len(events_of(node, PeerJoined)) == n - 1
        assert not events_of(node, PeerLeft)


def test_hostile_group_name_cannot_break_the_refusal() -> None:
    """A 255-octet group of control characters makes a long repr; the GBYE must still be valid."""
    net = SimNetwork()
    alice = net.add("alice", "derby")
    mallory = net.add("mallory", "\x00" * 255)
    mallory.mesh.discovered(alice.mesh.uuid, alice.mesh.endpoint, net.now)
    net.run(1.0)
    refused = events_of(alice, PeerRefused)
    assert len(refused) == 1 and "group mismatch" in refused[0].reason
    assert len(refused[0].reason.encode()) <= 1024


def test_goodbye_with_a_reason_from_an_admitted_peer_is_a_leave() -> None:
    net = SimNetwork()
    alice, bob = pair(net)
    net.deliver_raw(alice.mesh.endpoint, encode(Gbye(bob.mesh.uuid, "switching bouts")))
    net.run(0.01)
    assert [e.reason for e in events_of(alice, PeerLeft)] == ["left: switching bouts"]
    assert [p.state for p in alice.mesh.peers(net.now)] == ["gone"]
    # Not a refusal: bob may come back.
    alice.mesh.discovered(bob.mesh.uuid, bob.mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: meshed(net, alice, bob))


def test_handshake_does_not_last_forever_on_beats() -> None:
    """A peer that sends BEATs but never its BOUT is dropped after the handshake timeout."""
    mesh = Mesh(NodeId(b"\x01" * 16), name="a", group="", endpoint="tcp://10.0.0.1:5000",
                incarnation="00" * 8, now=0.0)
    other = NodeId(b"\x02" * 16)
    mesh.receive(encode(Helo(other, endpoint="tcp://10.0.0.2:5000", name="b", incarnation="22" * 8)), 0.0)
    for t in range(1, 8):
        mesh.receive(encode(Beat(other)), float(t))
        mesh.tick(float(t))
    assert mesh.peers(8.0) == []
    assert mesh.stats.dropped_unintroduced == 7
    assert not any(isinstance(a, Notify) and isinstance(a.event, PeerJoined) for a in mesh.take_actions())

