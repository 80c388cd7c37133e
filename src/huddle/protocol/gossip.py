"""Member gossip (MEMB, protocol.md 4.8, 4.9) and the probes of known members at a new endpoint (8.7).

A member list goes to each newcomer that may know fewer members than we do, to one random ALIVE
peer now and then (jittered around ``membership_interval``), and in reply to a list that lacks
members of ours, unless the list we sent that peer lately already named them.  A list, PEER or
discovery that names a member we have a session with at another endpoint or incarnation makes
us probe it there (it may have restarted): our HELO on a connection of its own, at most one
per member and handshake timeout; a probe answered by the same incarnation makes that endpoint
an alias of the member.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from typing import Final

from ..ids import NodeId
from ..limits import MeshLimits
from ..wire import MemberEntry, Members
from .parts import Dialler, Stats
from .session import Phase, Session, Timing

__all__ = ["MemberGossip"]


class MemberGossip:
    """When member lists go out and what they say, and the probes of known members."""

    def __init__(self, uuid: NodeId, timing: Timing, limits: MeshLimits, stats: Stats, *, rng: random.Random,
                 port: Dialler, now: float) -> None:
        self.uuid: Final = uuid
        self._timing = timing
        self._limits = limits
        self.stats = stats
        self._rng = rng  # the mesh's (deterministic per node, for the simulator)
        self._port = port
        self._next_list = now + timing.membership_interval * (0.5 + rng.random())
        # Probes of known members named at a new endpoint: uuid -> (conn, endpoint, opened).
        self.probes: dict[NodeId, tuple[int, str, float]] = {}
        self.aliases: dict[NodeId, str] = {}  # another endpoint a probe found the same incarnation at

    # lists -------------------------------------------------------------------

    def periodic(self, sessions: Mapping[NodeId, Session], now: float) -> tuple[Session, Members] | None:
        """At a heartbeat: if the next periodic list is due, to whom (one ALIVE peer at random)
        and the list, else None."""
        if now < self._next_list:
            return None
        self._next_list = now + self._timing.membership_interval * (0.5 + self._rng.random())
        alive = [x for x in sessions.values() if x.phase is Phase.ALIVE]
        if not alive:
            return None
        to = self._rng.choice(alive)
        return to, self.members_for(to, sessions, now, reply=False)

    def members_for(self, to: Session, sessions: Mapping[NodeId, Session], now: float, *, reply: bool) -> Members:
        """Our member list for ``to`` (its admitted members but ``to``, at most
        max-members-listed of them, sampled), remembered as the last we sent it."""
        members: list[MemberEntry] = [
            (x.uuid, x.endpoint, x.incarnation) for x in sessions.values()
            if x.admitted and x is not to and x.incarnation is not None
        ]
        limit = self._limits.max_members_listed
        if len(members) > limit:
            members = self._rng.sample(members, limit)
        self.stats.lists_sent += 1
        to.listed = frozenset(uuid for uuid, _, _ in members)
        to.listed_at = now
        return Members(sender=self.uuid, members=tuple(members), reply=reply)

    def lacking(self, s: Session, entries: Sequence[MemberEntry], sessions: Mapping[NodeId, Session], now: float) -> bool:
        """Whether ``s``'s list (``entries``, not a reply) calls for ours in reply: it lacks a
        member of ours that it may not be dialling already."""
        listed = {uuid for uuid, _, _ in entries}
        # Not the members we admitted lately, since we opened the session with its sender:
        # they met us in the same wave of handshakes, most likely on the same lists, and
        # dial it; if not, the next periodic lists tell.
        lately = now - self._timing.membership_interval
        lacking = [x.uuid for x in sessions.values() if x.admitted and x.uuid not in listed
                   and x is not s and (x.joined < s.created or x.joined < lately)]
        if not lacking:
            return False
        # Lists cross in a crowd joining at once: if the one we sent it lately
        # already named every member its list lacks, it is dialling them.
        if now - s.listed_at < self._timing.membership_interval and s.listed.issuperset(lacking):
            self.stats.lists_not_repeated += 1
            return False
        return True

    # probes ------------------------------------------------------------------

    def probe(self, uuid: NodeId, endpoint: str, incarnation: str | None, now: float, listed: int) -> bool | None:
        """A list, PEER or discovery names ``uuid``, admitted here, at ``endpoint``, another than
        its session's (or at another ``incarnation``): probe it there with our HELO, on a
        connection of its own, once per handshake timeout.  None: nothing to do (a known alias,
        a probe there or lately); False: refused (as many probes as handshakes already)."""
        if incarnation is None and self.aliases.get(uuid) == endpoint:
            return None
        probe = self.probes.get(uuid)
        if probe is not None and (probe[1] == endpoint or now - probe[2] < self._timing.handshake_timeout):
            return None
        if probe is not None:
            self._port.disconnect(probe[0])
            del self.probes[uuid]
        if len(self.probes) >= self._limits.max_handshaking:
            return False
        self.stats.members_probed += 1
        conn = self._port.connect(endpoint)
        self._port.send_hello(conn, reply=False, to=uuid, now=now, listed=listed)
        self.probes[uuid] = (conn, endpoint, now)
        self._port.note(now + self._timing.handshake_timeout)
        return True

    def answered(self, uuid: NodeId) -> None:
        """Our probe of ``uuid`` found the incarnation of its session: the probed endpoint is
        another name for it."""
        probe = self.probes.pop(uuid, None)
        if probe is not None:
            self._port.disconnect(probe[0])
            self.aliases[uuid] = probe[1]

    def adopt(self, uuid: NodeId, endpoint: str) -> int | None:
        """The connection of our probe to ``uuid`` at ``endpoint``, for its new session: a
        second connection under our identity to the same ROUTER would never be read."""
        probe = self.probes.get(uuid)
        if probe is None or probe[1] != endpoint:
            return None
        del self.probes[uuid]
        return probe[0]

    def expire(self, now: float) -> None:
        """Close the probes unanswered for a handshake timeout."""
        timeout = self._timing.handshake_timeout
        for uuid in [u for u, (_, _, at) in self.probes.items() if now - at >= timeout]:
            self._port.disconnect(self.probes.pop(uuid)[0])

    def close(self) -> None:
        for conn, _, _ in self.probes.values():
            self._port.disconnect(conn)
        self.probes.clear()

    def due(self) -> float:
        return min((at + self._timing.handshake_timeout for _, _, at in self.probes.values()), default=float("inf"))
