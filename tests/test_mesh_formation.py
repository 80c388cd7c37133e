"""Mesh formation: how fast a crowd of seeded nodes meshes, counted in the simulator."""

from __future__ import annotations

from huddle.protocol.events import PeerJoined
from huddle.sim import SimNetwork, SimNode


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
