"""Serving peers' asks, sans-I/O: the records a GSIP's ``ask`` list is answered with.

A peer asks for ranges of a source (``first..last``) or for its open tail (``first..``,
a catch-up).  :class:`Server` reads them from the store and sends them in XMSG batches:

* within what one GSIP may be answered with (:class:`Serve`: ``serve_records`` and
  ``serve_bytes`` across all its asks, ``serve_ranges`` ranges), and for a tail within
  ``window`` records in flight to that peer, what was sent recently not sent again;
* cut at the heads held (:meth:`Server.signed_batches`), each batch with its head and the
  chain hash before it, so the receiver verifies it back to the source's key; what this
  node cannot prove of a key-bound source it does not pass on when it is strict.

:func:`batches` cuts records to the size limits (``batch_records``, ``batch_bytes``), the
signing outbox's as well (protocol/outbox.py); :func:`split_runs` and :func:`coalesce` read
what a peer sent.  Time is passed in; nothing here does I/O but through the store port.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from operator import add as _add
from typing import Final

from ..ids import NodeId
from ..log.model import SourceState
from ..wire import MAX_SEQ, LogHead, LogRecord, Message, RecordBatch, Xmsg
from .logchain import GENESIS, key_bound
from .logstate import PeerLog, ReplicationStats, ReplicationTiming
from .logstore import EventStore, RecordRun

__all__ = ["RECORD_OVERHEAD", "Batch", "Serve", "Server", "batches", "coalesce", "split_runs"]

RECORD_OVERHEAD: Final = 120  # octets of JSON framing per record, at most (source, seq, stamp, hops)

# An XMSG's records with the heads they travel with: ``(chain hash before, head)`` each.
Batch = tuple[Sequence[LogRecord], tuple[tuple[bytes, LogHead], ...]]


@dataclass(slots=True)
class Serve:
    """What is left of the records and octets one GSIP may be answered with,
    across all its asks, and the records in flight to its sender (computed once)."""

    records: int
    octets: int
    inflight: int | None = None
    cut: bool = False  # something asked for was left unsent

    def take(self, records: Sequence[LogRecord]) -> Sequence[LogRecord]:
        """The first of ``records`` that fit what is left (at least one record
        while any octets are left), taken from it."""
        n = min(len(records), self.records)
        if isinstance(records, RecordRun):
            n = min(n, max(1, self.octets // max(1, records.record_size)))
            octets = n * records.record_size
        else:
            if n < len(records):
                records = records[:n]
            octets = _text_octets(records) + n * RECORD_OVERHEAD
            if octets > self.octets:  # the window ends within these: find where
                octets, i = 0, 0
                while i < n:
                    r = records[i]
                    size = len(r.body) + len(r.kind) + RECORD_OVERHEAD
                    if i and octets + size > self.octets:
                        break
                    octets += size
                    i += 1
                n = i
        self.records -= n
        self.octets -= octets
        return records if n == len(records) else records[:n]

    def exhausted(self) -> bool:
        return self.records <= 0 or self.octets <= 0


class Server:
    """Answers the asks of peers' GSIPs from ``store`` (module docstring).  ``before_read``
    stages this node's own new records first (so that they can be read); ``send`` queues
    a message on a connection among the replicator's actions."""

    def __init__(self, uuid: NodeId, store: EventStore, timing: ReplicationTiming, stats: ReplicationStats, *,
                 strict: bool, before_read: Callable[[], None], send: Callable[[int, Message], None]) -> None:
        self.uuid: Final = uuid
        self.store: Final = store
        self.timing: Final = timing
        self.stats: Final = stats
        self.strict: Final = strict  # key-bound sources' records go signed or not at all
        self._before_read: Final = before_read
        self._send: Final = send

    def answer(self, p: PeerLog, ask: Sequence[tuple[NodeId, Sequence[tuple[int, int]]]],
               sources: dict[NodeId, SourceState], *, serve: Serve, max_ranges: int, now: float) -> None:
        """Answer one GSIP's ``ask`` from peer ``p`` within ``serve`` and ``max_ranges``
        ranges; ``serve.cut`` says whether something held and asked for was left unsent."""
        answered = 0
        for s, ranges in ask:
            for first, last in coalesce(ranges):
                if serve.exhausted() or answered >= max_ranges:
                    serve.cut = serve.cut or s in sources
                    break
                answered += 1
                st = sources.get(s)
                if st is None:
                    continue
                if last == 0:
                    self._stream_tail(p, s, st, first, now=now, serve=serve)
                else:
                    self._send_range(p, s, st, first, last, serve=serve)

    def _stream_tail(self, p: PeerLog, s: NodeId, st: SourceState, first: int, *, now: float, serve: Serve) -> None:
        """Stream ``s`` (held as ``st``) from ``first`` on (contiguous records only), within
        the window and what is left of ``serve``; what was sent recently and may still be in
        flight is not sent again."""
        t = self.timing
        start = first - 1
        sent = p.sent.get(s, 0)
        if sent > start:
            if now - p.sent_at.get(s, now) < t.resend_after:
                start = sent  # in flight: continue after it
            else:
                self.stats.resends += 1  # sent long ago and still asked for: lost
        self._before_read()
        if serve.inflight is None:  # once per GSIP: it may ask for every source
            serve.inflight = sum(max(0, q - p.known.get(src, 0)) for src, q in p.sent.items())
        mine = max(0, p.sent.get(s, 0) - p.known.get(s, 0))
        others = serve.inflight - mine
        inflight = others + max(0, start - (first - 1))
        while start < st.contig and inflight < t.window and not serve.exhausted():
            n = min(t.batch_records * 4, st.contig - start, t.window - inflight, serve.records)
            records = self.store.read(s, start, n)
            if not records:
                break
            records = serve.take(records)
            sent = self._send_records(p, records)
            if not sent:
                break  # nothing up to a head we hold (it is being signed, or the window ends first)
            inflight += sent - start
            start = sent
            p.sent[s] = start
            p.sent_at[s] = now
        serve.cut = serve.cut or (serve.exhausted() and start < st.contig and inflight < t.window)
        serve.inflight = others + max(0, p.sent.get(s, 0) - p.known.get(s, 0))

    def _send_range(self, p: PeerLog, s: NodeId, st: SourceState, first: int, last: int, *, serve: Serve) -> None:
        """Send the records ``first..last`` of ``s`` that we hold (``st``: a gap the peer
        reported), within what is left of ``serve``."""
        held = min(last, st.contig)
        last = min(held, first - 1 + self.timing.window)
        self._before_read()
        start = first - 1
        while start < last and not serve.exhausted():  # a store may return less than asked
            records = self.store.read(s, start, min(last - start, serve.records))
            if not records:
                break
            records = serve.take(records)
            sent = self._send_records(p, records)
            if not sent:
                break
            start = sent
        # Held and asked for, but not sent: past the window, or what is left of this GSIP's.
        serve.cut = serve.cut or (start < held and (serve.exhausted() or start == last))

    def _send_records(self, p: PeerLog, records: Sequence[LogRecord]) -> int:
        """Send ``records`` (consecutive, of one source) in batches cut at the heads
        held; returns the last sequence sent (0: none)."""
        last = 0
        for batch, heads in self.signed_batches(records):
            self._send(p.conn, Xmsg(self.uuid, batch, heads))
            self.stats.records_sent += len(batch)
            last = batch[-1].seq
        return last

    def signed_batches(self, records: Sequence[LogRecord]) -> list[Batch]:
        """``records`` in XMSG batches, each ending at a head held (with it and the
        chain hash before it); records past the last head are left.  A source with no
        heads here goes unsigned, unless it is key-bound and this node is strict:
        then nothing (what it cannot prove, it does not pass on)."""
        s, first, end = records[0].source, records[0].seq, records[-1].seq
        heads = self.store.heads_in(s, first, end)
        prev = (GENESIS if first == 1 else self.store.chain_of(s, first - 1)) if heads else None
        if prev is None:
            if self.strict and key_bound(s):
                return []
            return [(b, ()) for b in batches(records, self.timing)]
        t = self.timing
        out: list[Batch] = []
        start = i = size = 0
        cand: tuple[int, LogHead, int] | None = None  # a cut: end (exclusive), its head, octets up to it
        by_count = isinstance(records, RecordRun) or (  # short records (the usual): cut by count alone
            (6 * _longest(records) + RECORD_OVERHEAD) * t.batch_records <= t.batch_bytes)
        for h in heads:
            j = h.seq - first + 1
            if by_count:
                i = j
            while i < j:
                r = records[i]
                size += len(r.body) * (2 if r.body.isascii() else 4) + len(r.kind) * 6 + RECORD_OVERHEAD
                i += 1
            if cand is not None and (j - start > t.batch_records or size > t.batch_bytes):
                end_at, head, upto = cand
                out.append((records[start:end_at], ((prev, head),)))
                prev, start, size = head.chain, end_at, size - upto
            cand = (j, h, size)
        if cand is not None:
            end_at, head, _ = cand
            out.append((records[start:end_at], ((prev, head),)))
        return out


