"""A partition heals within a few heartbeats, even when one side's answer is stuck.

When a network returns, both ends of a pair dial each other on the first beacons they hear.
A connection opened a moment before the link forwards again has its SYN lost (the kernel
tries again 1 s, then 3 s later), and one from before the cut may still hold the dialler's id
at the other ROUTER, which then never reads the new one (protocol.md 2.1, 8.5).  So one end
admits the other on the HELO and BOUT it dialled with, while its own answer sits on a stuck
connection: the other end, which has not admitted it, says nothing more.  Before this rule that
silence was judged by the short gone-after of the tests' timers, so the session went SUSPECT,
then ended, and the pair met again only seconds later (tests/test_faults.py's partition test
failed about one run in ten); where both ends' dials were stuck, neither admitted the other
before the handshake timeout (5 s).  On the simulator, the stuck connection is one whose
messages never arrive; a fresh one to the same endpoint works."""

from __future__ import annotations

from huddle.protocol import Connect, PeerLeft, PeerStateChanged, Timing
from huddle.sim import SimNetwork, SimNode

# tests/test_faults.py's namespaced nodes: --heartbeat-interval 0.25 --suspect-after 0.75 --gone-after 1.5
FAST = Timing(heartbeat_interval=0.25, suspect_after=0.75, gone_after=1.5)


def sees(node: SimNode, net: SimNetwork) -> set[str]:
    return {p.name for p in node.mesh.peers(net.local(node)) if p.state == "alive"}


def pair_apart(net: SimNetwork) -> tuple[SimNode, SimNode]:
    """Two nodes that met, then lost each other for longer than their gone-after."""
    a, b = net.add("a", "g", timing=FAST), net.add("b", "g", timing=FAST)
    a.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.local(a))
    assert net.settle(2.0, lambda: sees(a, net) == {"b"} and sees(b, net) == {"a"})
    net.partition(a, b)
    net.run(3.0)
    assert sees(a, net) == set() and sees(b, net) == set()
    net.heal()
    return a, b


def dial_stuck(net: SimNetwork, node: SimNode, peer: SimNode) -> int:
    """``node`` dials ``peer`` on a connection that never gets through (its SYN lost, or
    unread at the peer's ROUTER); the conn's number."""
    node.mesh.discovered(peer.mesh.uuid, peer.mesh.endpoint, net.local(node))
    conns = [a.conn for a in node.mesh.take_actions() if isinstance(a, Connect)]
    assert len(conns) == 1
    return conns[0]  # not run: the simulator never opens it, so what is sent on it is lost


def test_a_pair_whose_answer_is_stuck_meets_within_a_few_heartbeats_and_stays_met() -> None:
    net = SimNetwork(seed=18)
    a, b = pair_apart(net)
    dial_stuck(net, a, b)  # a dials first, too early: its SYN is lost
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))  # b's dial gets through
    events_from = len(a.events), len(b.events)
    net.run(0.1)
    assert sees(a, net) == {"b"}  # a admitted b on its HELO and BOUT; b has heard nothing of a
    assert sees(b, net) == set()
    # a's system-picture report calls it a handshake done at one end: the others relay a's
    # reports to b, as they do across a link open one way (picture.py, Reports.receive).
    assert [p.state for p in a.mesh.seen(net.local(a), 10.0) if p.uuid == b.mesh.uuid] == ["handshake"]
    # Within six heartbeats both ends see each other alive (a fresh dial a suspect_after and a beat on)...
    assert net.settle(1.5, lambda: sees(a, net) == {"b"} and sees(b, net) == {"a"}), (sees(a, net), sees(b, net))
    assert a.mesh.stats.answers_redialled == 1
    # ...and the session never wavered meanwhile, nor after (it was ended by a's timeout before).
    net.run(5.0)
    assert sees(a, net) == {"b"} and sees(b, net) == {"a"}
    for node, start in zip((a, b), events_from, strict=True):
        wavered = [e for e in node.events[start:] if isinstance(e, (PeerLeft, PeerStateChanged))]
        assert wavered == [], wavered
    assert a.mesh.stats.answers_redialled == 1  # answered: dialled afresh once, not every suspect_after
    assert [p.state for p in a.mesh.seen(net.local(a), 10.0) if p.uuid == b.mesh.uuid] == ["alive"]


