"""Which sources a node vouches for, and who brought the others (docs/protocol.md 12.2), sans-I/O.

A source is *vouched for* when it is this node, a peer it admitted (now or before: kept
in the store, with the address its session came from), or a key of its trust list.
Any other source counts against the *forwarder* that made the node track it, keyed by
the forwarding session's address (a new id does not renew the quota), and is the first
evicted when a source vouched for needs room: the one holding least first.  An address
vouches by admission for at most ``log.max-vouched-per-address`` ids.  The replicator
(protocol/replication.py) asks :class:`Vouching` and keeps the records.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from ..ids import NodeId
from ..limits import LogLimits
from ..log.model import SourceState

__all__ = ["Vouching"]


class Vouching:
    """The sources vouched for (``vouched``: each with the address it was vouched for
    from, "" for this node and the trust list) and the forwarders of the others."""

    def __init__(self, uuid: NodeId, vouched: dict[NodeId, str], limits: LogLimits) -> None:
        self.limits: Final = limits
        # Sources reloaded that are not vouched for hold no place: they count against no
        # forwarder (who sent them is not known) and are the first evicted when a source
        # vouched for needs room, as junk kept across a restart must be.
        self.vouched = vouched
        self.vouched[uuid] = ""
        self.from_address: dict[str, int] = {}  # address -> ids admitted from it and vouched for
        for address in vouched.values():
            if address:
                self.from_address[address] = self.from_address.get(address, 0) + 1
        self.introduced: dict[NodeId, str] = {}  # a source no one vouches for -> the forwarder that brought it
        self.introductions: dict[str, int] = {}  # forwarder -> sources tracked that it brought, held now

    def vouch(self, s: NodeId, address: str) -> bool:
        """Vouch for ``s`` (not vouched for yet) from ``address`` ("": the trust list);
        False if ``address`` vouched for ``max_vouched_per_address`` ids already."""
        if address:
            n = self.from_address.get(address, 0)
            if n >= self.limits.max_vouched_per_address:
                return False
            self.from_address[address] = n + 1
        self.vouched[s] = address
        self.unintroduce(s)
        return True

    def introduce(self, s: NodeId, forwarder: str, new_here: int, tracked: int) -> bool:
        """May ``forwarder`` make the node track ``s``, not vouched for (``new_here`` other
        new sources came in the same message; ``tracked`` sources are tracked)?  If so, ``s``
        counts against it from now on."""
        lim = self.limits
        if (new_here >= lim.max_new_sources_per_message
                or self.introductions.get(forwarder, 0) >= lim.max_new_sources_per_peer
                or tracked >= lim.max_sources):
            return False
        self.introductions[forwarder] = self.introductions.get(forwarder, 0) + 1
        self.introduced[s] = forwarder
        return True

    def unintroduce(self, s: NodeId) -> None:
        """``s`` no longer counts against the forwarder that brought it."""
        forwarder = self.introduced.pop(s, None)
        if forwarder is not None:
            left = self.introductions[forwarder] - 1
            if left:
                self.introductions[forwarder] = left
            else:
                del self.introductions[forwarder]

    def victim(self, sources: Mapping[NodeId, SourceState]) -> tuple[NodeId, int] | None:
        """The source to evict for one vouched for, with the records it holds: the one no one
        vouches for that holds the fewest (ties: the one whose forwarder brought the most,
        then the one tracked first).  None if every source is vouched for."""
        vouched, introduced, introductions = self.vouched, self.introduced, self.introductions
        victim: NodeId | None = None
        least: tuple[int, int] | None = None
        for s, st in sources.items():
            if s in vouched:
                continue
            rank = (st.count(), -introductions.get(introduced.get(s, ""), 0))
            if least is None or rank < least:
                victim, least = s, rank
                if rank[0] == 0 and rank[1] <= -self.limits.max_new_sources_per_peer:
                    break  # nothing held, from a forwarder at its quota: none ranks lower
        if victim is None or least is None:
            return None
        return victim, least[0]
