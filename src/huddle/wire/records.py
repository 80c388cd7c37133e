"""The replicated log's messages (docs/protocol.md 12): the records themselves
(:class:`LogRecord`, a decoded batch's columns :class:`RecordBatch`, the checks a record
passes before it is stored or sent), XMSG (records and signed heads) and GSIP (a digest
and asks).  Each type's encoder and decoder sit beside its class; ``framing.SPECS`` names
them in one table.

Pure: no sockets, no clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, ClassVar, Final, overload

from ..errors import DecodeError, LocalProtocolError
from ..ids import NodeId
from .fields import (
    MAX_BODY,
    MAX_SEQ,
    check,
    compact_json,
    fast_json_object,
    get_field,
    get_seq,
    hex_octets,
    json_object,
    node_hex,
    orjson_dumps,
    orjson_loads,
)

__all__ = [
    "CHAIN_HASH", "MAX_KIND", "MAX_RECORD", "PUBLIC_KEY", "SIGNATURE", "Gsip", "LogHead", "LogRecord", "RecordBatch",
    "Xmsg", "check_record", "checked_room", "decode_gsip", "decode_xmsg", "encode_gsip", "encode_xmsg", "make_record",
    "make_records", "record_size", "strict_json",
]

MAX_KIND: Final = 255
# A log record is at most this many octets as the body of an XMSG of its own,
# counted with ``hops`` 0: the margin leaves room for any hop count, so a record
# that fits at its source fits on every link it is forwarded over.
MAX_RECORD: Final = MAX_BODY - 64
# Whatever a record's text, its XMSG body is at most this many octets plus six per
# character of kind and body (a character escapes to at most six: ``\u001f``).
_RECORD_FRAME: Final = 128
# A body this short cannot nest deeper than the json scanner's recursion limit allows:
# orjson's verdict on it is strict_json's (orjson also refuses what strict_json refuses).
_QUICK_BODY: Final = 1000


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Strict JSON: NaN, Infinity and -Infinity refused (the parser hands them to parse_constant).
_STRICT_JSON: Final = json.JSONDecoder(parse_constant=_no_constant)
# The C scanner itself: no wrapper, no whitespace handling (not in the typeshed stubs).
_scan_json: Final[Callable[[str, int], tuple[Any, int]]] = _STRICT_JSON.scan_once  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One event of the replicated log as it travels.

    ``body`` is the event's JSON value as canonical JSON text, carried
    verbatim so every copy of an event is byte-for-byte the same; ``hops`` is
    how many links it had crossed before this message (0 from its source).

    The constructor does not check (the log makes millions of these from its
    own store); :func:`check_record` does, before a record is stored, and
    :func:`decode` does the same for every record it receives.
    """

    source: NodeId
    seq: int
    timestamp: float
    kind: str
    body: str
    hops: int = 0


_SETTERS: Final = tuple(getattr(LogRecord, name).__set__ for name in ("source", "seq", "timestamp", "kind", "body", "hops"))


def make_record(source: NodeId, seq: int, timestamp: float, kind: str, body: str, hops: int) -> LogRecord:  # noqa: PLR0917
    """``LogRecord(source, seq, timestamp, kind, body, hops)``, about a third faster: the
    slots are set directly, not by the frozen dataclass's ``object.__setattr__`` per field
    (the log makes one record per event at every step: append, decode, read)."""
    r = object.__new__(LogRecord)
    s_source, s_seq, s_timestamp, s_kind, s_body, s_hops = _SETTERS
    s_source(r, source)
    s_seq(r, seq)
    s_timestamp(r, timestamp)
    s_kind(r, kind)
    s_body(r, body)
    s_hops(r, hops)
    return r


