"""What a hostile peer can do to the mesh, on the sans-I/O Mesh: sessions
and introductions are bounded, announced timings are clamped, a failed
connection fails its session, and frames are blamed on the address that sent
them, never on the member whose UUID they carry."""

from __future__ import annotations

import dataclasses
import os

from huddle import NodeId
from huddle.ids import address_of
from huddle.limits import MeshLimits
from huddle.protocol import Connect, Mesh, Notify, PeerLeft, Send
from huddle.protocol.events import ChatReceived, PeerExcluded
from huddle.security import NodeIdentity
from huddle.transport.zmq_transport import ZmqTransport
from huddle.wire import Chat, Gbye, Group, Helo, Peer, encode, helo_signed

GROUP = "g"
HOME = "10.0.0.2"  # the honest member's address
EVIL = "10.0.0.66"  # another machine claiming its UUID


def node(**limits: int | float) -> Mesh:
    return Mesh(NodeId(b"\x01" * 16), name="alice", group=GROUP, endpoint="tcp://10.0.0.1:5000",
                incarnation="11" * 8, now=0.0, limits=MeshLimits(**limits))  # type: ignore[arg-type]


def fresh() -> NodeId:
    return NodeId.random()  # version 4: a legacy id, which may say HELO unsigned in open mode


def join(mesh: Mesh, uuid: NodeId, source: str, now: float, port: int = 6000, *,
         beat: float = 0.0, lost: int = 0, incarnation: str = "22" * 8) -> None:
    """A HELO and a BOUT from ``uuid`` arriving from ``source``."""
    host = address_of(source) or "10.0.0.4"
    helo = Helo(uuid, endpoint=f"tcp://{host}:{port}", name="peer", incarnation=incarnation, beat=beat, lost=lost)
    mesh.receive(encode(helo), now, source)
    mesh.receive(encode(Group(uuid, group=GROUP)), now, source)


def connects(mesh: Mesh) -> list[Connect]:
    return [a for a in mesh.take_actions() if isinstance(a, Connect)]


def events(mesh: Mesh, kind: type) -> list[object]:
    return [a.event for a in mesh.take_actions() if isinstance(a, Notify) and isinstance(a.event, kind)]


# ------------------------------------------------------- sessions, introductions, announced timing


def test_announced_heartbeat_timing_is_clamped() -> None:
    mesh = node(peer_gone_after_max=20.0)
    ghost = fresh()
    join(mesh, ghost, HOME, 0.0, beat=60.0, lost=100)  # would be gone after 6060 s
    assert mesh.alive_peers() == [ghost]
    mesh.take_actions()
    mesh.tick(19.9)
    assert mesh.alive_peers() == [ghost]
    mesh.tick(20.0)
    assert mesh.alive_peers() == []
    assert [e.reason for e in events(mesh, PeerLeft)] == ["timeout"]  # type: ignore[attr-defined]


def test_a_helo_flood_from_fresh_identities_opens_at_most_max_sessions() -> None:
    mesh = node(max_sessions=20, max_handshaking=5, max_handshaking_per_introducer=3, max_waiting_helos=0)
    for i in range(1100):
        join(mesh, fresh(), f"10.0.{i // 250}.{i % 250 + 1}", 0.0)
    assert len(connects(mesh)) == 20
    assert len(mesh.alive_peers()) == 20
    assert mesh.stats.helos_refused == 1080


def test_helos_without_bout_from_one_address_are_bounded_per_address_and_in_total() -> None:
    mesh = node(max_handshaking=5, max_handshaking_per_introducer=3, max_waiting_helos=0)
    for _ in range(100):
        mesh.receive(encode(Helo(fresh(), endpoint="tcp://10.0.0.9:1", name="x", incarnation="33" * 8)), 0.0, EVIL)
    assert len(connects(mesh)) == 3
    for i in range(100):
        src = f"10.0.1.{i + 1}"
        mesh.receive(encode(Helo(fresh(), endpoint=f"tcp://{src}:1", name="x", incarnation="33" * 8)), 0.0, src)
    assert len(connects(mesh)) == 2  # 5 in total
    assert mesh.stats.helos_refused == 195
    mesh.tick(5.0)  # the handshakes time out: room again
    join(mesh, fresh(), HOME, 5.0)
    assert len(mesh.alive_peers()) == 1


