"""A peer service is hosted one way (protocol/service.py): given to Mesh at construction,
it gets the messages of the types it claims from admitted peers, peer up / down, ticks,
exclusions and its deadline, and its actions go out with the mesh's.  Two services
claiming one type, or one claiming a message of the mesh's own, are refused."""

from __future__ import annotations

import math

import pytest

from huddle import NodeId
from huddle.posts.codec import SIGNATURE
from huddle.posts.peer import HydraBulk, HydraPayload, PostsPeer, PostsPeerDown, PostsPeerUp
from huddle.protocol import Mesh, Send
from huddle.protocol.delivery import Delivery, DeliveryTiming
from huddle.protocol.events import Action, MessageReceived
from huddle.protocol.picture import Reports
from huddle.protocol.replication import MemoryStore, Replicator
from huddle.protocol.service import MeshView, PeerFacts
from huddle.protocol.stack import build_services
from huddle.sim import SimNetwork, SimNode
from huddle.wire import Beat, Bulk, Chat, Dack, Dmsg, Gbye, Helo, LogRecord, Message, Xmsg, encode
from huddle.wire import Group as BoutMsg

ME = NodeId(b"\x01" * 16)
PEER = NodeId(b"\x02" * 16)
SOURCE = "10.0.0.2"


class Toy:
    """Records every call; answers each DMSG with a DACK on the peer's connection."""

    handles: tuple[type[Message], ...] = (Dmsg,)

    def __init__(self, deadline: float = math.inf) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.conns: dict[NodeId, int] = {}
        self.view: MeshView | None = None
        self.deadline = deadline
        self._out: list[Action] = []

    def attach(self, mesh: MeshView) -> None:
        self.view = mesh

    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts) -> None:
        self.calls.append(("up", peer, facts.incarnation, facts.name))
        self.conns[peer] = conn

    def peer_down(self, peer: NodeId, now: float) -> None:
        self.calls.append(("down", peer))

    def forget(self, peer: NodeId) -> None:
        self.calls.append(("forget", peer))

    def receive(self, peer: NodeId, msg: Message, now: float) -> None:
        assert isinstance(msg, Dmsg)
        self.calls.append(("receive", peer, msg.payload))
        self._out.append(Send(self.conns[peer], Dack(ME, msg.fseq)))

    def tick(self, now: float) -> None:
        self.calls.append(("tick", now))

    def next_deadline(self, now: float) -> float:
        return self.deadline

    def take_actions(self) -> list[Action]:
        out, self._out = self._out, []
        return out


def mesh_with(*services: object) -> Mesh:
    return Mesh(ME, name="alice", group="g", endpoint="tcp://10.0.0.1:5000", incarnation="11" * 8, now=0.0,
                services=services)  # type: ignore[arg-type]


def admit(mesh: Mesh, now: float = 0.0) -> None:
    helo = Helo(PEER, endpoint=f"tcp://{SOURCE}:6000", name="bob", incarnation="22" * 8)
    mesh.receive(encode(helo), now, SOURCE)
    mesh.receive(encode(BoutMsg(PEER, group="g")), now, SOURCE)


def test_a_service_given_at_construction_gets_its_peers_messages_and_ticks() -> None:
    toy = Toy(deadline=0.03)
    mesh = mesh_with(toy)
    assert toy.view is mesh  # attached: the view is the mesh, seen through MeshView
    assert mesh.service(Toy) is toy and mesh.service(Delivery) is None
    admit(mesh)
    assert toy.calls == [("up", PEER, "22" * 8, "bob")]
    conn = mesh.conn_of(PEER)
    assert conn is not None
    mesh.take_actions()

    assert mesh.receive(encode(Dmsg(PEER, 1, 1, 0, 1, b"hello")), 0.1, SOURCE)
    assert toy.calls[-1] == ("receive", PEER, b"hello")
    assert Send(conn, Dack(ME, 1)) in mesh.take_actions()  # its actions go out with the mesh's
    mesh.receive(encode(Beat(PEER)), 0.1, SOURCE)  # the mesh's own: not the service's
    mesh.receive(encode(Chat(PEER, "hi")), 0.1, SOURCE)
    assert [c[0] for c in toy.calls].count("receive") == 1

    mesh.tick(0.2)
    assert toy.calls[-1] == ("tick", 0.2)
    assert mesh.next_deadline(0.2) == 0.03  # the service's deadline, when it is the soonest

    mesh.receive(encode(Gbye(PEER, reason="")), 0.3, SOURCE)
    assert toy.calls[-1] == ("down", PEER)
    assert mesh.exclude(PEER, "test", 0.4)
    assert toy.calls[-1] == ("forget", PEER)