class RecordBatch(Sequence[LogRecord]):
    """Consecutive records ``first..`` of one source, as decoded from an XMSG: held as
    columns (timestamps, kinds, bodies, hops), each :class:`LogRecord` made only when
    asked for.  A receiver checks, chains and stores a batch column by column
    (protocol/logchain.py, log/store.py), so a catch-up makes no object per record.
    Equal to any sequence of the same records (a tuple of them, as the sender had)."""

    __slots__ = ("bodies", "first", "hop", "hops", "kind", "kinds", "source", "stamps")

    def __init__(self, source: NodeId, first: int, stamps: Sequence[float], kinds: Sequence[str],  # noqa: PLR0917
                 bodies: Sequence[str], hops: Sequence[int], *, kind: str | None = None, hop: int | None = None) -> None:
        self.source, self.first = source, first
        self.stamps, self.kinds, self.bodies, self.hops = stamps, kinds, bodies, hops
        # Every record's kind and hops, where they are one (None: not known to be).
        self.kind, self.hop = kind, hop

    def __len__(self) -> int:
        return len(self.bodies)

    @property
    def seqs(self) -> range:
        return range(self.first, self.first + len(self.bodies))

    @overload
    def __getitem__(self, index: int) -> LogRecord: ...
    @overload
    def __getitem__(self, index: slice) -> RecordBatch: ...
    def __getitem__(self, index: int | slice) -> LogRecord | RecordBatch:
        n = len(self.bodies)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return tuple(self)[index]  # type: ignore[return-value]  # not asked for by huddle itself
            stop = max(start, stop)
            return RecordBatch(self.source, self.first + start, self.stamps[start:stop], self.kinds[start:stop],
                               self.bodies[start:stop], self.hops[start:stop], kind=self.kind, hop=self.hop)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        return make_record(self.source, self.first + index, self.stamps[index], self.kinds[index],
                           self.bodies[index], self.hops[index])

    def __iter__(self) -> Iterator[LogRecord]:
        return map(make_record, repeat(self.source), self.seqs, self.stamps, self.kinds, self.bodies, self.hops)

    def __eq__(self, other: object) -> bool:
        if isinstance(other, RecordBatch):
            return (self.source == other.source and self.first == other.first and len(self) == len(other)
                    and list(self.stamps) == list(other.stamps) and list(self.kinds) == list(other.kinds)
                    and list(self.bodies) == list(other.bodies) and list(self.hops) == list(other.hops))
        if isinstance(other, (tuple, list)):
            return len(other) == len(self) and all(a == b for a, b in zip(self, other, strict=True))
        return NotImplemented

    def __hash__(self) -> int:
        return hash(tuple(self))

    def __repr__(self) -> str:
        return f"RecordBatch({self.source.short}, {self.first}..{self.first + len(self.bodies) - 1})"


def strict_json(text: str) -> bool:
    """True if ``text`` is one JSON value as RFC 8259 has it: no ``NaN`` or
    ``Infinity``, no control characters inside strings, no escape that spells
    a lone surrogate (``"\\ud800"``), whitespace allowed around it."""
    try:
        value, end = _scan_json(text, 0)
        if end != len(text):
            raise ValueError("more after the value")
    except (StopIteration, ValueError, RecursionError):
        try:  # leading or trailing whitespace, or really invalid: the full parser decides
            value = _STRICT_JSON.decode(text)
        except (ValueError, RecursionError):
            return False
    if "\\u" in text:  # an escape may spell a lone surrogate: the value must be valid Unicode
        try:
            compact_json({"v": value})
        except (UnicodeEncodeError, RecursionError):
            return False
    return True


def _body_ok(body: str) -> bool:
    """:func:`strict_json`, faster for the usual short body: what orjson accepts is
    strict JSON (it refuses NaN, infinities, control characters, lone surrogate
    escapes, anything after the value); what it refuses (also numbers beyond a
    double, e.g. ``1e400``, which RFC 8259 allows) the strict parser decides."""
    if len(body) < _QUICK_BODY:
        try:
            orjson_loads(body)
        except ValueError:  # orjson.JSONDecodeError
            return strict_json(body)
        return True
    return strict_json(body)


def record_size(record: LogRecord) -> int:
    """The octets of an XMSG body carrying ``record`` alone, with ``hops`` 0
    (what :data:`MAX_RECORD` bounds), as this node's encoder writes it.  Raises
    ``UnicodeEncodeError`` for text that is not valid Unicode (a lone surrogate)."""
    for text in (record.kind, record.body):
        if not text.isascii():
            text.encode("utf-8")
    alone = LogRecord(record.source, record.seq, record.timestamp, record.kind, record.body, 0)
    return len(encode_xmsg(Xmsg(record.source, (alone,))))


