"""A node's own network changing under it: the interface watch (pure) and the mesh
following a node whose address moved (simulated).  Processes: test_network_changes.py."""

from __future__ import annotations

import ipaddress

from huddle import NodeId
from huddle.discovery.interfaces import Interface
from huddle.discovery.watch import Back, InterfaceWatch, Lost, Moved, pick
from huddle.protocol import PeerLeft, Timing
from huddle.sim import SimNetwork, SimNode


def iface(name: str, ip: str, prefix: int = 24) -> Interface:
    return Interface(name, ip, ipaddress.IPv4Network(f"{ip}/{prefix}", strict=False))


# ------------------------------------------------------------- the interface watch


def test_the_watch_sees_nothing_while_the_address_stays() -> None:
    a = iface("wlan0", "10.0.0.5")
    watch = InterfaceWatch("wlan0", a)
    assert watch.observe([iface("lo", "127.0.0.1", 8), a]) is None
    # a DHCP renewal that adds the new address before removing the old: still the old one
    assert watch.observe([a, iface("wlan0", "10.0.0.9")]) is None


def test_a_new_address_is_a_move_and_a_missing_one_is_lost_once_then_back() -> None:
    a, b = iface("wlan0", "10.0.0.5"), iface("wlan0", "10.0.7.9")
    watch = InterfaceWatch("wlan0", a)
    assert watch.observe([iface("eth0", "192.168.1.2")]) == Lost("wlan0")
    assert watch.observe([]) is None  # said once
    assert watch.observe([a]) == Back(a)
    assert watch.observe([a]) is None
    assert watch.observe([b]) == Moved(a, b)
    assert watch.current == b
    assert watch.observe([]) == Lost("wlan0")
    assert watch.observe([a]) == Moved(b, a)  # back, but with another address than the last


def test_the_same_address_on_another_network_is_a_move() -> None:
    a = iface("eth0", "10.0.0.5", 24)
    wider = iface("eth0", "10.0.0.5", 16)
    assert InterfaceWatch("eth0", a).observe([wider]) == Moved(a, wider)


def test_an_address_spec_follows_that_address_only() -> None:
    a = iface("eth0", "10.0.0.5")
    watch = InterfaceWatch("10.0.0.5", a)
    assert watch.observe([iface("eth0", "10.0.0.6")]) == Lost("eth0")
    assert watch.observe([a]) == Back(a)
    assert pick("eth0", [iface("eth0", "10.0.0.6"), a], prefer="10.0.0.5") == a
    assert pick("eth0", [iface("eth0", "10.0.0.6"), a]) == iface("eth0", "10.0.0.6")
    assert pick("wlan0", [a]) is None


# ------------------------------------------------- the mesh, on a simulated network


def move(net: SimNetwork, node: SimNode, host: str) -> str:
    """``node``'s address changes: what was in flight to the old one is lost, its
    messages come from the new host from now on, and it listens there."""
    port = node.mesh.endpoint.rpartition(":")[2]
    endpoint = f"tcp://{host}:{port}"
    del net.nodes[node.mesh.endpoint]
    node.mesh.set_endpoint(endpoint, net.local(node))
    net.nodes[endpoint] = node
    return endpoint


def three(net: SimNetwork) -> list[SimNode]:
    nodes = [net.add(n, "g", uuid=NodeId(bytes([i + 1]) * 16), log=True) for i, n in enumerate(("a", "b", "c"))]
    for n in nodes[1:]:
        n.mesh.discovered(nodes[0].mesh.uuid, nodes[0].mesh.endpoint, net.now)
    assert net.settle(5.0, lambda: all(len(n.mesh.alive_peers()) == 2 for n in nodes))
    return nodes


def test_a_node_whose_address_changed_is_followed_by_its_peers_and_nothing_is_lost() -> None:
    net = SimNetwork()
    a, b, c = three(net)
    for i in range(5):
        b.log.append("score", str(i), net.local(b), net.local(b))
    new = move(net, b, "10.0.9.9")
    for i in range(5):  # written right after the move, while the peers still dial the old address
        b.log.append("score", str(i + 5), net.local(b), net.local(b))
        a.log.append("penalty", str(i), net.local(a), net.local(a))

    def healed() -> bool:
        return (all(p.endpoint == new for n in (a, c) for p in n.mesh.peers(net.local(n)) if p.uuid == b.mesh.uuid)
                and all(len(n.mesh.alive_peers()) == 2 for n in (a, b, c))
                and all(n.log.held() == 10 + 5 for n in (a, b, c)))

    assert net.settle(20.0, healed)
    # The peers followed the endpoint: the sessions lived on (no one saw b leave).
    assert not [e for n in (a, c) for e in n.events if isinstance(e, PeerLeft)]
    assert a.mesh.stats.endpoints_followed == 1 and c.mesh.stats.endpoints_followed == 1
    assert b.mesh.stats.endpoint_changes == 1
    net.run(5.0)
    assert b.mesh.moves.moving == {}  # every peer answered: no more HELOs
    # and a HELO from the new address was refused until the peer found the old one silent
    assert sum(a.mesh.blamed.values()) > 0


def test_a_node_that_moves_before_its_peers_time_it_out_slowly_still_meshes() -> None:
    """Long announced timings (gone after 20 s): the HELOs wait for SUSPECT, then the peer follows."""
    net = SimNetwork()
    timing = Timing(heartbeat_interval=2.0, gone_after=20.0)
    a = net.add("a", "g", uuid=NodeId(b"\x01" * 16), timing=timing)
    b = net.add("b", "g", uuid=NodeId(b"\x02" * 16), timing=timing)
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    assert net.settle(5.0, lambda: len(a.mesh.alive_peers()) == 1 and len(b.mesh.alive_peers()) == 1)
    new = move(net, b, "10.0.9.9")
    assert net.settle(30.0, lambda: [p.endpoint for p in a.mesh.peers(net.local(a))] == [new]
                      and a.mesh.peers(net.local(a))[0].state == "alive" and not b.mesh.moves.moving)
    assert not [e for e in a.events if isinstance(e, PeerLeft)]


def test_setting_the_same_endpoint_again_does_nothing() -> None:
    net = SimNetwork()
    a, _b, _c = three(net)
    a.mesh.take_actions()
    a.mesh.set_endpoint(a.mesh.endpoint, net.local(a))
    assert a.mesh.take_actions() == [] and a.mesh.stats.endpoint_changes == 0