def test_a_crowd_behind_one_address_past_the_caps_waits_its_turn_and_all_are_admitted() -> None:
    """Many honest nodes on one machine (or behind one NAT) dial us at once, each saying HELO and
    BOUT once: the HELOs past the per-address cap are held, their BOUTs dropped; each held one is
    answered, as a handshake completes, by a HELO with reply false, which makes its sender say
    HELO and BOUT again.  None is lost."""
    mesh = node(max_handshaking=64, max_handshaking_per_introducer=3, max_waiting_helos=256)
    crowd = {2000 + i: fresh() for i in range(31)}  # by port
    helos = {u: Helo(u, endpoint=f"tcp://{HOME}:{port}", name="n", incarnation="44" * 8) for port, u in crowd.items()}
    for u in crowd.values():
        mesh.receive(encode(helos[u]), 0.0, HOME)
    assert mesh.stats.helos_waited == 28
    for u in reversed(crowd.values()):  # the BOUTs of those waiting come first, and are dropped
        mesh.receive(encode(Group(u, group=GROUP)), 0.0, HOME)
    assert mesh.stats.dropped_unintroduced >= 20
    conns: dict[int, NodeId] = {}
    for _ in range(40):  # carry each node's answer to what the mesh sent it
        answers = []
        for a in mesh.take_actions():
            if isinstance(a, Connect):
                conns[a.conn] = crowd[int(a.endpoint.rsplit(":", 1)[1])]
            elif isinstance(a, Send) and isinstance(a.message, Helo) and not a.message.reply:
                u = conns[a.conn]
                answers += [dataclasses.replace(helos[u], reply=True), Group(u, group=GROUP)]
        for m in answers:
            mesh.receive(encode(m), 0.01, HOME)
    assert sorted(mesh.alive_peers()) == sorted(crowd.values())
    assert mesh.stats.helos_refused == 0


def test_held_helos_expire_after_the_handshake_timeout() -> None:
    mesh = node(max_handshaking=1, max_handshaking_per_introducer=1, max_waiting_helos=2)
    for i in range(4):
        src = f"10.0.3.{i + 1}"
        mesh.receive(encode(Helo(fresh(), endpoint=f"tcp://{src}:3000", name="x", incarnation="55" * 8)), 0.0, src)
    assert mesh.stats.helos_waited == 3 and mesh.stats.helos_refused == 1  # the oldest of three held went
    mesh.tick(10.0)  # past the handshake timeout: the held ones are given up, the slot's session too
    assert mesh.stats.helos_refused == 3
    assert mesh.admission.waiting == {}


def test_one_address_cannot_fill_the_waiting_room() -> None:
    mesh = node(max_handshaking=2, max_handshaking_per_introducer=2, max_waiting_helos=40)
    for i in range(500):  # a flood from one address: 2 handshaking, a quarter of the room waiting
        mesh.receive(encode(Helo(fresh(), endpoint=f"tcp://{EVIL}:{i + 1}", name="x", incarnation="55" * 8)), 0.0, EVIL)
    assert len(mesh.admission.waiting) == 10 and mesh.stats.helos_refused == 488
    honest = [fresh() for _ in range(5)]
    for i, u in enumerate(honest):  # honest nodes elsewhere still get a place in the queue
        mesh.receive(encode(Helo(u, endpoint=f"tcp://10.0.4.{i + 1}:1", name="h", incarnation="66" * 8)), 0.0,
                     f"10.0.4.{i + 1}")
    assert all(u in mesh.admission.waiting for u in honest)


