"""The mesh's parts, each on its own: pure, time passed in, no sockets and no Mesh.  A fake
port records what a part asks of the mesh (connections, HELOs, timers)."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import logging
import math
import random

import pytest

from huddle import NodeId
from huddle.errors import LocalProtocolError
from huddle.limits import MeshLimits
from huddle.protocol.admission import Admission
from huddle.protocol.clock import Clock
from huddle.protocol.events import ClockSynced
from huddle.protocol.gossip import MemberGossip
from huddle.protocol.helo import Greeting, Refusal, check_helo
from huddle.protocol.introductions import Introductions
from huddle.protocol.liveness import Liveness, Verdict
from huddle.protocol.moves import Moves
from huddle.protocol.parts import Stats
from huddle.protocol.seeds import SEED_BACKOFF_MAX, Seeds, TooManySeeds
from huddle.protocol.session import Move, Phase, Session, Timing
from huddle.protocol.sessions import Sessions
from huddle.ratelog import RateLog
from huddle.security import NodeIdentity, verify
from huddle.wire import Helo, Members, Peer, Time, helo_signed

ME = NodeIdentity.from_seed(b"\x01" * 32)
BOB = NodeIdentity.from_seed(b"\x02" * 32)
T = Timing()


class FakePort:
    """The mesh's side of the parts' port, recorded."""

    def __init__(self) -> None:
        self.calls: list[tuple[object, ...]] = []
        self.next_conn = 100
        self.opened: list[Session] = []

    def connect(self, endpoint: str, conn: int | None = None) -> int:
        if conn is None:
            self.next_conn += 1
            conn = self.next_conn
        self.calls.append(("connect", endpoint, conn))
        return conn

    def disconnect(self, conn: int) -> None:
        self.calls.append(("disconnect", conn))

    def send_hello(self, conn: int, *, reply: bool, to: NodeId | None, now: float, listed: int = 0) -> None:
        self.calls.append(("hello", conn, to, now))

    def note(self, when: float) -> None:
        self.calls.append(("note", when))

    def open(self, uuid: NodeId, endpoint: str, now: float, introducer: NodeId | None, listed: int) -> Session:
        s = session(uuid, conn=self.connect(endpoint), endpoint=endpoint, now=now)
        self.opened.append(s)
        return s

    def redial(self, s: Session, now: float) -> None:
        self.calls.append(("redial", s.uuid, now))

    def take(self, kind: str) -> list[tuple[object, ...]]:
        out = [c for c in self.calls if c[0] == kind]
        self.calls = [c for c in self.calls if c[0] != kind]
        return out


def session(uuid: NodeId | None = None, *, conn: int = 1, endpoint: str = "tcp://10.0.0.2:6000", now: float = 0.0,
            phase: Phase = Phase.CONNECTING, source: str = "") -> Session:
    s = Session(uuid=uuid or NodeId.random(), conn=conn, endpoint=endpoint, created=now, last_heard=now,
                source=source)
    for move in {Phase.CONNECTING: (), Phase.HANDSHAKE: (Move.HELO,), Phase.ALIVE: (Move.HELO, Move.BOUT),
                 Phase.SUSPECT: (Move.HELO, Move.BOUT, Move.SILENT)}[phase]:
        s.move(move)
    return s


def table(*sessions: Session) -> dict[NodeId, Session]:
    return {s.uuid: s for s in sessions}


# ------------------------------------------------------------ the HELO check


def signed(who: NodeIdentity, *, at: float = 0.0, to: NodeId | None = ME.node_id, incarnation: str = "22" * 8) -> Helo:
    helo = Helo(who.node_id, endpoint="tcp://10.0.0.2:6000", name="bob", incarnation=incarnation,
                key=who.public_key, sig=bytes(64), at=round(at * 1000), to=to)
    return dataclasses.replace(helo, sig=who.sign(helo_signed(helo)))


def check(m: Helo, s: Session | None = None, *, now: float = 0.0, source: str = "10.0.0.2",
          secure: bool = False) -> Refusal | None:
    return check_helo(m, now, source, s, me=ME.node_id, secure=secure, window=30.0)


def test_the_helo_check_gives_a_verdict_and_touches_nothing() -> None:
    good = signed(BOB)
    known = session(BOB.node_id, phase=Phase.ALIVE, source="10.0.0.2")
    before = copy.copy(known)
    assert check(good) is None and check(good, known) is None
    assert known == before  # a pure function: the session is read, never written
    legacy = Helo(NodeId.random(), endpoint="tcp://10.0.0.2:6000", name="old", incarnation="22" * 8)
    assert check(legacy) is None  # open mode: an unsigned legacy id is admitted, unverified
    assert check(legacy, secure=True) == Refusal("no key (a group with a secret admits key-derived ids only)")
    assert check(dataclasses.replace(good, key=b"", sig=b"", at=0)) == Refusal("a key-derived id without its key")
    assert check(signed(BOB, to=NodeId.random())) is not None
    assert check(signed(BOB, to=NodeId.random())).misaddressed  # type: ignore[union-attr]
    assert "signed at a time +60 s" in check(signed(BOB, at=60.0)).reason  # type: ignore[union-attr]
    assert check(dataclasses.replace(good, sig=bytes(64))) == Refusal("bad signature")
    other = dataclasses.replace(known, key=ME.public_key)
    assert check(good, other).reason.startswith("another key")  # type: ignore[union-attr]
    stranger = NodeIdentity.generate()
    forged = dataclasses.replace(signed(stranger), sender=BOB.node_id)
    assert check(forged).reason.startswith("the key")  # type: ignore[union-attr]
    later = signed(BOB, at=5.0)
    moved = dataclasses.replace(known, key=BOB.public_key, incarnation="22" * 8, helo_at=later.at,
                                source="10.0.0.2#a")
    assert check(later, moved, now=5.0, source="10.0.0.2#b") is None  # from its own address: HELOs may cross
    assert check(later, moved, now=5.0, source="10.0.0.3") == Refusal(
        "a HELO of its session no newer than the last, from another address")


def test_our_greeting_is_signed_and_checks_its_endpoint() -> None:
    greeting = Greeting(ME.node_id, "alice", "g", "11" * 8, "standard", 1.0, 4, 0, 0, ME)
    helo = greeting.helo("tcp://10.0.0.1:5000", reply=True, peers=3, deltas=True, now=12.5, to=BOB.node_id)
    assert (helo.reply, helo.peers, helo.at, helo.to, helo.key) == (True, 3, 12500, BOB.node_id, ME.public_key)
    assert verify(ME.public_key, helo_signed(helo), helo.sig)
    assert greeting.bout.group == "g"
    with pytest.raises(LocalProtocolError):
        greeting.check("not an endpoint")


# ---------------------------------------------------------------- admission


def admission(**limits: int | float) -> tuple[Admission, Stats]:
    stats = Stats()
    lim = MeshLimits(**limits)  # type: ignore[arg-type]
    return Admission(lim, stats, RateLog(logging.getLogger("test"), period=60.0), T.handshake_timeout), stats


def test_room_counts_unadmitted_sessions_in_total_and_per_key() -> None:
    adm, _ = admission(max_sessions=4, max_handshaking=3, max_handshaking_per_introducer=1)
    a = session(phase=Phase.HANDSHAKE)
    a.opened_by = "addr:10.0.0.2"
    sessions = table(a, session(phase=Phase.ALIVE))
    assert adm.room(sessions, "") and adm.room(sessions, "addr:10.0.0.3")
    assert not adm.room(sessions, "addr:10.0.0.2")  # that address holds its one handshake
    assert adm.room(sessions, "addr:10.0.0.2", cap=2)  # a seed's introductions may hold more
    sessions.update(table(session(phase=Phase.CONNECTING), session(phase=Phase.CONNECTING)))
    assert not adm.room(sessions, "")  # max-sessions


def test_the_waiting_room_is_bounded_per_place_and_released_oldest_first() -> None:
    adm, stats = admission(max_waiting_helos=8, max_handshaking_per_introducer=1, max_handshaking=1)
    helos = [Helo(NodeId.random(), endpoint="tcp://10.0.0.2:6000", name="x", incarnation="22" * 8)
             for _ in range(3)]
    assert adm.wait(helos[0], "10.0.0.2", 0.0)
    assert adm.wait(helos[1], "10.0.0.2", 0.1)  # a quarter of 8: two from one address
    assert not adm.wait(helos[2], "10.0.0.2", 0.2)  # the third is refused
    assert (stats.helos_waited, stats.helos_refused) == (2, 1)
    assert adm.due(0.2) == pytest.approx(0.3)  # polled while any waits
    room = table(session(phase=Phase.HANDSHAKE))
    assert list(adm.released(room, 1.0)) == []  # no handshake slot free
    room.clear()
    released = []
    for m, _ in adm.released(room, 1.0):  # the mesh opens each one's session before the next is judged
        released.append(m)
        room[m.sender] = session(m.sender, phase=Phase.HANDSHAKE)
    assert released == [helos[0]]  # one slot: the oldest
    assert list(adm.released({}, 0.2 + T.handshake_timeout)) == []  # the other expired: given up
    assert adm.waiting == {} and stats.helos_refused == 2 and adm.due(9.0) == math.inf


def test_eviction_chooses_a_silent_ghost_else_an_address_over_its_share() -> None:
    adm, _ = admission(max_sessions_per_address=2)
    ghost = session(phase=Phase.ALIVE, source="10.0.0.7")  # admitted at 0, silent since
    live = [session(phase=Phase.ALIVE, source="10.0.0.8") for _ in range(3)]
    for i, s in enumerate(live):
        s.last_heard = 5.0 + i
    assert adm.eviction(table(ghost, *live), "10.0.0.9", 5.0, beat=1.0) == (ghost, "silent since its admission")
    victim, why = adm.eviction(table(*live), "10.0.0.9", 5.0, beat=1.0)  # type: ignore[misc]
    assert victim is live[0] and why == "its address holds more than 2 sessions"
    assert adm.eviction(table(*live[:2]), "10.0.0.9", 5.0, beat=1.0) is None  # each within its share
    assert adm.eviction(table(ghost, *live), "10.0.0.8", 5.0, beat=1.0) is None  # the newcomer's address is full


def test_introductions_back_off_and_blame_is_bounded() -> None:
    adm, stats = admission(introduction_backoff=30.0, max_blamed_addresses=2)
    peer = NodeId.random()
    adm.back_off(peer, 10.0)
    assert adm.backed_off(peer, 39.9) and not adm.backed_off(peer, 40.0)
    for address in ("10.0.0.5#1", "10.0.0.5#2", "10.0.0.6#1", "10.0.0.7#1"):
        adm.blame(address, 0.0)
    assert adm.blamed == {"10.0.0.6": 1, "10.0.0.7": 1} and stats.foreign_frames == 4


# -------------------------------------------------------------------- seeds


def test_a_seed_is_retried_on_one_connection_with_back_off_then_afresh() -> None:
    port = FakePort()
    seeds = Seeds(T, port)
    seeds.add("tcp://10.0.0.9:5000", 0.0)
    tries = []
    now = 0.0
    while now < T.seed_reopen_after + 20:
        seeds.retry(now, lambda endpoint: False)
        tries += [(now, c[1]) for c in port.take("hello")]
        now += 0.5
    conns = [c for c in port.take("connect")]
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(tries)]
    assert gaps[:5] == [1.0, 2.0, 4.0, 8.0, SEED_BACKOFF_MAX]  # doubling, capped
    assert gaps[5] == SEED_BACKOFF_MAX + T.seed_retry  # unanswered past seed_reopen_after: closed, dialled afresh
    assert len(conns) == 2 and port.take("disconnect") == [("disconnect", conns[0][2])]  # reopened once
    assert {conn for _, conn in tries} == {conns[0][2], conns[1][2]}


def test_a_seed_answered_refused_or_forgotten() -> None:
    port = FakePort()
    seeds = Seeds(T, port)
    seeds.add("tcp://10.0.0.9:5000", 0.0)
    seeds.retry(0.0, lambda endpoint: False)
    peer = NodeId.random()
    conn = seeds.adopt(peer, "tcp://10.0.0.9:5000")
    assert conn == 101 and seeds.adopt(peer, "tcp://10.0.0.9:5000") is None  # answered once
    s = session(peer, conn=conn)
    s.seed = "tcp://10.0.0.9:5000"
    assert seeds.due() == math.inf  # answered: no retry due
    seeds.forgotten(s, 7.0)
    assert seeds.due() == 7.0 + T.seed_retry  # not at once (protocol.md 8.5)
    assert seeds.refused(s, "group mismatch") and seeds.due() == math.inf  # never tried again
    assert not seeds.refused(session(), "x")  # not a seed's session


def test_seeds_added_at_runtime_are_bounded_dropped_when_given_up_and_asked_again_when_refused() -> None:
    port = FakePort()
    seeds = Seeds(T, port)
    a, b, c = (f"tcp://10.0.0.{i}:5000" for i in (7, 8, 9))
    seeds.add("tcp://10.0.0.1:5000", 0.0)  # a --seed: not counted, never dropped
    seeds.add_runtime(a, 0.0, limit=2)
    seeds.add_runtime(b, 0.0, limit=2)
    seeds.retry(0.0, lambda endpoint: False)
    conn_a = next(conn for _, endpoint, conn in port.take("connect") if endpoint == a)
    with pytest.raises(TooManySeeds, match=r"mesh\.max-runtime-seeds=2"):  # both await their answer
        seeds.add_runtime(c, 0.0, limit=2)
    seeds.add_runtime(a, 0.0, limit=2)  # asked again: nothing new
    # a gives up: forgotten, its connection closed; a --seed is not dropped.
    seeds.drop(a)
    assert a not in seeds and port.take("disconnect") == [("disconnect", conn_a)]
    seeds.drop("tcp://10.0.0.1:5000")
    assert "tcp://10.0.0.1:5000" in seeds
    seeds.add_runtime(c, 0.0, limit=2)  # room again
    # b answered: past the bound it is the one that stops being a seed (its session goes on).
    peer = NodeId.random()
    assert seeds.adopt(peer, b) is not None
    seeds.add_runtime(a, 1.0, limit=2)
    assert b not in seeds and a in seeds and c in seeds and port.take("disconnect") == []
    # A seed that refused us is dialled again at once when asked again.
    s = session(NodeId.random(), conn=7)
    s.seed = c
    assert seeds.refused(s, "group mismatch") and seeds.get(c) is not None and seeds.get(c).refused  # type: ignore[union-attr]
    seeds.add_runtime(c, 2.0, limit=2)
    assert seeds.get(c).refused is None and seeds.get(c).next_try == 2.0  # type: ignore[union-attr]


# ------------------------------------------------------------ member gossip


def gossip(port: FakePort | None = None, **limits: int | float) -> tuple[MemberGossip, Stats]:
    stats = Stats()
    return MemberGossip(ME.node_id, T, MeshLimits(**limits), stats, rng=random.Random(1),  # type: ignore[arg-type]
                        port=port or FakePort(), now=0.0), stats


def test_member_lists_name_the_admitted_and_go_out_jittered() -> None:
    g, stats = gossip(max_members_listed=2)
    members = [session(phase=Phase.ALIVE) for _ in range(4)]
    for s in members:
        s.incarnation = "22" * 8
    to = members[0]
    listing = g.members_for(to, table(*members, session()), 1.0, reply=False)
    assert len(listing.members) == 2 and to.uuid not in {u for u, _, _ in listing.members}  # sampled to the cap
    assert to.listed == {u for u, _, _ in listing.members} and to.listed_at == 1.0 and stats.lists_sent == 1
    sent = [t / 10 for t in range(0, 200) if g.periodic(table(*members), t / 10) is not None]
    gaps = [b - a for a, b in itertools.pairwise(sent)]
    assert sent and all(0.5 * T.membership_interval <= gap <= 1.5 * T.membership_interval + 0.1 for gap in gaps)


def test_a_list_lacking_our_members_calls_for_ours_unless_we_just_named_them() -> None:
    g, stats = gossip()
    sender = session(phase=Phase.ALIVE, now=0.0)
    ours = session(phase=Phase.ALIVE, now=0.0)
    ours.joined = -10.0  # admitted before we met the sender
    sessions = table(sender, ours)
    assert g.lacking(sender, [], sessions, 20.0)
    sender.listed, sender.listed_at = frozenset({ours.uuid}), 19.0
    assert not g.lacking(sender, [], sessions, 20.0) and stats.lists_not_repeated == 1
    assert not g.lacking(sender, [(ours.uuid, ours.endpoint, "22" * 8)], sessions, 20.0)


def test_a_known_member_is_probed_once_per_handshake_timeout() -> None:
    port = FakePort()
    g, stats = gossip(port)
    uuid = NodeId.random()
    assert g.probe(uuid, "tcp://10.0.0.3:6000", None, 0.0, 0) is True
    assert g.probe(uuid, "tcp://10.0.0.4:6000", None, 1.0, 0) is None  # one probe per handshake timeout
    assert stats.members_probed == 1 and g.due() == T.handshake_timeout
    g.answered(uuid)  # the same incarnation answered there: an alias
    assert g.aliases == {uuid: "tcp://10.0.0.3:6000"} and g.probe(uuid, "tcp://10.0.0.3:6000", None, 9.0, 0) is None
    assert g.probe(uuid, "tcp://10.0.0.5:6000", None, 9.0, 0) is True
    g.expire(9.0 + T.handshake_timeout)
    assert g.probes == {} and port.take("disconnect")[-1] == ("disconnect", 102)


# -------------------------------------------------------------------- clock


def test_a_time_reply_sets_the_offset_only_for_the_peer_we_sync_with() -> None:
    clock = Clock(ME.node_id, 1.0, random.Random(1))
    peer = session(BOB.node_id, phase=Phase.ALIVE)
    probe = clock.probe(peer, 10.0)
    assert probe == Time(sender=ME.node_id, t0=10.0)
    assert clock.take_reply(peer, 9.0, 100.0, 10.2) is False  # not our probe's
    assert clock.take_reply(peer, 10.0, 100.0, 10.2) is True and peer.rtt == pytest.approx(0.2)
    assert clock.offset == 0.0 and clock.synced_with is None
    clock.probe(peer, 20.0)
    peer.sync_pending = True
    synced = clock.take_reply(peer, 20.0, 110.0, 20.2)
    assert synced == ClockSynced(BOB.node_id, pytest.approx(89.9), pytest.approx(0.2), pytest.approx(110.1))
    assert clock.synced_with == BOB.node_id and clock.mesh_time(20.2) == pytest.approx(110.1)
    assert clock.grid_after(20.2) == pytest.approx(20.9 + 0.2)  # mesh 110.1 -> next whole second 111.0
    assert clock.heartbeat_after(20.1) == pytest.approx(20.1)  # mesh 110.0: on the grid


def test_an_admitted_peer_is_probed_at_once_by_the_smaller_uuid() -> None:
    clock = Clock(NodeId(b"\x05" * 16), 1.0, random.Random(1))
    smaller, larger = session(NodeId(b"\x01" * 16), phase=Phase.ALIVE), session(NodeId(b"\x09" * 16), phase=Phase.ALIVE)
    assert clock.admitted(larger, alone=False, now=3.0) is not None and larger.probe_in == 0.5
    assert clock.admitted(smaller, alone=False, now=3.0) is None and 0 <= smaller.probe_in < 0.5
    assert clock.admitted(smaller, alone=True, now=3.0) is not None and smaller.sync_pending  # our clock's source


# ----------------------------------------------------------------- liveness


def test_liveness_judges_each_phase_when_due() -> None:
    port = FakePort()
    live = Liveness(T, Stats(), port)
    alive = session(phase=Phase.ALIVE)
    alive.answered = True
    assert live.due([alive]) == T.suspect_after
    assert live.check(alive, 2.0) is Verdict.KEEP
    assert live.check(alive, T.suspect_after) is Verdict.SILENT
    assert live.check(alive, T.gone_after) is Verdict.GONE
    dialling = session(phase=Phase.CONNECTING)
    assert live.check(dialling, T.handshake_timeout - 0.1) is Verdict.KEEP
    assert live.check(dialling, T.handshake_timeout) is Verdict.TIMED_OUT


def test_an_unanswered_admission_is_judged_by_the_handshake_timeout_and_redialled() -> None:
    port = FakePort()
    stats = Stats()
    live = Liveness(T, stats, port)
    s = session(phase=Phase.ALIVE)  # admitted on its HELO and BOUT; our answer not yet heard
    s.redial_at = T.suspect_after
    assert live.thresholds(s) == (T.handshake_timeout / 2, T.handshake_timeout)
    assert live.check(s, T.suspect_after) is Verdict.SILENT
    s.move(Move.SILENT)  # as the mesh does with that verdict
    assert port.take("disconnect") == [("disconnect", 1)] and stats.answers_redialled == 1
    assert s.reopen_at == T.suspect_after + T.heartbeat_interval and live.due([s]) == s.reopen_at
    live.check(s, s.reopen_at)  # the fresh connection, a heartbeat later, same conn
    assert port.take("connect") == [("connect", s.endpoint, 1)] and port.take("hello")[0][1] == 1
    assert s.reopen_at == math.inf and s.redial_at == T.suspect_after + T.heartbeat_interval + s.suspect_after


# -------------------------------------------------------------------- moves


def test_a_move_is_told_each_heartbeat_until_answered() -> None:
    port = FakePort()
    stats = Stats()
    moves = Moves(1.0, stats, port)
    peer, dialling = session(phase=Phase.ALIVE, conn=7), session(conn=8)
    sessions = table(peer, dialling)
    moves.moved(sessions, 0.0)
    assert moves.moving == {peer.uuid: 0.0} and stats.endpoint_changes == 1
    for now in (0.0, 0.5, 1.0):
        moves.tell(sessions, now)
    assert [c[1] for c in port.take("hello")] == [7, 7]  # at 0 and a heartbeat on, not in between
    assert port.take("connect") == [("connect", peer.endpoint, 7)] * 2  # the same conn, opened afresh
    moves.answered(peer.uuid)
    assert moves.due() == math.inf
    moves.follow(peer, "tcp://10.0.0.22:6000")
    assert peer.endpoint == "tcp://10.0.0.22:6000" and stats.endpoints_followed == 1


# --------------------------------------------------------- the session table


def test_the_table_binds_reports_and_retires_sessions() -> None:
    clock = Clock(ME.node_id, 1.0, random.Random(1))
    sessions = Sessions(T, "g", clock)
    s = sessions.open(BOB.node_id, 3, "tcp://10.0.0.2:6000", 1.0, None)
    assert s.phase is Phase.CONNECTING and sessions.counts[BOB.node_id] == [0, 0]
    assert Sessions.from_session(s, "10.0.0.9#z")  # any, before its first HELO
    Sessions.bind(s, "10.0.0.2#a")
    Sessions.bind(s, "10.0.0.2#b")
    assert Sessions.from_session(s, "10.0.0.2#a") and not Sessions.from_session(s, "10.0.0.3#a")
    Sessions.bind(s, "10.0.0.3#c")  # another address: the old connections hold nothing
    assert s.proven == [] and not Sessions.from_session(s, "10.0.0.2#b")
    s.move(Move.HELO)
    s.move(Move.BOUT)
    assert [p.state for p in sessions.peers(2.0)] == ["alive"] and sessions.conn_of(BOB.node_id) == 3
    assert sessions.remove(s) and not sessions.remove(s)
    sessions.retire(s, 2.0)
    assert [p.state for p in sessions.peers(2.0)] == ["gone"]
    sessions.expire(2.0 + T.gone_retention)
    assert sessions.peers(2.0 + T.gone_retention) == []


def test_a_helo_records_what_it_says_of_its_sender() -> None:
    s = session(BOB.node_id, phase=Phase.ALIVE)
    Sessions.record_helo(s, dataclasses.replace(signed(BOB, at=4.0), beat=0.5, lost=3), "10.0.0.2#a", 4.0, 30.0)
    assert (s.key, s.verified, s.helo_at, s.source) == (BOB.public_key, True, 4000, "10.0.0.2#a")
    assert (s.gone_after, s.suspect_after) == (2.0, 1.0)
    Sessions.record_helo(s, dataclasses.replace(signed(BOB), beat=60.0, lost=100), "10.0.0.2#a", 5.0, 30.0)
    assert s.gone_after == 30.0  # clamped: a HELO must not keep a silent ghost for long


# ------------------------------------------------------------ introductions


def test_introductions_dial_within_the_quotas_and_not_a_seed_awaiting_its_answer() -> None:
    port = FakePort()
    adm, stats = admission(max_handshaking_per_introducer=1)
    seeds = Seeds(T, port)
    g, _ = gossip(port)
    sessions: dict[NodeId, Session] = {}
    intros = Introductions(ME.node_id, lambda: "tcp://10.0.0.1:5000", sessions, {}, {}, limits=MeshLimits(),
                           stats=stats, admission=adm, seeds=seeds, gossip=g, port=port)
    introducer = session(phase=Phase.ALIVE)
    sessions[introducer.uuid] = introducer
    first, second = NodeId.random(), NodeId.random()
    intros.peer(introducer, Peer(introducer.uuid, first, "tcp://10.0.0.5:6000"), 0.0, live=True)
    assert [s.uuid for s in port.opened] == [first] and port.opened[0].opened_by == f"peer:{introducer.uuid}"
    sessions[first] = port.opened[0]
    intros.peer(introducer, Peer(introducer.uuid, second, "tcp://10.0.0.6:6000"), 0.0, live=True)
    assert second in adm.waiting  # its introducer's one handshake is taken: it waits its turn
    seeds.add("tcp://10.0.0.7:6000", 0.0)
    seeds.retry(0.0, lambda endpoint: False)
    intros.peer(introducer, Peer(introducer.uuid, NodeId.random(), "tcp://10.0.0.7:6000"), 0.0, live=True)
    assert stats.seed_intros_skipped == 1
    intros.peer(introducer, Peer(introducer.uuid, NodeId.random(), "tcp://10.0.0.8:6000"), 0.0, live=False)
    assert stats.introductions_refused == 1  # a SUSPECT introducer's PEER is not dialled
    reply = intros.members(introducer, Members(introducer.uuid, members=(), reply=True), 0.0, live=True)
    assert reply is False and stats.lists_received == 1
