"""Introductions: whom this node dials when it learns of a node (protocol.md 4.3, 4.9, 8.6, 8.7).

A node is learnt of from discovery (a beacon, mDNS, the naming broker), a PEER from an admitted
peer, or a member list (MEMB), which counts as a PEER for each member it names.  An unknown
node is dialled only within admission's quotas (a PEER's or list's at most its introducer's
cap, and waiting its turn when none is free), not past a back-off, not at an endpoint in use
or where our HELO to a seed awaits its answer, and only for a live introducer.  A known node
named elsewhere may have restarted there: a session still dialling is redirected, an
admitted one probed (gossip.py), and a dial left unanswered while discovery shows the node
there is dialled afresh.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Final

from ..ids import NodeId
from ..limits import MeshLimits
from ..wire import Members, Peer
from .admission import Admission
from .gossip import MemberGossip
from .parts import Opener, Stats
from .seeds import Seeds
from .service import BUSY_POLL
from .session import Phase, Session

__all__ = ["Introductions"]


class Introductions:
    """The mesh's decisions to dial a node it was told of."""

    def __init__(self, uuid: NodeId, endpoint: Callable[[], str], sessions: Mapping[NodeId, Session],
                 refused: Mapping[NodeId, str], excluded: Mapping[NodeId, str], *, limits: MeshLimits,
                 stats: Stats, admission: Admission, seeds: Seeds, gossip: MemberGossip, port: Opener) -> None:
        self.uuid: Final = uuid
        self._endpoint = endpoint  # this node's own, as it is now (it moves)
        self._sessions = sessions
        self._refused = refused  # uuid -> the incarnation refused
        self._excluded = excluded  # uuid -> why; never admitted again
        self._limits = limits
        self.stats = stats
        self._admission = admission
        self._seeds = seeds
        self._gossip = gossip
        self._port = port

    def _known(self, endpoint: str) -> bool:
        return any(s.endpoint == endpoint for s in self._sessions.values())

    def discovered(self, uuid: NodeId, endpoint: str, now: float) -> None:
        """A discovery mechanism saw ``uuid`` listening at ``endpoint``."""
        if uuid == self.uuid or uuid in self._refused or uuid in self._excluded:
            return
        s = self._sessions.get(uuid)
        if s is not None:
            if (s.phase is Phase.CONNECTING and s.endpoint == endpoint and now >= s.redial_at
                    and now - s.last_heard >= s.suspect_after and s.reopen_at == math.inf):
                # It is there, and has not answered our dial for a suspect_after: our connection
                # to it is stuck as an answer's can be (protocol.md 6), so is dialled afresh.
                self._port.redial(s, now)
                return
            self.follow(s, endpoint, None, now)  # it may have restarted elsewhere
            return
        if self._known(endpoint):
            return
        if not self._admission.room(self._sessions, ""):
            self._admission.refused_intro("a discovered node", now)
            return
        self._port.open(uuid, endpoint, now, None, 0)

    def peer(self, s: Session, m: Peer, now: float, live: bool, listed: int = 0) -> None:
        """A PEER from ``s`` (``live``: ALIVE when it came, not SUSPECT).  ``listed``: the size
        of the member list that named the peer (with its sender), if a list did: our HELO then
        says as many peers."""
        known = self._sessions.get(m.peer)
        if known is not None and live:
            self.follow(known, m.endpoint, None, now, listed)  # it may have restarted elsewhere
            return
        if m.peer == self.uuid or known is not None or m.peer in self._refused or m.peer in self._excluded:
            return
        if m.endpoint == self._endpoint() or self._known(m.endpoint):
            return
        seed = self._seeds.get(m.endpoint)
        if seed is not None and seed.awaited:
            # Our HELO to that seed awaits its answer: a second connection to it would carry our
            # identity too, and the seed's ROUTER would never read it (protocol.md 8.5).
            self.stats.seed_intros_skipped += 1
            return
        # Dial only what we would keep: for a live introducer, within the handshake
        # quotas, and not a node whose introduced handshake failed lately.
        key = f"peer:{s.uuid}"
        admission = self._admission
        if not live or admission.backed_off(m.peer, now):
            admission.refused_intro(f"a PEER from {s.uuid.short}", now)
            return
        if not admission.room(self._sessions, key, admission.introducer_cap(s)):
            if admission.wait(m, str(s.uuid), now):  # an honest crowd joining at once: its turn comes
                self._port.note(now + BUSY_POLL)
            return
        self._port.open(m.peer, m.endpoint, now, s.uuid, listed).opened_by = key

    def members(self, s: Session, m: Members, now: float, live: bool) -> bool:
        """A member list from ``s``: dial the members we have no session with (as if each were
        a PEER from ``s``: the same caps, waiting and back-off), probe the known ones it names
        at another incarnation.  True: it calls for our list in reply (it is none, and it
        lacks members of ours)."""
        self.stats.lists_received += 1
        entries = m.members[: self._limits.max_members_listed]
        size = len(entries) + 1  # the list's members and its sender
        for uuid, endpoint, incarnation in entries:
            if uuid in (self.uuid, s.uuid):
                continue
            known = self._sessions.get(uuid)
            if known is None:
                self.peer(s, Peer(sender=s.uuid, peer=uuid, endpoint=endpoint), now, live, size)
            elif live and known.incarnation != incarnation:
                self.follow(known, endpoint, incarnation, now, size)
        return not m.reply and self._gossip.lacking(s, entries, self._sessions, now)

    def follow(self, s: Session, endpoint: str, incarnation: str | None, now: float, listed: int = 0) -> None:
        """A list, PEER or discovery names the peer of ``s`` at ``endpoint`` (and
        ``incarnation`` if known): if that is new, it may have restarted there.  A session
        still dialling is redirected; an admitted one is kept until the new incarnation says
        HELO (protocol.md 8.7), and that endpoint is probed with a HELO of ours, on a
        connection of its own, once per handshake timeout."""
        if s.endpoint == endpoint and (incarnation is None or incarnation == s.incarnation):
            return
        if not s.admitted:
            if s.phase is Phase.CONNECTING and s.endpoint != endpoint:
                self._port.disconnect(s.conn)
                s.conn = self._port.connect(endpoint)
                s.endpoint = endpoint
                s.reopen_at = math.inf
                self._port.send_hello(s.conn, reply=False, to=s.uuid, now=now, listed=listed)
            return
        if self._gossip.probe(s.uuid, endpoint, incarnation, now, listed) is False:
            self._admission.refused_intro(f"a new endpoint of {s.uuid.short}", now)