def test_peer_introductions_are_bounded_backed_off_and_only_from_a_live_introducer() -> None:
    mesh = node(max_handshaking_per_introducer=8, introduction_backoff=30.0)
    bob = fresh()
    join(mesh, bob, HOME, 0.0)
    mesh.take_actions()
    named = [fresh() for _ in range(1100)]
    for i, uuid in enumerate(named):
        mesh.receive(encode(Peer(bob, peer=uuid, endpoint=f"tcp://10.9.{i // 250}.{i % 250}:1")), 0.1, HOME)
    assert len(connects(mesh)) == 8
    # A quarter of mesh.max-waiting-helos (256) wait their turn; the rest are refused.
    assert len(mesh.admission.waiting) == 64 and mesh.stats.introductions_waited == 64
    assert mesh.stats.introductions_refused == 1092 - 64
    mesh.receive(encode(Chat(bob, text="still here")), 4.0, HOME)
    mesh.tick(5.5)  # the 8 introduced handshakes time out
    assert len(mesh.alive_peers()) == 1
    for i, uuid in enumerate(named[:8]):  # backed off: not dialled again
        mesh.receive(encode(Peer(bob, peer=uuid, endpoint=f"tcp://10.9.0.{i}:1")), 5.6, HOME)
    assert connects(mesh) == []
    mesh.receive(encode(Peer(bob, peer=named[8], endpoint="tcp://10.9.0.8:1")), 5.6, HOME)
    assert len(connects(mesh)) == 1  # another one is
    mesh.tick(8.2)  # bob has been silent past suspect-after
    mesh.receive(encode(Peer(bob, peer=named[9], endpoint="tcp://10.9.0.9:1")), 8.2, HOME)
    assert connects(mesh) == []  # bob was suspect when its PEER came: not dialled


def test_an_introduced_handshake_that_timed_out_while_this_node_was_late_is_not_backed_off() -> None:
    # A crowd starting on a starved machine: the answers may wait unread in our own queue.
    mesh = node(max_handshaking_per_introducer=8, introduction_backoff=30.0)
    bob = fresh()
    join(mesh, bob, HOME, 0.0)
    mesh.take_actions()
    named = [fresh() for _ in range(6)]
    for i, uuid in enumerate(named[:3]):
        mesh.receive(encode(Peer(bob, peer=uuid, endpoint=f"tcp://10.9.0.{i}:1")), 0.1, HOME)
    assert len(connects(mesh)) == 3
    for at in (1.0, 2.0, 3.0):  # ticks on time: not late
        mesh.receive(encode(Chat(bob, text="here")), at - 0.01, HOME)
        assert mesh.next_deadline(at - 0.01) <= at
        mesh.tick(at)
    assert mesh.stats.late_ticks == 0
    mesh.receive(encode(Chat(bob, text="here")), 4.0, HOME)
    assert mesh.next_deadline(4.0) <= 4.5
    mesh.tick(5.5)  # a second late: the three introduced handshakes time out, not backed off
    assert mesh.stats.late_ticks == 1 and mesh.stats.backoffs_spared == 3
    mesh.take_actions()
    for i, uuid in enumerate(named[:3]):  # the next introduction dials them again
        mesh.receive(encode(Peer(bob, peer=uuid, endpoint=f"tcp://10.9.0.{i}:1")), 5.6, HOME)
    assert len(connects(mesh)) == 3
    # On time again: what times out now is backed off as before.
    for i, uuid in enumerate(named[3:]):
        mesh.receive(encode(Peer(bob, peer=uuid, endpoint=f"tcp://10.9.1.{i}:1")), 5.6, HOME)
    connects(mesh)
    for at in range(6, 12):
        mesh.receive(encode(Chat(bob, text="here")), at - 0.01, HOME)
        mesh.next_deadline(at - 0.01)
        mesh.tick(float(at))
    assert mesh.stats.late_ticks == 1 and mesh.stats.backoffs_spared == 3
    for i, uuid in enumerate(named[3:]):
        mesh.receive(encode(Peer(bob, peer=uuid, endpoint=f"tcp://10.9.1.{i}:1")), 12.0, HOME)
    assert connects(mesh) == []


