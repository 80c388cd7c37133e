"""The mesh state machine: sessions with peers, groups, liveness and time.

Sans-I/O: the driver feeds it received frames, discoveries and the passage of
time (``now``, the node's local clock in seconds), and collects the actions it
returns (connect, send, disconnect, notify).  Nothing here touches a socket or
reads a clock, so whole meshes run deterministically in one process.

Membership is the mesh's own job (HELO, BOUT, GBYE, TIME, BEAT, CHAT, PEER, MEMB);
everything else rides on its sessions as a peer service given at construction
(protocol/service.py): the log, addressed delivery, the system picture's
reports, posts (BULK).  Each other message type goes to its service through a table.

The mesh coordinates its parts, each a module of its own, tested on its own
(docs/architecture.md, "The mesh's parts"): the session record and its one transition
table (session.py), the session table (sessions.py), the handshake (handshake.py), HELO
identity (helo.py), admission quotas and the waiting room (admission.py), introductions
(introductions.py), seeds (seeds.py), member lists and probes (gossip.py), liveness
(liveness.py), clock sync (clock.py), address moves (moves.py), CHAT's fast paths (chat.py).
The mesh itself routes each message, owns the sessions' lifecycle (admitted, ended: the
services and events told), runs the timers and sends the heartbeats.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Final

from ..errors import DecodeError
from ..ids import NodeId, address_of
from ..limits import MeshLimits
from ..ratelog import RateLog
from ..security import NodeIdentity
from ..wire import MESH_TYPES, TAG_BEAT, TAG_CHAT, Beat, Chat, Gbye, Group, Helo, Members, Message, Peer, Time
from ..wire import decode as _decode
from .admission import Admission
from .chat import Chats
from .clock import Clock
from .events import (
    Action,
    ChatReceived,
    Connect,
    CutOff,
    Disconnect,
    Event,
    Notify,
    PeerExcluded,
    PeerJoined,
    PeerLeft,
    PeerNew,
    PeerRefused,
    PeerStateChanged,
    Send,
)
from .gossip import MemberGossip
from .handshake import Handshake
from .helo import Greeting
from .introductions import Introductions
from .liveness import Liveness, Verdict
from .moves import Moves
from .parts import Stats
from .seeds import Seeds
from .service import PeerFacts, PeerSeen, PeerService, group_scale
from .session import Move, Phase, Session, Timing
from .sessions import PeerInfo, Sessions

__all__ = ["Mesh", "PeerInfo", "Phase", "Timing"]

log = logging.getLogger("huddle.mesh")

# What a flood of bad input makes the mesh log: per kind, one line a minute, saying how
# many were left out (ratelog.py); every one of them is counted in Stats.
_LOG_EVERY: Final = 60.0
# A tick this many seconds after the deadline the mesh gave: this node's own loop is late (its
# process starved of CPU, or busy), and the peers' answers may be waiting unread.
LATE_TICK: Final = 0.5
# The messages the mesh handles itself (membership, time, chat): no service may claim them.
_OWN_TYPES: Final = MESH_TYPES  # the wire's table says which messages are the mesh's own


class _Port:
    """The mesh's side of the port its parts reach peers through (parts.Dialler): actions queued."""

    __slots__ = ("_mesh",)

    def __init__(self, mesh: Mesh) -> None:
        self._mesh = mesh

    def connect(self, endpoint: str, conn: int | None = None) -> int:
        if conn is None:
            return self._mesh._connect(endpoint)
        self._mesh._actions.append(Connect(conn, endpoint))
        return conn

    def open(self, uuid: NodeId, endpoint: str, now: float, introducer: NodeId | None, listed: int) -> Session:
        return self._mesh._open(uuid, endpoint, now, introducer, listed=listed)

    def redial(self, s: Session, now: float) -> None:
        self._mesh.liveness.redial(s, now)

    def disconnect(self, conn: int, *, flush: bool = False) -> None:
        self._mesh._actions.append(Disconnect(conn, flush=flush))

    def send_hello(self, conn: int, *, reply: bool, to: NodeId | None, now: float, listed: int = 0) -> None:
        self._mesh._send_hello(conn, reply=reply, to=to, now=now, listed=listed)

    def note(self, when: float) -> None:
        self._mesh._note(when)

    def new(self, uuid: NodeId, conn: int, endpoint: str, now: float) -> Session:
        return self._mesh._new(uuid, conn, endpoint, now, None)

    def admit(self, s: Session, now: float) -> None:
        self._mesh._admit(s, now)

    def end(self, s: Session, reason: str, now: float) -> None:
        self._mesh._end(s, reason, now)

    def forget(self, s: Session, now: float) -> None:
        self._mesh._forget(s, now)

    def heard(self, s: Session, now: float) -> None:
        self._mesh._heard(s, now)

    def make_room(self, address: str, now: float) -> None:
        self._mesh._make_room(address, now)

    def send(self, conn: int, msg: Message) -> None:
        self._mesh._send(conn, msg)

    def notify(self, event: Event) -> None:
        self._mesh._notify(event)


