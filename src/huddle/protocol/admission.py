"""Admission: who may open a session, and from where (protocol.md 8.6).

The quotas: at most ``max-sessions`` sessions, of which ``max-handshaking`` not yet admitted,
at most ``max-handshaking-per-introducer`` opened by one introducer's PEERs or lists (a seed of
ours: every slot) or by HELOs from one address.  A HELO or PEER that finds no slot waits in the
waiting room (``max-waiting-helos``, a quarter at most from one place, the oldest dropped
first) and is answered, oldest first, as slots free.  A full table makes room for a HELO by
ending a silent ghost or a session of an address over its share (:meth:`Admission.eviction`).
An introduced node whose handshake failed is not dialled again for a while (back-off); a
message under a session's UUID from another connection is counted against that address
(``blamed``), never against the session.

Pure bookkeeping: time is passed in, and the mesh, which owns the sessions, acts on the answers.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Final

from ..ids import NodeId, address_of
from ..limits import MeshLimits
from ..ratelog import RateLog
from ..wire import Helo, Peer
from .parts import Stats
from .service import BUSY_POLL
from .session import Session

__all__ = ["Admission"]

# A held HELO (from its source) or PEER (from its introducer's UUID, hex), and when it came.
Held = tuple[Helo | Peer, str, float]


class Admission:
    """The session quotas, the waiting room, the introductions' back-off and the blamed addresses."""

    def __init__(self, limits: MeshLimits, stats: Stats, lines: RateLog, handshake_timeout: float) -> None:
        self.limits: Final = limits
        self.stats = stats
        self._lines = lines
        self._handshake_timeout = handshake_timeout
        # HELOs that came while no handshake slot was free: answered, oldest first, when one frees
        # (an honest crowd joining at once, many nodes behind one address), dropped after the
        # handshake timeout; by the UUID to meet.
        self.waiting: dict[NodeId, Held] = {}
        self._backoff: dict[NodeId, float] = {}  # introduced nodes whose handshake failed -> until
        # Frames under a session's UUID from another address: counted per address (the
        # oldest address forgotten past max-blamed-addresses), never against the session.
        self.blamed: dict[str, int] = {}

    # quotas -------------------------------------------------------------------

    def introducer_cap(self, s: Session) -> int:
        """How many handshakes the introductions of ``s`` may hold open: one of our own
        seeds (the operator named it) may fill every handshake slot, so that a newcomer
        dials the whole member list its seed sends in one wave (at 64 nodes, 8 an
        introducer made a join two waves of handshakes: the rest waited for the lists
        of the first 8 admitted); any other introducer, ``max-handshaking-per-introducer``."""
        lim = self.limits
        return lim.max_handshaking if s.seed is not None else lim.max_handshaking_per_introducer

    def room(self, sessions: Mapping[NodeId, Session], key: str, cap: int | None = None) -> bool:
        """Whether one more session may open: below max-sessions, and, as it starts
        unadmitted, below max-handshaking in total and (``key`` not "") below ``cap``
        (default max-handshaking-per-introducer) for ``key``."""
        lim = self.limits
        if len(sessions) >= lim.max_sessions:
            return False
        pending = mine = 0
        for x in sessions.values():
            if not x.admitted:
                pending += 1
                if key and x.opened_by == key:
                    mine += 1
        return pending < lim.max_handshaking and (
            not key or mine < (lim.max_handshaking_per_introducer if cap is None else cap))

    def eviction(self, sessions: Mapping[NodeId, Session], address: str, now: float, beat: float,
                 ) -> tuple[Session, str] | None:
        """The session table is full and a HELO from ``address`` needs a slot (protocol.md 8.6):
        unless that address already holds ``max-sessions-per-address`` admitted sessions, the
        session to end to make room, and why (None: none).  First one that has sent nothing since
        its admission, a heartbeat or more ago (a ghost: a HELO and a BOUT, then silence; an
        honest peer beats), of the address holding the most sessions, the earliest admitted;
        failing that, the session heard from longest ago of the address holding the most, if it
        holds more than its share.  Nothing else: a table full of live peers, each address within
        its share, refuses the newcomer as before."""
        cap = self.limits.max_sessions_per_address
        held: dict[str, list[Session]] = {}
        for x in sessions.values():
            if x.admitted:
                held.setdefault(address_of(x.source), []).append(x)
        if len(held.get(address, ())) >= cap:
            return None
        due = now - beat
        silent = [x for x in sessions.values() if x.admitted and x.last_heard <= x.joined and x.joined <= due]
        if silent:
            return min(silent, key=lambda x: (-len(held[address_of(x.source)]), x.joined)), "silent since its admission"
        most = max(held.values(), key=len, default=[])
        if len(most) <= cap:
            return None
        return min(most, key=lambda x: x.last_heard), f"its address holds more than {cap} sessions"

    # the waiting room ---------------------------------------------------------

    def wait(self, m: Helo | Peer, via: str, now: float) -> bool:
        """No handshake slot for this HELO (``via``: its source, counted by its address) or PEER
        (``via``: the introducer's UUID, hex) now: hold it (bounded, the oldest dropped first).
        True: it is held (the mesh polls for a free slot)."""
        waiting = self.waiting
        uuid = m.sender if isinstance(m, Helo) else m.peer
        waiting.pop(uuid, None)
        limit = self.limits.max_waiting_helos
        # One address or introducer holds at most a quarter of the room (at least the per-key cap):
        # a flood from one place must not push out an honest crowd's turn.
        place = address_of(via)
        if sum(1 for x, v, _ in waiting.values() if address_of(v) == place and type(x) is type(m)) >= max(
                self.limits.max_handshaking_per_introducer, limit // 4):
            self.given_up(m, now)
            return False
        if len(waiting) >= limit:  # full (or no waiting at all): the oldest, or this one, is not answered
            if waiting:
                oldest = next(iter(waiting))
                self.given_up(waiting.pop(oldest)[0], now)
            else:
                self.given_up(m, now)
        if not limit:
            return False
        waiting[uuid] = (m, via, now)
        if isinstance(m, Helo):
            self.stats.helos_waited += 1
        else:
            self.stats.introductions_waited += 1
        return True

    def given_up(self, m: Helo | Peer, now: float) -> None:
        if isinstance(m, Peer):
            self.refused_intro(f"a PEER from {m.sender.short}", now)
            return
        self.stats.helos_refused += 1
        self._lines.warning("helo", now, "HELO from %s not answered: too many sessions and HELOs waiting "
                            "(%d so far)", m.sender.short, self.stats.helos_refused)

    def released(self, sessions: Mapping[NodeId, Session], now: float) -> Iterator[tuple[Helo | Peer, str]]:
        """The held HELOs and PEERs that freed handshake slots let in, oldest first, each taken
        out of the room as it is yielded (the mesh answers it before the next is judged);
        expired ones given up on the way."""
        waiting = self.waiting
        if not waiting:
            return
        expired = now - self._handshake_timeout
        for uuid, (m, via, at) in list(waiting.items()):
            if at <= expired:  # its sender gave up on this session by now
                del waiting[uuid]
                self.given_up(m, now)
                continue
            if uuid in sessions:
                del waiting[uuid]
                continue
            key = (f"addr:{address_of(via)}" if via else "") if isinstance(m, Helo) else f"peer:{m.sender}"
            introducer = None if isinstance(m, Helo) else sessions.get(m.sender)
            if not self.room(sessions, key, None if introducer is None else self.introducer_cap(introducer)):
                if not self.room(sessions, ""):
                    return  # no slot at all: the rest waits too
                continue  # this address or introducer is at its cap; another's may not be
            del waiting[uuid]
            yield m, via

    def due(self, now: float) -> float:
        """When the room needs the mesh next: each held message's expiry, and a poll while any waits."""
        if not self.waiting:
            return float("inf")
        return min(now + BUSY_POLL, *(at + self._handshake_timeout for _, _, at in self.waiting.values()))

    # introductions ------------------------------------------------------------

    def refused_intro(self, what: str, now: float) -> None:
        self.stats.introductions_refused += 1
        self._lines.warning("intro", now, "not dialling %s: introducer not alive, node backed off, or too many "
                            "sessions (%d so far)", what, self.stats.introductions_refused)

    def back_off(self, uuid: NodeId, now: float) -> None:
        """An introduced node failed its handshake: PEERs naming it are ignored for a while."""
        table = self._backoff
        table.pop(uuid, None)
        while table and len(table) >= 4 * max(1, self.limits.max_sessions):
            del table[next(iter(table))]  # the oldest entry
        table[uuid] = now + self.limits.introduction_backoff

    def handshake_failed(self, s: Session, now: float, *, spared: bool = False) -> None:
        """``s`` never got through its handshake: if a PEER or a list opened it, PEERs naming its
        node are ignored for a while (:meth:`back_off`), unless ``spared``: this node's own loop
        was late, and the answer may be what waited unread (the next list naming it dials it)."""
        if not s.opened_by.startswith("peer:"):
            return
        if spared:
            self.stats.backoffs_spared += 1
        else:
            self.back_off(s.uuid, now)

    def backed_off(self, uuid: NodeId, now: float) -> bool:
        until = self._backoff.get(uuid)
        return until is not None and until > now

    # foreign frames -----------------------------------------------------------

    def blame(self, source: str, now: float) -> None:
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
