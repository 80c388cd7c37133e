"""The huddle message codec: frames <-> typed messages.

A message on the wire is a ZeroMQ multipart of three frames as the
receiving ROUTER socket sees them::

    frame 1  sender   16 octets, the sender's UUID (its DEALER routing identity)
    frame 2  type     4 ASCII capital letters
    frame 3  body     UTF-8 text, at most MAX_BODY octets

except BULK, which has a fourth frame: its data (at most MAX_BULK octets),
kept apart from the head in frame 3 so that it is never sliced or copied.

This module is pure: no sockets, no clock.  :func:`decode` raises
:class:`~huddle.errors.DecodeError` for any malformed input and nothing else;
:func:`encode` is its inverse.  See ``docs/protocol.md`` for the grammar.
"""

from __future__ import annotations

import json
import math
import re
import struct
from collections.abc import Callable, Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress, repeat
from operator import attrgetter, itemgetter
from typing import Any, Final, TypeVar, cast, overload

import orjson

from ..errors import DecodeError, LocalProtocolError
from ..ids import NodeId

__all__ = [
    "MAX_BODY",
    "MAX_BULK",
    "MAX_BULK_HEAD",
    "MAX_GROUP",
    "MAX_KIND",
    "MAX_NAME",
    "MAX_RECORD",
    "MAX_SEQ",
    "PROTOCOL_VERSION",
    "Beat",
    "Bulk",
    "Chat",
    "Dack",
    "Dmsg",
    "Gbye",
    "Group",
    "Gsip",
    "Helo",
    "LogHead",
    "LogRecord",
    "MemberEntry",
    "Members",
    "Message",
    "Peer",
    "PeerStat",
    "Raws",
    "RecordBatch",
    "Time",
    "Xmsg",
    "check_record",
    "decode",
    "encode",
    "encode_parts",
    "helo_signed",
    "merge_report",
    "raws_signed",
    "record_size",
    "sign_raws",
    "strict_json",
    "valid_endpoint",
]

PROTOCOL_VERSION: Final = 1
HELO_KEY: Final = 32  # octets of an Ed25519 public key
HELO_SIG: Final = 64  # octets of an Ed25519 signature
_HELO_DOMAIN: Final = b"huddle HELO 1\n"
_RAWS_DOMAIN: Final = b"huddle RAWS 1\n"
# A signed RAWS body ends with its signature, the last member, written exactly so (protocol.md 14.1).
_RAWS_SIG_HEAD: Final = b',"sig":"'
_RAWS_SIG_TAIL: Final = len(_RAWS_SIG_HEAD) + 2 * HELO_SIG + 2  # ... then 128 hex digits and '"}'
MAX_BODY: Final = 1024 * 1024
MAX_NAME: Final = 255
MAX_GROUP: Final = 255
MAX_REASON: Final = 1024
MAX_KIND: Final = 255
MAX_SEQ: Final = 2**63 - 1
# A log record is at most this many octets as the body of an XMSG of its own,
# counted with ``hops`` 0: the margin leaves room for any hop count, so a record
# that fits at its source fits on every link it is forwarded over.
MAX_RECORD: Final = MAX_BODY - 64
# Whatever a record's text, its XMSG body is at most this many octets plus six per
# character of kind and body (a character escapes to at most six: ``\u001f``).
_RECORD_FRAME: Final = 128
MAX_FRAGMENTS: Final = 2**20
MAX_BULK: Final = 1024 * 1024  # octets of a BULK's data frame
MAX_BULK_HEAD: Final = 255  # octets of a BULK's head
_DMSG_HEADER: Final = struct.Struct(">QQII")
_DACK_BODY: Final = struct.Struct(">Q")

_ENDPOINT_RE: Final = re.compile(r"tcp://([A-Za-z0-9.\-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]):([0-9]{1,5})")
_DECIMAL_RE: Final = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")
_INCARNATION_RE: Final = re.compile(r"[0-9a-f]{16}")
_TYPE_RE: Final = re.compile(r"[a-z][a-z0-9_-]{0,31}")
_HEX32_RE: Final = re.compile(r"[0-9a-f]{32}")
_LOWER_HEX_RE: Final = re.compile(r"[0-9a-f]*")
MAX_BEAT: Final = 60.0  # seconds: the longest heartbeat interval a node may announce
MAX_LOST: Final = 100  # the most heartbeats a node may allow to be lost
MAX_FORGED_ROWS: Final = 1024  # peers a RAWS report's ``forged`` may name
MAX_GONE_ROWS: Final = 1024  # peers a RAWS delta's ``gone`` may name (more: the origin sends a full report)
PEER_STATES: Final = ("connecting", "handshake", "alive", "suspect", "none")


_orjson_loads: Final[Callable[[str], Any]] = orjson.loads
_orjson_dumps: Final[Callable[[Any], bytes]] = orjson.dumps
# A body this short cannot nest deeper than the json scanner's recursion limit allows:
# orjson's verdict on it is strict_json's (orjson also refuses what strict_json refuses).
_QUICK_BODY: Final = 1000


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


# Strict JSON: NaN, Infinity and -Infinity refused (the parser hands them to parse_constant).
_STRICT_JSON: Final = json.JSONDecoder(parse_constant=_no_constant)
# The C scanner itself: no wrapper, no whitespace handling (not in the typeshed stubs).
_scan_json: Final[Callable[[str, int], tuple[Any, int]]] = _STRICT_JSON.scan_once  # type: ignore[attr-defined]


def valid_endpoint(text: str) -> bool:
    """True if ``text`` is ``tcp://HOST:PORT`` with a port in 1..65535."""
    m = _ENDPOINT_RE.fullmatch(text)
    return m is not None and 1 <= int(m.group(2)) <= 65535


def _check(ok: bool, what: str) -> None:
    if not ok:
        raise LocalProtocolError(what)


def _check_text(value: object, field: str, limit: int, *, empty: bool = True) -> None:
    _check(isinstance(value, str), f"{field} must be a string")
    assert isinstance(value, str)
    _check(empty or value != "", f"{field} must not be empty")
    if value.isascii():  # fast path: one octet per character, nothing to encode
        size = len(value)
    else:
        try:
            size = len(value.encode("utf-8"))
        except UnicodeEncodeError:
            raise LocalProtocolError(f"{field} is not valid Unicode text") from None
    _check(size <= limit, f"{field} is longer than {limit} octets")


