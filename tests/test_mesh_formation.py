"""Mesh formation: how fast a crowd of seeded nodes meshes, counted in the simulator."""

from __future__ import annotations

import pytest

from huddle.protocol.events import PeerJoined
from huddle.sim import SimNetwork, SimNode
from huddle.wire import Members, Raws


def _seeded_crowd(n: int, latency: float) -> tuple[SimNetwork, list[SimNode], float]:
    """Node 0 serves; then ``n - 1`` nodes on the same host (as the benchmark runs them on
    127.0.0.1) start at once with node 0 as their seed."""
    net = SimNetwork(latency=latency, seed=3)
    nodes = [net.add("n00", endpoint="tcp://127.0.0.1:40000")]
    net.run(0.2)
    start = net.now
    for i in range(1, n):
        nodes.append(net.add(f"n{i:02d}", endpoint=f"tcp://127.0.0.1:{40000 + i}"))
        nodes[-1].mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    assert net.settle(10.0, lambda: all(len(x.mesh.alive_peers()) == n - 1 for x in nodes))
    return net, nodes, start


def test_each_peer_says_when_it_was_admitted_on_the_local_clock() -> None:
    net, nodes, start = _seeded_crowd(4, 0.005)
    for node in nodes:
        joins = {e.peer: e.time - node.mesh.offset for e in node.events if isinstance(e, PeerJoined)}
        for info in node.mesh.peers(net.local(node)):
            assert start < info.joined <= net.now
            assert abs(info.joined - joins[info.uuid]) < 1e-9, "admission time is the local clock, not mesh time"


def _crowd_over(n: int, spread: float) -> tuple[SimNetwork, list[SimNode], float]:
    """Like ``_seeded_crowd`` but the ``n - 1`` nodes start one by one over ``spread``
    seconds, as 31 processes spawned at once on two busy CPUs do; counting messages."""
    net = SimNetwork(latency=0.005, seed=3)
    nodes = [net.add("n00", endpoint="tcp://127.0.0.1:40000")]
    net.run(0.2)
    net.trace = []
    start = net.now
    for i in range(1, n):
        if spread:
            net.run(spread / (n - 1))
        nodes.append(net.add(f"n{i:02d}", endpoint=f"tcp://127.0.0.1:{40000 + i}"))
        nodes[-1].mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    assert net.settle(10.0, lambda: all(len(x.mesh.alive_peers()) == n - 1 for x in nodes))
    return net, nodes, start


def test_a_crowd_joining_makes_about_one_report_per_node_not_one_per_join() -> None:
    # 32 nodes join over 0.6 s.  Each admission used to bring every member's next
    # report within 0.2 s, and every member relayed a report that did not yet list
    # the newcomer to it: 4 884 RAWS (3 078 relayed, 92 822 rows) in the formation
    # and the second after it.  Now a burst makes one report per node within the
    # soon window, and nobody relays to a peer admitted less than an interval ago.
    n = 32
    net, nodes, _ = _crowd_over(n, 0.6)
    net.run(1.0)
    assert net.trace is not None
    # Since the soon window grows with the group (3.2 s at 32 nodes, protocol.md 14):
    # 267 RAWS (5 478 rows) in the same time, where a 1 s window made 1 228 (35 269).
    reports = [m for _, _, m in net.trace if isinstance(m, Raws)]
    assert len(reports) <= n * (n - 1) / 2, len(reports)
    assert sum(len(r.peers) for r in reports) <= 10_000
    assert sum(x.reports.stats.reports_relayed for x in nodes) == 0
    # Every node still holds a report of every other within the window, and they agree on the picture.
    window = nodes[0].pictures.soon_window()
    assert window == 3.2
    assert net.settle(window, lambda: len({x.pictures.picture().digest for x in nodes}) == 1)
    assert len(nodes[0].pictures.picture().members) == n