def batches(records: Sequence[LogRecord], t: ReplicationTiming) -> Iterable[Sequence[LogRecord]]:
    """Cut ``records`` into XMSG payloads within ``batch_records`` and ``batch_bytes``."""
    if isinstance(records, RecordRun):
        n = max(1, min(t.batch_records, t.batch_bytes // max(1, records.record_size)))
        for i in range(0, len(records), n):
            yield records[i : i + n]
        return
    if not records:
        return
    n = t.batch_records
    longest = _longest(records)
    if (6 * longest + RECORD_OVERHEAD) * n <= t.batch_bytes:  # short records (the usual): by count alone
        for i in range(0, len(records), n):
            yield tuple(records[i : i + n])
        return
    batch: list[LogRecord] = []
    size = 0
    for r in records:
        # At most: in a JSON string an ASCII character of JSON text takes two
        # octets (``\"``, ``\n``), any other at most four; a kind's, six (``\u001f``).
        body = r.body
        rsize = len(body) * (2 if body.isascii() else 4) + len(r.kind) * 6 + RECORD_OVERHEAD
        if batch and (len(batch) >= t.batch_records or size + rsize > t.batch_bytes):
            yield tuple(batch)
            batch, size = [], 0
        batch.append(r)
        size += rsize
    if batch:
        yield tuple(batch)


def coalesce(ranges: Sequence[tuple[int, int]]) -> Sequence[tuple[int, int]]:
    """One source's asked ranges, sorted, with those that overlap or touch merged (``last`` 0:
    open-ended), so that asking for the same records many times over in one GSIP gets them once."""
    if len(ranges) < 2:
        return ranges
    merged: list[list[int]] = []
    for first, last in sorted((a, b or MAX_SEQ + 1) for a, b in ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return [(a, 0 if b > MAX_SEQ else b) for a, b in merged]


def _text_octets(records: Sequence[LogRecord]) -> int:
    """Characters of kind and body in ``records``, in all (a batch's from its columns)."""
    if isinstance(records, RecordBatch):
        return sum(map(len, records.bodies)) + sum(map(len, records.kinds))
    return sum([len(r.body) + len(r.kind) for r in records])


def _longest(records: Sequence[LogRecord]) -> int:
    """The most characters of kind and body one of ``records`` has (a batch's from its columns)."""
    if isinstance(records, RecordBatch):
        longest: int = max(map(_add, map(len, records.bodies), map(len, records.kinds)))
        return longest
    return max([len(r.body) + len(r.kind) for r in records])


def split_runs(records: Sequence[LogRecord]) -> Iterator[tuple[NodeId, int, Sequence[LogRecord]]]:
    """Split ``records`` into runs of consecutive sequences of one source: ``(source, first, run)``."""
    if isinstance(records, (RecordRun, RecordBatch)):  # one run by construction
        yield records.source, records.first, records
        return
    i, n = 0, len(records)
    while i < n:
        s, lo = records[i].source, records[i].seq
        j = i + 1
        while j < n and records[j].seq == lo + (j - i) and records[j].source == s:
            j += 1
        yield s, lo, records[i:j]
        i = j