@dataclass(frozen=True, slots=True)
class Helo:
    """Introduction: who I am and where my ROUTER listens.

    ``reply`` is false when a node opens a session and true when it answers
    one; a HELO with ``reply`` false is always answered, one with ``reply``
    true never is, so two nodes cannot echo HELOs forever.
    """

    sender: NodeId
    endpoint: str
    name: str
    incarnation: str
    reply: bool = False
    peers: int = 0
    version: int = PROTOCOL_VERSION
    node_type: str = ""  # the sender's node type ("" : not said; then the others use their own timing)
    beat: float = 0.0  # the sender's heartbeat interval, seconds (0: not said)
    lost: int = 0  # heartbeats of the sender that may be lost before it counts as gone (0: not said)
    rate: int = 0  # octets per second the sender accepts of addressed messages (0: no limit)
    guests: int = 0  # the UDP port on which the sender answers Noam guests' marcos (0: it hosts none)
    # Identity (protocol.md 4.1, "Identity"): the sender's Ed25519 public key and its signature of helo_signed(self);
    # ``at`` the sender's clock (milliseconds since the epoch) and ``to`` the node it means to meet
    # (None: it does not know, a seed), both signed so that a copy is no use later or elsewhere.
    key: bytes = b""  # 32 octets, or b"": not said (unsigned)
    sig: bytes = b""  # 64 octets, given with the key
    at: int = 0
    to: NodeId | None = None
    # The sender understands RAWS deltas (protocol.md 14.1): only then may it be sent one.  Outside
    # the signature (older nodes sign and check a fixed list of members without it).
    deltas: bool = False

    def __post_init__(self) -> None:
        _check(isinstance(self.version, int) and 0 <= self.version < 2**31, "version must be a small integer")
        _check(isinstance(self.deltas, bool), "deltas must be a boolean")
        _check(isinstance(self.key, bytes) and len(self.key) in (0, HELO_KEY), f"key must be {HELO_KEY} octets")
        _check(isinstance(self.sig, bytes) and len(self.sig) == (HELO_SIG if self.key else 0),
               f"sig must be {HELO_SIG} octets, given with the key and only with it")
        _check(isinstance(self.at, int) and not isinstance(self.at, bool) and 0 <= self.at < 2**53,
               "at must be a non-negative integer")
        _check(self.to is None or isinstance(self.to, NodeId), "to must be a NodeId")
        _check(
            isinstance(self.node_type, str) and (self.node_type == "" or _TYPE_RE.fullmatch(self.node_type) is not None),
            "type must be 1..32 of a-z 0-9 _ - starting with a letter",
        )
        _check(
            isinstance(self.beat, float) and (self.beat == 0.0 or 0.01 <= self.beat <= MAX_BEAT),
            f"beat must be 0 or 0.01..{MAX_BEAT:g} seconds",
        )
        _check(isinstance(self.lost, int) and 0 <= self.lost <= MAX_LOST, f"lost must be 0..{MAX_LOST}")
        _check((self.beat == 0.0) == (self.lost == 0), "beat and lost are given together or not at all")
        _check(isinstance(self.rate, int) and 0 <= self.rate < 2**53, "rate must be a non-negative integer")
        _check(isinstance(self.endpoint, str) and valid_endpoint(self.endpoint), f"bad endpoint {self.endpoint!r}")
        _check_text(self.name, "name", MAX_NAME, empty=False)
        _check(
            isinstance(self.incarnation, str) and _INCARNATION_RE.fullmatch(self.incarnation) is not None,
            "incarnation must be 16 lowercase hex digits",
        )
        _check(isinstance(self.reply, bool), "reply must be a boolean")
        _check(isinstance(self.guests, int) and not isinstance(self.guests, bool) and 0 <= self.guests <= 65535,
               "guests must be a port number 0..65535")
        _check(isinstance(self.peers, int) and 0 <= self.peers < 2**31, "peers must be a non-negative integer")


@dataclass(frozen=True, slots=True)
class Peer:
    """Introduction of a third node: "have you met this one?"."""

    sender: NodeId
    peer: NodeId
    endpoint: str

    def __post_init__(self) -> None:
        _check(isinstance(self.peer, NodeId), "peer must be a NodeId")
        _check(isinstance(self.endpoint, str) and valid_endpoint(self.endpoint), f"bad endpoint {self.endpoint!r}")


MemberEntry = tuple[NodeId, str, str]  # (uuid, endpoint, incarnation)


@dataclass(frozen=True, slots=True)
class Members:
    """Membership anti-entropy: the members the sender has sessions with, as
    (uuid, endpoint, incarnation).  ``reply`` true answers a list (and is never
    answered itself).  Its length is bounded by the receiver (mesh.max-members-listed)."""

    sender: NodeId
    members: tuple[MemberEntry, ...]
    reply: bool = False

    def __post_init__(self) -> None:
        _check(isinstance(self.reply, bool), "reply must be a boolean")
        _check(isinstance(self.members, tuple), "members must be a tuple")
        for entry in self.members:
            _check(isinstance(entry, tuple) and len(entry) == 3, "a member is (uuid, endpoint, incarnation)")
            uuid, endpoint, incarnation = entry
            _check(isinstance(uuid, NodeId), "member uuid must be a NodeId")
            _check(isinstance(endpoint, str) and valid_endpoint(endpoint), f"bad endpoint {endpoint!r}")
            _check(isinstance(incarnation, str) and _INCARNATION_RE.fullmatch(incarnation) is not None,
                   "member incarnation must be 16 lowercase hex digits")


@dataclass(frozen=True, slots=True)
class Group:
    """BOUT: the sender's group name; the empty string is a group too.  (The wire tag
    keeps the source's word for a group, "bout"; the class says what it carries, as
    "bout" is also the derby document.)"""

    sender: NodeId
    group: str

    def __post_init__(self) -> None:
        _check_text(self.group, "group", MAX_GROUP)


@dataclass(frozen=True, slots=True)
class Gbye:
    """The sender is leaving, or refuses this session (reason says why)."""

    sender: NodeId
    reason: str = ""

    def __post_init__(self) -> None:
        _check_text(self.reason, "reason", MAX_REASON)


@dataclass(frozen=True, slots=True)
class Chat:
    """A line of text for humans."""

    sender: NodeId
    text: str

    def __post_init__(self) -> None:
        text = self.text  # ASCII text within the limit passes at once: a chat line is built per message sent
        if type(text) is not str or len(text) > MAX_BODY or not text.isascii():
            _check_text(text, "text", MAX_BODY)


@dataclass(frozen=True, slots=True)
class Beat:
    """Heartbeat: the sender is alive.  Its body is empty."""

    sender: NodeId


@dataclass(frozen=True, slots=True)
class Time:
    """Clock probe.  A request carries ``t0`` (opaque to the responder); the
    reply echoes ``t0`` and adds ``t1``, the responder's mesh time on receipt."""

    sender: NodeId
    t0: float
    t1: float | None = None

    def __post_init__(self) -> None:
        _check(isinstance(self.t0, float) and math.isfinite(self.t0), "t0 must be a finite float")
        _check(
            self.t1 is None or (isinstance(self.t1, float) and math.isfinite(self.t1)),
            "t1 must be a finite float or None",
        )


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
            _json({"v": value})
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
            _orjson_loads(body)
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
    return len(_xmsg_body(Xmsg(record.source, (alone,))))


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
    _check(isinstance(record.source, NodeId), "event source must be a NodeId")
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
        _check(1 <= self.seq <= MAX_SEQ, "a head's seq must be 1..2^63-1")
        _check(len(self.chain) == CHAIN_HASH and len(self.signature) == SIGNATURE and len(self.key) == PUBLIC_KEY,
               "a head is a 32-octet hash, a 64-octet signature and a 32-octet key")