def test_nodes_joining_one_by_one_report_once_a_scaled_window_not_once_a_second() -> None:
    # 48 nodes start one by one, one every 0.25 s, as dozens of processes starting on
    # one machine do: every admission changes the sessions of both ends.  With the soon
    # window fixed at 1 s, every member reported to every other about once a second, and
    # relayed to each newcomer what did not list it yet: 16 311 RAWS (7 618 relayed) until
    # the last one started.  The window and the relays' wait now grow with the group.
    n = 48
    net = SimNetwork(latency=0.005, seed=3, wire=False)
    nodes = [net.add("n00", endpoint="tcp://127.0.0.1:40000")]
    net.run(0.2)
    for i in range(1, n):
        net.run(12.0 / (n - 1))
        nodes.append(net.add(f"n{i:02d}", endpoint=f"tcp://127.0.0.1:{40000 + i}"))
        nodes[-1].mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    sent = sum(x.reports.stats.reports_sent + x.reports.stats.reports_relayed for x in nodes)
    assert sent <= 4_000, sent  # 2 607
    assert sum(x.reports.stats.reports_relayed for x in nodes) <= 500
    assert net.settle(1.0, lambda: all(len(x.mesh.alive_peers()) == n - 1 for x in nodes))
    window = nodes[-1].pictures.soon_window()
    assert window == pytest.approx(4.8)
    # A 48-member picture takes ~30 ms to compute, 48 of them every 50 ms tick took the test 70 s:
    # the digests are compared every 0.5 simulated seconds.
    checked, end = [net.now], net.now + 2 * window

    def one_picture() -> bool:
        if net.now - checked[0] < 0.5 and net.now < end - 0.1:
            return False
        checked[0] = net.now
        return len({x.pictures.picture().digest for x in nodes}) == 1

    assert net.settle(2 * window, one_picture)
    assert len(nodes[-1].pictures.picture().members) == n


def test_lists_in_a_simultaneous_start_go_only_where_they_tell_something() -> None:
    # 31 nodes start at once with node 0 as their seed.  Lists pushed on admission
    # crossed; each was answered with the receiver's own list whenever it lacked a
    # member: 1 377 lists (647 replies, 26 737 entries) in the formation and the
    # second after it, 6 161 at 64 nodes; 959 (119 replies, 14 879 entries) once a
    # reply was left out when our last list to that peer already named what it lacked.
    # Now a newcomer dialling its seed's list says HELO with that list's length for
    # `peers`, so only a member that knows more pushes its list; and a list is not
    # answered for the members we admitted lately, since we met its sender (they
    # dial it themselves): 375 lists (8 680 entries), no reply.
    n = 32
    net, _, start = _crowd_over(n, 0.0)
    assert net.now - start <= 0.1, "the mesh forms as fast as before (50 ms simulated)"
    net.run(1.0)
    assert net.trace is not None
    lists = [m for _, _, m in net.trace if isinstance(m, Members)]
    assert len(lists) <= 500, len(lists)
    assert sum(len(m.members) for m in lists) <= 10_000
    assert sum(1 for m in lists if m.reply) <= 30


def test_a_join_into_a_settled_group_gets_one_member_list() -> None:
    # One node joins a settled 63 through its seed.  Every member it then dialled pushed it
    # a list of the 62 others (its HELO said `peers` 1): 64 lists, 3 968 entries to decode.
    # Now its HELOs say how many members the seed's list named: the seed's list alone.
    n = 64
    net, nodes, _ = _crowd_over(n - 1, 0.0)
    net.run(10.0)
    net.trace = []
    newcomer = net.add("late", endpoint=f"tcp://127.0.0.1:{40000 + n}")
    newcomer.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    assert net.settle(1.0, lambda: len(newcomer.mesh.alive_peers()) == n - 1
                      and all(len(x.mesh.alive_peers()) == n - 1 for x in nodes))
    lists = [(to, m) for _, to, m in net.trace if isinstance(m, Members)]
    pushed = [m for to, m in lists if to == "late"]
    assert len(pushed) == 1 and pushed[0].sender == nodes[0].mesh.uuid and len(pushed[0].members) == n - 2
    assert len(lists) <= 2, lists  # and the newcomer's to the last member it meets, which knows as many


def test_a_newcomer_dials_its_seeds_member_list_in_one_wave() -> None:
    # One node joins a settled mesh of 63 through a seed.  With at most 8 handshakes open on
    # one introducer's list, it dialled 8 of the seed's 62, and the rest waited for the lists
    # of those 8 once admitted: two waves of handshakes (6 one-way latencies from the first
    # HELO to the last admission).  A seed, named by the operator, may fill every handshake
    # slot: one wave (4 latencies).  Any other introducer keeps the cap of 8.
    n = 64
    net, nodes, _ = _crowd_over(n - 1, 0.0)
    net.run(1.0)
    newcomer = net.add("late", endpoint=f"tcp://127.0.0.1:{40000 + n}")
    newcomer.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    start = net.local(newcomer)
    assert net.settle(1.0, lambda: len(newcomer.mesh.alive_peers()) == n - 1
                      and all(len(x.mesh.alive_peers()) == n - 1 for x in nodes))
    took = max(p.joined for p in newcomer.mesh.peers(net.local(newcomer))) - start
    assert newcomer.mesh.stats.introductions_waited == 0
    assert took <= 4 * 0.005 + 0.002, took
    # Lists from members that are not seeds still open at most 8 handshakes each.
    assert newcomer.mesh.limits.max_handshaking_per_introducer == 8
