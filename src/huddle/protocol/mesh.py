"""The mesh state machine: sessions with peers, groups, liveness and time.

Sans-I/O: the driver feeds it received frames, discoveries and the passage of
time (``now``, the node's local clock in seconds), and collects the actions it
returns (connect, send, disconnect, notify).  Nothing here touches a socket or
reads a clock, so whole meshes run deterministically in one process.

Membership is the mesh's own job (HELO, BOUT, GBYE, TIME, BEAT, CHAT, PEER, MEMB);
everything else rides on its sessions as a peer service given at construction
(protocol/service.py): the log, addressed delivery, the system picture's
reports, posts (BULK).  Each other message type goes to its service through a table.

A session with a peer goes through these phases::

    CONNECTING --HELO--> HANDSHAKE --BOUT(same group)--> ALIVE <--> SUSPECT
        |                    |                              |
        +----- timeout ------+--- BOUT(other group) ---+    +-- silence / GBYE --> (removed)
                                                       v
                                                 refused (GBYE sent)
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import math
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from ..errors import DecodeError, NoSuchPeer
from ..ids import NodeId, address_of
from ..limits import MeshLimits
from ..ratelog import RateLog
from ..security import NodeIdentity, fingerprint, key_derived, node_id_for, verify
from ..wire import (
    MAX_BODY,
    PROTOCOL_VERSION,
    Beat,
    Chat,
    Gbye,
    Group,
    Helo,
    MemberEntry,
    Members,
    Message,
    Peer,
    Time,
    encode_parts,
    helo_signed,
)
from ..wire import decode as _decode
from .events import (
    Action,
    ChatReceived,
    ClockSynced,
    Connect,
    Counters,
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
from .service import BUSY_POLL, PeerFacts, PeerSeen, PeerService, group_scale

__all__ = ["Mesh", "PeerInfo", "Phase", "Timing"]

log = logging.getLogger("huddle.mesh")

_SEED_BACKOFF_MAX: Final = 10.0
# What a flood of bad input makes the mesh log: per kind, one line a minute, saying how
# many were left out (ratelog.py); every one of them is counted in Stats.
_LOG_EVERY: Final = 60.0
# A tick this many seconds after the deadline the mesh gave: this node's own loop is late (its
# process starved of CPU, or busy), and the peers' answers may be waiting unread.
LATE_TICK: Final = 0.5
# The messages the mesh handles itself (membership, time, chat): no service may claim them.
_OWN_TYPES: Final = frozenset({Helo, Gbye, Group, Time, Beat, Chat, Peer, Members})
# Connections from a session's own address, besides its latest, that carried a HELO of the session
# and so may carry its messages (a probe's, a re-dialled DEALER's, while the older one closes).
_PROVEN: Final = 3


class Phase(enum.Enum):
    CONNECTING = "connecting"  # we sent HELO, have not heard theirs
    HANDSHAKE = "handshake"  # we have their HELO, wait for their BOUT
    ALIVE = "alive"
    SUSPECT = "suspect"


@dataclass(frozen=True, slots=True)
class Timing:
    """Liveness and retry timings, in seconds."""

    heartbeat_interval: float = 1.0
    suspect_after: float = 2.5
    gone_after: float = 5.0
    handshake_timeout: float = 5.0
    seed_retry: float = 1.0
    rtt_probe_interval: float = 5.0
    gone_retention: float = 60.0
    exclude_after_errors: int = 100  # undecodable messages from an admitted peer before it is excluded (0: never)
    exclude_slow_after: float = 60.0  # seconds a peer's send buffer may stay full before it is excluded (0: never)
    membership_interval: float = 3.0  # mean seconds between two member lists (MEMB) sent to one random peer
    # An unanswered seed DEALER is closed (and the next try connects afresh) only after this long:
    # long past any answer a busy seed is late with, so no second connection races the first
    # (protocol.md 8.5); the HELOs it queues while the seed is down stay few.
    seed_reopen_after: float = 30.0

    def __post_init__(self) -> None:
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        if not 0 < self.suspect_after <= self.gone_after:
            raise ValueError("suspect_after must be positive and not above gone_after")
        if self.gone_after <= self.heartbeat_interval:
            raise ValueError("gone_after must exceed the heartbeat interval")
        for name in ("handshake_timeout", "seed_retry", "rtt_probe_interval", "gone_retention", "membership_interval",
                     "seed_reopen_after"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.exclude_after_errors < 0 or self.exclude_slow_after < 0:
            raise ValueError("exclusion limits must be 0 (never) or positive")


@dataclass(slots=True)
class _Session:
    uuid: NodeId
    conn: int
    endpoint: str
    phase: Phase
    created: float
    last_heard: float
    name: str = ""
    incarnation: str | None = None
    introducer: NodeId | None = None
    helo_peers: int = 0
    rtt: float | None = None
    probe_t0: float | None = None
    sync_pending: bool = False
    probed: float = 0.0  # its next probe is due probe_in x the scaled interval after this
    probe_in: float = 1.0
    seed: str | None = None
    errors: int = 0  # undecodable messages from it while admitted
    suspect_after: float = 2.5  # from its HELO's beat and lost, else our own timing
    gone_after: float = 5.0
    node_type: str = ""
    rate: int = 0  # octets per second it accepts of addressed messages (0: no limit)
    # The connection its HELO came from: address and routing suffix (ids.CONN_MARK; "" not yet
    # known): its frames must come from there, or from one of ``proven``.
    source: str = ""
    proven: list[str] = dataclasses.field(default_factory=list)  # earlier connections from its address
    opened_by: str = ""  # "peer:<uuid>" (a PEER) or "addr:<ip>" (a HELO): whose handshake quota it uses
    guests: int = 0  # its HELO's marco port: it hosts Noam guests (0: it does not)
    deltas: bool = False  # its HELO says it understands RAWS deltas (protocol.md 14.1)
    joined: float = 0.0  # local clock when it was admitted (kept while it is SUSPECT)
    listed: frozenset[NodeId] = frozenset()  # the members named in the last list we sent it
    listed_at: float = -math.inf  # when we sent it
    key: bytes = b""  # the Ed25519 key its HELOs carry (b"": unsigned HELOs, a legacy id in open mode)
    verified: bool = False  # its id is the one its key gives (node_id_for)
    helo_at: int = 0  # the signed time of its last HELO we accepted (this incarnation)
    # It has shown that our HELO reached it: its HELO with reply true, or any message but the HELO and
    # BOUT it dials with (it beats only once it has admitted us); a HELO with reply false from it
    # since says it dials us afresh.  Admitted, but not answered, it is judged by the handshake
    # timeout and dialled afresh each suspect_after (protocol.md 6).
    answered: bool = False
    # When our connection to it is closed as stuck, if it has not answered by then (a dial of ours:
    # not before, and only when discovery shows it there); and when the fresh one opens, a
    # heartbeat after the close (protocol.md 6, 8.5).
    redial_at: float = math.inf
    reopen_at: float = math.inf

    @property
    def admitted(self) -> bool:
        phase = self.phase  # identity tests: hashing an Enum in a set is slow on hot paths
        return phase is Phase.ALIVE or phase is Phase.SUSPECT


@dataclass(slots=True)
class _Seed:
    endpoint: str
    conn: int | None = None
    opened: float = 0.0
    next_try: float = 0.0
    backoff: float = 0.0
    peer: NodeId | None = None
    refused: str | None = None


@dataclass(frozen=True, slots=True)
class PeerInfo:
    """A snapshot of one peer, as the API reports it."""

    uuid: NodeId
    name: str
    endpoint: str
    group: str
    state: str
    last_seen: float
    rtt: float | None
    joined: float = 0.0  # the node's local clock (not mesh time) when the session was admitted
    key: str = ""  # the fingerprint of the peer's key ("": it said none)
    verified: bool = False  # its node id is the one its key gives: no other key can claim it


@dataclass(slots=True)
class Stats(Counters):
    received: int = 0
    decode_errors: int = 0
    dropped_unintroduced: int = 0
    refused: int = 0
    sent: int = 0
    chats_received: int = 0
    stale_time_replies: int = 0
    helos_refused: int = 0  # HELOs dropped past max-sessions / max-handshaking and max-waiting-helos, or expired waiting
    helos_waited: int = 0  # HELOs held until a handshake slot freed
    introductions_waited: int = 0  # PEERs held until a handshake slot freed
    introductions_refused: int = 0  # PEERs and discoveries not dialled: caps, back-off, introducer not ALIVE
    connect_failed: int = 0  # outgoing connections the driver could not open (EMFILE, ...)
    foreign_frames: int = 0  # frames under a session's UUID from another connection (or address) than the session's
    auto_excluded: int = 0  # sessions ended and their incarnation refused: undecodable messages, a stuck buffer
    endpoint_changes: int = 0  # this node's own endpoint changed (set_endpoint: its address moved)
    endpoints_followed: int = 0  # an admitted peer said HELO from a new endpoint: connected there instead
    lists_sent: int = 0  # member lists (MEMB) sent: on admission, periodically, in reply
    lists_received: int = 0  # member lists (MEMB) received from admitted peers
    lists_not_repeated: int = 0  # replies not sent: our last list to that peer named every member its list lacked
    members_probed: int = 0  # known members dialled at a new endpoint or incarnation that a list, PEER or discovery named
    restarts_followed: int = 0  # sessions replaced at once by a newer incarnation's HELO
    refused_identity: int = 0  # HELOs refused before any session state: key, id, signature or time do not hold
    helos_misaddressed: int = 0  # signed HELOs meant for another node (a stale endpoint, or a copy sent on)
    late_ticks: int = 0  # ticks LATE_TICK or more after their deadline: this node's loop was late
    backoffs_spared: int = 0  # introduced handshakes timed out while this node was late: not backed off
    seed_intros_skipped: int = 0  # introductions not dialled: a seed connection to that endpoint awaits its answer
    sessions_evicted: int = 0  # admitted sessions ended to make room for a HELO (silent ones, an address over its share)
    answers_redialled: int = 0  # fresh connections to a peer admitted on its HELO and BOUT that had not heard our answer


@dataclass(slots=True)
class _Gone:
    info: PeerInfo
    until: float


def _quote(text: str, limit: int = 60) -> str:
    """A group name for a reason text: quoted, and cut short so reasons stay small."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


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
    ) -> None:
        self.timing: Final = timing or Timing()
        self.limits: Final = limits or MeshLimits()
        self.beat: Final = self.timing.heartbeat_interval
        # The heartbeats we allow to be lost, as we announce it: peers then wait
        # beat * (lost + 1) before they count us gone (our gone_after).
        self.lost: Final = max(1, min(100, round(self.timing.gone_after / self.beat) - 1))
        # Constructing our own HELO validates name, endpoint, incarnation and type.
        Helo(sender=uuid, endpoint=endpoint, name=name, incarnation=incarnation, node_type=node_type,
             beat=float(self.beat), lost=self.lost, rate=rate)
        Group(sender=uuid, group=group)
        self.uuid: Final = uuid
        # This node's key: it signs our HELOs (a test or tool that gives none gets a fresh one).
        # ``secure`` (a group secret): only ids a key gives are admitted (protocol.md 4.1).
        self.identity: Final = identity or NodeIdentity.generate()
        self.secure: Final = secure
        self.name: Final = name
        self.group: Final = group
        self.endpoint = endpoint  # changes only through set_endpoint (this node's address changed)
        self.incarnation: Final = incarnation
        self.node_type: Final = node_type
        self.rate: Final = rate
        self.guests: Final = guests  # our marco port when we host Noam guests (0: we do not), said in our HELO
        self.offset = 0.0
        self.synced_with: NodeId | None = None
        self.stats = Stats()
        self._sessions: dict[NodeId, _Session] = {}
        self._seeds: dict[str, _Seed] = {}
        self._gone: dict[NodeId, _Gone] = {}
        self._refused: dict[NodeId, str] = {}  # uuid -> incarnation refused
        self.excluded: dict[NodeId, str] = dict(excluded or {})  # uuid -> why; never admitted again
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
        self._last_frame: dict[NodeId, float] = {}  # any message from a node, admitted or not
        self._counts: dict[NodeId, list[int]] = {}  # per node: messages and octets received
        self.cut_off = False  # had peers and lost the last one
        self._had_peers = False
        # Frames under a session's UUID from another address: counted per address (the
        # oldest address forgotten past max-blamed-addresses), never against the session.
        self.blamed: dict[str, int] = {}
        self._lines = RateLog(log, period=_LOG_EVERY)  # per kind: decode, foreign, helo, intro, evict
        self._intro_backoff: dict[NodeId, float] = {}  # introduced nodes whose handshake failed -> until
        # HELOs that came while no handshake slot was free: answered, oldest first, when one frees
        # (an honest crowd joining at once, many nodes behind one address), dropped after handshake_timeout.
        self._waiting: dict[NodeId, tuple[Helo | Peer, str, float]] = {}  # by the UUID to meet
        # Peers not yet told of this node's new endpoint (set_endpoint) -> when to say HELO again.
        self._moving: dict[NodeId, float] = {}
        # Membership anti-entropy (protocol.md 4.9): a member list to one random peer now and then,
        # jittered (deterministic per node, for the simulator); and probes of known members
        # named at a new endpoint (a restart): uuid -> (conn, endpoint, opened).
        self._rng = random.Random(bytes(uuid) + bytes.fromhex(incarnation))
        self._next_list = now + self.timing.membership_interval * (0.5 + self._rng.random())
        self._probes: dict[NodeId, tuple[int, str, float]] = {}
        self._aliases: dict[NodeId, str] = {}  # another endpoint a probe found the same incarnation at
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
        return now + self.offset

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
        """Every node heard from within ``keep`` seconds or with a session, by UUID (the
        excluded left out): what the system picture's reports say of them.  A session admitted
        here whose peer has not answered is a handshake done at one end only: reported as
        ``handshake``, so that the others relay our report to that peer (protocol.md 6, 14)."""
        for uuid in [u for u, t in self._last_frame.items() if now - t > keep and u not in self._sessions]:
            del self._last_frame[uuid]
            self._counts.pop(uuid, None)
        rows = []
        for uuid in sorted(set(self._last_frame) | set(self._sessions)):
            if uuid in self.excluded:
                continue
            s = self._sessions.get(uuid)
            msgs_in, bytes_in = self._counts.get(uuid, (0, 0))
            rows.append(PeerSeen(
                uuid, self._last_frame.get(uuid), s.rtt if s is not None and s.admitted else None,
                "none" if s is None else Phase.HANDSHAKE.value if s.admitted and not s.answered else s.phase.value,
                msgs_in, bytes_in, None if s is None else s.conn,
            ))
        return rows

    def peers(self, now: float) -> list[PeerInfo]:
        """Every admitted peer, then recently gone ones (state ``gone``).  A gone peer being
        dialled again (a member list that still names it) stays gone until it is admitted."""
        sessions = self._sessions
        infos = [self._info(s, now) for s in sessions.values() if s.admitted]
        infos.sort(key=lambda p: (p.name, p.uuid))
        gone = [g.info for uuid, g in self._gone.items()
                if g.until > now and (uuid not in sessions or not sessions[uuid].admitted)]
        return infos + sorted(gone, key=lambda p: (p.name, p.uuid))

    def alive_peers(self) -> list[NodeId]:
        return [s.uuid for s in self._sessions.values() if s.admitted]

    def guest_hosts(self) -> list[NodeId]:
        """The ALIVE peers whose HELO says they host guests on our marco port (they
        hear the marcos we hear).  A SUSPECT one is left out: its guests' marcos go
        to another host until it is heard again."""
        port = self.guests
        return [s.uuid for s in self._sessions.values() if port and s.guests == port and s.phase is Phase.ALIVE]

    def conn_of(self, peer: NodeId) -> int | None:
        s = self._sessions.get(peer)
        return None if s is None or not s.admitted else s.conn

    def source_of(self, peer: NodeId) -> str:
        """The address a peer's HELO came from ("" if unknown): guest hosts are bounded per address."""
        s = self._sessions.get(peer)
        return "" if s is None else address_of(s.source)

    def bound_by_address(self) -> dict[str, int]:
        """Per source address, the sessions whose HELO was accepted from there: how many of
        the ROUTER's connections from that address have proved themselves (section 2.1;
        the transport bounds and closes the others)."""
        out: dict[str, int] = {}
        for s in self._sessions.values():
            if s.source:
                address = address_of(s.source)
                out[address] = out.get(address, 0) + 1
        return out

    def _info(self, s: _Session, now: float) -> PeerInfo:
        return PeerInfo(
            uuid=s.uuid,
            name=s.name,
            endpoint=s.endpoint,
            group=self.group,
            state=s.phase.value,
            last_seen=self.mesh_time(s.last_heard),
            rtt=s.rtt,
            joined=s.joined,
            key=fingerprint(s.key) if s.key else "",
            verified=s.verified,
        )

    # ------------------------------------------------------------- discovery

    def add_seed(self, endpoint: str, now: float) -> None:
        """Keep trying ``endpoint`` (``tcp://IP:PORT``) until a peer answers there."""
        if endpoint == self.endpoint or endpoint in self._seeds:
            return
        self._seeds[endpoint] = _Seed(endpoint=endpoint, next_try=now)
        self._note(now)
        self._retry_seeds(now)

    def discovered(self, uuid: NodeId, endpoint: str, now: float) -> None:
        """A discovery mechanism saw ``uuid`` listening at ``endpoint``."""
        if self._closed or uuid == self.uuid or uuid in self._refused:
            return
        if uuid in self.excluded:
            return
        if uuid in self._sessions:
            s = self._sessions[uuid]
            if (s.phase is Phase.CONNECTING and s.endpoint == endpoint and now >= s.redial_at
                    and now - s.last_heard >= s.suspect_after and s.reopen_at == math.inf):
                # It is there, and has not answered our dial for a suspect_after: our connection
                # to it is stuck as an answer's can be (protocol.md 6), so is dialled afresh.
                self._redial(s, now)
                return
            self._follow(uuid, endpoint, None, now)  # it may have restarted elsewhere
            return
        if self._endpoint_known(endpoint):
            return
        if not self._room(""):
            self._refused_intro("a discovered node", now)
            return
        self._open(uuid, endpoint, now, introducer=None)

    def set_endpoint(self, endpoint: str, now: float) -> None:
        """This node's own address changed (a DHCP renewal, another Wi-Fi): advertise
        ``endpoint`` from now on.  Every peer is told with a HELO on a fresh connection
        (from the new address), again each heartbeat until it answers with a HELO: a
        peer accepts it once it finds the old address silent (SUSPECT, protocol.md 8.8), and
        its stale connection from the old address must be gone first (section 2.1)."""
        Helo(sender=self.uuid, endpoint=endpoint, name=self.name, incarnation=self.incarnation,
             node_type=self.node_type, beat=float(self.beat), lost=self.lost, rate=self.rate)
        if endpoint == self.endpoint or self._closed:
            return
        self.endpoint = endpoint
        self.stats.endpoint_changes += 1
        for s in self._sessions.values():
            if s.admitted:
                self._moving[s.uuid] = now
        for seed in self._seeds.values():
            if seed.conn is not None and seed.peer is None:
                self._actions.append(Disconnect(seed.conn))  # its HELO named the old endpoint
                seed.conn = None
                seed.next_try = now
                self._note(now)
        self._tell_moved(now)

    def _tell_moved(self, now: float) -> None:
        for uuid, due in list(self._moving.items()):
            s = self._sessions.get(uuid)
            if s is None or not s.admitted:
                del self._moving[uuid]
            elif due <= now:
                self._actions.append(Disconnect(s.conn))
                self._actions.append(Connect(s.conn, s.endpoint))  # same conn: replication and delivery keep it
                s.reopen_at = math.inf  # open again now
                self._send_hello(s.conn, reply=False, to=uuid, now=now)
                self._moving[uuid] = now + self.beat
                self._note(now + self.beat)

    def _follow_moved(self, s: _Session, endpoint: str) -> None:
        """An admitted peer says HELO from a new endpoint (its address changed):
        connect there instead, under the same conn."""
        self._actions.append(Disconnect(s.conn))
        self._actions.append(Connect(s.conn, endpoint))
        s.reopen_at = math.inf  # open again now
        s.endpoint = endpoint
        self.stats.endpoints_followed += 1

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
                if s.opened_by.startswith("peer:"):
                    self._back_off(s.uuid, now)
        for seed in self._seeds.values():
            if seed.conn == conn:
                seed.conn = None  # dialled afresh at its next try (it keeps its back-off)

    def not_responding(self, conn: int, now: float) -> None:
        """The driver could not queue another message on ``conn``: its send
        buffers are full.  The peer is suspect until it is heard from again."""
        for s in self._sessions.values():
            if s.conn == conn and s.phase is Phase.ALIVE:
                s.phase = Phase.SUSPECT
                self._notify(PeerStateChanged(s.uuid, s.name, s.phase.value, self.mesh_time(now)))

    # ---------------------------------------------------------------- commands

    def chat(self, text: str, now: float, to: NodeId | None = None) -> int:
        """Send a CHAT to one admitted peer, or to every one.  Returns how many."""
        msg = Chat(sender=self.uuid, text=text)
        conns = self._chat_conns(to)
        for conn in conns:
            self._send(conn, msg)
        return len(conns)

    def _chat_conns(self, to: NodeId | None) -> list[int]:
        """The connections a chat line goes on: ``to``'s, or every admitted peer's."""
        if to is None:
            return [s.conn for s in self._sessions.values() if s.admitted]
        s = self._sessions.get(to)
        if s is None or not s.admitted:
            raise NoSuchPeer(f"no alive peer {to}")
        return [s.conn]

    def leave(self, now: float) -> None:
        """Say GBYE to everyone and close every connection."""
        self._closed = True
        bye = Gbye(sender=self.uuid, reason="")
        for s in list(self._sessions.values()):
            if s.phase is not Phase.CONNECTING:
                self._send(s.conn, bye)
            self._actions.append(Disconnect(s.conn, flush=True))
        for seed in self._seeds.values():
            if seed.conn is not None and seed.peer is None:
                self._actions.append(Disconnect(seed.conn))
            seed.conn = None
        for conn, _, _ in self._probes.values():
            self._actions.append(Disconnect(conn))
        self._probes.clear()
        self._sessions.clear()

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
        if len(frames) == 3 and frames[1] == b"CHAT":
            event = self.receive_chat(frames, now, source)  # counted there, if it takes the message
            if event is not None:
                self._notify(event)
                return True
        self.stats.received += 1
        if len(frames) == 3 and frames[1] == b"BEAT" and not frames[2] and not self._closed:
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
            if s is not None and source and not self._from_session(s, source):
                self._blame(source, now)  # not the session's connection: never towards its exclusion
            elif s is not None and s.admitted and limit:
                s.errors += 1
                if s.errors >= limit:
                    self._cut_incarnation(s, f"{s.errors} undecodable messages", now)
            self._lines.warning("decode", now, "dropped undecodable message (%d so far): %s",
                                self.stats.decode_errors, exc)
            return False
        if source:
            s = self._sessions.get(msg.sender)
            if (s is not None and not self._from_session(s, source)
                    and not (isinstance(msg, Helo) and (s.phase is Phase.SUSPECT
                                                        or address_of(source) == address_of(s.source)))):
                self._blame(source, now)
                return False
        if msg.sender in self._counts:
            self._counts[msg.sender][1] += len(frames[2]) if len(frames) == 3 else len(frames[2]) + len(frames[3])
        return self.handle(msg, now, source)

    @staticmethod
    def _from_session(s: _Session, source: str) -> bool:
        """Whether ``source`` is a connection ``s`` is bound to (any, before its first HELO)."""
        return not s.source or s.source == source or source in s.proven

    def receive_chat(self, frames: list[bytes], now: float, source: str = "") -> ChatReceived | None:
        """CHAT's fast path (docs/architecture.md, "The CHAT fast path"): the commonest message,
        decided here without a decoded ``Chat`` or a ``Notify``.  An ALIVE peer's CHAT from its
        session's address (``source``, as :meth:`receive` takes it) whose body is UTF-8 within
        MAX_BODY is counted exactly as :meth:`receive` counts it (received, chats, the peer
        heard, its messages and octets) and its event returned, for the caller to publish.

        None: this path does not take the message and has changed and counted nothing; hand the
        same frames to :meth:`receive`, which decides (and counts any refusal) as for every
        message: not a CHAT, a closed mesh, a sender with no session or one not ALIVE (a
        handshake, or a SUSPECT peer, which the general path makes ALIVE again), another
        address than its session's, a body too long or not UTF-8."""
        if len(frames) != 3 or frames[1] != b"CHAT" or self._closed:
            return None
        s = self._sessions.get(frames[0])  # type: ignore[call-overload]
        if s is None or s.phase is not Phase.ALIVE or (source and s.source != source):
            return None
        body = frames[2]
        if len(body) > MAX_BODY:
            return None
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            return None
        stats = self.stats
        stats.received += 1
        stats.chats_received += 1
        uuid = s.uuid
        s.last_heard = self._last_frame[uuid] = now  # _heard, for an ALIVE peer
        s.answered = True
        counts = self._counts[uuid]
        counts[0] += 1
        counts[1] += len(body)
        return ChatReceived(uuid, s.name, text, now + self.offset)

    def chat_frames(self, text: str, to: NodeId | None = None) -> tuple[list[bytes], list[int]]:
        """CHAT's fast path out: what :meth:`chat` decides, as the frames to send (type and
        body, encoded once) and the connections to send them on (``to``'s, or every admitted
        peer's), counted as sent, with no ``Chat`` or ``Send`` queued: the caller hands them to
        the transport.  Raises LocalProtocolError as :meth:`chat` does (nothing counted)."""
        if type(text) is str and len(text) <= MAX_BODY and text.isascii():  # Chat's own fast check
            frames = [b"CHAT", text.encode("ascii")]
        else:
            frames = encode_parts(Chat(sender=self.uuid, text=text))  # checked whole, as chat() does
        conns = self._chat_conns(to)
        self.stats.sent += len(conns)
        return frames, conns

    def handle(self, msg: Message, now: float, source: str = "") -> bool:
        """Handle a decoded message (from ``source``, "" if unknown).  True if it was accepted."""
        if self._closed:
            return False
        if isinstance(msg, Helo):
            return self._on_helo(msg, now, source)
        if isinstance(msg, Gbye):
            return self._on_gbye(msg, now)
        s = self._sessions.get(msg.sender)
        if s is None or s.phase is Phase.CONNECTING:
            self.stats.dropped_unintroduced += 1
            return False
        if isinstance(msg, Group):
            self._heard(s, now)
            return self._on_bout(s, msg, now)
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
            self._on_peer(s, msg, now, live=not was_suspect)
            return True
        if isinstance(msg, Members):
            self._on_members(s, msg, now, live=not was_suspect)
            return True
        # A type no service of this node handles (a node that keeps no log, say): dropped.
        self.stats.dropped_unintroduced += 1
        return False

    def _on_helo(self, m: Helo, now: float, source: str = "") -> bool:
        if m.sender != self.uuid and m.version == PROTOCOL_VERSION:
            why = self._identity_refusal(m, now, source)
            if why is not None:
                if why.startswith("meant for"):
                    self.stats.helos_misaddressed += 1
                else:
                    self.stats.refused_identity += 1
                self._lines.warning("identity", now, "refused a HELO claiming %s (%s) from %s: %s "
                                    "(%d refused, %d misaddressed so far)", m.sender.short, _quote(m.name),
                                    source or "?", why, self.stats.refused_identity, self.stats.helos_misaddressed)
                return False
        return self._on_checked_helo(m, now, source)

    def _identity_refusal(self, m: Helo, now: float, source: str) -> str | None:
        """Why this HELO's identity does not hold (None: it does), before any state is
        touched (protocol.md 4.1): an id a key gives (RFC 9562 version 8) comes with that
        key and its signature; in secure mode every id does; a session keeps its key."""
        s = self._sessions.get(m.sender)
        derived = key_derived(m.sender)
        if not m.key:
            if derived:
                return "a key-derived id without its key"
            if self.secure:
                return "no key (a group with a secret admits key-derived ids only)"
            if s is not None and s.key:
                return "no key, where its session has one"
            return None  # a legacy id in open mode: admitted, unverified
        if m.to is not None and m.to != self.uuid:
            return f"meant for {m.to.short}"
        skew = m.at / 1000.0 - now
        if abs(skew) > self.limits.helo_clock_window:
            return f"signed at a time {skew:+.0f} s from ours (window {self.limits.helo_clock_window:g} s)"
        if s is not None and s.key and s.key != m.key:
            return f"another key ({fingerprint(m.key)}) than its session's ({fingerprint(s.key)})"
        if node_id_for(m.key) != m.sender and (derived or self.secure):
            return f"the key {fingerprint(m.key)} does not give this id"
        if (s is not None and s.incarnation == m.incarnation and s.helo_at and source and s.source
                and address_of(source) != address_of(s.source) and m.at <= s.helo_at):
            # Only where it would move the session: from its own address HELOs may cross on two
            # connections (a probe's, the session's) and arrive out of order, harmlessly.
            return "a HELO of its session no newer than the last, from another address"
        if not verify(m.key, helo_signed(m), m.sig):
            return "bad signature"
        return None

    def _on_checked_helo(self, m: Helo, now: float, source: str = "") -> bool:
        if m.sender == self.uuid:
            # We dialled ourselves (a seed that is another name for our own
            # endpoint).  Which seed cannot be told; it is retried with backoff.
            return False
        if m.version != PROTOCOL_VERSION:
            reason = f"incompatible protocol version {m.version}: this node speaks version {PROTOCOL_VERSION}"
            self._refuse_endpoint(m.sender, m.endpoint, m.incarnation, reason, now)
            return False
        if m.sender in self.excluded:
            self._refuse_endpoint(m.sender, m.endpoint, m.incarnation, f"excluded: {self.excluded[m.sender]}", now)
            return False
        if self._refused.get(m.sender) == m.incarnation:
            self.stats.dropped_unintroduced += 1
            return False
        self._refused.pop(m.sender, None)
        s = self._sessions.get(m.sender)
        if s is not None and s.incarnation is not None and s.incarnation != m.incarnation:
            # The peer restarted: end the old session, start afresh.
            self.stats.restarts_followed += 1
            self._end(s, "restarted", now)
            s = None
        probe = self._probes.get(m.sender)
        if probe is not None and s is not None and s.incarnation == m.incarnation and s.endpoint == m.endpoint:
            # Our probe found the same incarnation: the other endpoint is another name for it.
            del self._probes[m.sender]
            self._actions.append(Disconnect(probe[0]))
            self._aliases[m.sender] = probe[1]
        if s is None:
            conn = self._adopt_seed_conn(m.sender, m.endpoint)
            seeded = conn is not None
            if conn is None:
                conn = self._adopt_probe(m.sender, m.endpoint)
            if conn is None:
                key = f"addr:{address_of(source)}" if source else ""
                if len(self._sessions) >= self.limits.max_sessions:
                    self._make_room(address_of(source), now)
                if not self._room(key):
                    self._wait(m, source, now)
                    return False
                s = self._open(m.sender, m.endpoint, now, introducer=None, send_helo=False)
                s.opened_by = key
            else:
                s = self._new_session(m.sender, conn, m.endpoint, now, introducer=None)
                if seeded:
                    s.seed = m.endpoint
            if not m.reply or conn is None:
                self._send_hello(s.conn, reply=m.reply is False, to=m.sender, now=now)
        elif not m.reply:
            # The peer (re)opens a session with us: answer it.
            if s.endpoint != m.endpoint and not s.admitted:
                self._actions.append(Disconnect(s.conn))
                s.conn = self._connect(m.endpoint)
                s.endpoint = m.endpoint
                s.reopen_at = math.inf
            elif s.endpoint != m.endpoint:
                self._follow_moved(s, m.endpoint)
            self._send_hello(s.conn, reply=True, to=m.sender, now=now)
        else:
            self._moving.pop(m.sender, None)  # it answered a HELO: it knows our endpoint
        s.incarnation = m.incarnation
        # From another connection of its address, only a HELO newer than the last binds it: one
        # crossing ours out of order (on a probe's connection) is answered, and binds nothing.
        newer = not m.key or m.at > s.helo_at or not s.source
        if m.reply:
            s.answered = True  # it answers our HELO: our BOUT, which came with it, admits us there
        elif s.answered and s.admitted:
            # It dials us afresh: it lost our session, or does not read our connection (protocol.md 6).
            s.answered = False
            s.redial_at = now + s.suspect_after
        if m.key:
            s.key = m.key
            s.verified = node_id_for(m.key) == m.sender
            s.helo_at = max(s.helo_at, m.at)  # HELOs may cross on two connections: keep the newest
        s.name = m.name
        s.helo_peers = m.peers
        s.node_type = m.node_type
        s.rate = m.rate
        s.guests = m.guests
        s.deltas = m.deltas
        if source and source != s.source and newer:
            self._bind(s, source)
        if m.beat:
            # Its node type says how often it beats and how many beats may be lost
            # (clamped: a HELO must not keep a silent ghost for long).
            s.gone_after = min(self.limits.peer_gone_after_max, max(0.2, m.beat * (m.lost + 1)))
            s.suspect_after = s.gone_after / 2
        self._heard(s, now)
        if s.phase is Phase.CONNECTING:
            s.phase = Phase.HANDSHAKE
        return True

    @staticmethod
    def _bind(s: _Session, source: str) -> None:
        """Bind ``s`` to the connection ``source``, whose HELO passed the identity checks.  A
        connection from the same address it was bound to stays good too (the last _PROVEN):
        the peer's probe, or a DEALER it re-opened while the old one drains; another address
        (the peer moved) leaves the old one's connections nothing."""
        if s.source and address_of(s.source) == address_of(source):
            proven = s.proven
            if source in proven:
                proven.remove(source)
            proven.append(s.source)
            del proven[:-_PROVEN]
        else:
            s.proven.clear()
        s.source = source

    def _on_bout(self, s: _Session, m: Group, now: float) -> bool:
        if m.group != self.group:
            reason = f"group mismatch: peer is in {_quote(m.group)}, this node is in {_quote(self.group)}"
            self._send(s.conn, Gbye(sender=self.uuid, reason=reason))
            self._actions.append(Disconnect(s.conn, flush=True))
            self._forget(s, now)
            self._refused[s.uuid] = s.incarnation or ""
            self.stats.refused += 1
            if s.seed is not None and s.seed in self._seeds:
                self._seeds[s.seed].refused = reason
                log.warning("seed %s refused: %s (not retrying it)", s.seed, reason)
            self._notify(PeerRefused(s.uuid, s.endpoint, reason, True, self.mesh_time(now)))
            return True
        if s.phase is Phase.HANDSHAKE:
            self._admit(s, now)
        return True

    def _on_gbye(self, m: Gbye, now: float) -> bool:
        s = self._sessions.get(m.sender)
        if s is None or (s.phase is Phase.CONNECTING and s.incarnation is None and not m.reason):
            self.stats.dropped_unintroduced += 1
            if s is None and m.reason:
                log.info("peer %s refused us: %s", m.sender.short, m.reason)
            return False
        if s.admitted:
            self._end(s, f"left: {m.reason}" if m.reason else "left", now)
            return True
        # A refusal during the handshake: remember it, do not retry in a loop.
        self._actions.append(Disconnect(s.conn))
        self._forget(s, now)
        reason = m.reason or "peer said goodbye during the handshake"
        self._refused[s.uuid] = s.incarnation or ""
        if s.seed is not None and s.seed in self._seeds:
            self._seeds[s.seed].refused = reason
            log.warning("seed %s refused us: %s (not retrying it)", s.seed, reason)
        self._notify(PeerRefused(s.uuid, s.endpoint, reason, False, self.mesh_time(now)))
        return True

    def _on_peer(self, s: _Session, m: Peer, now: float, live: bool, listed: int = 0) -> None:
        """``listed``: the size of the member list that named the peer (with its sender), if a
        list did: our HELO then says as many peers (:meth:`_send_hello`)."""
        if m.peer in self._sessions and live:
            self._follow(m.peer, m.endpoint, None, now, listed)  # it may have restarted elsewhere
            return
        if m.peer == self.uuid or m.peer in self._sessions or m.peer in self._refused or m.peer in self.excluded:
            return
        if m.endpoint == self.endpoint or self._endpoint_known(m.endpoint):
            return
        seed = self._seeds.get(m.endpoint)
        if seed is not None and seed.conn is not None and seed.peer is None:
            # Our HELO to that seed awaits its answer: a second connection to it would carry our
            # identity too, and the seed's ROUTER would never read it (protocol.md 8.5).
            self.stats.seed_intros_skipped += 1
            return
        # Dial only what we would keep: for a live introducer, within the handshake
        # quotas, and not a node whose introduced handshake failed lately.
        key = f"peer:{s.uuid}"
        until = self._intro_backoff.get(m.peer)
        if not live or (until is not None and until > now):
            self._refused_intro(f"a PEER from {s.uuid.short}", now)
            return
        if not self._room(key, self._introducer_cap(s)):
            self._wait(m, str(s.uuid), now)  # an honest crowd joining at once: its turn comes
            return
        self._open(m.peer, m.endpoint, now, introducer=s.uuid, listed=listed).opened_by = key

    def _on_members(self, s: _Session, m: Members, now: float, live: bool) -> None:
        """A member list: dial the members we have no session with (as if each were a PEER
        from ``s``: the same caps, waiting and back-off), probe the known ones it names at
        another incarnation, and, unless it is a reply, answer with our list if it lacks
        any of our members."""
        self.stats.lists_received += 1
        entries = m.members[: self.limits.max_members_listed]
        size = len(entries) + 1  # the list's members and its sender
        for uuid, endpoint, incarnation in entries:
            if uuid in (self.uuid, s.uuid):
                continue
            known = self._sessions.get(uuid)
            if known is None:
                self._on_peer(s, Peer(sender=s.uuid, peer=uuid, endpoint=endpoint), now, live, size)
            elif live and known.incarnation != incarnation:
                self._follow(uuid, endpoint, incarnation, now, size)
        if not m.reply:
            listed = {uuid for uuid, _, _ in entries}
            # Not the members we admitted lately, since we opened the session with its sender:
            # they met us in the same wave of handshakes, most likely on the same lists, and
            # dial it; if not, the next periodic lists tell.
            lately = now - self.timing.membership_interval
            lacking = [x.uuid for x in self._sessions.values() if x.admitted and x.uuid not in listed
                       and x is not s and (x.joined < s.created or x.joined < lately)]
            if not lacking:
                return
            # Lists cross in a crowd joining at once: if the one we sent it lately
            # already named every member its list lacks, it is dialling them.
            if now - s.listed_at < self.timing.membership_interval and s.listed.issuperset(lacking):
                self.stats.lists_not_repeated += 1
                return
            self._send_members(s, now, reply=True)

    def _send_members(self, to: _Session, now: float, *, reply: bool) -> None:
        members: list[MemberEntry] = [
            (x.uuid, x.endpoint, x.incarnation) for x in self._sessions.values()
            if x.admitted and x is not to and x.incarnation is not None
        ]
        limit = self.limits.max_members_listed
        if len(members) > limit:
            members = self._rng.sample(members, limit)
        self.stats.lists_sent += 1
        to.listed = frozenset(uuid for uuid, _, _ in members)
        to.listed_at = now
        self._send(to.conn, Members(sender=self.uuid, members=tuple(members), reply=reply))

    def _follow(self, uuid: NodeId, endpoint: str, incarnation: str | None, now: float, listed: int = 0) -> None:
        """A list, PEER or discovery names ``uuid``, which we have a session with, at
        ``endpoint`` (and ``incarnation`` if known): if that is new, it may have restarted
        there.  A session still dialling is redirected; an admitted one is kept until the
        new incarnation says HELO (protocol.md 8.7), and that endpoint is probed with a
        HELO of ours, on a connection of its own, once per handshake timeout."""
        s = self._sessions[uuid]
        if s.endpoint == endpoint and (incarnation is None or incarnation == s.incarnation):
            return
        if not s.admitted:
            if s.phase is Phase.CONNECTING and s.endpoint != endpoint:
                self._actions.append(Disconnect(s.conn))
                s.conn = self._connect(endpoint)
                s.endpoint = endpoint
                s.reopen_at = math.inf
                self._send_hello(s.conn, reply=False, to=uuid, now=now, listed=listed)
            return
        if incarnation is None and self._aliases.get(uuid) == endpoint:
            return
        probe = self._probes.get(uuid)
        if probe is not None and (probe[1] == endpoint or now - probe[2] < self.timing.handshake_timeout):
            return
        if probe is not None:
            self._actions.append(Disconnect(probe[0]))
            del self._probes[uuid]
        if len(self._probes) >= self.limits.max_handshaking:
            self._refused_intro(f"a new endpoint of {uuid.short}", now)
            return
        self.stats.members_probed += 1
        conn = self._connect(endpoint)
        self._send_hello(conn, reply=False, to=uuid, now=now, listed=listed)
        self._probes[uuid] = (conn, endpoint, now)
        self._note(now + self.timing.handshake_timeout)

    def _adopt_probe(self, uuid: NodeId, endpoint: str) -> int | None:
        """The connection of our probe to ``uuid`` at ``endpoint``, for its new session: a
        second connection under our identity to the same ROUTER would never be read."""
        probe = self._probes.get(uuid)
        if probe is None or probe[1] != endpoint:
            return None
        del self._probes[uuid]
        return probe[0]

    def _on_time(self, s: _Session, m: Time, now: float) -> bool:
        if m.t1 is None:
            self._send(s.conn, Time(sender=self.uuid, t0=m.t0, t1=self.mesh_time(now)))
            return True
        if s.probe_t0 is None or m.t0 != s.probe_t0:
            self.stats.stale_time_replies += 1  # not the answer to our outstanding probe
            return False
        s.probe_t0 = None
        rtt = max(0.0, now - m.t0)
        s.rtt = rtt
        if s.sync_pending:
            s.sync_pending = False
            self.offset = m.t1 - (m.t0 + now) / 2.0
            self.synced_with = s.uuid
            self._notify(ClockSynced(s.uuid, self.offset, rtt, self.mesh_time(now)))
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
            silence = now - s.last_heard
            if s.admitted:
                suspect_after, gone_after = s.suspect_after, s.gone_after
                if not s.answered:
                    # Admitted on its HELO and BOUT, it cannot speak before our answer reaches it.
                    suspect_after = max(suspect_after, t.handshake_timeout / 2)
                    gone_after = max(gone_after, t.handshake_timeout)
                if silence >= gone_after:
                    self._end(s, "timeout", now)
                    continue
                if now >= s.redial_at and not s.answered:
                    self._redial(s, now)
                if now >= s.reopen_at:
                    self._reopen(s, now)
                if silence >= suspect_after and s.phase is Phase.ALIVE:
                    s.phase = Phase.SUSPECT
                    self._notify(PeerStateChanged(s.uuid, s.name, s.phase.value, self.mesh_time(now)))
                if beating and now >= s.probed + s.probe_in * probe_every:
                    self._probe(s, now)
                    s.probed, s.probe_in = probe_base, 1.0
                    told.add(s.conn)
            elif now >= s.reopen_at:
                self._reopen(s, now)
            elif now - s.created >= t.handshake_timeout and silence >= t.handshake_timeout:
                self._actions.append(Disconnect(s.conn))
                self._forget(s, now)
                if s.opened_by.startswith("peer:"):
                    if now - self._late_at < t.handshake_timeout:
                        # Our own loop was late within the handshake's time: its answer may be
                        # what waited unread.  The next list naming it dials it again.
                        self.stats.backoffs_spared += 1
                    else:
                        self._back_off(s.uuid, now)
        for uuid in [u for u, g in self._gone.items() if g.until <= now]:
            del self._gone[uuid]
        for uuid in [u for u, (_, _, at) in self._probes.items() if now - at >= t.handshake_timeout]:
            self._actions.append(Disconnect(self._probes.pop(uuid)[0]))
        if beating and now >= self._next_list:
            self._next_list = now + t.membership_interval * (0.5 + self._rng.random())
            admitted = [x for x in self._sessions.values() if x.phase is Phase.ALIVE]
            if admitted:
                chosen = self._rng.choice(admitted)
                self._send_members(chosen, now, reply=False)
                told.add(chosen.conn)
        self._retry_seeds(now)
        if self._moving:
            self._tell_moved(now)
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
            self._next_beat = self._grid_after(now)
        self._due = self._own_deadline(now)

    def heartbeat_after(self, when: float) -> float:
        """The first heartbeat moment at or after ``when`` (a multiple of the interval in mesh time)."""
        beat = self.timing.heartbeat_interval
        return math.ceil(self.mesh_time(when) / beat) * beat - self.offset

    def _grid_after(self, now: float) -> float:
        """The first heartbeat moment after ``now``: the next multiple of the interval in mesh time."""
        beat = self.timing.heartbeat_interval
        mesh_now = self.mesh_time(now)
        return (math.floor(mesh_now / beat) + 1) * beat - self.offset

    def _own_deadline(self, now: float) -> float:
        """The soonest of this mesh's own timers but the heartbeat (which ticks anyway), from scratch."""
        t = self.timing
        due = math.inf
        for s in self._sessions.values():
            phase = s.phase
            if s.reopen_at < due:  # noqa: PLR1730 (min() costs a call here, per session and tick)
                due = s.reopen_at
            if not s.answered and (phase is Phase.ALIVE or phase is Phase.SUSPECT):
                gone = s.last_heard + max(s.gone_after, t.handshake_timeout)
                due = min(due, s.redial_at, gone if phase is Phase.SUSPECT else
                          s.last_heard + max(s.suspect_after, t.handshake_timeout / 2))
            elif phase is Phase.ALIVE:
                due = min(due, s.last_heard + s.suspect_after)
            elif phase is Phase.SUSPECT:
                due = min(due, s.last_heard + s.gone_after)
            else:
                due = min(due, max(s.created, s.last_heard) + t.handshake_timeout)
        for seed in self._seeds.values():
            if seed.refused is None and seed.peer is None:
                due = min(due, seed.next_try)
        for _, _, at in self._waiting.values():
            due = min(due, at + t.handshake_timeout)
        for _, _, at in self._probes.values():
            due = min(due, at + t.handshake_timeout)
        if self._moving:
            due = min(due, *self._moving.values())
        if self._waiting:
            due = min(due, now + BUSY_POLL)  # answered as slots free; polled as before
        return due

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
        admitted = max(listed, sum(1 for x in self._sessions.values() if x.admitted))
        helo = Helo(
            sender=self.uuid,
            endpoint=self.endpoint,
            name=self.name,
            incarnation=self.incarnation,
            reply=reply,
            peers=admitted,
            node_type=self.node_type,
            beat=float(self.beat),
            lost=self.lost,
            rate=self.rate,
            guests=self.guests,
            deltas=self.deltas,
            key=self.identity.public_key,
            sig=bytes(64),  # replaced by the signature of the rest below
            at=max(0, round(now * 1000)),
            to=to,
        )
        self._send(conn, dataclasses.replace(helo, sig=self.identity.sign(helo_signed(helo))))
        self._send(conn, Group(sender=self.uuid, group=self.group))

    def _new_session(
        self, uuid: NodeId, conn: int, endpoint: str, now: float, introducer: NodeId | None
    ) -> _Session:
        s = _Session(
            uuid=uuid, conn=conn, endpoint=endpoint, phase=Phase.CONNECTING,
            created=now, last_heard=now, introducer=introducer,
            suspect_after=self.timing.suspect_after, gone_after=self.timing.gone_after,
            redial_at=now + self.timing.suspect_after,
        )
        self._sessions[uuid] = s
        self._counts.setdefault(uuid, [0, 0])
        self._note(now + self.timing.handshake_timeout)
        return s

    def _open(
        self, uuid: NodeId, endpoint: str, now: float, introducer: NodeId | None, *, send_helo: bool = True,
        listed: int = 0,
    ) -> _Session:
        s = self._new_session(uuid, self._connect(endpoint), endpoint, now, introducer)
        if send_helo:
            self._send_hello(s.conn, reply=False, to=uuid, now=now, listed=listed)
        return s

    def _heard(self, s: _Session, now: float) -> None:
        s.last_heard = now
        self._last_frame[s.uuid] = now
        self._counts[s.uuid][0] += 1
        if s.phase is Phase.SUSPECT:
            s.phase = Phase.ALIVE
            self._notify(PeerStateChanged(s.uuid, s.name, s.phase.value, self.mesh_time(now)))

    def _admit(self, s: _Session, now: float) -> None:
        others = [x for x in self._sessions.values() if x.admitted and x is not s]
        s.phase = Phase.ALIVE
        s.joined = now
        self._note(s.last_heard + s.suspect_after)
        if not s.answered:
            s.redial_at = s.last_heard + s.suspect_after
        self._gone.pop(s.uuid, None)
        if s.seed is None:
            for seed in self._seeds.values():
                if seed.endpoint == s.endpoint and seed.peer is None:
                    if seed.conn is not None and seed.conn != s.conn:
                        self._actions.append(Disconnect(seed.conn))
                    seed.conn = s.conn
                    seed.peer = s.uuid
                    s.seed = seed.endpoint
        self._notify(PeerJoined(s.uuid, s.name, s.endpoint, self.mesh_time(now)))
        self._had_peers = True
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
        # Time: a node alone takes its clock from the first peer it meets.  When
        # two lone nodes meet, the one with the smaller UUID is the reference.
        s.sync_pending = not others and (s.helo_peers > 0 or s.uuid < self.uuid)
        # The round trip: measured at once by one end of the pair, the one with the smaller UUID
        # (and by a node taking the peer's clock); the other end's first probe comes at a random
        # point of the next half interval.  The next probe half an interval on (the first round
        # trip, measured while the peer was busy being admitted, is soon renewed): of the
        # interval as the group's size scales it then, so that the peers admitted while the
        # group was small are not all probed again amid a crowd joining.
        if s.sync_pending or self.uuid < s.uuid:
            self._probe(s, now)
            s.probed, s.probe_in = now, 0.5
        else:
            s.probed, s.probe_in = now, 0.5 * self._rng.random()
        self._answer_waiting(now)  # a handshake slot just freed

    def _redial(self, s: _Session, now: float) -> None:
        """A peer admitted on the HELO and BOUT it dialled us with has said nothing since, for
        its suspect_after: our answer has not reached it (it beats only once our HELO and BOUT
        admit us there), so our connection to it is stuck.  After a network returns, one opened
        a moment too early has its SYN lost, and the kernel tries again 1 s, then 3 s later; or
        its ROUTER does not read it, a connection from before the cut still holding our id
        (section 2.1).  Closed now, and a fresh connection a heartbeat later, HELO and BOUT on it
        (:meth:`_reopen`): opened in the same turn, it could reach the peer's ROUTER before the
        close does, and be left unread there in turn (protocol.md 8.5).  Again each
        suspect_after until it answers (protocol.md 6).  Meanwhile it is judged as its end judges
        our handshake: gone after the handshake timeout, suspect after half (:meth:`tick`)."""
        self.stats.answers_redialled += 1
        self._actions.append(Disconnect(s.conn))
        s.redial_at = math.inf
        s.reopen_at = now + self.beat
        self._note(s.reopen_at)

    def _reopen(self, s: _Session, now: float) -> None:
        """The fresh connection of :meth:`_redial`, under the same conn (replication and delivery
        keep it): HELO (reply false) and BOUT on it."""
        s.reopen_at = math.inf
        self._actions.append(Connect(s.conn, s.endpoint))
        self._send_hello(s.conn, reply=False, to=s.uuid, now=now)
        if not s.answered:
            s.redial_at = now + s.suspect_after

    def _probe(self, s: _Session, now: float) -> None:
        s.probe_t0 = now
        self._send(s.conn, Time(sender=self.uuid, t0=now))

    def _probe_scale(self) -> float:
        """How much longer than ``rtt_probe_interval`` a peer's probes are apart: past 10
        nodes (our admitted peers plus one), the group's size / 10, as the picture scales its
        reports (protocol.md 4.6, 14).  Every member probes every other, so the probes and
        their replies would grow with the square of the group; scaled, a node sends and
        answers about 4 a second whatever the group's size (at 64: 25 a second before)."""
        return group_scale(1 + sum(1 for s in self._sessions.values() if s.admitted))

    def _end(self, s: _Session, reason: str, now: float) -> None:
        self._actions.append(Disconnect(s.conn))
        self._forget(s, now)
        if s.admitted:
            info = self._info(s, now)
            gone = dataclasses.replace(info, state="gone")
            self._gone[s.uuid] = _Gone(gone, now + self.timing.gone_retention)
            self._notify(PeerLeft(s.uuid, s.name, reason, self.mesh_time(now)))
            if not self._closed and not self.cut_off and not any(x.admitted for x in self._sessions.values()):
                self.cut_off = True
                self._notify(CutOff(True, self.mesh_time(now)))

    def _forget(self, s: _Session, now: float) -> None:
        if self._sessions.get(s.uuid) is s:
            del self._sessions[s.uuid]
            self._aliases.pop(s.uuid, None)
            for service in self._services:
                service.peer_down(s.uuid, now)
        if s.seed is not None:
            seed = self._seeds.get(s.seed)
            if seed is not None and seed.peer == s.uuid:
                seed.peer = None
                seed.conn = None
                seed.backoff = 0.0
                # Dialled again a retry interval on, not at once: a new connection that reaches the
                # seed before it saw the old one close is never read there (protocol.md 8.5).
                seed.next_try = now + self.timing.seed_retry
                self._note(seed.next_try)

    def _refuse_endpoint(self, uuid: NodeId, endpoint: str, incarnation: str, reason: str, now: float) -> None:
        old = self._sessions.get(uuid)
        if old is not None:
            self._end(old, f"refused: {reason}", now)
        if self._refused.get(uuid) != incarnation:
            log.warning("refusing %s at %s: %s", uuid.short, endpoint, reason)
            self.stats.refused += 1
            self._refused[uuid] = incarnation
            conn = self._connect(endpoint)
            self._send(conn, Gbye(sender=self.uuid, reason=reason))
            self._actions.append(Disconnect(conn, flush=True))
            self._notify(PeerRefused(uuid, endpoint, reason, True, self.mesh_time(now)))

    def _cut_incarnation(self, s: _Session, reason: str, now: float) -> None:
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

    def _endpoint_known(self, endpoint: str) -> bool:
        return any(s.endpoint == endpoint for s in self._sessions.values())

    # bounds --------------------------------------------------------------------

    def _introducer_cap(self, s: _Session) -> int:
        """How many handshakes the introductions of ``s`` may hold open: one of our own
        seeds (the operator named it) may fill every handshake slot, so that a newcomer
        dials the whole member list its seed sends in one wave (at 64 nodes, 8 an
        introducer made a join two waves of handshakes: the rest waited for the lists
        of the first 8 admitted); any other introducer, ``max-handshaking-per-introducer``."""
        lim = self.limits
        return lim.max_handshaking if s.seed is not None else lim.max_handshaking_per_introducer

    def _room(self, key: str, cap: int | None = None) -> bool:
        """Whether one more session may open: below max-sessions, and, as it starts
        unadmitted, below max-handshaking in total and (``key`` not "") below ``cap``
        (default max-handshaking-per-introducer) for ``key``."""
        lim = self.limits
        if len(self._sessions) >= lim.max_sessions:
            return False
        pending = mine = 0
        for x in self._sessions.values():
            if not x.admitted:
                pending += 1
                if key and x.opened_by == key:
                    mine += 1
        return pending < lim.max_handshaking and (
            not key or mine < (lim.max_handshaking_per_introducer if cap is None else cap))

    def _make_room(self, address: str, now: float) -> None:
        """The session table is full and a HELO from ``address`` needs a slot (protocol.md 8.6):
        unless that address already holds ``max-sessions-per-address`` admitted sessions, end
        one session to make room.  First one that has sent nothing since its admission, a
        heartbeat or more ago (a ghost: a HELO and a BOUT, then silence; an honest peer beats),
        of the address holding the most sessions, the earliest admitted; failing that, the
        session heard from longest ago of the address holding the most, if it holds more than
        its share.  Nothing else is ended: a table full of live peers, each address within its
        share, refuses the newcomer as before."""
        cap = self.limits.max_sessions_per_address
        held: dict[str, list[_Session]] = {}
        for x in self._sessions.values():
            if x.admitted:
                held.setdefault(address_of(x.source), []).append(x)
        if len(held.get(address, ())) >= cap:
            return
        due = now - self.beat
        silent = [x for x in self._sessions.values()
                  if x.admitted and x.last_heard <= x.joined and x.joined <= due]
        if silent:
            victim = min(silent, key=lambda x: (-len(held[address_of(x.source)]), x.joined))
            why = "silent since its admission"
        else:
            most = max(held.values(), key=len, default=[])
            if len(most) <= cap:
                return
            victim = min(most, key=lambda x: x.last_heard)
            why = f"its address holds more than {cap} sessions"
        self.stats.sessions_evicted += 1
        self._lines.warning("evict", now, "ended the session of %s from %s to make room for a HELO from %s: %s "
                            "(%d so far)", victim.uuid.short, address_of(victim.source) or "?", address or "?",
                            why, self.stats.sessions_evicted)
        self._end(victim, f"evicted: {why}", now)

    def _wait(self, m: Helo | Peer, via: str, now: float) -> None:
        """No handshake slot for this HELO (``via``: its source, counted by its address) or PEER
        (``via``: the introducer's UUID, hex) now: hold it (bounded, the oldest dropped first)."""
        waiting = self._waiting
        uuid = m.sender if isinstance(m, Helo) else m.peer
        waiting.pop(uuid, None)
        limit = self.limits.max_waiting_helos
        # One address or introducer holds at most a quarter of the room (at least the per-key cap):
        # a flood from one place must not push out an honest crowd's turn.
        place = address_of(via)
        if sum(1 for x, v, _ in waiting.values() if address_of(v) == place and type(x) is type(m)) >= max(
                self.limits.max_handshaking_per_introducer, limit // 4):
            self._given_up(m, now)
            return
        if len(waiting) >= limit:  # full (or no waiting at all): the oldest, or this one, is not answered
            if waiting:
                oldest = next(iter(waiting))
                self._given_up(waiting.pop(oldest)[0], now)
            else:
                self._given_up(m, now)
        if limit:
            waiting[uuid] = (m, via, now)
            self._note(now + BUSY_POLL)
            if isinstance(m, Helo):
                self.stats.helos_waited += 1
            else:
                self.stats.introductions_waited += 1

    def _given_up(self, m: Helo | Peer, now: float) -> None:
        if isinstance(m, Peer):
            self._refused_intro(f"a PEER from {m.sender.short}", now)
            return
        self.stats.helos_refused += 1
        self._lines.warning("helo", now, "HELO from %s not answered: too many sessions and HELOs waiting "
                            "(%d so far)", m.sender.short, self.stats.helos_refused)

    def _answer_waiting(self, now: float) -> None:
        """Answer the held HELOs and PEERs that freed handshake slots let in, oldest first."""
        waiting = self._waiting
        if not waiting:
            return
        expired = now - self.timing.handshake_timeout
        for uuid, (m, via, at) in list(waiting.items()):
            if at <= expired:  # its sender gave up on this session by now
                del waiting[uuid]
                self._given_up(m, now)
                continue
            if uuid in self._sessions:
                del waiting[uuid]
                continue
            key = (f"addr:{address_of(via)}" if via else "") if isinstance(m, Helo) else f"peer:{m.sender}"
            introducer = None if isinstance(m, Helo) else self._sessions.get(m.sender)
            if not self._room(key, None if introducer is None else self._introducer_cap(introducer)):
                if not self._room(""):
                    return  # no slot at all: the rest waits too
                continue  # this address or introducer is at its cap; another's may not be
            del waiting[uuid]
            if isinstance(m, Helo):
                # Its BOUT came while it waited and was dropped: answer as if we opened the
                # session (a HELO with reply false), so that it says HELO and BOUT again.
                self._on_checked_helo(dataclasses.replace(m, reply=True), now, via)  # checked when it came
                continue
            if introducer is not None and introducer.phase is Phase.ALIVE:
                self._on_peer(introducer, m, now, live=True)

    def _refused_intro(self, what: str, now: float) -> None:
        self.stats.introductions_refused += 1
        self._lines.warning("intro", now, "not dialling %s: introducer not alive, node backed off, or too many "
                            "sessions (%d so far)", what, self.stats.introductions_refused)

    def _back_off(self, uuid: NodeId, now: float) -> None:
        """An introduced node failed its handshake: PEERs naming it are ignored for a while."""
        table = self._intro_backoff
        table.pop(uuid, None)
        while table and len(table) >= 4 * max(1, self.limits.max_sessions):
            del table[next(iter(table))]  # the oldest entry
        table[uuid] = now + self.limits.introduction_backoff

    def _blame(self, source: str, now: float) -> None:
        """A message under a session's UUID came from another connection than the session's."""
        self.stats.foreign_frames += 1
        blamed = self.blamed
        source = address_of(source)  # counted per address, whichever of its connections
        n = blamed.pop(source, 0) + 1  # re-inserted last: the most recent address
        if n == 1:
            while blamed and len(blamed) >= self.limits.max_blamed_addresses:
                del blamed[next(iter(blamed))]
        if self.limits.max_blamed_addresses:
            blamed[source] = n
        self._lines.warning("foreign", now, "dropped a message from %s under another connection's UUID (%d so far)",
                            source, self.stats.foreign_frames)

    # seeds -------------------------------------------------------------------

    def _retry_seeds(self, now: float) -> None:
        for seed in self._seeds.values():
            if seed.refused is not None or seed.peer is not None or now < seed.next_try:
                continue
            if self._endpoint_known(seed.endpoint):
                continue
            if seed.conn is not None and now - seed.opened >= self.timing.seed_reopen_after:
                # Unanswered this long: the seed is down or gone, not busy.  Drop the HELOs queued
                # for it; the next try, not this same turn, connects afresh.
                self._actions.append(Disconnect(seed.conn))
                seed.conn = None
                seed.next_try = now + self.timing.seed_retry
                self._note(seed.next_try)
                continue
            if seed.conn is None:
                # Kept until the seed answers (or seed_reopen_after), its retries on it: a new
                # connection would carry our identity while the old one may linger at the seed,
                # whose ROUTER would then never read it (protocol.md 8.5).
                seed.conn = self._connect(seed.endpoint)
                seed.opened = now
            self._send_hello(seed.conn, reply=False, to=None, now=now)
            seed.backoff = min(_SEED_BACKOFF_MAX, max(self.timing.seed_retry, seed.backoff * 2))
            seed.next_try = now + seed.backoff
            self._note(seed.next_try)

    def _adopt_seed_conn(self, uuid: NodeId, endpoint: str) -> int | None:
        seed = self._seeds.get(endpoint)
        if seed is None or seed.conn is None or seed.peer is not None:
            return None
        seed.peer = uuid
        return seed.conn