@dataclass(frozen=True, slots=True)
class Xmsg:
    """A batch of log records: live events from their source, or a catch-up range.

    ``heads``: per source whose records it carries signed, ``(prev, head)``: the
    chain hash before the batch's first record of that source, and the source's
    head at the batch's last one (docs/protocol.md 12.5)."""

    sender: NodeId
    records: Sequence[LogRecord]  # a tuple, or a run made on demand (the simulator's RecordRun)
    heads: tuple[tuple[bytes, LogHead], ...] = ()

    def __post_init__(self) -> None:
        _check(len(self.records) > 0, "an XMSG carries at least one record")


@dataclass(frozen=True, slots=True)
class Gsip:
    """Gossip digest: for each source, the highest sequence the sender holds
    with no gap before it (its version vector; sources not listed: 0), and the
    ranges of records it asks the receiver to send (``ask``): per source, a
    list of ``(first, last)``, where ``last`` 0 means "and everything after"."""

    sender: NodeId
    vv: tuple[tuple[NodeId, int], ...]
    ask: tuple[tuple[NodeId, tuple[tuple[int, int], ...]], ...] = ()

    def as_dict(self) -> dict[NodeId, int]:
        return dict(self.vv)


@dataclass(frozen=True, slots=True)
class Dmsg:
    """One frame of an addressed message: frame sequence ``fseq`` (per
    sender-receiver channel, from 1), message sequence ``mseq``, fragment
    ``index`` of ``count``, and that fragment's octets."""

    sender: NodeId
    fseq: int
    mseq: int
    index: int
    count: int
    payload: bytes

    def __post_init__(self) -> None:
        _check(1 <= self.fseq <= MAX_SEQ and 1 <= self.mseq <= MAX_SEQ, "DMSG sequences must be 1..2^63-1")
        _check(0 <= self.index < self.count <= MAX_FRAGMENTS, f"DMSG fragment must be 0 <= index < count <= {MAX_FRAGMENTS}")


@dataclass(frozen=True, slots=True)
class Dack:
    """Acknowledges every frame of the channel up to ``upto`` (0: none yet)."""

    sender: NodeId
    upto: int

    def __post_init__(self) -> None:
        _check(0 <= self.upto <= MAX_SEQ, "DACK sequence must be 0..2^63-1")


@dataclass(frozen=True, slots=True)
class Bulk:
    """Octets for one peer outside the addressed-message channel: ``head`` says
    what they are (for the application that asked for them), ``data`` is carried
    as a frame of its own.  Not acknowledged, not re-sent, not fragmented: the
    receiver asked for it and asks again if it does not come."""

    sender: NodeId
    head: bytes
    data: bytes | memoryview  # a view is sent and received without a copy

    def __post_init__(self) -> None:
        _check(1 <= len(self.head) <= MAX_BULK_HEAD, f"BULK head must be 1..{MAX_BULK_HEAD} octets")
        _check(len(self.data) <= MAX_BULK, f"BULK data must be at most {MAX_BULK} octets")


@dataclass(frozen=True, slots=True)
class PeerStat:
    """What one node measured of one peer (a row of a RAWS report).

    ``heard`` is how many seconds before the report the node last received
    any well-formed message from the peer, admitted or not (None: never);
    ``rtt`` the last measured round trip in seconds (None: none yet).  The
    counters run from the node's start."""

    peer: NodeId
    heard: float | None
    rtt: float | None
    state: str  # the session's phase, or "none"
    msgs_in: int = 0
    msgs_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    sent: int = 0  # addressed-message frames sent (first transmissions)
    retrans: int = 0  # addressed-message frames sent again
    queued: int = 0  # octets of addressed messages waiting for this peer

    def __post_init__(self) -> None:
        # Reports carry a row per peer, and every node receives every report:
        # one quick test of everything (no generator, no getattr), the detailed
        # checks only to say what is wrong.
        heard, rtt = self.heard, self.rtt
        v1, v2, v3, v4 = self.msgs_in, self.msgs_out, self.bytes_in, self.bytes_out
        v5, v6, v7 = self.sent, self.retrans, self.queued
        if (
            type(self.peer) is NodeId
            and self.state in PEER_STATES
            and (heard is None or (type(heard) is float and 0 <= heard < math.inf))
            and (rtt is None or (type(rtt) is float and 0 <= rtt < math.inf))
            and type(v1) is int and type(v2) is int and type(v3) is int and type(v4) is int
            and type(v5) is int and type(v6) is int and type(v7) is int
            and 0 <= v1 <= MAX_SEQ and 0 <= v2 <= MAX_SEQ and 0 <= v3 <= MAX_SEQ and 0 <= v4 <= MAX_SEQ
            and 0 <= v5 <= MAX_SEQ and 0 <= v6 <= MAX_SEQ and 0 <= v7 <= MAX_SEQ
        ):
            return
        _check(isinstance(self.peer, NodeId), "peer must be a NodeId")
        for name in ("heard", "rtt"):
            v = getattr(self, name)
            _check(v is None or (isinstance(v, float) and math.isfinite(v) and v >= 0), f"{name} must be None or >= 0")
        _check(self.state in PEER_STATES, f"state must be one of {', '.join(PEER_STATES)}")
        for name in ("msgs_in", "msgs_out", "bytes_in", "bytes_out", "sent", "retrans", "queued"):
            v = getattr(self, name)
            _check(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SEQ, f"{name} must be 0..2^63-1")


