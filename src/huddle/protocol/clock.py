"""Clock sync (TIME, protocol.md 4.6): the mesh's clock offset, its heartbeat grid, the probes.

Mesh time is the node's local clock plus ``offset``: zero until the node takes a peer's clock
(the first peer a lone node meets, or of two lone nodes the one with the smaller UUID), then
set from one TIME exchange.  The same probes measure each peer's round trip.  Heartbeats fall
on a grid of mesh time, so the members of a group beat at the same moments.
"""

from __future__ import annotations

import math
import random

from ..ids import NodeId
from ..wire import Time
from .events import ClockSynced
from .session import Session

__all__ = ["Clock"]


class Clock:
    """This node's offset to mesh time, and what a TIME message does to it."""

    def __init__(self, uuid: NodeId, beat: float, rng: random.Random) -> None:
        self.uuid = uuid
        self.beat = beat  # the heartbeat interval: the grid's step
        self._rng = rng  # the mesh's (deterministic per node, for the simulator)
        self.offset = 0.0
        self.synced_with: NodeId | None = None

    def mesh_time(self, now: float) -> float:
        return now + self.offset

    def heartbeat_after(self, when: float) -> float:
        """The first heartbeat moment at or after ``when`` (a multiple of the interval in mesh time)."""
        beat = self.beat
        return math.ceil(self.mesh_time(when) / beat) * beat - self.offset

    def grid_after(self, now: float) -> float:
        """The first heartbeat moment after ``now``: the next multiple of the interval in mesh time."""
        beat = self.beat
        return (math.floor(self.mesh_time(now) / beat) + 1) * beat - self.offset

    def probe(self, s: Session, now: float) -> Time:
        """A TIME request to ``s``: the one outstanding; its reply is measured against it."""
        s.probe_t0 = now
        return Time(sender=self.uuid, t0=now)

    def admitted(self, s: Session, alone: bool, now: float) -> Time | None:
        """``s`` was just admitted (``alone``: our first peer): whether we take its clock, and
        when we first probe it; the probe to send it now, if any."""
        # A node alone takes its clock from the first peer it meets.  When two lone nodes
        # meet, the one with the smaller UUID is the reference.
        s.sync_pending = alone and (s.helo_peers > 0 or s.uuid < self.uuid)
        # The round trip: measured at once by one end of the pair, the one with the smaller UUID
        # (and by a node taking the peer's clock); the other end's first probe comes at a random
        # point of the next half interval.  The next probe half an interval on (the first round
        # trip, measured while the peer was busy being admitted, is soon renewed): of the
        # interval as the group's size scales it then, so that the peers admitted while the
        # group was small are not all probed again amid a crowd joining.
        if s.sync_pending or self.uuid < s.uuid:
            s.probed, s.probe_in = now, 0.5
            return self.probe(s, now)
        s.probed, s.probe_in = now, 0.5 * self._rng.random()
        return None

    def answer(self, m: Time, now: float) -> Time:
        """The reply to a TIME request: its t0 and our mesh time."""
        return Time(sender=self.uuid, t0=m.t0, t1=self.mesh_time(now))

    def take_reply(self, s: Session, t0: float, t1: float, now: float) -> ClockSynced | bool:
        """A TIME reply from ``s`` (our ``t0``, its mesh time ``t1``).  False: not the answer to
        our outstanding probe (stale); else its round trip is recorded, and if ``s`` is the peer
        whose clock we wait to take, the offset set and the event that says so returned (True
        otherwise)."""
        if s.probe_t0 is None or t0 != s.probe_t0:
            return False
        s.probe_t0 = None
        rtt = max(0.0, now - t0)
        s.rtt = rtt
        if not s.sync_pending:
            return True
        s.sync_pending = False
        self.offset = t1 - (t0 + now) / 2.0
        self.synced_with = s.uuid
        return ClockSynced(s.uuid, self.offset, rtt, self.mesh_time(now))
