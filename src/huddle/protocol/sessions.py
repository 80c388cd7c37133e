"""The session table: sessions by peer UUID, what was heard from any node, the peers gone lately.

It opens and removes sessions (a removal is the END move of session.py's table), binds a
session to the connections its HELOs came from (protocol.md section 2.1), and answers what the
API, the system picture and the transport ask of the peers.  Pure: time is passed in, and the
mesh turns what it returns into actions and events.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Container
from dataclasses import dataclass
from typing import Final

from ..ids import NodeId, address_of
from ..security import fingerprint, node_id_for
from ..wire import Helo
from .clock import Clock
from .service import PeerSeen
from .session import Move, Phase, Session, Timing

__all__ = ["PROVEN", "PeerInfo", "Sessions"]

# Connections from a session's own address, besides its latest, that carried a HELO of the session
# and so may carry its messages (a probe's, a re-dialled DEALER's, while the older one closes).
PROVEN: Final = 3


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
    tags: dict[str, str] = dataclasses.field(default_factory=dict)  # its HELO's tags (protocol.md 4.1, "Tags")


@dataclass(slots=True)
class _Gone:
    info: PeerInfo
    until: float
    reason: str = ""  # why its session ended ("timeout", "left", "left: why", ...)


class Sessions:
    """The sessions of one mesh, by peer UUID, and what it heard of any node."""

    def __init__(self, timing: Timing, group: str, clock: Clock) -> None:
        self._timing = timing
        self._group = group
        self._clock = clock
        self.by_uuid: Final[dict[NodeId, Session]] = {}
        self.last_frame: Final[dict[NodeId, float]] = {}  # any message from a node, admitted or not
        self.counts: Final[dict[NodeId, list[int]]] = {}  # per node: messages and octets received
        self._gone: dict[NodeId, _Gone] = {}

    # the table ----------------------------------------------------------------

    def open(self, uuid: NodeId, conn: int, endpoint: str, now: float, introducer: NodeId | None) -> Session:
        """A new session, CONNECTING, judged by our own timing until its HELO says its own."""
        t = self._timing
        s = Session(uuid=uuid, conn=conn, endpoint=endpoint, created=now, last_heard=now, introducer=introducer,
                    suspect_after=t.suspect_after, gone_after=t.gone_after, redial_at=now + t.suspect_after)
        self.by_uuid[uuid] = s
        self.counts.setdefault(uuid, [0, 0])
        return s

    def remove(self, s: Session) -> bool:
        """Take ``s`` out of the table (its END move).  False: it was not the table's (already
        removed, or replaced by a newer session of the same peer)."""
        if self.by_uuid.get(s.uuid) is not s:
            return False
        s.move(Move.END)
        del self.by_uuid[s.uuid]
        return True

    def clear(self) -> None:
        """Every session removed at once (this node leaves)."""
        for s in self.by_uuid.values():
            s.move(Move.END)
        self.by_uuid.clear()

    def retire(self, s: Session, now: float, reason: str = "") -> None:
        """``s``, admitted, has ended (``reason``): reported as gone for the gone retention."""
        info = dataclasses.replace(self.info(s), state="gone")
        self._gone[s.uuid] = _Gone(info, now + self._timing.gone_retention, reason)

    def departure(self, uuid: NodeId) -> str | None:
        """Why ``uuid``'s last admitted session ended, while it is listed gone (None: it is not)."""
        g = self._gone.get(uuid)
        return None if g is None else g.reason

    def returned(self, uuid: NodeId) -> None:
        """``uuid`` is admitted again: no longer reported gone."""
        self._gone.pop(uuid, None)

    def expire(self, now: float) -> None:
        for uuid in [u for u, g in self._gone.items() if g.until <= now]:
            del self._gone[uuid]

    def forget_node(self, uuid: NodeId) -> None:
        """Forget having heard ``uuid`` (excluded for good)."""
        self.last_frame.pop(uuid, None)

    # binding ------------------------------------------------------------------

    @staticmethod
    def from_session(s: Session, source: str) -> bool:
        """Whether ``source`` is a connection ``s`` is bound to (any, before its first HELO)."""
        return not s.source or s.source == source or source in s.proven

    @staticmethod
    def bind(s: Session, source: str) -> None:
        """Bind ``s`` to the connection ``source``, whose HELO passed the identity checks.  A
        connection from the same address it was bound to stays good too (the last PROVEN):
        the peer's probe, or a DEALER it re-opened while the old one drains; another address
        (the peer moved) leaves the old one's connections nothing."""
        if s.source and address_of(s.source) == address_of(source):
            proven = s.proven
            if source in proven:
                proven.remove(source)
            proven.append(s.source)
            del proven[:-PROVEN]
        else:
            s.proven.clear()
        s.source = source

    @staticmethod
    def record_helo(s: Session, m: Helo, source: str, now: float, gone_after_max: float) -> None:
        """What an accepted HELO from ``source`` says of its sender, recorded in ``s``: who it
        is, whether it answers us, its key, the connection it is bound to, its timing."""
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
        s.tags = m.tags
        s.rate = m.rate
        s.guests = m.guests
        s.deltas = m.deltas
        if source and source != s.source and newer:
            Sessions.bind(s, source)
        if m.beat:
            # Its node type says how often it beats and how many beats may be lost
            # (clamped: a HELO must not keep a silent ghost for long).
            s.gone_after = min(gone_after_max, max(0.2, m.beat * (m.lost + 1)))
            s.suspect_after = s.gone_after / 2

    # queries ------------------------------------------------------------------

    def admitted(self) -> list[Session]:
        return [s for s in self.by_uuid.values() if s.admitted]

    def count_admitted(self) -> int:
        return sum(1 for s in self.by_uuid.values() if s.admitted)

    def endpoint_known(self, endpoint: str) -> bool:
        return any(s.endpoint == endpoint for s in self.by_uuid.values())

    def info(self, s: Session) -> PeerInfo:
        return PeerInfo(
            uuid=s.uuid,
            name=s.name,
            endpoint=s.endpoint,
            group=self._group,
            state=s.phase.value,
            last_seen=self._clock.mesh_time(s.last_heard),
            rtt=s.rtt,
            joined=s.joined,
            key=fingerprint(s.key) if s.key else "",
            verified=s.verified,
            tags=s.tags,
        )

    def seen(self, now: float, keep: float, excluded: Container[NodeId]) -> list[PeerSeen]:
        """Every node heard from within ``keep`` seconds or with a session, by UUID (the
        ``excluded`` left out): what the system picture's reports say of them.  A session
        admitted here whose peer has not answered is a handshake done at one end only: reported
        as ``handshake``, so that the others relay our report to that peer (protocol.md 6, 14)."""
        sessions, last_frame, counts = self.by_uuid, self.last_frame, self.counts
        for uuid in [u for u, t in last_frame.items() if now - t > keep and u not in sessions]:
            del last_frame[uuid]
            counts.pop(uuid, None)
        rows = []
        for uuid in sorted(set(last_frame) | set(sessions)):
            if uuid in excluded:
                continue
            s = sessions.get(uuid)
            msgs_in, bytes_in = counts.get(uuid, (0, 0))
            rows.append(PeerSeen(
                uuid, last_frame.get(uuid), s.rtt if s is not None and s.admitted else None,
                "none" if s is None else Phase.HANDSHAKE.value if s.admitted and not s.answered else s.phase.value,
                msgs_in, bytes_in, None if s is None else s.conn,
            ))
        return rows

    def peers(self, now: float) -> list[PeerInfo]:
        """Every admitted peer, then recently gone ones (state ``gone``).  A gone peer being
        dialled again (a member list that still names it) stays gone until it is admitted."""
        sessions = self.by_uuid
        infos = [self.info(s) for s in sessions.values() if s.admitted]
        infos.sort(key=lambda p: (p.name, p.uuid))
        gone = [g.info for uuid, g in self._gone.items()
                if g.until > now and (uuid not in sessions or not sessions[uuid].admitted)]
        return infos + sorted(gone, key=lambda p: (p.name, p.uuid))

    def guest_hosts(self, port: int) -> list[NodeId]:
        """The ALIVE peers whose HELO says they host guests on our marco ``port`` (they
        hear the marcos we hear).  A SUSPECT one is left out: its guests' marcos go
        to another host until it is heard again."""
        return [s.uuid for s in self.by_uuid.values() if port and s.guests == port and s.phase is Phase.ALIVE]

    def conn_of(self, peer: NodeId) -> int | None:
        s = self.by_uuid.get(peer)
        return None if s is None or not s.admitted else s.conn

    def source_of(self, peer: NodeId) -> str:
        """The address a peer's HELO came from ("" if unknown): guest hosts are bounded per address."""
        s = self.by_uuid.get(peer)
        return "" if s is None else address_of(s.source)

    def bound_by_address(self) -> dict[str, int]:
        """Per source address, the sessions whose HELO was accepted from there: how many of
        the ROUTER's connections from that address have proved themselves (section 2.1;
        the transport bounds and closes the others)."""
        out: dict[str, int] = {}
        for s in self.by_uuid.values():
            if s.source:
                address = address_of(s.source)
                out[address] = out.get(address, 0) + 1
        return out