@dataclass(frozen=True, slots=True)
class Raws:
    """Raw statistics of node ``origin`` (report ``seq``, from 1), relayed by
    ``sender``: its node type and timing, whether it is cut off, and a row per
    peer.  Every node floods the newest report of every origin it holds, so
    reports cross links that are only open one way."""

    sender: NodeId
    origin: NodeId
    seq: int
    name: str
    node_type: str
    beat: float
    lost: int
    cut_off: bool
    peers: Sequence[PeerStat]  # a tuple, or (decoded) rows checked and turned into PeerStats when read
    forged: tuple[tuple[NodeId, int], ...] = ()  # forged log batches received, per peer that sent them
    # A delta (protocol.md 14.1): ``peers`` holds only the rows changed since the origin's report
    # ``base``, and ``gone`` the peers whose rows were dropped since it.  None: a full report.
    base: int | None = None
    gone: tuple[NodeId, ...] = ()
    # Signed by the origin (protocol.md 14.1): its Ed25519 public key, the
    # signature, and the body's octets that it signs (the body less its last member, ``sig``).
    # A signed report is sent as those octets, whatever its other fields say: a relay passes on
    # the origin's words, not its own encoding of them.  Made by ``sign_raws`` and the decoder.
    key: bytes = b""
    sig: bytes = b""
    signed: bytes = field(default=b"", compare=False, repr=False)

    def __post_init__(self) -> None:
        _check(isinstance(self.origin, NodeId), "origin must be a NodeId")
        if self.sig or self.key or self.signed:
            _check(len(self.key) == HELO_KEY and len(self.sig) == HELO_SIG and self.signed[-1:] == b"}",
                   "a signed report has a 32-octet key, a 64-octet signature and the octets it signs")
        _check(len(self.forged) <= MAX_FORGED_ROWS and all(1 <= n <= MAX_SEQ for _, n in self.forged),
               f"forged: at most {MAX_FORGED_ROWS} peers, counts 1..2^63-1")
        _check(isinstance(self.seq, int) and 1 <= self.seq <= MAX_SEQ, "seq must be 1..2^63-1")
        _check_text(self.name, "name", MAX_NAME, empty=False)
        _check(isinstance(self.node_type, str) and _TYPE_RE.fullmatch(self.node_type) is not None, "bad node type")
        _check(isinstance(self.beat, float) and 0.01 <= self.beat <= MAX_BEAT, f"beat must be 0.01..{MAX_BEAT:g}")
        _check(isinstance(self.lost, int) and 1 <= self.lost <= MAX_LOST, f"lost must be 1..{MAX_LOST}")
        _check(isinstance(self.cut_off, bool), "cut_off must be a boolean")
        if type(self.peers) is not CheckedRows:  # the decoder checked those, no peer twice included
            _check(len({p.peer for p in self.peers}) == len(self.peers), "a peer appears twice")
        base, gone = self.base, self.gone
        if base is not None or gone:
            _check(type(base) is int and 1 <= base < self.seq, "base must be 1..seq-1, given with gone")
            _check(len(gone) <= MAX_GONE_ROWS and all(type(g) is NodeId for g in gone),
                   f"gone: at most {MAX_GONE_ROWS} peers")
            _check(len(set(gone)) == len(gone), "a peer is gone twice")
            _check(not gone or not self.peers_in(PEER_STATES).intersection(gone), "a peer is both gone and in peers")

    @property
    def is_delta(self) -> bool:
        return self.base is not None

    def peers_in(self, states: Container[str]) -> set[NodeId]:
        """The peers whose row's state is one of ``states`` (without making a
        PeerStat of every row of a decoded report)."""
        peers = self.peers
        if type(peers) is CheckedRows:
            return peers.peers_in(states)
        return {p.peer for p in peers if p.state in states}

    def hex_peers_in(self, states: Container[str]) -> set[str]:
        """``peers_in`` as lowercase hex: of decoded rows, the text they came in, no object made
        (a node checks every report it receives against its links: whom to relay it to)."""
        peers = self.peers
        if type(peers) is CheckedRows and peers._stats is None:
            return {row[0] for row in peers._rows if row[3] in states}
        return {p.peer.hex() for p in peers if p.state in states}


Message = Helo | Peer | Group | Gbye | Chat | Beat | Time | Xmsg | Gsip | Dmsg | Dack | Raws | Bulk | Members


# --------------------------------------------------------------------------- encode


