"""The handshake (protocol.md 4.1-4.4, 5, 8.3, 8.7): HELO, BOUT and GBYE.

A HELO whose identity holds (helo.py) opens a session, on the connection of our seed or probe
that it answers or a new one within admission's quotas (else it waits its turn), or answers,
moves or restarts the session its sender has; what it says is recorded in the session
(sessions.py).  A BOUT naming our group admits a HANDSHAKE session; another group is refused.
A GBYE ends an admitted session, or during the handshake is a refusal, remembered so that we
do not retry in a loop.  A HELO of another protocol version or of an excluded node is refused
with a GBYE of ours, once per incarnation.

What it decides the mesh carries out through the port (parts.Host): sessions opened, admitted,
ended; messages sent, events notified.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, MutableMapping
from typing import Final

from ..ids import NodeId, address_of
from ..limits import MeshLimits
from ..ratelog import RateLog
from ..wire import PROTOCOL_VERSION, Gbye, Group, Helo
from .admission import Admission
from .clock import Clock
from .events import PeerRefused
from .gossip import MemberGossip
from .helo import check_helo
from .moves import Moves
from .parts import Host, Stats
from .seeds import Seeds
from .service import BUSY_POLL
from .session import Move, Phase, Session
from .sessions import Sessions

__all__ = ["Handshake", "quote"]

log = logging.getLogger("huddle.mesh")


def quote(text: str, limit: int = 60) -> str:
    """A group name for a reason text: quoted, and cut short so reasons stay small."""
    return repr(text) if len(text) <= limit else repr(text[:limit]) + "..."


class Handshake:
    """HELO, BOUT and GBYE, for one mesh."""

    def __init__(self, uuid: NodeId, group: str, sessions: Mapping[NodeId, Session], *,
                 refused: MutableMapping[NodeId, str], excluded: Mapping[NodeId, str], secure: bool,
                 limits: MeshLimits, stats: Stats, lines: RateLog, clock: Clock, admission: Admission, seeds: Seeds,
                 gossip: MemberGossip, moves: Moves, port: Host) -> None:
        self.uuid: Final = uuid
        self.group: Final = group
        self._sessions = sessions
        self._refused = refused  # uuid -> the incarnation refused (until it restarts)
        self._excluded = excluded  # uuid -> why; never admitted again
        self._secure = secure
        self._limits = limits
        self.stats = stats
        self._lines = lines
        self._clock = clock
        self._admission = admission
        self._seeds = seeds
        self._gossip = gossip
        self._moves = moves
        self._port = port

    def helo(self, m: Helo, now: float, source: str) -> bool:
        """A HELO from ``source``: its identity checked (helo.py), then taken (:meth:`checked`)."""
        if m.sender != self.uuid and m.version == PROTOCOL_VERSION:
            refusal = check_helo(m, now, source, self._sessions.get(m.sender), me=self.uuid, secure=self._secure,
                                 window=self._limits.helo_clock_window)
            if refusal is not None:
                if refusal.misaddressed:
                    self.stats.helos_misaddressed += 1
                else:
                    self.stats.refused_identity += 1
                self._lines.warning("identity", now, "refused a HELO claiming %s (%s) from %s: %s "
                                    "(%d refused, %d misaddressed so far)", m.sender.short, quote(m.name),
                                    source or "?", refusal.reason, self.stats.refused_identity,
                                    self.stats.helos_misaddressed)
                return False
        return self.checked(m, now, source)

    def checked(self, m: Helo, now: float, source: str) -> bool:
        """A HELO whose identity holds (or that was held waiting, checked when it came): refused,
        or its session opened, answered or moved, and what it says recorded.  True: taken."""
        port = self._port
        if m.sender == self.uuid:
            # We dialled ourselves (a seed that is another name for our own
            # endpoint).  Which seed cannot be told; it is retried with backoff.
            return False
        if m.version != PROTOCOL_VERSION:
            reason = f"incompatible protocol version {m.version}: this node speaks version {PROTOCOL_VERSION}"
            self._refuse(m.sender, m.endpoint, m.incarnation, reason, now)
            return False
        if m.sender in self._excluded:
            self._refuse(m.sender, m.endpoint, m.incarnation, f"excluded: {self._excluded[m.sender]}", now)
            return False
        if self._refused.get(m.sender) == m.incarnation:
            self.stats.dropped_unintroduced += 1
            return False
        self._refused.pop(m.sender, None)
        s = self._sessions.get(m.sender)
        if s is not None and s.incarnation is not None and s.incarnation != m.incarnation:
            # The peer restarted: end the old session, start afresh.
            self.stats.restarts_followed += 1
            port.end(s, "restarted", now)
            s = None
        if s is not None and s.incarnation == m.incarnation and s.endpoint == m.endpoint:
            self._gossip.answered(m.sender)  # a probe of ours found the same incarnation: an alias
        if s is None:
            conn = self._seeds.adopt(m.sender, m.endpoint)
            seeded = conn is not None
            if conn is None:
                conn = self._gossip.adopt(m.sender, m.endpoint)
            if conn is None:
                key = f"addr:{address_of(source)}" if source else ""
                if len(self._sessions) >= self._limits.max_sessions:
                    port.make_room(address_of(source), now)
                if not self._admission.room(self._sessions, key):
                    if self._admission.wait(m, source, now):
                        port.note(now + BUSY_POLL)
                    return False
                s = port.new(m.sender, port.connect(m.endpoint), m.endpoint, now)
                s.opened_by = key
            else:
                s = port.new(m.sender, conn, m.endpoint, now)
                if seeded:
                    s.seed = m.endpoint
            if not m.reply or conn is None:
                port.send_hello(s.conn, reply=m.reply is False, to=m.sender, now=now)
        elif not m.reply:
            # The peer (re)opens a session with us: answer it.
            if s.endpoint != m.endpoint and not s.admitted:
                port.disconnect(s.conn)
                s.conn = port.connect(m.endpoint)
                s.endpoint = m.endpoint
                s.reopen_at = math.inf
            elif s.endpoint != m.endpoint:
                self._moves.follow(s, m.endpoint)
            port.send_hello(s.conn, reply=True, to=m.sender, now=now)
        else:
            self._moves.answered(m.sender)  # it answered a HELO: it knows our endpoint
        if not m.reply and s.answered and s.admitted:  # it lost our session: it holds nothing of ours (picture, 14)
            self.stats.dialled_afresh += 1
        Sessions.record_helo(s, m, source, now, self._limits.peer_gone_after_max)
        port.heard(s, now)
        if s.phase is Phase.CONNECTING:
            s.move(Move.HELO)
        return True

    def bout(self, s: Session, m: Group, now: float) -> bool:
        """A BOUT from ``s`` (not CONNECTING): another group is refused, ours admits a HANDSHAKE."""
        port = self._port
        if m.group != self.group:
            reason = f"group mismatch: peer is in {quote(m.group)}, this node is in {quote(self.group)}"
            port.send(s.conn, Gbye(sender=self.uuid, reason=reason))
            port.disconnect(s.conn, flush=True)
            port.forget(s, now)
            self._refused[s.uuid] = s.incarnation or ""
            self.stats.refused += 1
            if self._seeds.refused(s, reason):
                log.warning("seed %s refused: %s (not retrying it)", s.seed, reason)
            port.notify(PeerRefused(s.uuid, s.endpoint, reason, True, self._clock.mesh_time(now)))
            return True
        if s.phase is Phase.HANDSHAKE:
            port.admit(s, now)
        return True

    def gbye(self, m: Gbye, now: float) -> bool:
        """A GBYE: an admitted peer leaves; during the handshake it is a refusal, remembered."""
        port = self._port
        s = self._sessions.get(m.sender)
        if s is None or (s.phase is Phase.CONNECTING and s.incarnation is None and not m.reason):
            self.stats.dropped_unintroduced += 1
            if s is None and m.reason:
                log.info("peer %s refused us: %s", m.sender.short, m.reason)
            return False
        if s.admitted:
            port.end(s, f"left: {m.reason}" if m.reason else "left", now)
            return True
        # A refusal during the handshake: remember it, do not retry in a loop.
        port.disconnect(s.conn)
        port.forget(s, now)
        reason = m.reason or "peer said goodbye during the handshake"
        self._refused[s.uuid] = s.incarnation or ""
        if self._seeds.refused(s, reason):
            log.warning("seed %s refused us: %s (not retrying it)", s.seed, reason)
        port.notify(PeerRefused(s.uuid, s.endpoint, reason, False, self._clock.mesh_time(now)))
        return True

    def _refuse(self, uuid: NodeId, endpoint: str, incarnation: str, reason: str, now: float) -> None:
        """Refuse ``uuid``'s HELO (protocol.md 8.3): its session ended, and, once per
        incarnation, a GBYE of ours on a connection of its own."""
        port = self._port
        old = self._sessions.get(uuid)
        if old is not None:
            port.end(old, f"refused: {reason}", now)
        if self._refused.get(uuid) != incarnation:
            log.warning("refusing %s at %s: %s", uuid.short, endpoint, reason)
            self.stats.refused += 1
            self._refused[uuid] = incarnation
            conn = port.connect(endpoint)
            port.send(conn, Gbye(sender=self.uuid, reason=reason))
            port.disconnect(conn, flush=True)
            port.notify(PeerRefused(uuid, endpoint, reason, True, self._clock.mesh_time(now)))