def test_a_message_from_a_peer_not_admitted_or_of_a_type_nobody_handles_is_dropped() -> None:
    toy = Toy()
    mesh = mesh_with(toy)
    mesh.receive(encode(Helo(PEER, endpoint=f"tcp://{SOURCE}:6000", name="bob", incarnation="22" * 8)), 0.0, SOURCE)
    assert not mesh.receive(encode(Dmsg(PEER, 1, 1, 0, 1, b"early")), 0.0, SOURCE)  # before its BOUT
    mesh.receive(encode(BoutMsg(PEER, group="g")), 0.0, SOURCE)
    dropped = mesh.stats.dropped_unintroduced
    assert not mesh.receive(encode(Xmsg(PEER, (LogRecord(PEER, 1, 1.0, "k", "1"),))), 0.1, SOURCE)  # no service handles XMSG here
    assert mesh.stats.dropped_unintroduced == dropped + 1
    assert [c[0] for c in toy.calls] == ["up"]


def test_two_services_claiming_one_type_or_one_claiming_the_meshs_own_are_refused() -> None:
    with pytest.raises(ValueError, match="two services handle Dmsg"):
        mesh_with(Toy(), Delivery(ME))
    greedy = Toy()
    greedy.handles = (Chat,)
    with pytest.raises(ValueError, match="Chat is the mesh's own message"):
        mesh_with(greedy)


def test_the_node_and_the_simulator_build_the_same_services() -> None:
    posts = PostsPeer(ME)  # a feature's service, as the node's posts feature gives it
    services = build_services(ME, now=0.0, store=MemoryStore(), delivery=Delivery(ME).timing, extra=[posts],
                              takers=[posts])
    assert [type(s) for s in services] == [Replicator, Delivery, Reports, PostsPeer]
    assert [type(s) for s in build_services(ME, now=0.0)] == [Reports]  # no log, no delivery (so no posts)
    with pytest.raises(ValueError, match="ride on addressed delivery"):  # a taker without delivery
        build_services(ME, now=0.0, extra=[posts], takers=[posts])
    net = SimNetwork()
    node = net.add("a", "g", log=True)
    assert node.mesh.service(Replicator) is node.log and node.mesh.service(Delivery) is None


def test_a_replicator_reloaded_from_its_store_is_the_same_hosted_service() -> None:
    """What an ``empty`` node cut off does (it dropped others' records): the mesh keeps
    its replicator, which reads the store afresh and keeps its counters; when the peer is
    back, what was dropped is fetched again."""
    net = SimNetwork()
    a, b = net.add("a", "g", log=True), net.add("b", "g", log=True)
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))
    b.log.append("k", '"1"', net.local(b), net.local(b))
    assert net.settle(5.0, lambda: a.log.held() == 1)
    received = a.log.stats.received
    net.partition(a, b)
    assert net.settle(10.0, lambda: not a.mesh.alive_peers())
    assert isinstance(a.store, MemoryStore)
    a.store.records.pop(b.mesh.uuid)  # as SqliteStore.drop_others does
    log = a.log
    log.reload(net.local(a))
    assert a.log is log and log.held() == 0 and log.stats.received == received
    net.heal()
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))
    assert net.settle(15.0, lambda: a.log.held() == 1)  # b is back: its record is fetched again
    assert a.mesh.service(Replicator) is log


def test_reports_are_the_picture_services_and_counted_there() -> None:
    """RAWS go out and come in through the Reports service: each node's report reaches the
    other, and the service counts them."""
    net = SimNetwork()
    a, b = net.add("a", "g"), net.add("b", "g")
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))
    assert net.settle(10.0, lambda: set(a.pictures.reports()) == set(b.pictures.reports()) == {a.mesh.uuid, b.mesh.uuid})
    assert a.reports.stats.reports_sent > 0 and b.reports.stats.reports_received > 0


# --------------------------------------------------------------------------- posts


def posts_pair(net: SimNetwork) -> tuple[SimNode, SimNode, PostsPeer]:
    a = net.add("a", "g", delivery=DeliveryTiming())
    b = net.add("b", "g", delivery=DeliveryTiming())
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))
    assert net.settle(5.0, lambda: a.mesh.alive_peers() == [b.mesh.uuid] and b.mesh.alive_peers() == [a.mesh.uuid])
    posts = a.mesh.service(PostsPeer)
    assert posts is not None
    return a, b, posts