def _json(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _encode_body(msg: Message) -> tuple[bytes, bytes]:
    if isinstance(msg, Chat):
        return b"CHAT", msg.text.encode("utf-8")
    if isinstance(msg, Beat):
        return b"BEAT", b""
    if isinstance(msg, Helo):
        body = {
            "version": msg.version,
            "endpoint": msg.endpoint,
            "name": msg.name,
            "incarnation": msg.incarnation,
            "reply": msg.reply,
            "peers": msg.peers,
        }
        if msg.node_type:
            body["type"] = msg.node_type
        if msg.beat:
            body["beat"] = msg.beat
            body["lost"] = msg.lost
        if msg.rate:
            body["rate"] = msg.rate
        if msg.guests:
            body["guests"] = msg.guests
        if msg.deltas:
            body["deltas"] = True
        if msg.key:
            body["key"] = msg.key.hex()
            body["sig"] = msg.sig.hex()
            body["at"] = msg.at
            if msg.to is not None:
                body["to"] = msg.to.hex()
        return b"HELO", _json(body)
    if isinstance(msg, Peer):
        return b"PEER", _json({"uuid": msg.peer.hex(), "endpoint": msg.endpoint})
    if isinstance(msg, Members):
        return b"MEMB", _json({"reply": msg.reply, "members": [[u.hex(), e, i] for u, e, i in msg.members]})
    if isinstance(msg, Group):
        return b"BOUT", msg.group.encode("utf-8")
    if isinstance(msg, Gbye):
        return b"GBYE", msg.reason.encode("utf-8")
    if isinstance(msg, Time):
        text = repr(msg.t0) if msg.t1 is None else f"{msg.t0!r} {msg.t1!r}"
        return b"TIME", text.encode("ascii")
    if isinstance(msg, Xmsg):
        return b"XMSG", _xmsg_body(msg)
    if isinstance(msg, Dmsg):
        return b"DMSG", _DMSG_HEADER.pack(msg.fseq, msg.mseq, msg.index, msg.count) + msg.payload
    if isinstance(msg, Dack):
        return b"DACK", _DACK_BODY.pack(msg.upto)
    if isinstance(msg, Gsip):
        digest: dict[str, Any] = {"vv": {s.hex(): q for s, q in msg.vv}}
        if msg.ask:
            digest["ask"] = {s.hex(): [list(r) for r in ranges] for s, ranges in msg.ask}
        return b"GSIP", _json(digest)
    if isinstance(msg, Raws):
        if msg.sig:  # the origin's octets as it signed them, then the signature
            return b"RAWS", b"".join((msg.signed[:-1], _RAWS_SIG_HEAD, msg.sig.hex().encode(), b'"}'))
        return b"RAWS", _json(_raws_object(msg))
    raise LocalProtocolError(f"not a huddle message: {msg!r}")


def _raws_object(msg: Raws) -> dict[str, Any]:
    rows = [
        [p.peer.hex(), p.heard, p.rtt, p.state, p.msgs_in, p.msgs_out, p.bytes_in, p.bytes_out,
         p.sent, p.retrans, p.queued]
        for p in msg.peers
    ]
    report = {
        "origin": msg.origin.hex(), "seq": msg.seq, "name": msg.name, "type": msg.node_type,
        "beat": msg.beat, "lost": msg.lost, "cut_off": msg.cut_off, "peers": rows,
    }
    if msg.forged:
        report["forged"] = {peer.hex(): n for peer, n in msg.forged}
    if msg.base is not None:
        report["base"] = msg.base
        report["gone"] = [peer.hex() for peer in msg.gone]
    return report


def sign_raws(msg: Raws, key: bytes, sign: Callable[[bytes], bytes]) -> Raws:
    """``msg`` signed by its origin (protocol.md 14.1): its body with ``key`` (the origin's
    Ed25519 public key), and ``sign`` (its private half) over ``raws_signed`` of that body.
    Sent, the body is those octets with the signature as its last member."""
    signed = _json(_raws_object(msg) | {"key": key.hex()})
    return replace(msg, key=key, sig=sign(_RAWS_DOMAIN + signed), signed=signed)


def raws_signed(msg: Raws) -> bytes:
    """The octets a signed report's ``sig`` signs: ``huddle RAWS 1`` and a line feed, then its
    body less the last member (``sig``), a closing brace in its place."""
    return _RAWS_DOMAIN + msg.signed


def _xmsg_body(msg: Xmsg) -> bytes:
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
        return _orjson_dumps({"records": rows})
    heads = [[h.source.hex(), h.seq, prev.hex(), h.chain.hex(), h.signature.hex(), h.key.hex()]
             for prev, h in msg.heads]
    return _orjson_dumps({"records": rows, "heads": heads})


def encode(msg: Message) -> list[bytes]:
    """Encode ``msg`` as the frames a ROUTER receives: sender, type, body (and a BULK's data)."""
    return [bytes(msg.sender), *encode_parts(msg)]


def encode_parts(msg: Message) -> list[bytes]:
    """The frames a DEALER sends: type and body (and a BULK's data).  Its
    identity, the sender's UUID, reaches the ROUTER as frame 1."""
    if isinstance(msg, Bulk):
        # Sizes checked by the constructor; ZeroMQ sends a memoryview as it does bytes.
        return [b"BULK", msg.head, cast(bytes, msg.data)]
    kind, body = _encode_body(msg)
    if len(body) > MAX_BODY:
        raise LocalProtocolError(f"{kind.decode()} body of {len(body)} octets exceeds {MAX_BODY}")
    return [kind, body]


# --------------------------------------------------------------------------- decode


def _object(body: str, kind: str) -> dict[str, Any]:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError) as exc:
        raise DecodeError(f"{kind} body is not JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise DecodeError(f"{kind} body must be a JSON object")
    return obj


def _fast_object(body: str, kind: str) -> dict[str, Any]:
    """``_object`` by orjson, for the bodies every node receives from every
    peer many times a second (RAWS, MEMB): about 4x faster than ``json``, and
    as strict (NaN and infinities refused; a lone surrogate refused too, an
    integer beyond 64 bits read as a float, which no integer field accepts)."""
    try:
        obj = _orjson_loads(body)
    except ValueError as exc:  # orjson.JSONDecodeError, depth limit included
        raise DecodeError(f"{kind} body is not JSON: {exc}") from None
    if type(obj) is not dict:
        raise DecodeError(f"{kind} body must be a JSON object")
    return obj


def _field(obj: dict[str, Any], key: str, kind: str, typ: type) -> Any:
    if key not in obj:
        raise DecodeError(f"{kind} body lacks {key!r}")
    value = obj[key]
    if not isinstance(value, typ) or (typ is int and isinstance(value, bool)):
        raise DecodeError(f"{kind} field {key!r} must be {typ.__name__}")
    return value


def _decimal(text: str, kind: str) -> float:
    if _DECIMAL_RE.fullmatch(text) is None:
        raise DecodeError(f"{kind} value {text[:40]!r} is not a decimal number")
    value = float(text)
    if not math.isfinite(value):
        raise DecodeError(f"{kind} value {text[:40]!r} is out of range")
    return value


def _d_helo(sender: NodeId, body: str) -> Message:
    obj = _object(body, "HELO")
    return Helo(
        sender=sender,
        version=_field(obj, "version", "HELO", int),
        endpoint=_field(obj, "endpoint", "HELO", str),
        name=_field(obj, "name", "HELO", str),
        incarnation=_field(obj, "incarnation", "HELO", str),
        reply=_field(obj, "reply", "HELO", bool) if "reply" in obj else False,
        peers=_field(obj, "peers", "HELO", int) if "peers" in obj else 0,
        node_type=_field(obj, "type", "HELO", str) if "type" in obj else "",
        beat=_number(obj, "beat", "HELO") if "beat" in obj else 0.0,
        lost=_field(obj, "lost", "HELO", int) if "lost" in obj else 0,
        rate=_field(obj, "rate", "HELO", int) if "rate" in obj else 0,
        guests=_field(obj, "guests", "HELO", int) if "guests" in obj else 0,
        key=_hex_field(obj, "key", HELO_KEY) if "key" in obj else b"",
        sig=_hex_field(obj, "sig", HELO_SIG) if "key" in obj else b"",
        at=_field(obj, "at", "HELO", int) if "key" in obj else 0,
        to=NodeId(_hex_field(obj, "to", 16)) if "key" in obj and "to" in obj else None,
        deltas=_field(obj, "deltas", "HELO", bool) if "deltas" in obj else False,
    )


def _hex_field(obj: dict[str, Any], key: str, size: int) -> bytes:
    value = _field(obj, key, "HELO", str)
    if len(value) != 2 * size or _LOWER_HEX_RE.fullmatch(value) is None:
        raise DecodeError(f"HELO field {key!r} must be {2 * size} lowercase hex digits")
    return bytes.fromhex(value)


def helo_signed(m: Helo) -> bytes:
    """The octets a HELO's ``sig`` signs: every member but ``sig`` itself, in a fixed
    order (not the JSON text, which another encoder may write otherwise)."""
    fields = [bytes(m.sender).hex(), "" if m.to is None else bytes(m.to).hex(), m.at, m.key.hex(), m.version,
              m.endpoint, m.name, m.incarnation, m.reply, m.peers, m.node_type, m.beat, m.lost, m.rate, m.guests]
    return _HELO_DOMAIN + json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _number(obj: dict[str, Any], key: str, kind: str) -> float:
    value = obj.get(key)
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise DecodeError(f"{kind} field {key!r} must be a finite number")
    return float(value)


def _peer_stat(row: object, index: int) -> PeerStat:
    """A RAWS peer row, ``[uuid, heard, rtt, state, msgs_in, msgs_out, bytes_in,
    bytes_out, sent, retrans, queued]``, or a DecodeError naming the row."""
    if type(row) is not list or len(row) != 11:
        raise DecodeError(f"RAWS peer row {index} must be a list of 11 values")
    uuid, heard, rtt = row[0], row[1], row[2]
    # JSON may write a whole number of seconds without a fraction: it is a float here.
    if type(heard) is int:
        heard = float(heard)
    if type(rtt) is int:
        rtt = float(rtt)
    if type(uuid) is not str or _HEX32_RE.fullmatch(uuid) is None:
        raise DecodeError(f"RAWS peer row {index} uuid must be 32 lowercase hex digits")
    try:
        return PeerStat(_node_id(uuid), heard, rtt, *row[3:])
    except LocalProtocolError as exc:
        raise DecodeError(f"RAWS peer row {index}: {exc}") from None


class _NodeIds(dict[str, NodeId]):
    """NodeIds by their 32 lowercase hex digits (checked before), each made
    when first asked for: every report, list and GSIP names the same peers,
    and making a NodeId of a row's text cost more than the rest of reading
    the report's admitted peers.  At
    most ``_NODE_IDS_KEPT`` (a report naming unknown peers by the thousand
    empties it, which costs the next reports what no cache would)."""

    __slots__ = ()

    def __missing__(self, text: str) -> NodeId:
        if len(self) >= _NODE_IDS_KEPT:
            self.clear()
        node = self[text] = bytes.__new__(NodeId, bytes.fromhex(text))
        return node


_NODE_IDS_KEPT: Final = 4096
_NODE_IDS: Final = _NodeIds()
_UUID: Final = itemgetter(0)
_STATE: Final = itemgetter(3)


class CheckedRows(Sequence[PeerStat]):
    """The rows of a decoded RAWS report, every field checked (``_rows_ok``) but
    kept as the JSON arrays they came in: a PeerStat is made of each only when
    the rows are read (the picture, asked for now and then; a relay).  A node
    receives every member's report: at 64 nodes, decoding a 63-row report into
    PeerStats cost 10 times its JSON, and the mesh reads only a row's peer and
    state (``peers_in``)."""

    __slots__ = ("_rows", "_stats")

    def __init__(self, rows: list[list[Any]]) -> None:
        self._rows = rows
        self._stats: tuple[PeerStat, ...] | None = None

    def _made(self) -> tuple[PeerStat, ...]:
        stats = self._stats
        if stats is None:
            new = bytes.__new__
            stats = self._stats = tuple(
                PeerStat(new(NodeId, bytes.fromhex(u)), float(h) if type(h) is int else h,
                         float(t) if type(t) is int else t, s, v1, v2, v3, v4, v5, v6, v7)
                for u, h, t, s, v1, v2, v3, v4, v5, v6, v7 in self._rows)
            self._rows = []
        return stats

    def peers_in(self, states: Container[str]) -> set[NodeId]:
        if self._stats is not None:
            return {p.peer for p in self._stats if p.state in states}
        rows = self._rows  # each row's uuid where its state is one of states, as a NodeId made once
        return set(map(_NODE_IDS.__getitem__, compress(map(_UUID, rows), map(states.__contains__, map(_STATE, rows)))))

    def __len__(self) -> int:
        return len(self._rows) if self._stats is None else len(self._stats)

    @overload
    def __getitem__(self, index: int) -> PeerStat: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[PeerStat, ...]: ...
    def __getitem__(self, index: int | slice) -> PeerStat | tuple[PeerStat, ...]:
        return self._made()[index]

    def __iter__(self) -> Iterator[PeerStat]:
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CheckedRows | tuple | list):
            return self._made() == tuple(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._made())

    def __repr__(self) -> str:
        return repr(self._made())


