"""Compact logs for the simulator: millions of events without an object each.

A simulated event's content is a function of its source and sequence
(:class:`Origin`), so a node's store keeps only which ranges it holds and
how each range arrived (:class:`RangeStore`); records are made again when
they are read, sent or exported.  The replicator sees an ordinary
:class:`~huddle.protocol.logstore.EventStore` and handles each range as
one :class:`~huddle.protocol.logstore.RecordRun`.

Records that arrive as separate objects (through the codec) are checked
against their origin before they are stored: a (source, seq) that came back
with other content is recorded in :attr:`RangeStore.conflicts`.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from .ids import NodeId
from .log.model import SourceState
from .protocol.logstore import RecordRun
from .wire import LogHead, LogRecord

__all__ = ["KINDS", "Origin", "RangeStore", "Segment"]

KINDS: Final = ("score", "penalty", "lineup")
_FACTOR: Final = 7919


def _salt(source: NodeId) -> int:
    return int.from_bytes(source[:3], "big")


@dataclass(slots=True)
class _Appends:
    firsts: list[int] = field(default_factory=list)  # first sequence of each append
    stamps: list[float] = field(default_factory=list)  # its timestamp
    top: int = 0


class Origin:
    """What every simulated source originated: per source, its appends
    (first sequence and timestamp).  A record's kind is ``KINDS[seq % 3]`` and
    its body ``{"n": seq * 7919 + salt}``, the salt taken from the source."""

    record_size: Final = 64  # octets per record on the wire, roughly

    def __init__(self) -> None:
        self._sources: dict[NodeId, _Appends] = {}

    def register(self, source: NodeId, first: int, count: int, stamp: float) -> RecordRun:
        """Note that ``source`` originates ``first .. first+count-1`` at ``stamp``."""
        a = self._sources.setdefault(source, _Appends())
        if first != a.top + 1 or count < 1:
            raise ValueError(f"{source.short} appends {count} from {first}, after {a.top}")
        a.firsts.append(first)
        a.stamps.append(stamp)
        a.top = first + count - 1
        return RecordRun(source, first, a.top, self.record, record_size=self.record_size)

    def top(self, source: NodeId) -> int:
        a = self._sources.get(source)
        return 0 if a is None else a.top

    def sources(self) -> list[NodeId]:
        return sorted(self._sources)

    def stamp(self, source: NodeId, seq: int) -> float:
        a = self._sources[source]
        return a.stamps[bisect.bisect_right(a.firsts, seq) - 1]

    def record(self, source: NodeId, seq: int, hops: int = 0) -> LogRecord:
        a = self._sources.get(source)
        if a is None or not 1 <= seq <= a.top:
            raise KeyError(f"{source.short}#{seq} was never originated")
        return LogRecord(source, seq, self.stamp(source, seq), KINDS[seq % 3],
                         f'{{"n":{seq * _FACTOR + _salt(source)}}}', hops)

    def pieces(self, source: NodeId, first: int, last: int) -> Iterator[tuple[int, int, float]]:
        """``first..last`` cut where the timestamp changes: ``(first, last, stamp)``."""
        a = self._sources[source]
        i = bisect.bisect_right(a.firsts, first) - 1
        q = first
        while q <= last:
            end = a.firsts[i + 1] - 1 if i + 1 < len(a.firsts) else a.top
            yield q, min(end, last), a.stamps[i]
            q = end + 1
            i += 1

    def columns(self, source: NodeId, first: int, last: int) -> dict[str, Any]:
        """The records ``first..last`` as Arrow arrays (seq, timestamp, kind, body),
        made column-wise: the same values as :meth:`record`, without a Python object per row."""
        import pyarrow as pa  # noqa: PLC0415 - pyarrow: deferred, only an export needs it
        import pyarrow.compute as pc  # noqa: PLC0415 - as above

        seq = pa.array(range(first, last + 1), pa.int64())
        stamps: list[Any] = []
        for a, b, stamp in self.pieces(source, first, last):
            stamps.append(pa.repeat(pa.scalar(stamp, pa.float64()), b - a + 1))
        mod3 = pc.subtract(seq, pc.multiply(pc.divide(seq, 3), 3))
        body = pc.binary_join_element_wise(
            '{"n":', pc.cast(pc.add(pc.multiply(seq, _FACTOR), _salt(source)), pa.string()), "}", "")
        return {
            "seq": seq,
            "timestamp": pa.concat_arrays(stamps),
            "kind": pc.take(pa.array(KINDS, pa.string()), mod3),
            "body": body,
        }


@dataclass(slots=True)
class Segment:
    """Records ``first..last`` of one source, received together."""

    first: int
    last: int
    hops: int
    received_from: NodeId | None
    received_at: float


class RangeStore:
    """An :class:`~huddle.protocol.logstore.EventStore` of held ranges."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin
        self.segments: dict[NodeId, list[Segment]] = {}
        self.conflicts: list[str] = []
        self.overlaps: list[str] = []
        self.committed = 0
        self._staged = 0
        self.vouches: dict[NodeId, str] = {}

    # ---------------------------------------------------------------- port

    def vouched(self) -> dict[NodeId, str]:
        return dict(self.vouches)

    def vouch(self, source: NodeId, address: str) -> None:
        self.vouches.setdefault(source, address)

    def drop_source(self, source: NodeId) -> None:
        self.segments.pop(source, None)

    def load(self) -> dict[NodeId, SourceState]:
        out: dict[NodeId, SourceState] = {}
        for source, segs in self.segments.items():
            st = out[source] = SourceState()
            for seg in segs:
                st.add(seg.first, seg.last)
        return out

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        """Chain hashes are not kept: the bulk simulations run unsigned."""
        hop = 0 if received_from is None else 1
        if isinstance(records, RecordRun):
            self._insert(records.source, Segment(records.first, records.last, records.hops + hop,
                                                 received_from, received_at))
            return
        run: Segment | None = None
        source: NodeId | None = None
        for r in records:
            try:
                expected = self.origin.record(r.source, r.seq, r.hops)
            except KeyError:
                self.conflicts.append(f"{r.source.short}#{r.seq} arrived but was never originated")
                continue
            if r != expected:
                self.conflicts.append(f"{r.source.short}#{r.seq} arrived with other content: {r} != {expected}")
                continue
            if run is not None and r.source == source and r.seq == run.last + 1 and r.hops + hop == run.hops:
                run.last = r.seq
                continue
            if run is not None and source is not None:
                self._insert(source, run)
            source, run = r.source, Segment(r.seq, r.seq, r.hops + hop, received_from, received_at)
        if run is not None and source is not None:
            self._insert(source, run)

    def commit(self) -> None:
        self.committed += self._staged
        self._staged = 0

    def add_heads(self, heads: Sequence[LogHead]) -> None:
        """Not kept (unsigned bulk simulations)."""

    def heads_in(self, source: NodeId, first: int, last: int) -> list[LogHead]:
        return []

    def chain_of(self, source: NodeId, seq: int) -> bytes | None:
        return None

    def set_chain(self, source: NodeId, rows: Sequence[tuple[int, bytes]]) -> None:
        """Not kept."""

    def read(self, source: NodeId, after: int, limit: int) -> Sequence[LogRecord]:
        segs = self.segments.get(source, [])
        q = after + 1
        i = bisect.bisect_right(segs, q, key=lambda s: s.first) - 1
        if i < 0 or segs[i].last < q or limit < 1:
            return []
        seg = segs[i]
        return RecordRun(source, q, min(seg.last, after + limit), self.origin.record,
                         hops=seg.hops, record_size=self.origin.record_size)

    # ------------------------------------------------------------- queries

    def ranges(self, source: NodeId) -> list[tuple[int, int]]:
        """The held ranges of ``source``, adjacent segments merged."""
        out: list[tuple[int, int]] = []
        for seg in self.segments.get(source, []):
            if out and seg.first == out[-1][1] + 1:
                out[-1] = (out[-1][0], seg.last)
            else:
                out.append((seg.first, seg.last))
        return out

    def holdings(self) -> dict[NodeId, list[tuple[int, int]]]:
        return {s: self.ranges(s) for s in sorted(self.segments) if self.segments[s]}

    def count(self) -> int:
        return sum(seg.last - seg.first + 1 for segs in self.segments.values() for seg in segs)

    # ----------------------------------------------------------- internals

    def _insert(self, source: NodeId, seg: Segment) -> None:
        self._staged += seg.last - seg.first + 1
        segs = self.segments.setdefault(source, [])
        i = bisect.bisect_right(segs, seg.first, key=lambda s: s.first)
        if (i > 0 and segs[i - 1].last >= seg.first) or (i < len(segs) and segs[i].first <= seg.last):
            self.overlaps.append(f"{source.short} {seg.first}..{seg.last} stored twice")
            return
        prev = segs[i - 1] if i > 0 else None
        if (prev is not None and prev.last + 1 == seg.first and prev.hops == seg.hops
                and prev.received_from == seg.received_from and prev.received_at == seg.received_at):
            prev.last = seg.last  # the same arrival, continued
            return
        segs.insert(i, seg)