def test_a_connection_that_cannot_be_opened_fails_its_session_and_its_seed_retries() -> None:
    mesh = node()
    mesh.add_seed("tcp://10.0.0.7:5000", 0.0)
    (seed_conn,) = connects(mesh)
    mesh.connect_failed(seed_conn.conn, 0.0)
    assert mesh.stats.connect_failed == 1
    mesh.tick(0.5)
    assert connects(mesh) == []  # its back-off holds
    mesh.tick(1.0)
    assert [c.endpoint for c in connects(mesh)] == ["tcp://10.0.0.7:5000"]  # a new connection
    other = fresh()
    mesh.discovered(other, "tcp://10.0.0.8:5000", 2.0)
    (conn,) = connects(mesh)
    mesh.connect_failed(conn.conn, 2.0)
    assert mesh.stats.connect_failed == 2
    mesh.discovered(other, "tcp://10.0.0.8:5000", 2.1)  # the session is gone: dialled afresh
    assert len(connects(mesh)) == 1


# --------------------------------------------------------------------- frames under another's UUID


def test_frames_under_a_members_uuid_from_another_address_are_blamed_on_that_address() -> None:
    mesh = node()
    bob = fresh()
    join(mesh, bob, HOME, 0.0)
    mesh.take_actions()
    for _ in range(150):
        assert mesh.receive([bytes(bob), b"WHAT", b"?"], 1.0, EVIL) is False
    mesh.receive(encode(Chat(bob, text="I am bob")), 1.0, EVIL)
    mesh.receive(encode(Helo(bob, endpoint=f"tcp://{EVIL}:1", name="bob?", incarnation="44" * 8)), 1.0, EVIL)
    mesh.receive(encode(Gbye(bob, reason="")), 1.0, EVIL)
    assert bob not in mesh.excluded
    assert mesh.alive_peers() == [bob]
    assert events(mesh, ChatReceived) == [] and connects(mesh) == []
    assert mesh.stats.foreign_frames == 153
    assert mesh.blamed == {EVIL: 153}
    mesh.receive(encode(Chat(bob, text="the real bob")), 1.0, HOME)
    assert len(events(mesh, ChatReceived)) == 1
    # From its own connection, undecodable messages still count towards exclusion (of that
    # incarnation, until it restarts: never for good, since anyone may claim a UUID).
    for _ in range(100):
        mesh.receive([bytes(bob), b"WHAT", b"?"], 2.0, HOME)
    assert mesh.alive_peers() == [] and bob not in mesh.excluded
    assert mesh.stats.auto_excluded == 1 and events(mesh, PeerExcluded) == []


def test_a_suspect_members_uuid_may_come_back_from_a_new_address() -> None:
    mesh = node()
    bob = fresh()
    join(mesh, bob, HOME, 0.0)
    mesh.tick(3.0)  # silent past suspect-after (2.5 s)
    assert [p.state for p in mesh.peers(3.0)] == ["suspect"]
    join(mesh, bob, "10.0.0.3", 3.0, incarnation="55" * 8)  # restarted on another machine
    assert [p.state for p in mesh.peers(3.0)] == ["alive"]
    mesh.take_actions()
    mesh.receive(encode(Chat(bob, text="moved")), 3.1, "10.0.0.3")
    assert len(events(mesh, ChatReceived)) == 1
    mesh.receive(encode(Chat(bob, text="old address")), 3.1, HOME)
    assert events(mesh, ChatReceived) == [] and mesh.blamed == {HOME: 1}


def test_the_blame_table_is_bounded() -> None:
    mesh = node(max_blamed_addresses=4)
    bob = fresh()
    join(mesh, bob, HOME, 0.0)
    for i in range(10):
        mesh.receive([bytes(bob), b"WHAT", b"?"], 1.0, f"10.0.5.{i}")
    assert list(mesh.blamed) == [f"10.0.5.{i}" for i in range(6, 10)]
    assert mesh.stats.foreign_frames == 10


