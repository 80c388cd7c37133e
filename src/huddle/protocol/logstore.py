"""The replicated log's storage contract and the values it stores, sans-I/O.

* :class:`EventStore`: where log records are kept (a port: the node passes SQLite,
  log/store.py; the simulator :class:`MemoryStore` or simlog.py's ranges).  ``stage``
  writes, ``commit`` makes durable: the replicator stages as it goes and hands the
  commit to its driver as an action (:class:`~huddle.protocol.events.Commit`).
* :class:`RecordRun`: a run of one source's records made on demand (the simulator
  moves millions of records without a Python object per record).
* :func:`canonical_json`: the one text form of an event's JSON body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, Final, Protocol, overload

import orjson

from ..errors import LocalProtocolError
from ..ids import NodeId
from ..log.model import SourceState
from ..wire import MAX_SEQ, LogHead, LogRecord

__all__ = ["EventStore", "MemoryStore", "RecordRun", "canonical_json"]


_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
# orjson writes what _CANONICAL writes for plain dicts, lists, strings, integers and booleans;
# subclasses, dataclasses and dates it is told to refuse (json decides).  It writes NaN and the
# infinities as null, and floats below 1e-4 or with an exponent otherwise than json: text where
# these may be is left to json too.
_ORJSON_CANONICAL: Final = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
                            | orjson.OPT_PASSTHROUGH_DATETIME)
_JSON_DECIDES: Final = ("e+", "e-", "0.0000", "null")  # orjson writes an exponent with its sign
_PLAIN: Final = frozenset({str, int, bool, type(None)})


def canonical_json(value: Any) -> str:
    """The one text form of a JSON value: sorted keys, no spaces, UTF-8 (``json``'s
    with ``sort_keys``, compact separators, ``ensure_ascii`` and ``allow_nan`` off)."""
    try:  # orjson first (about 4x faster), where its text is provably json's
        text = orjson.dumps(value, option=_ORJSON_CANONICAL)
    except orjson.JSONEncodeError:  # a type it does not take, a key that is not text, an integer past 64 bits...
        pass
    else:
        out = text.decode()
        # A flat object of text, integers, booleans and nulls (the usual event; exact types, the keys
        # text as orjson takes no other): json writes these as orjson did, nothing to look for.
        if type(value) is dict and _PLAIN.issuperset(map(type, value.values())):
            return out
        # Read back equal: no type orjson writes and json refuses (a UUID, an Enum, a tuple for a list).
        # Searched in the decoded text: ``b"e+" in octets`` first tries the needle as an integer,
        # which raises and catches a TypeError each time (4x slower than the whole dumps).
        a, b, c, d = _JSON_DECIDES
        if a not in out and b not in out and c not in out and d not in out and orjson.loads(text) == value:
            return out
    try:
        return _CANONICAL.encode(value)
    except (TypeError, ValueError) as exc:
        raise LocalProtocolError(f"event body is not a JSON value: {exc}") from None


class RecordRun(Sequence[LogRecord]):
    """The records ``first..last`` of one source, all with the same ``hops``,
    made on demand by ``make(source, seq, hops)``.

    The replicator handles a run as one unit (one range to mark held, one
    store write, one XMSG per batch), so the simulator can move millions of
    records without a Python object per record; a real node uses tuples.
    ``record_size`` is the octets one record takes on the wire, roughly.
    """

    __slots__ = ("first", "hops", "last", "make", "record_size", "source")

    def __init__(
        self, source: NodeId, first: int, last: int, make: Callable[[NodeId, int, int], LogRecord],
        *, hops: int = 0, record_size: int = 64,
    ) -> None:
        if first < 1 or last < first:
            raise ValueError(f"a run needs 1 <= first <= last, not {first}..{last}")
        self.source, self.first, self.last, self.hops = source, first, last, hops
        self.make, self.record_size = make, record_size

    def __len__(self) -> int:
        return self.last - self.first + 1

    @overload
    def __getitem__(self, index: int) -> LogRecord: ...
    @overload
    def __getitem__(self, index: slice) -> RecordRun: ...
    def __getitem__(self, index: int | slice) -> LogRecord | RecordRun:
        n = self.last - self.first + 1
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1 or stop <= start:
                raise ValueError("a run slices only to a non-empty run with step 1")
            return RecordRun(self.source, self.first + start, self.first + stop - 1, self.make,
                             hops=self.hops, record_size=self.record_size)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        return self.make(self.source, self.first + index, self.hops)

    def __iter__(self) -> Iterator[LogRecord]:
        for q in range(self.first, self.last + 1):
            yield self.make(self.source, q, self.hops)

    def with_hops(self, hops: int) -> RecordRun:
        return RecordRun(self.source, self.first, self.last, self.make, hops=hops, record_size=self.record_size)

    def __repr__(self) -> str:
        return f"RecordRun({self.source.short}, {self.first}..{self.last}, hops={self.hops})"


class EventStore(Protocol):
    """Where log records are kept.  ``stage`` writes, ``commit`` makes them durable."""

    def load(self) -> dict[NodeId, SourceState]: ...

    def vouched(self) -> dict[NodeId, str]:
        """The sources vouched for (:meth:`vouch`), each with the address it was vouched for from."""

    def vouch(self, source: NodeId, address: str) -> None:
        """Keep ``source`` as vouched for (with the next commit); ``address``: where its
        session came from ("" when none did: the trust list)."""

    def drop_source(self, source: NodeId) -> None:
        """Delete every record and head of ``source`` (with the next commit): it was evicted."""

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        """Write ``records`` (with their chain hashes, when they have them).  Received
        ones (``received_from`` set) are stored with one more hop than they arrived with."""

    def commit(self) -> None: ...

    def add_heads(self, heads: Sequence[LogHead]) -> None:
        """Keep signed heads (with the next commit)."""

    def heads_in(self, source: NodeId, first: int, last: int) -> Sequence[LogHead]:
        """The heads of ``source`` kept at ``first..last``, in order."""

    def chain_of(self, source: NodeId, seq: int) -> bytes | None:
        """The chain hash of record ``seq`` of ``source`` (None: not held, or unchained)."""

    def set_chain(self, source: NodeId, rows: Sequence[tuple[int, bytes]]) -> None:
        """Write chain hashes ``(seq, hash)`` of records held."""

    def read(self, source: NodeId, after: int, limit: int) -> Sequence[LogRecord]:
        """Up to ``limit`` records of ``source`` from ``after + 1`` on, consecutive;
        fewer (even none) where what is held stops or the store's pieces end."""