def test_hydra_payloads_go_to_the_posts_service_and_plain_ones_to_the_applications() -> None:
    """Delivery hands a payload that starts with the Hydra signature to the posts peer
    service (registered as its taker at construction), which hands it to its driver; a
    plain addressed message is announced as before, and never reaches posts."""
    net = SimNetwork()
    a, b, _ = posts_pair(net)
    assert b.handed == [PostsPeerUp(a.mesh.uuid)] and a.handed == [PostsPeerUp(b.mesh.uuid)]
    hydra = SIGNATURE + b"\x01" + b"x" * 100_000  # cut into two frames: joined before the demux
    a.delivery.send(b.mesh.uuid, hydra, net.local(a))
    a.delivery.send(b.mesh.uuid, b"plain", net.local(a))
    assert net.settle(5.0, lambda: any(isinstance(e, MessageReceived) for e in b.events))
    assert b.handed[1:] == [HydraPayload(a.mesh.uuid, hydra)]
    assert [e.payload for e in b.events if isinstance(e, MessageReceived)] == [b"plain"]
    assert b.delivery.stats.messages_received == 2


def test_bulk_is_the_posts_services_and_goes_to_admitted_peers_only() -> None:
    net = SimNetwork()
    a, b, posts = posts_pair(net)
    assert posts.send_bulk(b.mesh.uuid, b"head", b"data" * 1000)
    assert not posts.send_bulk(NodeId(b"\x09" * 16), b"head", b"x")  # no such peer: nothing sent
    assert net.settle(1.0, lambda: len(b.handed) > 1)
    assert b.handed[1:] == [HydraBulk(a.mesh.uuid, b"head", b"data" * 1000)]
    # From a node that never said HELO: dropped and counted, never handed on.
    stranger = NodeId(b"\x07" * 16)
    dropped = b.mesh.stats.dropped_unintroduced
    net.deliver_raw(b.mesh.endpoint, encode(Bulk(stranger, b"head", b"evil")))
    net.deliver_raw(b.mesh.endpoint, [bytes(a.mesh.uuid), b"BULK", b"", b"no head"])
    net.run(0.1)
    assert b.mesh.stats.dropped_unintroduced == dropped + 1
    assert b.mesh.stats.decode_errors == 1
    assert len(b.handed) == 2
    # A node that hosts no posts (no delivery) drops a BULK as a type nobody handles.
    lone = net.add("c", "g")
    lone.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(lone))
    assert net.settle(5.0, lambda: lone.mesh.uuid in a.mesh.alive_peers() and a.mesh.uuid in lone.mesh.alive_peers())
    dropped = lone.mesh.stats.dropped_unintroduced
    assert posts.send_bulk(lone.mesh.uuid, b"head", b"x")
    net.run(0.1)
    assert lone.mesh.stats.dropped_unintroduced == dropped + 1 and lone.handed == []


def test_the_posts_service_hears_its_peers_go_once() -> None:
    net = SimNetwork()
    a, b, posts = posts_pair(net)
    net.partition(a, b)
    assert net.settle(10.0, lambda: PostsPeerDown(b.mesh.uuid) in a.handed)
    assert not posts.send_bulk(b.mesh.uuid, b"head", b"x")  # gone: nothing sent
    net.heal()
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.local(b))
    assert net.settle(10.0, lambda: a.handed.count(PostsPeerUp(b.mesh.uuid)) == 2)
    assert a.mesh.exclude(b.mesh.uuid, "test", net.local(a))  # ended, then forgotten: told once
    net.run(0.1)
    assert a.handed == [PostsPeerUp(b.mesh.uuid), PostsPeerDown(b.mesh.uuid)] * 2


def test_payload_takers_with_overlapping_prefixes_are_refused() -> None:
    class Taker:
        def __init__(self, prefix: bytes) -> None:
            self.prefix = prefix

        def take_payload(self, peer: NodeId, seq: int, payload: bytes) -> None:
            pass

    Delivery(ME, takers=[Taker(b"\xaa\xa0"), Taker(b"\xaa\xa1")])  # distinct: fine
    with pytest.raises(ValueError, match="overlap"):
        Delivery(ME, takers=[Taker(b"\xaa\xa0"), Taker(b"\xaa")])
    with pytest.raises(ValueError, match="needs a prefix"):
        Delivery(ME, takers=[Taker(b"")])
