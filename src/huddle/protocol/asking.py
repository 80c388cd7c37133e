"""Asking peers for what this node lacks, sans-I/O, and the GSIP's sizes.

For each source it lacks records of, a node names one peer in its GSIP's ``ask``
list: the source itself when it is a peer, else the peer known to hold the most; it
asks another if no progress follows within ``resend_after`` (protocol/replication.py,
"the rules").  Records of its own source are asked of the peers that claim more of it
than it holds (protocol/ownseq.py), the most first.  Each source's ranges are cut to
``max_ask_ranges``, and a GSIP's asks to half the body cap: the rest is asked for on a
later tick.  :func:`gsip_pieces` cuts a digest too large for one body.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from ..ids import NodeId
from ..limits import LogLimits
from ..log.model import SourceState
from ..wire import MAX_BODY, Gsip
from .logstate import Ask, PeerLog, ReplicationStats, ReplicationTiming
from .ownseq import OwnSequence

__all__ = ["GSIP_BUDGET", "MAX_WIRE_RANGES", "Asking", "ask_size", "gsip_pieces"]

# The most octets one entry of a GSIP takes: a vv entry ``"<32 hex>":<19 digits>,``;
# an ask entry ``"<32 hex>":[...],`` and each of its ranges ``[<19 digits>,<19 digits>],``.
GSIP_BUDGET: Final = MAX_BODY - 64  # ``{"vv":{},"ask":{}}`` and change
_VV_ENTRY: Final = 56
_ASK_SOURCE: Final = 40
_ASK_RANGE: Final = 42
MAX_WIRE_RANGES: Final = 10_000  # ranges of one source in an ask, at most (docs/protocol.md 2.4)
_TAILS_PER_GSIP: Final = GSIP_BUDGET // 2 // (_ASK_SOURCE + _ASK_RANGE)  # open tails repeated in one GSIP


def ask_size(ranges: Sequence[tuple[int, int]]) -> int:
    """The most octets one source's ask with ``ranges`` takes in a GSIP."""
    return _ASK_SOURCE + _ASK_RANGE * len(ranges)


def gsip_pieces(sender: NodeId, items: tuple[tuple[NodeId, int], ...],
                ask: tuple[tuple[NodeId, tuple[tuple[int, int], ...]], ...]) -> list[Gsip]:
    """A digest (``items``, the version vector) and its ``ask`` in GSIPs within the body
    cap: one, unless the whole vector does not fit one body (many sources); then in pieces,
    the ask with the first (a GSIP need not name every source)."""
    room = (GSIP_BUDGET - sum(ask_size(r) for _, r in ask)) // _VV_ENTRY
    if len(items) <= room:
        return [Gsip(sender, items, ask)]
    step = GSIP_BUDGET // _VV_ENTRY
    return [Gsip(sender, items[:room], ask), *(Gsip(sender, items[i : i + step]) for i in range(room, len(items), step))]


class Asking:
    """The sources this node lacks records of, whom it asked for each and what peers are
    known to hold (module docstring)."""

    def __init__(self, timing: ReplicationTiming, limits: LogLimits, stats: ReplicationStats,
                 lacking: set[NodeId]) -> None:
        self.timing: Final = timing
        self.limits: Final = limits
        self.stats: Final = stats
        self.asks: dict[NodeId, Ask] = {}  # source -> whom we asked for its missing records
        self.best: dict[NodeId, int] = {}  # source -> the most any peer is known to hold
        self.lacking = lacking  # sources with records known to exist that we do not hold

    def forget(self, s: NodeId) -> None:
        """Source ``s`` is no longer tracked."""
        self.asks.pop(s, None)
        self.lacking.discard(s)
        self.best.pop(s, None)

    def tails(self, peer: NodeId, sources: dict[NodeId, SourceState]) -> tuple[tuple[NodeId, tuple[tuple[int, int], ...]], ...]:
        """The open tails we asked ``peer`` for, asked again (as many as one GSIP takes):
        repeated with each GSIP to it, they keep a catch-up's window moving."""
        tails = [s for s, a in self.asks.items() if a.provider == peer]
        return tuple((s, ((sources[s].top + 1, 0),)) for s in tails[:_TAILS_PER_GSIP])

    def plan(self, now: float, uuid: NodeId, sources: dict[NodeId, SourceState], peers: dict[NodeId, PeerLog],
             own: OwnSequence) -> dict[NodeId, list[tuple[NodeId, tuple[tuple[int, int], ...]]]]:
        """Choose, for each source we lack records of (``uuid``: ours, claimed by peers in
        ``own``), one of ``peers`` to ask; the asks per peer chosen, each fit for one GSIP."""
        t = self.timing
        payload: dict[NodeId, list[tuple[NodeId, tuple[tuple[int, int], ...]]]] = {}
        room: dict[NodeId, int] = {}  # octets of ask still free in each provider's GSIP
        max_ranges = min(self.limits.max_ask_ranges, MAX_WIRE_RANGES)
        for s in list(self.lacking):
            st = sources[s]
            top = st.top
            if s == uuid:  # claims of more of ours (on_gsip): asked for, believed only signed
                if (ask := self.asks.get(s)) is not None and st.contig <= ask.contig_at and (
                        now - ask.at >= t.resend_after):
                    own.claims.pop(ask.provider, None)  # it did not back its claim up: asked no more
                own.claims = {peer: q for peer, q in own.claims.items() if q > top}
                best = max(own.claims.values(), default=0)
            else:
                best = self.best.get(s, 0)
            if best <= top and not st.ahead:
                self.asks.pop(s, None)
                self.lacking.discard(s)
                continue
            ask = self.asks.get(s)
            if ask is not None and ask.provider in peers:
                if st.contig > ask.contig_at:  # progress: keep the provider
                    ask.at, ask.contig_at = now, st.contig
                    continue
                if now - ask.at < t.resend_after:
                    continue
            if s == uuid:
                claims = own.claims
                holders = [peer for peer in claims if peer in peers]
                holders.sort(key=lambda peer: (-claims[peer], peer))
            else:
                holders = [peer for peer, p in peers.items() if p.known.get(s, 0) > st.contig]
            if not holders:
                continue
            if s in holders:
                provider = s  # the source itself, when it is a peer
            elif s == uuid:
                provider = holders[0]
            else:
                holders.sort(key=lambda peer: (-peers[peer].known.get(s, 0), peer))
                previous = None if ask is None else ask.provider
                provider = next((h for h in holders if h != previous), holders[0])
            ranges = st.missing()[:max_ranges]
            if best > top and len(ranges) < max_ranges:
                ranges.append((top + 1, 0))
            size = ask_size(ranges)
            free = room.get(provider, GSIP_BUDGET // 2)
            if size > free:  # the GSIP is full: this source is asked for on a later tick
                self.stats.asks_deferred += 1
                continue
            room[provider] = free - size
            if ask is not None:
                self.stats.resends += 1
            self.asks[s] = Ask(provider, now, st.contig)
            self.stats.asks += 1
            payload.setdefault(provider, []).append((s, tuple(ranges)))
        return payload