_STATE_SET: Final = frozenset(PEER_STATES)
_SECONDS_TYPES: Final = frozenset({float, int, type(None)})
_COUNTER_TEXT: Final = b"[" + b"[]" * 7 + b"]"  # the seven counter columns as JSON, without digits and commas
_DIGITS_AS_9: Final = bytes.maketrans(b"012345678", b"999999999")
_NINETEEN_DIGITS: Final = b"9" * 19  # any number of 18 digits or fewer is below 2^63


def _rows_ok(rows: list[Any]) -> bool:
    """Every row well formed, as PeerStat would check it, and no peer twice,
    a column at a time with builtins, no Python step per row or per field
    (every node checks every member's report, each naming all its peers).
    False: let ``_peer_stats`` say what is wrong.  tests/test_picture.py
    checks that this takes exactly the rows PeerStat takes."""
    if not rows:
        return True
    if set(map(type, rows)) != {list} or set(map(len, rows)) != {11}:
        return False
    try:
        uuids, heard, rtt, states, *counts = zip(*rows, strict=False)  # every row 11 long
        if not _STATE_SET.issuperset(states):
            return False
        # The counters written back as JSON hold nothing but digits, commas and
        # the columns' brackets: no sign, fraction, exponent, true/false (a bool
        # is no count), null, string or nested value.
        text = orjson.dumps(counts)
        if text.translate(None, b"0123456789,") != _COUNTER_TEXT:
            return False
        joined = "".join(uuids)  # str only
    except TypeError:  # a state not hashable, a counter beyond 64 bits, a uuid not a string
        return False
    if _NINETEEN_DIGITS in text.translate(_DIGITS_AS_9) and max(map(max, counts)) > MAX_SEQ:
        return False
    if set(map(len, uuids)) != {32} or len(set(uuids)) != len(uuids):
        return False
    seconds: Sequence[Any] = heard + rtt
    kinds = set(map(type, seconds))
    if not _SECONDS_TYPES.issuperset(kinds):
        return False
    if type(None) in kinds:
        seconds = [x for x in seconds if x is not None]
    if int in kinds:  # a whole number of seconds: as PeerStat's check has it (no int is NaN; one may be huge)
        if not all(0 <= x < math.inf for x in seconds):
            return False
    elif seconds and (min(seconds) < 0 or not all(map(math.isfinite, seconds))):
        return False  # a NaN can hide from min, not from isfinite
    try:  # lowercase hex digits only: what fromhex reads and hex writes back the same
        return bytes.fromhex(joined).hex() == joined
    except ValueError:
        return False


def _peer_stats(rows: list[Any]) -> tuple[PeerStat, ...]:
    """Every row of a RAWS report, in one pass: a row whose uuid and seconds
    are plainly well formed goes straight to PeerStat (whose constructor
    checks every field); anything else, or a refusal, goes through
    ``_peer_stat`` for the error that names the row."""
    out = []
    hex32 = _HEX32_RE.fullmatch
    for row in rows:
        if type(row) is list and len(row) == 11:
            uuid, heard, rtt, state, v1, v2, v3, v4, v5, v6, v7 = row
            if type(uuid) is str and hex32(uuid) is not None and type(heard) is not int and type(rtt) is not int:
                try:
                    out.append(PeerStat(bytes.__new__(NodeId, bytes.fromhex(uuid)), heard, rtt, state,
                                        v1, v2, v3, v4, v5, v6, v7))
                    continue
                except LocalProtocolError:
                    pass
        out.append(_peer_stat(row, len(out)))
    return tuple(out)


def _raws_signature(obj: dict[str, Any], body: str) -> tuple[bytes, bytes, bytes]:
    """A signed report's key, signature and signed octets (protocol.md 14.1), checked for
    form only: whether the signature verifies is the receiver's to say."""
    if "sig" not in obj:
        if "key" in obj:
            raise DecodeError("RAWS key comes with sig")
        return b"", b"", b""
    raw = body.encode("utf-8")
    tail = raw[-_RAWS_SIG_TAIL:]
    digits = tail[len(_RAWS_SIG_HEAD):-2]
    if (len(raw) <= _RAWS_SIG_TAIL or not tail.startswith(_RAWS_SIG_HEAD) or not tail.endswith(b'"}')
            or _LOWER_HEX_RE.fullmatch(digits.decode("ascii", "replace")) is None or obj["sig"] != digits.decode()):
        raise DecodeError(f"RAWS sig must be the body's last member, {2 * HELO_SIG} lowercase hex digits")
    key = obj.get("key")
    if type(key) is not str or len(key) != 2 * HELO_KEY or _LOWER_HEX_RE.fullmatch(key) is None:
        raise DecodeError(f"RAWS key must be {2 * HELO_KEY} lowercase hex digits")
    return bytes.fromhex(key), bytes.fromhex(digits.decode()), raw[:-_RAWS_SIG_TAIL] + b"}"