def test_a_peer_that_dialled_and_died_is_gone_after_the_handshake_timeout() -> None:
    """The allowance has an end: a peer admitted on its HELO and BOUT that never says more
    (it died as it dialled) is dialled afresh each suspect_after and is gone after the
    handshake timeout (suspect after half), as its own end times out a handshake."""
    net = SimNetwork(seed=19)
    a, b = pair_apart(net)
    dial_stuck(net, a, b)
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))
    net.run(0.01)  # b's HELO and BOUT are on their way
    net.crash(b)
    net.run(0.1)
    assert sees(a, net) == {"b"}
    net.run(FAST.handshake_timeout / 2 - 0.3)
    assert sees(a, net) == {"b"}  # not suspect yet: it could not have answered
    net.run(FAST.handshake_timeout / 2)
    assert [p.state for p in a.mesh.peers(net.local(a))] == ["suspect"]  # not gone yet
    assert a.mesh.stats.answers_redialled >= 5  # each suspect_after (0.75 s)
    net.run(0.5)
    assert [p.state for p in a.mesh.peers(net.local(a))] == ["gone"]
    left = [e for e in a.events if isinstance(e, PeerLeft)]
    assert left[-1].reason == "timeout"


def test_a_peer_that_answered_is_judged_by_its_own_timing() -> None:
    """Once it has said anything but its dial's HELO and BOUT, a peer's silence counts as
    before: suspect after suspect_after, gone after gone_after, and no fresh dial."""
    net = SimNetwork(seed=20)
    a, b = pair_apart(net)
    a.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.local(a))
    assert net.settle(1.0, lambda: sees(a, net) == {"b"} and sees(b, net) == {"a"})
    net.run(0.5)
    net.crash(b)
    net.run(FAST.gone_after + 0.3)
    assert sees(a, net) == set()
    assert a.mesh.stats.answers_redialled == 0


def test_a_peer_dialling_afresh_over_a_session_we_hold_gets_our_answer_on_a_fresh_connection() -> None:
    """Our connection to b stopped being read at b (in tests/test_faults.py: a fresh dial that
    met the kernel's SYN retry of the one it replaced).  b times us out and dials us again
    while our session with it is still alive: its HELO (reply false) says it has not heard us,
    so our answer, which would go on the stuck connection, goes on a fresh one too."""
    net = SimNetwork(seed=21)
    a, b = net.add("a", "g", timing=FAST), net.add("b", "g", timing=FAST)
    a.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.local(a))
    assert net.settle(2.0, lambda: sees(a, net) == {"b"} and sees(b, net) == {"a"})
    conn = a.mesh.conn_of(b.mesh.uuid)
    assert conn is not None
    del a.conns[conn]  # what a sends b is lost from now on; b still reaches a
    assert net.settle(3.0, lambda: [p.state for p in b.mesh.peers(net.local(b))] == ["gone"])  # b timed a out...
    assert sees(a, net) == {"b"}  # ...while a, which still hears b's last beats, holds its session
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))  # b's next beacon from a
    assert net.settle(1.5, lambda: sees(a, net) == {"b"} and sees(b, net) == {"a"}), (sees(a, net), sees(b, net))
    net.run(3.0)
    assert sees(a, net) == {"b"} and sees(b, net) == {"a"}
    assert a.mesh.stats.answers_redialled == 1


def test_two_dials_both_stuck_meet_again_on_the_next_beacons() -> None:
    """After a cut shorter than TCP keep-alive's reset (~4 s), each ROUTER may still hold the
    other's connection from before it, and leave both new dials unread: neither end admits
    the other, both wait for a handshake timeout (5 s).  A dial unanswered for a suspect_after
    whose peer a beacon shows there is dialled afresh, and the pair meets within a few beats."""
    net = SimNetwork(seed=22)
    a, b = pair_apart(net)
    dial_stuck(net, a, b)
    dial_stuck(net, b, a)
    start = net.now

    def beacons() -> bool:  # every node beacons each 0.25 s in tests/test_faults.py
        a.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.local(a))
        b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))
        net.run(0.25)
        return sees(a, net) == {"b"} and sees(b, net) == {"a"}

    while not beacons():
        assert net.now - start < 2.0, (sees(a, net), sees(b, net))
    assert a.mesh.stats.answers_redialled + b.mesh.stats.answers_redialled >= 1
    net.run(3.0)
    assert sees(a, net) == {"b"} and sees(b, net) == {"a"}