def test_without_a_source_address_nothing_is_checked() -> None:
    """The simulator and other drivers that cannot tell addresses keep working."""
    mesh = node()
    bob = fresh()
    join(mesh, bob, "", 0.0)
    mesh.take_actions()
    mesh.receive(encode(Chat(bob, text="hi")), 0.5)
    assert len(events(mesh, ChatReceived)) == 1 and mesh.stats.foreign_frames == 0


def test_the_transport_reports_a_connection_it_cannot_open_instead_of_raising() -> None:
    failed: list[int] = []
    transport = ZmqTransport(NodeId(os.urandom(16)), on_frames=lambda batch, sources: None,
                             on_connect_failed=failed.append)
    try:
        assert transport.connect(7, "tcp://not an endpoint") is False
        assert failed == [7] and transport.connect_failed == 1
        assert 7 not in transport.conns and transport.send(7, [b"BEAT", b""]) is False
    finally:
        transport.close()


# ------------------------------------------------------- connections: no squatting a member's id

def signed_helo(who: NodeIdentity, endpoint: str, at: float) -> Helo:
    """A HELO under the id ``who``'s key gives, signed, stamped ``at`` (the mesh's clock, seconds)."""
    helo = Helo(who.node_id, endpoint=endpoint, name="bob", incarnation="22" * 8, key=who.public_key,
                sig=bytes(64), at=round(at * 1000))
    return dataclasses.replace(helo, sig=who.sign(helo_signed(helo)))

def test_a_connection_squatting_a_members_uuid_holds_nothing_and_its_restart_is_followed_at_once() -> None:
    """Sources name connections (address#routing suffix): another connection from the member's own
    address (a squatter on its machine, or behind its NAT) gets nothing through under its UUID but a
    HELO, judged as any HELO is: the member's restart, on a new connection, is followed at once."""
    mesh = node()
    bob = fresh()
    first, squat, restarted = f"{HOME}#aa", f"{HOME}#bb", f"{HOME}#cc"
    join(mesh, bob, first, 0.0)
    mesh.take_actions()
    assert mesh.receive(encode(Chat(bob, text="not bob")), 0.5, squat) is False
    assert mesh.receive([bytes(bob), b"BEAT", b""], 0.5, squat) is False
    assert mesh.receive(encode(Gbye(bob, reason="")), 0.5, squat) is False
    assert mesh.alive_peers() == [bob] and events(mesh, ChatReceived) == []
    assert mesh.stats.foreign_frames == 3 and mesh.blamed == {HOME: 3}  # counted by address
    join(mesh, bob, restarted, 0.6, port=6001, incarnation="55" * 8)  # while its old session is ALIVE
    assert mesh.stats.restarts_followed == 1
    assert [(p.state, p.endpoint) for p in mesh.peers(0.6)] == [("alive", f"tcp://{HOME}:6001")]
    mesh.take_actions()
    mesh.receive(encode(Chat(bob, text="back")), 0.7, restarted)
    mesh.receive(encode(Chat(bob, text="stale")), 0.7, first)
    assert [e.text for e in events(mesh, ChatReceived)] == ["back"]  # type: ignore[attr-defined]
    assert mesh.stats.foreign_frames == 4


def test_a_members_newer_helo_on_another_connection_from_its_address_binds_that_one_too() -> None:
    """A member's probe, or a DEALER it re-opened, says HELO on a second connection: both carry
    its messages (the old one drains), and an older HELO out of order binds nothing."""
    mesh = node()
    key = NodeIdentity.generate()
    bob, first, second, third = key.node_id, f"{HOME}#aa", f"{HOME}#bb", f"{HOME}#cc"
    helo = signed_helo(key, f"tcp://{HOME}:6000", 0.0)
    mesh.receive(encode(helo), 0.0, first)
    mesh.receive(encode(Group(bob, group=GROUP)), 0.0, first)
    assert mesh.alive_peers() == [bob]
    mesh.receive(encode(signed_helo(key, f"tcp://{HOME}:6000", 0.1)), 0.1, second)
    mesh.receive(encode(helo), 0.1, third)  # no newer than the last: answered, binds nothing
    mesh.take_actions()
    for source in (first, second, third):
        mesh.receive(encode(Chat(bob, text=source)), 0.2, source)
    assert [e.text for e in events(mesh, ChatReceived)] == [first, second]  # type: ignore[attr-defined]
    assert mesh.stats.foreign_frames == 1 and mesh.stats.refused_identity == 0