class MemoryStore:
    """An :class:`EventStore` in memory, for the simulator and tests."""

    def __init__(self) -> None:
        self.records: dict[NodeId, dict[int, LogRecord]] = {}
        self.receipts: dict[tuple[NodeId, int], tuple[NodeId | None, float]] = {}
        self.staged: list[LogRecord] = []
        self.committed = 0
        self.chains: dict[tuple[NodeId, int], bytes] = {}
        self.heads: dict[NodeId, dict[int, LogHead]] = {}
        self.vouches: dict[NodeId, str] = {}

    def load(self) -> dict[NodeId, SourceState]:
        return {source: SourceState.of(sorted(recs)) for source, recs in self.records.items()}

    def vouched(self) -> dict[NodeId, str]:
        return dict(self.vouches)

    def vouch(self, source: NodeId, address: str) -> None:
        self.vouches.setdefault(source, address)

    def drop_source(self, source: NodeId) -> None:
        for q in self.records.pop(source, {}):
            self.receipts.pop((source, q), None)
            self.chains.pop((source, q), None)
        self.heads.pop(source, None)

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        hop = 0 if received_from is None else 1
        if chain is not None:
            self.set_chain(records[0].source, [(r.seq, h) for r, h in zip(records, chain, strict=True)])
        for r in records:
            if hop:
                r = replace(r, hops=min(r.hops + 1, MAX_SEQ))  # noqa: PLW2901 - the stored copy
            self.records.setdefault(r.source, {})[r.seq] = r
            self.receipts[(r.source, r.seq)] = (received_from, received_at)
            self.staged.append(r)

    def commit(self) -> None:
        self.committed += len(self.staged)
        self.staged.clear()

    def add_heads(self, heads: Sequence[LogHead]) -> None:
        for h in heads:
            self.heads.setdefault(h.source, {}).setdefault(h.seq, h)

    def heads_in(self, source: NodeId, first: int, last: int) -> list[LogHead]:
        held = self.heads.get(source, {})
        return [held[q] for q in sorted(held) if first <= q <= last]

    def chain_of(self, source: NodeId, seq: int) -> bytes | None:
        return self.chains.get((source, seq))

    def set_chain(self, source: NodeId, rows: Sequence[tuple[int, bytes]]) -> None:
        for q, h in rows:
            self.chains[(source, q)] = h

    def read(self, source: NodeId, after: int, limit: int) -> list[LogRecord]:
        recs = self.records.get(source, {})
        out: list[LogRecord] = []
        q = after + 1
        while q in recs and len(out) < limit:
            out.append(recs[q])
            q += 1
        return out

    def all_records(self) -> list[LogRecord]:
        return [r for recs in self.records.values() for r in recs.values()]