def _d_raws(sender: NodeId, body: str) -> Message:
    obj = _fast_object(body, "RAWS")
    rows = _field(obj, "peers", "RAWS", list)
    key, sig, signed = _raws_signature(obj, body)
    return Raws(
        sender=sender,
        origin=_node_hex(obj.get("origin"), "RAWS origin"),
        seq=_seq(obj.get("seq"), "RAWS seq"),
        name=_field(obj, "name", "RAWS", str),
        node_type=_field(obj, "type", "RAWS", str),
        beat=_number(obj, "beat", "RAWS"),
        lost=_field(obj, "lost", "RAWS", int),
        cut_off=_field(obj, "cut_off", "RAWS", bool),
        peers=CheckedRows(rows) if _rows_ok(rows) else _peer_stats(rows),
        forged=_forged(obj["forged"]) if "forged" in obj else (),
        base=_seq(obj["base"], "RAWS base") if "base" in obj else None,
        gone=_gone(obj["gone"]) if "gone" in obj else (),
        key=key, sig=sig, signed=signed,
    )


def _gone(value: object) -> tuple[NodeId, ...]:
    if type(value) is not list or len(value) > MAX_GONE_ROWS:
        raise DecodeError(f"RAWS gone must be a list of at most {MAX_GONE_ROWS} peers")
    return tuple(_node_hex(v, "RAWS gone peer") for v in value)


def merge_report(held: Raws, delta: Raws) -> Raws:
    """The full report that ``delta`` makes of ``held``, the origin's report ``delta.base``
    (protocol.md 14.1): ``held``'s rows, less those ``gone``, with the delta's rows in place of
    (or, new peers, after) the held ones; name, type, timing, ``cut_off`` and ``forged`` the
    delta's; unsigned (no origin signed the merged whole: a relay passes on the delta).  Raises
    LocalProtocolError when the delta does not fit ``held`` (another base or origin, a gone peer
    ``held`` has no row for).  Decoded rows are merged as the JSON arrays
    they came in: no PeerStat is made of the rows that did not change."""
    _check(delta.base is not None and held.base is None and held.origin == delta.origin
           and held.seq == delta.base, "a delta applies only to the full report it is based on")
    hp, dp = held.peers, delta.peers
    if type(hp) is CheckedRows and type(dp) is CheckedRows and hp._stats is None and dp._stats is None:
        rows = _merged_rows(hp._rows, dp._rows, {g.hex() for g in delta.gone}, _UUID)
        return replace(delta, peers=CheckedRows(rows), base=None, gone=(), key=b"", sig=b"", signed=b"")
    stats = _merged_rows(hp, dp, set(delta.gone), _PEER)
    return replace(delta, peers=tuple(stats), base=None, gone=(), key=b"", sig=b"", signed=b"")


_PEER: Final = attrgetter("peer")
_R = TypeVar("_R")


def _merged_rows(held: Iterable[_R], changed: Iterable[_R], gone: set[Any], key: Callable[[_R], Any]) -> list[_R]:
    """``held``'s rows in order, less the ``gone`` keys, each replaced by the ``changed`` row
    of its key if any; then the changed rows of new keys.  Raises LocalProtocolError if a
    gone key has no held row (``gone`` is used up)."""
    by_key = {key(row): row for row in changed}
    out = []
    for row in held:
        k = key(row)
        if k in gone:
            gone.discard(k)
        else:
            out.append(by_key.pop(k, row))
    _check(not gone, "a gone peer has no row in the report the delta is based on")
    out.extend(by_key.values())
    return out


def _forged(value: object) -> tuple[tuple[NodeId, int], ...]:
    if not isinstance(value, dict) or len(value) > MAX_FORGED_ROWS:
        raise DecodeError(f"RAWS forged must be an object of at most {MAX_FORGED_ROWS} peers")
    return tuple((_node_hex(k, "RAWS forged peer"), _seq(v, "RAWS forged count")) for k, v in value.items())


def _d_peer(sender: NodeId, body: str) -> Message:
    obj = _object(body, "PEER")
    try:
        peer = NodeId.from_hex(_field(obj, "uuid", "PEER", str))
    except ValueError as exc:
        raise DecodeError(f"PEER uuid: {exc}") from None
    return Peer(sender=sender, peer=peer, endpoint=_field(obj, "endpoint", "PEER", str))


def _d_members(sender: NodeId, body: str) -> Message:
    obj = _fast_object(body, "MEMB")
    rows = _field(obj, "members", "MEMB", list)
    members = []
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != 3 or type(row[1]) is not str or type(row[2]) is not str:
            raise DecodeError(f"MEMB member {i} must be [uuid, endpoint, incarnation]")
        members.append((_node_hex(row[0], f"MEMB member {i} uuid"), row[1], row[2]))
    reply = _field(obj, "reply", "MEMB", bool) if "reply" in obj else False
    return Members(sender=sender, members=tuple(members), reply=reply)


def _d_time(sender: NodeId, body: str) -> Message:
    parts = body.split(" ")
    if len(parts) == 1:
        return Time(sender=sender, t0=_decimal(parts[0], "TIME"))
    if len(parts) == 2:
        return Time(sender=sender, t0=_decimal(parts[0], "TIME"), t1=_decimal(parts[1], "TIME"))
    raise DecodeError("TIME body is one or two decimal numbers separated by a space")


def _d_beat(sender: NodeId, body: str) -> Message:
    if body:
        raise DecodeError("BEAT body must be empty")
    return Beat(sender=sender)


def _seq(value: object, what: str, low: int = 1) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= MAX_SEQ:
        raise DecodeError(f"{what} must be an integer in {low}..2^63-1")
    return value


def _node_id(text: str) -> NodeId:
    """The NodeId of 32 lowercase hex digits the caller has matched with ``_HEX32_RE``."""
    # Exactly 16 octets by construction: bytes' own constructor, not NodeId's length check.
    return bytes.__new__(NodeId, bytes.fromhex(text))


def _node_hex(value: object, what: str) -> NodeId:
    # A peer's id comes in every member list, report and GSIP: made once (``_NodeIds``).
    node = _NODE_IDS.get(value) if type(value) is str else None
    if node is None:
        _octets(value, 16, what)  # 32 lowercase hex digits, or a DecodeError
        node = _NODE_IDS[cast(str, value)]
    return node


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
        src = sources[source] = _node_hex(source, "XMSG record source")
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
        for _ in map(_orjson_loads, bodies):  # each body strict JSON (orjson refuses what strict_json does)
            pass
        src = _node_hex(source, "XMSG record source")
    except (ValueError, DecodeError):  # orjson.JSONDecodeError: the record is looked at alone
        return None
    sources[source] = src
    one_hop = {*hops}
    return RecordBatch(src, first, stamps, kinds, bodies, hops, kind=kinds[0] if len(one_kind) == 1 else None,
                       hop=hops[0] if len(one_hop) == 1 else None)