# ------------------------------------------------------- one address filling the session table

def test_a_wave_of_ghost_helos_from_one_address_does_not_keep_a_newcomer_out() -> None:
    """Ghosts (HELO and BOUT, then silence) from one address fill the table; a newcomer from
    another address takes a silent ghost's place, and a second wave from the ghosts' address,
    which holds more than its share, is refused: the newcomer stays."""
    mesh = node(max_sessions=20, max_sessions_per_address=5, max_waiting_helos=0)
    for i in range(60):
        join(mesh, fresh(), EVIL, 0.0, port=7000 + i, beat=60.0, lost=100)
    assert len(mesh.alive_peers()) == 20 and mesh.stats.helos_refused == 40
    newcomer = fresh()
    join(mesh, newcomer, HOME, 1.5)
    assert newcomer in mesh.alive_peers() and len(mesh.alive_peers()) == 20
    assert mesh.stats.sessions_evicted == 1
    left = events(mesh, PeerLeft)
    assert [e.reason for e in left] == ["evicted: silent since its admission"]  # type: ignore[attr-defined]
    for i in range(60):
        join(mesh, fresh(), EVIL, 2.0, port=8000 + i, beat=60.0, lost=100)
    assert newcomer in mesh.alive_peers() and mesh.stats.sessions_evicted == 1
    assert mesh.stats.helos_refused == 100


def test_when_the_table_is_full_of_live_peers_only_an_address_over_its_share_gives_way() -> None:
    mesh = node(max_sessions=10, max_sessions_per_address=4, max_waiting_helos=0)
    crowd = [fresh() for _ in range(8)]  # honest peers on one machine, all beating
    for i, u in enumerate(crowd):
        join(mesh, u, EVIL, 0.0, port=7000 + i)
    others = {fresh(): f"10.0.7.{i + 1}" for i in range(2)}
    for u, source in others.items():
        join(mesh, u, source, 0.0)
    for u in crowd[1:]:
        mesh.receive([bytes(u), b"BEAT", b""], 1.5, EVIL)
    for u, source in others.items():
        mesh.receive([bytes(u), b"BEAT", b""], 1.5, source)
    mesh.receive([bytes(crowd[0]), b"BEAT", b""], 1.0, EVIL)  # heard from longest ago
    newcomer = fresh()
    join(mesh, newcomer, HOME, 2.0)
    assert newcomer in mesh.alive_peers() and crowd[0] not in mesh.alive_peers()
    assert mesh.stats.sessions_evicted == 1
    assert [e.reason for e in events(mesh, PeerLeft)] == [  # type: ignore[attr-defined]
        "evicted: its address holds more than 4 sessions"]
    # From the crowd's own address (over its share), a HELO makes no room: it is refused.
    join(mesh, fresh(), EVIL, 2.1, port=9000)
    assert mesh.stats.sessions_evicted == 1 and mesh.stats.helos_refused == 1
    # Each address within its share, no one silent: a newcomer is refused, nobody ended.
    calm = node(max_sessions=4, max_sessions_per_address=4, max_waiting_helos=0)
    for i in range(4):
        u = fresh()
        join(calm, u, f"10.0.8.{i + 1}", 0.0)
        calm.receive([bytes(u), b"BEAT", b""], 1.0, f"10.0.8.{i + 1}")
    join(calm, fresh(), HOME, 2.0)
    assert calm.stats.sessions_evicted == 0 and calm.stats.helos_refused == 1