class Mesh:
    """One node's view of its group: the peer sessions and the clock offset."""

    def __init__(
        self,
        uuid: NodeId,
        *,
        name: str,
        group: str,
        endpoint: str,
        incarnation: str,
        now: float,
        timing: Timing | None = None,
        excluded: dict[NodeId, str] | None = None,
        node_type: str = "standard",
        rate: int = 0,
        limits: MeshLimits | None = None,
        guests: int = 0,
        services: Iterable[PeerService] = (),
        identity: NodeIdentity | None = None,
        secure: bool = False,
        tags: Mapping[str, str] | None = None,
    ) -> None:
        self.timing: Final = timing or Timing()
        self.limits: Final = limits or MeshLimits()
        self.beat: Final = self.timing.heartbeat_interval
        # The heartbeats we allow to be lost, as we announce it: peers then wait
        # beat * (lost + 1) before they count us gone (our gone_after).
        self.lost: Final = max(1, min(100, round(self.timing.gone_after / self.beat) - 1))
        self.uuid: Final = uuid
        # This node's key: it signs our HELOs (a test or tool that gives none gets a fresh one).
        # ``secure`` (a group secret): only ids a key gives are admitted (protocol.md 4.1).
        self.identity: Final = identity or NodeIdentity.generate()
        # Constructing our own HELO validates name, endpoint, incarnation, type and group.
        self.greeting: Final = Greeting(uuid, name, group, incarnation, node_type, float(self.beat), self.lost, rate,
                                        guests, self.identity, dict(tags or {}))
        self.greeting.check(endpoint)
        self.greeting.bout  # noqa: B018 (constructing it checks the group's name)
        self.secure: Final = secure
        self.name: Final = name
        self.group: Final = group
        self.endpoint = endpoint  # changes only through set_endpoint (this node's address changed)
        self.incarnation: Final = incarnation
        self.node_type: Final = node_type
        self.tags: Final = self.greeting.tags  # said in our HELO and our reports (protocol.md 4.1, "Tags")
        self.rate: Final = rate
        self.guests: Final = guests  # our marco port when we host Noam guests (0: we do not), said in our HELO
        # Deterministic per node (for the simulator): the jitter of member lists and first probes.
        self._rng = random.Random(bytes(uuid) + bytes.fromhex(incarnation))
        self.clock: Final = Clock(uuid, self.timing.heartbeat_interval, self._rng)
        self.stats = Stats()
        self.sessions: Final = Sessions(self.timing, group, self.clock)
        self.chats: Final = Chats(uuid, self.sessions, self.stats, self.clock)
        # CHAT's fast paths (chat.py; docs/architecture.md), bound here so that no call comes
        # between the driver and them.  In: an ALIVE peer's CHAT taken and counted as receive()
        # would, its event returned for the caller to publish; None: nothing changed, hand the
        # frames to receive().  Out: the frames and the connections, counted as sent; raises
        # LocalProtocolError as chat() does.
        self.receive_chat = self.chats.receive
        self.chat_frames = self.chats.frames
        # The table's dicts, read on every message: bound once, not looked up each time.
        self._sessions: Final = self.sessions.by_uuid
        self._last_frame: Final = self.sessions.last_frame
        self._counts: Final = self.sessions.counts
        port = _Port(self)
        self.seeds: Final = Seeds(self.timing, port, notify=self._notify, mesh_time=self.mesh_time)
        self._refused: Final[dict[NodeId, str]] = {}  # uuid -> incarnation refused
        self.excluded: Final[dict[NodeId, str]] = dict(excluded or {})  # uuid -> why; never admitted again
        self._reported: set[NodeId] = set()  # reported new once
        self._actions: list[Action] = []
        self._next_conn = 1
        self._next_beat = now
        # The soonest of this mesh's own timers (liveness, handshakes, seeds, held HELOs, probes,
        # an address move): computed at each tick, brought forward by what comes between two.
        self._due = now
        self._asked = math.inf  # the soonest deadline next_deadline gave since the last tick
        self._late_at = -math.inf  # when a tick last came LATE_TICK or more after its deadline
        self._closed = False
        self.cut_off = False  # had peers and lost the last one
        self.phase_changes = 0  # sessions gone SUSPECT or heard again: the picture's reports watch it (14)
        self._lines = RateLog(log, period=_LOG_EVERY)  # per kind: decode, foreign, helo, intro, evict, identity
        self.admission: Final = Admission(self.limits, self.stats, self._lines, self.timing.handshake_timeout)
        self.blamed: Final = self.admission.blamed  # per address: frames under another connection's UUID
        self.moves: Final = Moves(self.beat, self.stats, port)
        self.liveness: Final = Liveness(self.timing, self.stats, port)
        self.gossip: Final = MemberGossip(uuid, self.timing, self.limits, self.stats, rng=self._rng, port=port, now=now)
        self.handshake: Final = Handshake(uuid, group, self._sessions, refused=self._refused, excluded=self.excluded,
                                          secure=secure, limits=self.limits, stats=self.stats, lines=self._lines,
                                          clock=self.clock, admission=self.admission, seeds=self.seeds,
                                          gossip=self.gossip, moves=self.moves, port=port)
        self.intros: Final = Introductions(uuid, lambda: self.endpoint, self._sessions, self._refused, self.excluded,
                                           limits=self.limits, stats=self.stats, admission=self.admission,
                                           seeds=self.seeds, gossip=self.gossip, port=port)
        self.push_on_admit = True  # send a newly admitted peer our member list (tests turn it off)
        self.deltas = True  # our HELO says we understand RAWS deltas (tests turn it off: an older node)
        # The peer services (protocol/service.py), in the order given: ticked, told of peers and
        # asked for actions in that order; each received message goes to the one that handles its type.
        self._services: Final[tuple[PeerService, ...]] = tuple(services)
        self._dispatch: Final[dict[type[Message], Callable[[NodeId, Message, float], None]]] = {}
        for service in self._services:
            for kind in service.handles:
                if kind in _OWN_TYPES:
                    raise ValueError(f"{kind.__name__} is the mesh's own message: no service may handle it")
                if kind in self._dispatch:
                    raise ValueError(f"two services handle {kind.__name__}")
                self._dispatch[kind] = service.receive
        for service in self._services:
            service.attach(self)
        # Asked after every message the driver hands in: bound once, not looked up each time.
        self._takers: Final = tuple(service.take_actions for service in self._services)
        self._deadlines: Final = tuple(service.next_deadline for service in self._services)

    # ------------------------------------------------------------------ queries

    def mesh_time(self, now: float) -> float:
        return now + self.clock.offset

    @property
    def offset(self) -> float:
        """Mesh time minus this node's local clock (clock.py)."""
        return self.clock.offset

    @property
    def synced_with(self) -> NodeId | None:
        """The peer whose clock this node took (None: none yet)."""
        return self.clock.synced_with

    def take_actions(self) -> list[Action]:
        actions, self._actions = self._actions, []
        for take in self._takers:
            more = take()
            if more:
                actions.extend(more)
        return actions

    @property
    def exclude_slow_after(self) -> float:
        return self.timing.exclude_slow_after

    def seen(self, now: float, keep: float) -> list[PeerSeen]:
        """Every node heard from within ``keep`` seconds or with a session, the excluded left
        out: what the system picture's reports say of them (:meth:`Sessions.seen`)."""
        return self.sessions.seen(now, keep, self.excluded)

    def peers(self, now: float) -> list[PeerInfo]:
        """Every admitted peer, then recently gone ones (state ``gone``)."""
        return self.sessions.peers(now)

    @property
    def dialled_afresh(self) -> int:
        """How many times an admitted peer dialled us afresh (it lost our session)."""
        return self.stats.dialled_afresh

    def departure(self, peer: NodeId) -> str | None:
        """Why ``peer``'s last admitted session ended, while it is listed gone (:meth:`Sessions.departure`)."""
        return self.sessions.departure(peer)

    def alive_peers(self) -> list[NodeId]:
        return [s.uuid for s in self._sessions.values() if s.admitted]

    def guest_hosts(self) -> list[NodeId]:
        """The ALIVE peers that host guests on our marco port (:meth:`Sessions.guest_hosts`)."""
        return self.sessions.guest_hosts(self.guests)

    def conn_of(self, peer: NodeId) -> int | None:
        return self.sessions.conn_of(peer)

    def source_of(self, peer: NodeId) -> str:
        """The address a peer's HELO came from ("" if unknown): guest hosts are bounded per address."""
        return self.sessions.source_of(peer)

    def bound_by_address(self) -> dict[str, int]:
        """Per source address, the sessions whose HELO was accepted from there (section 2.1)."""
        return self.sessions.bound_by_address()

    # ------------------------------------------------------------- discovery

    def add_seed(self, endpoint: str, now: float, *, runtime: bool = False) -> None:
        """Keep trying ``endpoint`` (``tcp://IP:PORT``) until a peer answers there; ``runtime``: a
        seed added while the node runs (``huddle join``), bounded (seeds.py, TooManySeeds)."""
        if endpoint == self.endpoint or (endpoint in self.seeds and not runtime):
            return
        if runtime:
            self.seeds.add_runtime(endpoint, now, self.limits.max_runtime_seeds)
        else:
            self.seeds.add(endpoint, now)
        self.seeds.retry(now, self.sessions.endpoint_known)

    def discovered(self, uuid: NodeId, endpoint: str, now: float) -> None:
        """A discovery mechanism saw ``uuid`` listening at ``endpoint`` (introductions.py)."""
        if not self._closed:
            self.intros.discovered(uuid, endpoint, now)

    def set_endpoint(self, endpoint: str, now: float) -> None:
        """This node's own address changed (a DHCP renewal, another Wi-Fi): advertise
        ``endpoint`` from now on.  Every peer is told with a HELO on a fresh connection
        (from the new address), again each heartbeat until it answers with a HELO: a
        peer accepts it once it finds the old address silent (SUSPECT, protocol.md 8.8), and
        its stale connection from the old address must be gone first (section 2.1)."""
        self.greeting.check(endpoint)
        if endpoint == self.endpoint or self._closed:
            return
        self.endpoint = endpoint
        self.moves.moved(self._sessions, now)
        self.seeds.moved(now)
        self.moves.tell(self._sessions, now)

    def connect_failed(self, conn: int, now: float) -> None:
        """The driver could not open connection ``conn`` (out of descriptors, or any
        other error): whatever used it fails as if its peer never answered."""
        self.stats.connect_failed += 1
        for s in [x for x in self._sessions.values() if x.conn == conn]:
            if s.admitted:
                self._end(s, "connection failed", now)
            else:
                self._actions.append(Disconnect(conn))
                self._forget(s, now)
                self.admission.handshake_failed(s, now)
        self.seeds.connect_failed(conn)

    def not_responding(self, conn: int, now: float) -> None:
        """The driver could not queue another message on ``conn``: its send
        buffers are full.  The peer is suspect until it is heard from again."""
        for s in self._sessions.values():
            if s.conn == conn and s.phase is Phase.ALIVE:
                s.move(Move.SILENT)
                self.phase_changes += 1
                self._notify(PeerStateChanged(s.uuid, s.name, s.phase.value, self.mesh_time(now)))

    # ---------------------------------------------------------------- commands

    def chat(self, text: str, now: float, to: NodeId | None = None) -> int:
        """Send a CHAT to one admitted peer, or to every one.  Returns how many."""
        msg = Chat(sender=self.uuid, text=text)
        conns = self.chats.conns(to)
        for conn in conns:
            self._send(conn, msg)
        return len(conns)

    def leave(self, now: float) -> None:
        """Say GBYE to everyone and close every connection."""
        self._closed = self.chats.closed = True
        bye = Gbye(sender=self.uuid, reason="")
        for s in list(self._sessions.values()):
            if s.phase is not Phase.CONNECTING:
                self._send(s.conn, bye)
            self._actions.append(Disconnect(s.conn, flush=True))
        self.seeds.close()
        self.gossip.close()
        self.sessions.clear()

    # ----------------------------------------------------------------- receive

    def receive(self, frames: list[bytes], now: float, source: str = "") -> bool:
        """Handle the frames of one message from the ROUTER.  True if it was
        accepted, False if it was dropped (and counted).

        ``source`` is the connection the message came from: its address, and the
        sender's routing suffix if it has one (ids.CONN_MARK; "" if the driver cannot
        tell: then nothing is checked).  A session is bound to the connection of the
        HELO that opened it (and of the later HELOs it took from that address); a
        message under its UUID from another connection is dropped and counted against
        that address (``blamed``), never against the session, except a HELO from the
        session's own address (a restart, a probe; judged as any HELO) or, once the
        session is SUSPECT, from another (the peer moved)."""
        if len(frames) == 3 and frames[1] == TAG_CHAT:
            event = self.receive_chat(frames, now, source)  # counted there, if it takes the message
            if event is not None:
                self._notify(event)
                return True
        self.stats.received += 1
        if len(frames) == 3 and frames[1] == TAG_BEAT and not frames[2] and not self._closed:
            # Heartbeats are most of what an idle node receives: an admitted peer's needs no decoding.
            s = self._sessions.get(frames[0])  # type: ignore[call-overload]
            if s is not None and s.admitted and (s.source == source or not source):
                self._heard(s, now)
                s.answered = True
                return True
        try:
            msg = _decode(frames)
        except DecodeError as exc:
            self.stats.decode_errors += 1
            limit = self.timing.exclude_after_errors
            s = self._sessions.get(frames[0]) if frames and isinstance(frames[0], bytes) else None  # type: ignore[call-overload]
            if s is not None and source and not Sessions.from_session(s, source):
                self.admission.blame(source, now)  # not the session's connection: never towards its exclusion
            elif s is not None and s.admitted and limit:
                s.errors += 1
                if s.errors >= limit:
                    self._cut_incarnation(s, f"{s.errors} undecodable messages", now)
            self._lines.warning("decode", now, "dropped undecodable message (%d so far): %s",
                                self.stats.decode_errors, exc)
            return False
        if source:
            s = self._sessions.get(msg.sender)
            if (s is not None and not Sessions.from_session(s, source)
                    and not (isinstance(msg, Helo) and (s.phase is Phase.SUSPECT
                                                        or address_of(source) == address_of(s.source)))):
                self.admission.blame(source, now)
                return False
        if msg.sender in self._counts:
            self._counts[msg.sender][1] += len(frames[2]) if len(frames) == 3 else len(frames[2]) + len(frames[3])
        return self.handle(msg, now, source)

    def handle(self, msg: Message, now: float, source: str = "") -> bool:
        """Handle a decoded message (from ``source``, "" if unknown).  True if it was accepted."""
        if self._closed:
            return False
        if isinstance(msg, Helo):
            return self.handshake.helo(msg, now, source)
        if isinstance(msg, Gbye):
            return self.handshake.gbye(msg, now)
        s = self._sessions.get(msg.sender)
        if s is None or s.phase is Phase.CONNECTING:
            self.stats.dropped_unintroduced += 1
            return False
        if isinstance(msg, Group):
            self._heard(s, now)
            return self.handshake.bout(s, msg, now)
        if isinstance(msg, Time):
            self._heard(s, now)
            s.answered = True  # a probe or its reply: it has admitted us, or we probed it
            return self._on_time(s, msg, now)
        if not s.admitted:
            # Before its BOUT, nothing else counts (not even as a sign of life).
            self.stats.dropped_unintroduced += 1
            return False
        was_suspect = s.phase is Phase.SUSPECT
        self._heard(s, now)
        s.answered = True
        receive = self._dispatch.get(type(msg))
        if receive is not None:
            receive(s.uuid, msg, now)
            return True
        if isinstance(msg, Beat):
            return True
        if isinstance(msg, Chat):
            self.stats.chats_received += 1
            self._notify(ChatReceived(s.uuid, s.name, msg.text, self.mesh_time(now)))
            return True
        if isinstance(msg, Peer):
            self.intros.peer(s, msg, now, live=not was_suspect)
            return True
        if isinstance(msg, Members):
            if self.intros.members(s, msg, now, live=not was_suspect):
                self._send_members(s, now, reply=True)
            return True
        # A type no service of this node handles (a node that keeps no log, say): dropped.
        self.stats.dropped_unintroduced += 1
        return False

    def _send_members(self, to: Session, now: float, *, reply: bool) -> None:
        self._send(to.conn, self.gossip.members_for(to, self._sessions, now, reply=reply))

    def _on_time(self, s: Session, m: Time, now: float) -> bool:
        if m.t1 is None:
            self._send(s.conn, self.clock.answer(m, now))
            return True
        taken = self.clock.take_reply(s, m.t0, m.t1, now)
        if taken is False:
            self.stats.stale_time_replies += 1  # not the answer to our outstanding probe
            return False
        if taken is not True:
            self._notify(taken)  # our clock now follows this peer's
        return True

    # -------------------------------------------------------------------- time

    def tick(self, now: float) -> None:
        """Advance timers: heartbeats, liveness, handshakes, seeds, probes.

        Heartbeats go out on a grid of mesh time (every ``heartbeat_interval`` from 0), so
        the members of a group, whose mesh clocks agree, beat at the same moments and each
        one reads its peers' heartbeats in a few batches rather than one by one.  The
        periodic work that may wait for a heartbeat goes out with one: TIME probes (in place
        of that peer's BEAT), member lists, and what the services send on that tick (a peer
        sent anything else on this tick gets no BEAT: every message is a sign of life)."""
        if self._closed:
            return
        t = self.timing
        if now - self._asked >= LATE_TICK:
            self._late_at = now
            self.stats.late_ticks += 1
        self._asked = math.inf
        self._answer_waiting(now)
        beat_at = self._next_beat
        beating = now >= beat_at
        # A TIME probe replaces the BEAT it goes with; its interval counts from the heartbeat's
        # place on the grid, so that the next one falls on a heartbeat too.
        probe_base = beat_at if now - beat_at < t.heartbeat_interval else now
        probe_every = t.rtt_probe_interval * self._probe_scale() if beating else 0.0  # S as the group is now
        told: set[int] = set()
        for s in list(self._sessions.values()):
            verdict = self.liveness.check(s, now)  # a stuck connection re-dialled on the way
            if verdict is Verdict.GONE:
                self._end(s, "timeout", now)
                continue
            if verdict is Verdict.TIMED_OUT:
                self._actions.append(Disconnect(s.conn))
                self._forget(s, now)
                # Our own loop late within the handshake's time: its answer may be what waited unread.
                self.admission.handshake_failed(s, now, spared=now - self._late_at < t.handshake_timeout)
                continue
            if verdict is Verdict.SILENT:
                s.move(Move.SILENT)
                self.phase_changes += 1
                self._notify(PeerStateChanged(s.uuid, s.name, s.phase.value, self.mesh_time(now)))
            if beating and s.admitted and now >= s.probed + s.probe_in * probe_every:
                self._probe(s, now)
                s.probed, s.probe_in = probe_base, 1.0
                told.add(s.conn)
        self.sessions.expire(now)
        self.gossip.expire(now)
        listing = self.gossip.periodic(self._sessions, now) if beating else None
        if listing is not None:
            chosen, members = listing
            self._send(chosen.conn, members)
            told.add(chosen.conn)
        self.seeds.retry(now, self.sessions.endpoint_known)
        if self.moves.moving:
            self.moves.tell(self._sessions, now)
        for service in self._services:
            service.tick(now)
        if beating:
            # What the services send now goes before the heartbeats, which it makes needless.
            for take in self._takers:
                more = take()
                if more:
                    self._actions.extend(more)
                    told.update(a.conn for a in more if isinstance(a, Send))
            beat = Beat(sender=self.uuid)
            for s in self._sessions.values():
                if s.admitted and s.conn not in told:
                    self._send(s.conn, beat)
            self._next_beat = self.clock.grid_after(now)
        self._due = self._own_deadline(now)

    def heartbeat_after(self, when: float) -> float:
        """The first heartbeat moment at or after ``when`` (a multiple of the interval in mesh time)."""
        return self.clock.heartbeat_after(when)

    def _own_deadline(self, now: float) -> float:
        """The soonest of this mesh's own timers but the heartbeat (which ticks anyway), from scratch."""
        due = self.liveness.due(self._sessions.values())
        return min(due, self.seeds.due(), self.admission.due(now), self.gossip.due(), self.moves.due())

    def _note(self, when: float) -> None:
        """A timer of this mesh's own is due at ``when`` (between two ticks): tick by then."""
        self._due = min(self._due, when)

    def next_deadline(self, now: float) -> float:
        """The latest time by which :meth:`tick` should be called again: the next heartbeat,
        or sooner when a timer of the mesh's own or of a service is due.  Cheap (no loop over
        the peers): the driver asks after every input."""
        deadline = self._next_beat if self._next_beat < self._due else self._due
        for due in self._deadlines:  # no min(): this runs after every message a sender sends
            when = due(now)
            if when < deadline:  # noqa: PLR1730 (min() costs a call here)
                deadline = when
        # A tick LATE_TICK after this (after now, for a deadline already past) is late.
        due_by = deadline if deadline > now else now
        if due_by < self._asked:  # noqa: PLR1730
            self._asked = due_by
        return deadline

    # ---------------------------------------------------------------- internals

    def _notify(self, event: Event) -> None:
        self._actions.append(Notify(event))

    def _send(self, conn: int, msg: Message) -> None:
        self.stats.sent += 1
        self._actions.append(Send(conn, msg))

    def _connect(self, endpoint: str) -> int:
        conn = self._next_conn
        self._next_conn += 1
        self._actions.append(Connect(conn, endpoint))
        return conn

    def _send_hello(self, conn: int, *, reply: bool, to: NodeId | None, now: float, listed: int = 0) -> None:
        """Our HELO (signed: protocol.md 4.1) and BOUT on ``conn``, to ``to`` (None: a seed,
        whose id we do not know); ``listed``: the size of the member list we dial on, if any."""
        # Our admitted peers; dialling the members of a list, as many as it names (we know them
        # all, and each member we dial then sends us its own list only if it may know more).
        peers = max(listed, self.sessions.count_admitted())
        self._send(conn, self.greeting.helo(self.endpoint, reply=reply, peers=peers, deltas=self.deltas, now=now, to=to))
        self._send(conn, self.greeting.bout)

    def _new(self, uuid: NodeId, conn: int, endpoint: str, now: float, introducer: NodeId | None) -> Session:
        self._note(now + self.timing.handshake_timeout)
        return self.sessions.open(uuid, conn, endpoint, now, introducer)

    def _open(
        self, uuid: NodeId, endpoint: str, now: float, introducer: NodeId | None, *, send_helo: bool = True,
        listed: int = 0,
    ) -> Session:
        s = self._new(uuid, self._connect(endpoint), endpoint, now, introducer)
        if send_helo:
            self._send_hello(s.conn, reply=False, to=uuid, now=now, listed=listed)
        return s

    def _heard(self, s: Session, now: float) -> None:
        s.last_heard = now
        self._last_frame[s.uuid] = now
        self._counts[s.uuid][0] += 1
        if s.phase is Phase.SUSPECT:
            s.move(Move.HEARD)
            self.phase_changes += 1
            self._notify(PeerStateChanged(s.uuid, s.name, s.phase.value, self.mesh_time(now)))

    def _admit(self, s: Session, now: float) -> None:
        others = [x for x in self._sessions.values() if x.admitted and x is not s]
        s.move(Move.BOUT)
        s.joined = now
        self._note(s.last_heard + s.suspect_after)
        if not s.answered:
            s.redial_at = s.last_heard + s.suspect_after
        self.sessions.returned(s.uuid)
        self.seeds.admitted(s)
        self._notify(PeerJoined(s.uuid, s.name, s.endpoint, self.mesh_time(now)))
        if self.cut_off:
            self.cut_off = False
            self._notify(CutOff(False, self.mesh_time(now)))
        if s.uuid not in self._reported:
            self._reported.add(s.uuid)
            self._notify(PeerNew(s.uuid, s.name, self.mesh_time(now)))
        if self._services:
            facts = PeerFacts(s.incarnation or "", s.rate, s.name, s.node_type, s.deltas, address_of(s.source))
            for service in self._services:
                service.peer_up(s.uuid, s.conn, now, facts)
        # Our member list to the newcomer, if it may know fewer members than we do (it dials
        # the ones it lacks): one message per admission, where a PEER to every other member
        # made a join into N cost about N² messages (protocol.md 4.8).
        if self.push_on_admit and others and s.helo_peers <= len(others):
            self._send_members(s, now, reply=False)
        probe = self.clock.admitted(s, not others, now)
        if probe is not None:
            self._send(s.conn, probe)
        self._answer_waiting(now)  # a handshake slot just freed

    def _probe(self, s: Session, now: float) -> None:
        self._send(s.conn, self.clock.probe(s, now))

    def _probe_scale(self) -> float:
        """How much longer than ``rtt_probe_interval`` a peer's probes are apart: past 10
        nodes (our admitted peers plus one), the group's size / 10, as the picture scales its
        reports (protocol.md 4.6, 14).  Every member probes every other, so the probes and
        their replies would grow with the square of the group; scaled, a node sends and
        answers about 4 a second whatever the group's size (at 64: 25 a second before)."""
        return group_scale(1 + sum(1 for s in self._sessions.values() if s.admitted))

    def _end(self, s: Session, reason: str, now: float) -> None:
        self._actions.append(Disconnect(s.conn))
        self._forget(s, now)
        if s.admitted:
            self.sessions.retire(s, now, reason)
            self._notify(PeerLeft(s.uuid, s.name, reason, self.mesh_time(now)))
            if not self._closed and not self.cut_off and not any(x.admitted for x in self._sessions.values()):
                self.cut_off = True
                self._notify(CutOff(True, self.mesh_time(now)))

    def _forget(self, s: Session, now: float) -> None:
        if self.sessions.remove(s):
            self.gossip.aliases.pop(s.uuid, None)
            for service in self._services:
                service.peer_down(s.uuid, now)
        self.seeds.forgotten(s, now)

    def _cut_incarnation(self, s: Session, reason: str, now: float) -> None:
        """An automatic exclusion: end the session (GBYE ``excluded: reason``) and refuse
        this incarnation of the peer until it restarts.  Not for good, as :meth:`exclude`
        is: what the peer did was seen on one connection, and a UUID is public — an
        impostor must not be able to get a member banned for good (protocol.md 8.6)."""
        self.stats.auto_excluded += 1
        log.warning("excluding %s (%s) until it restarts: %s", s.uuid.short, s.name or "?", reason)
        self._send(s.conn, Gbye(sender=self.uuid, reason=f"excluded: {reason}"))
        self._end(s, f"excluded: {reason}", now)
        self._refused[s.uuid] = s.incarnation or ""
        for service in self._services:
            service.forget(s.uuid)
        self._notify(PeerRefused(s.uuid, s.endpoint, f"excluded until it restarts: {reason}", True,
                                 self.mesh_time(now)))

    def exclude(self, uuid: NodeId, reason: str, now: float) -> bool:
        """Exclude a node for good: end its session (GBYE ``excluded: reason``),
        drop its channel, and never admit its UUID again.  False if it already was."""
        if uuid in self.excluded or uuid == self.uuid:
            return False
        self.excluded[uuid] = reason
        s = self._sessions.get(uuid)
        name = s.name if s is not None else ""
        log.warning("excluding %s (%s): %s", uuid.short, name or "?", reason)
        if s is not None:
            self._send(s.conn, Gbye(sender=self.uuid, reason=f"excluded: {reason}"))
            self._end(s, f"excluded: {reason}", now)
        for service in self._services:
            service.forget(uuid)
        self._last_frame.pop(uuid, None)
        self._notify(PeerExcluded(uuid, name, reason, self.mesh_time(now)))
        return True

    def end_incarnation(self, peer: NodeId, reason: str, now: float) -> bool:
        """A service's automatic exclusion of ``peer`` (:meth:`_cut_incarnation`); False,
        and the services told to forget it, if there is no session with it."""
        s = self._sessions.get(peer)
        if s is None:
            for service in self._services:
                service.forget(peer)
            return False
        self._cut_incarnation(s, reason, now)
        return True

    # bounds --------------------------------------------------------------------

    def _make_room(self, address: str, now: float) -> None:
        """The session table is full and a HELO from ``address`` needs a slot: end the session
        admission chooses, if any (protocol.md 8.6, :meth:`Admission.eviction`)."""
        chosen = self.admission.eviction(self._sessions, address, now, self.beat)
        if chosen is None:
            return
        victim, why = chosen
        self.stats.sessions_evicted += 1
        self._lines.warning("evict", now, "ended the session of %s from %s to make room for a HELO from %s: %s "
                            "(%d so far)", victim.uuid.short, address_of(victim.source) or "?", address or "?",
                            why, self.stats.sessions_evicted)
        self._end(victim, f"evicted: {why}", now)

    def _answer_waiting(self, now: float) -> None:
        """Answer the held HELOs and PEERs that freed handshake slots let in, oldest first."""
        for m, via in self.admission.released(self._sessions, now):
            if isinstance(m, Helo):
                # Its BOUT came while it waited and was dropped: answer as if we opened the
                # session (a HELO with reply false), so that it says HELO and BOUT again.
                self.handshake.checked(dataclasses.replace(m, reply=True), now, via)  # checked when it came
                continue
            introducer = self._sessions.get(m.sender)
            if introducer is not None and introducer.phase is Phase.ALIVE:
                self.intros.peer(introducer, m, now, live=True)