def _utf8_ok(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _record_problem(kind: object, body: object, seq: object, timestamp: object, hops: object,
                    *, parse: bool = True) -> str | None:
    """What is wrong with a record's fields (source aside), or None; ``parse`` False:
    the body is known to be JSON but for its UTF-8 (:func:`check_record`)."""
    if not isinstance(kind, str) or not kind:
        return "kind must be non-empty text"
    if len(kind) > MAX_KIND or not _utf8_ok(kind) or (not kind.isascii() and len(kind.encode("utf-8")) > MAX_KIND):
        return f"kind must be 1..{MAX_KIND} octets of UTF-8 text (no lone surrogates)"
    if not isinstance(body, str):
        return "body must be JSON text in a string"
    if not _utf8_ok(body):
        return "body is not valid Unicode text (a lone surrogate)"
    if parse and not _body_ok(body):
        return "body is not valid JSON text (strict: one value, no NaN or Infinity)"
    if not isinstance(seq, int) or isinstance(seq, bool) or not 1 <= seq <= MAX_SEQ:
        return "seq must be an integer in 1..2^63-1"
    if not isinstance(timestamp, float) or not math.isfinite(timestamp):
        return "timestamp must be a finite float"
    if not isinstance(hops, int) or isinstance(hops, bool) or not 0 <= hops <= MAX_SEQ:
        return "hops must be an integer in 0..2^63-1"
    return None


def _too_large(record: LogRecord) -> bool:
    """True if ``record`` is over :data:`MAX_RECORD`; its exact encoded size is
    computed only when its text is long enough that it might be."""
    return 6 * (len(record.kind) + len(record.body)) + _RECORD_FRAME > MAX_RECORD and record_size(record) > MAX_RECORD


def check_record(record: LogRecord, *, canonical: bool = False) -> None:
    """Raise :class:`LocalProtocolError` unless ``record`` may be stored and
    sent: strict UTF-8 text, a strict JSON body, sequence and hops in range, a
    finite timestamp, and at most :data:`MAX_RECORD` octets in an XMSG of its own.
    ``canonical``: the body is text ``canonical_json`` wrote (protocol/replication.py),
    strict JSON by construction (no NaN or infinities, control characters escaped)
    but for a lone surrogate, which the UTF-8 check still finds: it is not parsed again."""
    check(isinstance(record.source, NodeId), "event source must be a NodeId")
    problem = _record_problem(record.kind, record.body, record.seq, record.timestamp, record.hops,
                              parse=not canonical)
    if problem is not None:
        raise LocalProtocolError(f"event {problem}")
    if _too_large(record):
        raise LocalProtocolError(
            f"event is larger than the {MAX_RECORD}-octet record limit ({record_size(record)} octets as a message)")


def make_records(source: NodeId, first: int, timestamp: float, events: Sequence[tuple[str, str]]) -> list[LogRecord]:
    """:func:`make_record` of ``(kind, body)`` events with sequences from ``first`` on and 0 hops, in
    one loop (a new event's records: without a call per record, about 30 % less than make_record)."""
    s_source, s_seq, s_timestamp, s_kind, s_body, s_hops = _SETTERS
    new = object.__new__
    out: list[LogRecord] = []
    append = out.append
    seq = first
    for kind, body in events:
        r = new(LogRecord)
        s_source(r, source)
        s_seq(r, seq)
        s_timestamp(r, timestamp)
        s_kind(r, kind)
        s_body(r, body)
        s_hops(r, 0)
        append(r)
        seq += 1
    return out


def checked_room(kind: str) -> int:
    """The most characters a body may have for a record of ``kind`` to be within
    :data:`MAX_RECORD` whatever they are (:func:`check_record` computes no encoded size below)."""
    return (MAX_RECORD - _RECORD_FRAME) // 6 - len(kind)


CHAIN_HASH: Final = 32  # octets of a log chain hash (SHA-256)
SIGNATURE: Final = 64  # octets of an Ed25519 signature
PUBLIC_KEY: Final = 32  # octets of an Ed25519 public key


@dataclass(frozen=True, slots=True)
class LogHead:
    """A source's signed head (docs/protocol.md 12.5): the hash ``chain`` of its
    record ``seq``'s chain, signed by ``source`` with the Ed25519 ``key`` (whose
    node id must be ``source``).  Checked by the log, not here: here only sizes."""

    source: NodeId
    seq: int
    chain: bytes
    signature: bytes
    key: bytes

    def __post_init__(self) -> None:
        check(1 <= self.seq <= MAX_SEQ, "a head's seq must be 1..2^63-1")
        check(len(self.chain) == CHAIN_HASH and len(self.signature) == SIGNATURE and len(self.key) == PUBLIC_KEY,
               "a head is a 32-octet hash, a 64-octet signature and a 32-octet key")


@dataclass(frozen=True, slots=True)
class Xmsg:
    """A batch of log records: live events from their source, or a catch-up range.

    ``heads``: per source whose records it carries signed, ``(prev, head)``: the
    chain hash before the batch's first record of that source, and the source's
    head at the batch's last one (docs/protocol.md 12.5)."""

    TAG: ClassVar[bytes] = b"XMSG"

    sender: NodeId
    records: Sequence[LogRecord]  # a tuple, or a run made on demand (the simulator's RecordRun)
    heads: tuple[tuple[bytes, LogHead], ...] = ()

    def __post_init__(self) -> None:
        check(len(self.records) > 0, "an XMSG carries at least one record")


@dataclass(frozen=True, slots=True)
class Gsip:
    """Gossip digest: for each source, the highest sequence the sender holds
    with no gap before it (its version vector; sources not listed: 0), and the
    ranges of records it asks the receiver to send (``ask``): per source, a
    list of ``(first, last)``, where ``last`` 0 means "and everything after"."""

    TAG: ClassVar[bytes] = b"GSIP"

    sender: NodeId
    vv: tuple[tuple[NodeId, int], ...]
    ask: tuple[tuple[NodeId, tuple[tuple[int, int], ...]], ...] = ()

    def as_dict(self) -> dict[NodeId, int]:
        return dict(self.vv)


# --------------------------------------------------------------------------- encode


def encode_xmsg(msg: Xmsg) -> bytes:
    """An XMSG's JSON, by orjson (about 5x faster than ``json`` here; the records were
    checked before: valid UTF-8 text, integers within 64 bits, finite timestamps)."""
    records = msg.records
    rows: list[Any]
    if isinstance(records, RecordBatch):  # what a provider serves: its columns as they are (tuples: arrays)
        rows = list(zip(repeat(records.source.hex()), records.seqs, records.stamps, records.kinds, records.bodies,
                        records.hops))
    else:
        first = records[0].source
        hexed = first.hex()  # a batch mostly carries one source: its hex once
        rows = [[hexed if r.source is first else r.source.hex(), r.seq, r.timestamp, r.kind, r.body, r.hops]
                for r in records]
    if not msg.heads:
        return orjson_dumps({"records": rows})
    heads = [[h.source.hex(), h.seq, prev.hex(), h.chain.hex(), h.signature.hex(), h.key.hex()]
             for prev, h in msg.heads]
    return orjson_dumps({"records": rows, "heads": heads})


def encode_gsip(msg: Gsip) -> bytes:
    digest: dict[str, Any] = {"vv": {s.hex(): q for s, q in msg.vv}}
    if msg.ask:
        digest["ask"] = {s.hex(): [list(r) for r in ranges] for s, ranges in msg.ask}
    return compact_json(digest)


# --------------------------------------------------------------------------- decode


def _record(row: object, sources: dict[str, NodeId]) -> LogRecord:
    if not isinstance(row, list) or len(row) != 6:
        raise DecodeError("an XMSG record is [source, seq, timestamp, kind, body, hops]")
    source, seq, ts, kind, body, hops = row
    if not isinstance(ts, (int, float)) or isinstance(ts, bool) or not math.isfinite(ts):
        raise DecodeError("XMSG record timestamp must be a finite number")
    if (  # the usual record, checked at once; any other is looked at closely
        type(kind) is str and type(body) is str and 0 < len(kind) <= MAX_KIND and kind.isascii() and body.isascii()
        and type(seq) is int and 1 <= seq <= MAX_SEQ and type(hops) is int and 0 <= hops <= MAX_SEQ
    ):
        if not _body_ok(body):
            raise DecodeError("XMSG record body is not valid JSON text (strict: one value, no NaN or Infinity)")
    else:
        problem = _record_problem(kind, body, seq, float(ts), hops)
        if problem is not None:
            raise DecodeError(f"XMSG record {problem}")
    src = sources.get(source) if isinstance(source, str) else None
    if src is None:
        src = sources[source] = node_hex(source, "XMSG record source")
    record = make_record(src, seq, float(ts), kind, body, hops)
    if 6 * (len(kind) + len(body)) + _RECORD_FRAME > MAX_RECORD and _too_large(record):
        raise DecodeError(f"XMSG record exceeds the {MAX_RECORD}-octet record limit")
    return record


_LIST: Final = frozenset((list,))
_SIX: Final = frozenset((6,))
_INT: Final = frozenset((int,))
_FLOAT: Final = frozenset((float,))
_STR: Final = frozenset((str,))


def _batch(rows: list[Any], sources: dict[str, NodeId]) -> RecordBatch | None:
    """An XMSG's records, the usual batch, as one :class:`RecordBatch`, checked column by column
    as :func:`_record` checks each row, accepting what it accepts and nothing else: one
    source, consecutive sequences, float timestamps, ASCII kinds and bodies (each body
    shorter than ``_QUICK_BODY``, so orjson's verdict is strict JSON's and no record is near
    :data:`MAX_RECORD`).  None for any other batch: then each record is looked at alone
    (and the first bad one named)."""
    if not (_LIST.issuperset(map(type, rows)) and _SIX.issuperset(map(len, rows))):
        return None
    srcs, seqs, stamps, kinds, bodies, hops = zip(*rows, strict=True)
    n, source, first = len(rows), srcs[0], seqs[0]
    if (
        type(source) is not str or srcs.count(source) != n
        or not _INT.issuperset(map(type, seqs)) or not 1 <= first <= MAX_SEQ - n + 1
        or seqs != tuple(range(first, first + n))
        or not _FLOAT.issuperset(map(type, stamps)) or not all(map(math.isfinite, stamps))
        or not _STR.issuperset(map(type, kinds))
        or not _STR.issuperset(map(type, bodies)) or not all(map(str.isascii, bodies))
        or max(map(len, bodies)) >= _QUICK_BODY
        or not _INT.issuperset(map(type, hops)) or min(hops) < 0 or max(hops) > MAX_SEQ
    ):
        return None
    one_kind = {*kinds}
    for kind in one_kind:
        if not 0 < len(kind) <= MAX_KIND or not kind.isascii():
            return None
    try:
        for _ in map(orjson_loads, bodies):  # each body strict JSON (orjson refuses what strict_json does)
            pass
        src = node_hex(source, "XMSG record source")
    except (ValueError, DecodeError):  # orjson.JSONDecodeError: the record is looked at alone
        return None
    sources[source] = src
    one_hop = {*hops}
    return RecordBatch(src, first, stamps, kinds, bodies, hops, kind=kinds[0] if len(one_kind) == 1 else None,
                       hop=hops[0] if len(one_hop) == 1 else None)


def _head(row: object) -> tuple[bytes, LogHead]:
    if not isinstance(row, list) or len(row) != 6:
        raise DecodeError("an XMSG head is [source, seq, prev, chain, signature, key]")
    source, seq, prev, chain, sig, key = row
    return hex_octets(prev, CHAIN_HASH, "XMSG head prev"), LogHead(
        node_hex(source, "XMSG head source"), get_seq(seq, "XMSG head seq"), hex_octets(chain, CHAIN_HASH, "XMSG head chain"),
        hex_octets(sig, SIGNATURE, "XMSG head signature"), hex_octets(key, PUBLIC_KEY, "XMSG head key"))


def decode_xmsg(sender: NodeId, body: str) -> Xmsg:
    obj = fast_json_object(body, "XMSG")
    rows = get_field(obj, "records", "XMSG", list)
    if not rows:
        raise DecodeError("an XMSG carries at least one record")
    sources: dict[str, NodeId] = {}  # a batch names few sources: parse each hex once
    records: Sequence[LogRecord] | None = _batch(rows, sources)
    if records is None:
        records = tuple([_record(r, sources) for r in rows])
    if "heads" not in obj:
        return Xmsg(sender=sender, records=records)
    heads = get_field(obj, "heads", "XMSG", list)
    if not heads or len(heads) > len(sources):
        raise DecodeError("an XMSG carries 1 to one head per source of its records")
    return Xmsg(sender=sender, records=records, heads=tuple([_head(h) for h in heads]))


def decode_gsip(sender: NodeId, body: str) -> Gsip:
    obj = json_object(body, "GSIP")
    vv = get_field(obj, "vv", "GSIP", dict)
    ask = get_field(obj, "ask", "GSIP", dict) if "ask" in obj else {}
    return Gsip(
        sender=sender,
        vv=tuple((node_hex(k, "GSIP source"), get_seq(v, "GSIP sequence", 0)) for k, v in vv.items()),
        ask=tuple((node_hex(k, "GSIP ask source"), _ranges(v)) for k, v in ask.items()),
    )


def _ranges(value: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not value or len(value) > 10_000:
        raise DecodeError("GSIP ask ranges must be a non-empty list of [first, last]")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            raise DecodeError("a GSIP ask range is [first, last]")
        first = get_seq(item[0], "GSIP ask first")
        last = get_seq(item[1], "GSIP ask last", 0)
        if last and last < first:
            raise DecodeError("a GSIP ask range has last < first")
        out.append((first, last))
    return tuple(out)