def _octets(value: object, size: int, what: str) -> bytes:
    if not isinstance(value, str) or len(value) != 2 * size:
        raise DecodeError(f"{what} must be {2 * size} lowercase hex digits")
    try:
        raw = bytes.fromhex(value)
    except ValueError:
        raise DecodeError(f"{what} must be {2 * size} lowercase hex digits") from None
    if raw.hex() != value:
        raise DecodeError(f"{what} must be {2 * size} lowercase hex digits")
    return raw


def _head(row: object) -> tuple[bytes, LogHead]:
    if not isinstance(row, list) or len(row) != 6:
        raise DecodeError("an XMSG head is [source, seq, prev, chain, signature, key]")
    source, seq, prev, chain, sig, key = row
    return _octets(prev, CHAIN_HASH, "XMSG head prev"), LogHead(
        _node_hex(source, "XMSG head source"), _seq(seq, "XMSG head seq"), _octets(chain, CHAIN_HASH, "XMSG head chain"),
        _octets(sig, SIGNATURE, "XMSG head signature"), _octets(key, PUBLIC_KEY, "XMSG head key"))


def _d_xmsg(sender: NodeId, body: str) -> Message:
    obj = _fast_object(body, "XMSG")
    rows = _field(obj, "records", "XMSG", list)
    if not rows:
        raise DecodeError("an XMSG carries at least one record")
    sources: dict[str, NodeId] = {}  # a batch names few sources: parse each hex once
    records: Sequence[LogRecord] | None = _batch(rows, sources)
    if records is None:
        records = tuple([_record(r, sources) for r in rows])
    if "heads" not in obj:
        return Xmsg(sender=sender, records=records)
    heads = _field(obj, "heads", "XMSG", list)
    if not heads or len(heads) > len(sources):
        raise DecodeError("an XMSG carries 1 to one head per source of its records")
    return Xmsg(sender=sender, records=records, heads=tuple([_head(h) for h in heads]))


def _d_gsip(sender: NodeId, body: str) -> Message:
    obj = _object(body, "GSIP")
    vv = _field(obj, "vv", "GSIP", dict)
    ask = _field(obj, "ask", "GSIP", dict) if "ask" in obj else {}
    return Gsip(
        sender=sender,
        vv=tuple((_node_hex(k, "GSIP source"), _seq(v, "GSIP sequence", 0)) for k, v in vv.items()),
        ask=tuple((_node_hex(k, "GSIP ask source"), _ranges(v)) for k, v in ask.items()),
    )


def _ranges(value: object) -> tuple[tuple[int, int], ...]:
    if not isinstance(value, list) or not value or len(value) > 10_000:
        raise DecodeError("GSIP ask ranges must be a non-empty list of [first, last]")
    out = []
    for item in value:
        if not isinstance(item, list) or len(item) != 2:
            raise DecodeError("a GSIP ask range is [first, last]")
        first = _seq(item[0], "GSIP ask first")
        last = _seq(item[1], "GSIP ask last", 0)
        if last and last < first:
            raise DecodeError("a GSIP ask range has last < first")
        out.append((first, last))
    return tuple(out)


_DECODERS: Final[dict[bytes, Callable[[NodeId, str], Message]]] = {
    b"HELO": _d_helo,
    b"PEER": _d_peer,
    b"BOUT": lambda s, b: Group(sender=s, group=b),
    b"GBYE": lambda s, b: Gbye(sender=s, reason=b),
    b"CHAT": lambda s, b: Chat(sender=s, text=b),
    b"BEAT": _d_beat,
    b"TIME": _d_time,
    b"XMSG": _d_xmsg,
    b"GSIP": _d_gsip,
    b"RAWS": _d_raws,
    b"MEMB": _d_members,
}


def _d_dmsg(sender: NodeId, body: bytes) -> Dmsg:
    if len(body) < _DMSG_HEADER.size:
        raise LocalProtocolError(f"body of {len(body)} octets is shorter than its {_DMSG_HEADER.size}-octet header")
    fseq, mseq, index, count = _DMSG_HEADER.unpack_from(body)
    return Dmsg(sender, fseq, mseq, index, count, body[_DMSG_HEADER.size:])


def _d_dack(sender: NodeId, body: bytes) -> Dack:
    if len(body) != _DACK_BODY.size:
        raise LocalProtocolError(f"body must be {_DACK_BODY.size} octets, got {len(body)}")
    return Dack(sender, _DACK_BODY.unpack(body)[0])


def _d_bulk(frames: Sequence[bytes]) -> Bulk:
    raw_sender, head, data = frames[0], frames[2], frames[3]
    if not (isinstance(raw_sender, bytes) and isinstance(head, bytes) and isinstance(data, bytes | memoryview)):
        raise DecodeError("frames must be byte strings (the data may be a memoryview)")
    if len(raw_sender) != 16:
        raise DecodeError(f"sender UUID must be 16 octets, got {len(raw_sender)}")
    if not 1 <= len(head) <= MAX_BULK_HEAD:
        raise DecodeError(f"BULK: head of {len(head)} octets, not 1..{MAX_BULK_HEAD}")
    if len(data) > MAX_BULK:
        raise DecodeError(f"BULK: data of {len(data)} octets exceeds {MAX_BULK}")
    return Bulk(NodeId(raw_sender), head, data)


_BINARY_DECODERS: Final[dict[bytes, Callable[[NodeId, bytes], Message]]] = {b"DMSG": _d_dmsg, b"DACK": _d_dack}


def decode(frames: Sequence[bytes]) -> Message:
    """Decode the frames a ROUTER received into a message.

    Raises :class:`DecodeError` (and nothing else) if the frames are not a
    valid huddle message.
    """
    try:
        count = len(frames)
    except TypeError:
        raise DecodeError("frames must be a sequence of byte strings") from None
    if count == 4 and frames[1] == b"BULK":
        return _d_bulk(frames)
    if count != 3:
        raise DecodeError(f"a message has 3 frames (4 for BULK), got {count}")
    raw_sender, kind, raw_body = frames[0], frames[1], frames[2]
    if kind == b"BULK":
        raise DecodeError("BULK has 4 frames (sender, type, head, data), got 3")
    if not all(isinstance(f, bytes) for f in (raw_sender, kind, raw_body)):
        raise DecodeError("frames must be byte strings")
    if len(raw_sender) != 16:
        raise DecodeError(f"sender UUID must be 16 octets, got {len(raw_sender)}")
    if len(raw_body) > MAX_BODY:
        raise DecodeError(f"body of {len(raw_body)} octets exceeds {MAX_BODY}")
    binary = _BINARY_DECODERS.get(kind)
    if binary is not None:
        try:
            return binary(NodeId(raw_sender), raw_body)
        except (LocalProtocolError, struct.error) as exc:
            raise DecodeError(f"{kind.decode()}: {exc}") from None
    decoder = _DECODERS.get(kind)
    if decoder is None:
        raise DecodeError(f"unknown message type {kind[:8]!r}")
    try:
        body = raw_body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{kind.decode()} body is not UTF-8: {exc.reason} at octet {exc.start}") from None
    try:
        return decoder(NodeId(raw_sender), body)
    except LocalProtocolError as exc:
        raise DecodeError(f"{kind.decode()}: {exc}") from None
