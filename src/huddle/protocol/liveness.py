"""Liveness (protocol.md 6): when a session's peer is suspect or gone, its handshake timed out,
or our connection to it is stuck and dialled afresh.

An admitted peer is SUSPECT after its suspect_after of silence and gone after its gone_after
(both from its HELO's beat and lost).  One admitted on the HELO and BOUT it dialled us with,
that has not answered ours, cannot speak before our answer reaches it: it is judged as its
end judges our handshake (suspect after half the handshake timeout, gone after all of it), and
our connection to it is closed and opened afresh each suspect_after until it answers.  A
session not yet admitted is dropped after the handshake timeout of silence.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Iterable

from .parts import Dialler, Stats
from .session import Phase, Session, Timing

__all__ = ["Liveness", "Verdict"]


class Verdict(enum.Enum):
    """What the mesh does with a session after :meth:`Liveness.check`."""

    KEEP = "keep"
    SILENT = "silent"  # ALIVE, silent past its suspect time: it moves to SUSPECT
    GONE = "gone"  # admitted, silent past its gone time: the session ends ("timeout")
    TIMED_OUT = "timed out"  # not admitted within the handshake timeout: dropped, no GBYE


class Liveness:
    """The session timers, judged when due; stuck connections re-dialled through the port."""

    def __init__(self, timing: Timing, stats: Stats, port: Dialler) -> None:
        self._timing = timing
        self.stats = stats
        self._port = port

    def thresholds(self, s: Session) -> tuple[float, float]:
        """The silence after which the admitted peer of ``s`` is suspect, and gone."""
        if s.answered:
            return s.suspect_after, s.gone_after
        # Admitted on its HELO and BOUT, it cannot speak before our answer reaches it.
        timeout = self._timing.handshake_timeout
        return max(s.suspect_after, timeout / 2), max(s.gone_after, timeout)

    def check(self, s: Session, now: float) -> Verdict:
        """Judge ``s`` at ``now``; a stuck connection to it is closed or opened afresh on the way."""
        silence = now - s.last_heard
        if s.admitted:
            suspect_after, gone_after = self.thresholds(s)
            if silence >= gone_after:
                return Verdict.GONE
            if now >= s.redial_at and not s.answered:
                self.redial(s, now)
            if now >= s.reopen_at:
                self.reopen(s, now)
            return Verdict.SILENT if silence >= suspect_after and s.phase is Phase.ALIVE else Verdict.KEEP
        if now >= s.reopen_at:
            self.reopen(s, now)
            return Verdict.KEEP
        timeout = self._timing.handshake_timeout
        return Verdict.TIMED_OUT if now - s.created >= timeout and silence >= timeout else Verdict.KEEP

    def due(self, sessions: Iterable[Session]) -> float:
        """The soonest moment :meth:`check` has something to do for any of ``sessions``."""
        timeout = self._timing.handshake_timeout
        due = math.inf
        for s in sessions:
            phase = s.phase
            if s.reopen_at < due:  # noqa: PLR1730 (min() costs a call here, per session and tick)
                due = s.reopen_at
            if not s.answered and (phase is Phase.ALIVE or phase is Phase.SUSPECT):
                gone = s.last_heard + max(s.gone_after, timeout)
                due = min(due, s.redial_at, gone if phase is Phase.SUSPECT else
                          s.last_heard + max(s.suspect_after, timeout / 2))
            elif phase is Phase.ALIVE:
                due = min(due, s.last_heard + s.suspect_after)
            elif phase is Phase.SUSPECT:
                due = min(due, s.last_heard + s.gone_after)
            else:
                due = min(due, max(s.created, s.last_heard) + timeout)
        return due

    def redial(self, s: Session, now: float) -> None:
        """A peer admitted on the HELO and BOUT it dialled us with has said nothing since, for
        its suspect_after: our answer has not reached it (it beats only once our HELO and BOUT
        admit us there), so our connection to it is stuck.  After a network returns, one opened
        a moment too early has its SYN lost, and the kernel tries again 1 s, then 3 s later; or
        its ROUTER does not read it, a connection from before the cut still holding our id
        (section 2.1).  Closed now, and a fresh connection a heartbeat later, HELO and BOUT on it
        (:meth:`reopen`): opened in the same turn, it could reach the peer's ROUTER before the
        close does, and be left unread there in turn (protocol.md 8.5).  Again each
        suspect_after until it answers (protocol.md 6).  Meanwhile it is judged as its end judges
        our handshake: gone after the handshake timeout, suspect after half (:meth:`thresholds`)."""
        self.stats.answers_redialled += 1
        self._port.disconnect(s.conn)
        s.redial_at = math.inf
        s.reopen_at = now + self._timing.heartbeat_interval
        self._port.note(s.reopen_at)

    def reopen(self, s: Session, now: float) -> None:
        """The fresh connection of :meth:`redial`, under the same conn (replication and delivery
        keep it): HELO (reply false) and BOUT on it."""
        s.reopen_at = math.inf
        self._port.connect(s.endpoint, s.conn)
        self._port.send_hello(s.conn, reply=False, to=s.uuid, now=now)
        if not s.answered:
            s.redial_at = now + s.suspect_after
