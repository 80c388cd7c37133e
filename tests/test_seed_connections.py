"""A node never holds two connections to its seed at once (protocol.md 6, 8.5).

Without ROUTER_HANDOVER the seed's ROUTER keeps reading the first connection that
carried our identity and never reads a second one, even after the first closed: a
new connection opened in the same turn as the old one closed, or an introduced dial
beside the seed's own, leaves the seed deaf to us.  Its session with us then times
out, ours with it 5 s later, and the seed retries back off: in 64-node formations
on two busy CPUs (bench/HISTORY.md, "seed sessions lost") this tail of lost seed
sessions, re-formed 6-15 s after the last node served, was what set the clock."""

from __future__ import annotations

from huddle import NodeId
from huddle.protocol import Connect, Disconnect, Mesh, Send
from huddle.wire import Group, Helo, Members, encode

GROUP = "g"
SEED = "tcp://10.0.0.7:5000"
SEED_ADDRESS = "10.0.0.7"


def newcomer() -> Mesh:
    mesh = Mesh(NodeId(b"\x01" * 16), name="alice", group=GROUP, endpoint="tcp://10.0.0.1:5000",
                incarnation="11" * 8, now=0.0)
    mesh.add_seed(SEED, 0.0)
    return mesh


def connections(actions: list[object]) -> tuple[list[int], list[int]]:
    """The conns opened and closed by ``actions``."""
    return ([a.conn for a in actions if isinstance(a, Connect)],
            [a.conn for a in actions if isinstance(a, Disconnect)])


def helos_on(actions: list[object], conn: int) -> int:
    return sum(1 for a in actions if isinstance(a, Send) and a.conn == conn and isinstance(a.message, Helo))


def next_connect(mesh: Mesh, now: float, until: float) -> tuple[float, list[int]]:
    """Tick as the mesh asks until it opens a connection (or ``until``): when, and which."""
    while now < until:
        now = mesh.next_deadline(now)
        mesh.tick(now)
        opened, _ = connections(mesh.take_actions())
        if opened:
            return now, opened
    return now, []


def meet(mesh: Mesh, uuid: NodeId, endpoint: str, source: str, now: float) -> None:
    """``uuid`` answers our HELO: HELO(reply) and BOUT from ``source``."""
    mesh.receive(encode(Helo(uuid, endpoint=endpoint, name="peer", incarnation="22" * 8, reply=True)), now, source)
    mesh.receive(encode(Group(uuid, group=GROUP)), now, source)


def test_an_unanswered_seed_connection_is_kept_and_its_retries_go_on_it() -> None:
    # A process starting among dozens on two CPUs: its timers run seconds late, or its seed
    # answers seconds late.  Before: the connection was closed at the handshake timeout (5 s)
    # and a new one opened in the same turn (the seed then never read the new one).
    mesh = newcomer()
    opened, _ = connections(mesh.take_actions())
    assert len(opened) == 1
    first = opened[0]
    mesh.next_deadline(0.0)
    mesh.tick(6.0)  # five seconds late
    actions = mesh.take_actions()
    assert connections(actions) == ([], [])
    assert helos_on(actions, first) == 1  # the retry goes on the connection we have
    at, helos = 6.0, 0
    while at < 25.0:  # on time now: the seed does not answer for 25 s
        at = mesh.next_deadline(at)
        mesh.tick(at)
        actions = mesh.take_actions()
        assert connections(actions) == ([], [])
        helos += helos_on(actions, first)
    assert helos >= 3  # retried on back-off (1, 2, 4, 8, 10 s), on the one connection
    # (only after 30 s unanswered is it closed, and the next try, a retry later, connects afresh)
    seed = NodeId(b"\x07" * 16)
    meet(mesh, seed, SEED, SEED_ADDRESS, at + 0.1)
    assert list(mesh.alive_peers()) == [seed]
    assert connections(mesh.take_actions()) == ([], [])  # and the session stays on it


def test_a_seed_whose_session_ends_is_dialled_again_a_retry_later_not_at_once() -> None:
    mesh = newcomer()
    (first,), _ = connections(mesh.take_actions())
    seed = NodeId(b"\x07" * 16)
    meet(mesh, seed, SEED, SEED_ADDRESS, 0.1)
    mesh.take_actions()
    gone = 0.1 + mesh.timing.gone_after
    mesh.tick(gone)  # silent since: the session ends
    assert mesh.alive_peers() == []
    opened, closed = connections(mesh.take_actions())
    assert first in closed and opened == []
    when, opened = next_connect(mesh, gone, gone + 5.0)
    assert abs(when - (gone + mesh.timing.seed_retry)) < 1e-9
    assert len(opened) == 1


def test_an_introduction_of_the_seed_while_its_answer_is_awaited_opens_no_second_connection() -> None:
    # Another member lists the seed before the seed's answer is read: dialling it would open a
    # second connection to it, which its ROUTER would never read.
    mesh = newcomer()
    (first,), _ = connections(mesh.take_actions())
    bob, seed = NodeId(b"\x02" * 16), NodeId(b"\x07" * 16)
    mesh.receive(encode(Helo(bob, endpoint="tcp://10.0.0.2:5000", name="bob", incarnation="33" * 8)), 0.1, "10.0.0.2")
    mesh.receive(encode(Group(bob, group=GROUP)), 0.1, "10.0.0.2")
    assert list(mesh.alive_peers()) == [bob]
    mesh.take_actions()
    mesh.receive(encode(Members(bob, members=((seed, SEED, "44" * 8),))), 0.2, "10.0.0.2")
    assert connections(mesh.take_actions()) == ([], [])
    assert mesh.stats.seed_intros_skipped == 1
    meet(mesh, seed, SEED, SEED_ADDRESS, 0.3)  # the seed's answer, on the one connection
    assert set(mesh.alive_peers()) == {bob, seed}
    opened, closed = connections(mesh.take_actions())
    assert opened == [] and first not in closed
