"""The system picture's report (docs/protocol.md 14): RAWS, a node's measurements of
its peers (:class:`PeerStat` rows), full or a delta, signed by its origin; a decoded
report's rows checked column by column and kept as JSON arrays (:class:`CheckedRows`)
until read; and the extension map (``ext``), the features' facts of its origin, each a
small flat JSON object, bounded in form and size (:func:`extension_problem`).  How a delta
is merged into the report it is based on is the picture's (protocol/picture_compute.py
``merge_report``).  RAWS' encoder and decoder sit beside its class;
``framing.SPECS`` names them in one table.

Pure: no sockets, no clock.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Container, Iterator, Sequence
from dataclasses import dataclass, field, replace
from itertools import compress
from operator import itemgetter
from typing import Any, ClassVar, Final, overload

import orjson

from ..errors import DecodeError, LocalProtocolError
from ..ids import NodeId
from .fields import (
    _NODE_IDS,
    HELO_KEY,
    HELO_SIG,
    LOWER_HEX_RE,
    MAX_BEAT,
    MAX_LOST,
    MAX_NAME,
    MAX_SEQ,
    TYPE_RE,
    check,
    check_text,
    compact_json,
    fast_json_object,
    get_field,
    get_number,
    get_seq,
    node_hex,
)
from .tags import NodeTags, tags_problem

__all__ = [
    "DEPARTED_STATES", "MAX_DEPARTED_ROWS", "MAX_EXTENSIONS", "MAX_EXTENSION_OCTETS", "MAX_FORGED_ROWS", "MAX_GONE_ROWS",
    "PEER_STATES", "CheckedRows", "Departed", "Extensions", "FactValue", "PeerStat", "Raws", "decode_raws",
    "encode_raws", "extension_problem", "raws_signed", "sign_raws",
]

_RAWS_DOMAIN: Final = b"huddle RAWS 1\n"
# A signed RAWS body ends with its signature, the last member, written exactly so (protocol.md 14.1).
_RAWS_SIG_HEAD: Final = b',"sig":"'
_RAWS_SIG_TAIL: Final = len(_RAWS_SIG_HEAD) + 2 * HELO_SIG + 2  # ... then 128 hex digits and '"}'
_HEX32_RE: Final = re.compile(r"[0-9a-f]{32}")
MAX_FORGED_ROWS: Final = 1024  # peers a RAWS report's ``forged`` may name
MAX_GONE_ROWS: Final = 1024  # peers a RAWS delta's ``gone`` may name (more: the origin sends a full report)
PEER_STATES: Final = ("connecting", "handshake", "alive", "suspect", "none")
# A peer the origin had a session with and lost (protocol.md 14.1 ``departed``): silent past its
# gone time, or it said goodbye.  Kept in every report until it returns or is forgotten, bounded.
DEPARTED_STATES: Final = ("failed", "left")
MAX_DEPARTED_ROWS: Final = 256  # peers a RAWS report's ``departed`` may name (the origin keeps the newest)
# The extension map (protocol.md 14.1): the same bound on every node, so every node holds the same
# reports and computes the same digest (a bound set per node would let one refuse what others hold).
MAX_EXTENSIONS: Final = 16  # features one report's ``ext`` may name
MAX_EXTENSION_OCTETS: Final = 2048  # octets of the ``ext`` object as compact JSON, every feature's facts together
FactValue = str | int | float | bool | None  # a fact: a JSON scalar (a table's cell)
Extensions = dict[str, dict[str, FactValue]]  # feature name -> its facts (fact name -> value)
_FACT_TYPES: Final = frozenset({str, int, float, bool, type(None)})
_UUID: Final = itemgetter(0)
_STATE: Final = itemgetter(3)


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
        check(isinstance(self.peer, NodeId), "peer must be a NodeId")
        for name in ("heard", "rtt"):
            v = getattr(self, name)
            check(v is None or (isinstance(v, float) and math.isfinite(v) and v >= 0), f"{name} must be None or >= 0")
        check(self.state in PEER_STATES, f"state must be one of {', '.join(PEER_STATES)}")
        for name in ("msgs_in", "msgs_out", "bytes_in", "bytes_out", "sent", "retrans", "queued"):
            v = getattr(self, name)
            check(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_SEQ, f"{name} must be 0..2^63-1")


@dataclass(frozen=True, slots=True)
class Departed:
    """A peer the origin lost (protocol.md 14.1 ``departed``): ``failed`` (its session ended
    by silence) or ``left`` (a GBYE), ``since`` when the origin last heard it (ms of the
    origin's clock, as ``seq``), and the name and type its HELO gave ("": not known)."""

    peer: NodeId
    state: str
    since: int
    name: str = ""
    node_type: str = ""

    def __post_init__(self) -> None:
        check(type(self.peer) is NodeId, "departed: peer must be a NodeId")
        check(self.state in DEPARTED_STATES, f"departed: state must be one of {', '.join(DEPARTED_STATES)}")
        check(type(self.since) is int and 1 <= self.since <= MAX_SEQ, "departed: since must be 1..2^63-1")
        check_text(self.name, "departed: name", MAX_NAME, empty=True)
        check(type(self.node_type) is str and (not self.node_type or TYPE_RE.fullmatch(self.node_type) is not None),
              "departed: bad node type")


@dataclass(frozen=True, slots=True)
class Raws:
    """Raw statistics of node ``origin`` (report ``seq``, from 1), relayed by
    ``sender``: its node type and timing, whether it is cut off, and a row per
    peer.  Every node floods the newest report of every origin it holds, so
    reports cross links that are only open one way."""

    TAG: ClassVar[bytes] = b"RAWS"

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
    # The origin's features' facts (protocol.md 14.1 ``ext``), carried whole in full and delta
    # reports alike; empty: none (the member is then left out, the body as before it existed).
    ext: Extensions = field(default_factory=dict, hash=False)
    # The origin's tags (protocol.md 14.1 ``tags``), in full and delta reports alike; empty: none
    # (the member is then left out, as ``ext``).
    tags: NodeTags = field(default_factory=dict, hash=False)
    # The peers the origin lost and still names (protocol.md 14.1 ``departed``), carried whole in
    # full and delta reports alike; empty: none (the member left out, the body as before it existed).
    departed: tuple[Departed, ...] = ()

    def __post_init__(self) -> None:
        check(isinstance(self.origin, NodeId), "origin must be a NodeId")
        departed = self.departed
        if departed:
            check(len(departed) <= MAX_DEPARTED_ROWS and len({d.peer for d in departed}) == len(departed),
                  f"departed: at most {MAX_DEPARTED_ROWS} peers, none twice")
        if self.ext:
            problem = extension_problem(self.ext)
            check(problem is None, f"ext: {problem}")
        if self.tags:
            problem = tags_problem(self.tags)
            check(problem is None, f"tags: {problem}")
        if self.sig or self.key or self.signed:
            check(len(self.key) == HELO_KEY and len(self.sig) == HELO_SIG and self.signed[-1:] == b"}",
                   "a signed report has a 32-octet key, a 64-octet signature and the octets it signs")
        check(len(self.forged) <= MAX_FORGED_ROWS and all(1 <= n <= MAX_SEQ for _, n in self.forged),
               f"forged: at most {MAX_FORGED_ROWS} peers, counts 1..2^63-1")
        check(isinstance(self.seq, int) and 1 <= self.seq <= MAX_SEQ, "seq must be 1..2^63-1")
        check_text(self.name, "name", MAX_NAME, empty=False)
        check(isinstance(self.node_type, str) and TYPE_RE.fullmatch(self.node_type) is not None, "bad node type")
        check(isinstance(self.beat, float) and 0.01 <= self.beat <= MAX_BEAT, f"beat must be 0.01..{MAX_BEAT:g}")
        check(isinstance(self.lost, int) and 1 <= self.lost <= MAX_LOST, f"lost must be 1..{MAX_LOST}")
        check(isinstance(self.cut_off, bool), "cut_off must be a boolean")
        if type(self.peers) is not CheckedRows:  # the decoder checked those, no peer twice included
            check(len({p.peer for p in self.peers}) == len(self.peers), "a peer appears twice")
        base, gone = self.base, self.gone
        if base is not None or gone:
            check(type(base) is int and 1 <= base < self.seq, "base must be 1..seq-1, given with gone")
            check(len(gone) <= MAX_GONE_ROWS and all(type(g) is NodeId for g in gone),
                   f"gone: at most {MAX_GONE_ROWS} peers")
            check(len(set(gone)) == len(gone), "a peer is gone twice")
            check(not gone or not self.peers_in(PEER_STATES).intersection(gone), "a peer is both gone and in peers")

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


# --------------------------------------------------------------------------- encode


def encode_raws(msg: Raws) -> bytes:
    if msg.sig:  # the origin's octets as it signed them, then the signature
        return b"".join((msg.signed[:-1], _RAWS_SIG_HEAD, msg.sig.hex().encode(), b'"}'))
    return compact_json(_raws_object(msg))


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
    if msg.ext:
        report["ext"] = msg.ext
    if msg.tags:
        report["tags"] = msg.tags
    if msg.departed:
        report["departed"] = {d.peer.hex(): [d.state, d.since, d.name, d.node_type] for d in msg.departed}
    if msg.base is not None:
        report["base"] = msg.base
        report["gone"] = [peer.hex() for peer in msg.gone]
    return report


def sign_raws(msg: Raws, key: bytes, sign: Callable[[bytes], bytes]) -> Raws:
    """``msg`` signed by its origin (protocol.md 14.1): its body with ``key`` (the origin's
    Ed25519 public key), and ``sign`` (its private half) over ``raws_signed`` of that body.
    Sent, the body is those octets with the signature as its last member."""
    signed = compact_json(_raws_object(msg) | {"key": key.hex()})
    return replace(msg, key=key, sig=sign(_RAWS_DOMAIN + signed), signed=signed)


def raws_signed(msg: Raws) -> bytes:
    """The octets a signed report's ``sig`` signs: ``huddle RAWS 1`` and a line feed, then its
    body less the last member (``sig``), a closing brace in its place."""
    return _RAWS_DOMAIN + msg.signed


# --------------------------------------------------------------------------- decode


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


def _node_id(text: str) -> NodeId:
    """The NodeId of 32 lowercase hex digits the caller has matched with ``_HEX32_RE``."""
    # Exactly 16 octets by construction: bytes' own constructor, not NodeId's length check.
    return bytes.__new__(NodeId, bytes.fromhex(text))



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

    @property
    def raw(self) -> list[list[Any]] | None:
        """The rows as the JSON arrays they came in (each checked), or None once PeerStats
        were made of them (merging a delta keeps the rows that did not change as they are)."""
        return self._rows if self._stats is None else None

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
            or LOWER_HEX_RE.fullmatch(digits.decode("ascii", "replace")) is None or obj["sig"] != digits.decode()):
        raise DecodeError(f"RAWS sig must be the body's last member, {2 * HELO_SIG} lowercase hex digits")
    key = obj.get("key")
    if type(key) is not str or len(key) != 2 * HELO_KEY or LOWER_HEX_RE.fullmatch(key) is None:
        raise DecodeError(f"RAWS key must be {2 * HELO_KEY} lowercase hex digits")
    return bytes.fromhex(key), bytes.fromhex(digits.decode()), raw[:-_RAWS_SIG_TAIL] + b"}"


def decode_raws(sender: NodeId, body: str) -> Raws:
    obj = fast_json_object(body, "RAWS")
    rows = get_field(obj, "peers", "RAWS", list)
    key, sig, signed = _raws_signature(obj, body)
    return Raws(
        sender=sender,
        origin=node_hex(obj.get("origin"), "RAWS origin"),
        seq=get_seq(obj.get("seq"), "RAWS seq"),
        name=get_field(obj, "name", "RAWS", str),
        node_type=get_field(obj, "type", "RAWS", str),
        beat=get_number(obj, "beat", "RAWS"),
        lost=get_field(obj, "lost", "RAWS", int),
        cut_off=get_field(obj, "cut_off", "RAWS", bool),
        peers=CheckedRows(rows) if _rows_ok(rows) else _peer_stats(rows),
        forged=_forged(obj["forged"]) if "forged" in obj else (),
        base=get_seq(obj["base"], "RAWS base") if "base" in obj else None,
        gone=_gone(obj["gone"]) if "gone" in obj else (),
        key=key, sig=sig, signed=signed,
        ext=_ext(obj["ext"]) if "ext" in obj else {},
        tags=get_field(obj, "tags", "RAWS", dict) if "tags" in obj else {},
        departed=_departed(obj["departed"]) if "departed" in obj else (),
    )


def _departed(value: object) -> tuple[Departed, ...]:
    """``departed`` (protocol.md 14.1): ``{peer: [state, since, name, type]}``, at most
    MAX_DEPARTED_ROWS peers; anything else refuses the report (counted as undecodable)."""
    if type(value) is not dict or len(value) > MAX_DEPARTED_ROWS:
        raise DecodeError(f"RAWS departed must be an object of at most {MAX_DEPARTED_ROWS} peers")
    out = []
    for peer, entry in value.items():
        if type(entry) is not list or len(entry) != 4 or type(entry[1]) is not int:
            raise DecodeError("RAWS departed entry must be [state, since, name, type]")
        try:
            out.append(Departed(node_hex(peer, "RAWS departed peer"), *entry))
        except LocalProtocolError as exc:
            raise DecodeError(f"RAWS {exc}") from None
    return tuple(out)


def _ext(value: object) -> Extensions:
    if type(value) is not dict:  # the rest is Raws' to check (extension_problem)
        raise DecodeError("RAWS ext must be an object")
    return value


def extension_problem(ext: object) -> str | None:
    """What is wrong with ``ext`` as a report's extension map (protocol.md 14.1), or None: an
    object of at most MAX_EXTENSIONS features, each named ``[a-z][a-z0-9_-]{0,31}``, whose
    facts are an object of facts so named, each a string, a boolean, null, an integer of
    -2^63..2^63-1 or a finite number; and all of it at most MAX_EXTENSION_OCTETS octets
    written as compact JSON (UTF-8, not escaped to ASCII).  The node's own facts are checked
    with it before they go into a report (what does not fit is left out), every received
    report's as it is decoded."""
    if type(ext) is not dict:
        return "must be an object"
    if len(ext) > MAX_EXTENSIONS:
        return f"at most {MAX_EXTENSIONS} features, got {len(ext)}"
    for name, facts in ext.items():
        if type(name) is not str or TYPE_RE.fullmatch(name) is None:
            return f"feature name {str(name)[:40]!r} is not [a-z][a-z0-9_-]{{0,31}}"
        if type(facts) is not dict:
            return f"{name}: facts must be an object"
        for key, value in facts.items():
            if type(key) is not str or TYPE_RE.fullmatch(key) is None:
                return f"{name}: fact name {str(key)[:40]!r} is not [a-z][a-z0-9_-]{{0,31}}"
            kind = type(value)
            if kind not in _FACT_TYPES:
                return f"{name}.{key}: a fact is a string, number, boolean or null"
            if (kind is int and not -MAX_SEQ - 1 <= value <= MAX_SEQ) or (kind is float and not math.isfinite(value)):
                return f"{name}.{key}: a number must be finite, an integer within 64 bits"
    try:
        size = len(compact_json(ext))
    except UnicodeEncodeError:  # a lone surrogate: no UTF-8 (a decoded report has none)
        return "a string is not valid text"
    if size > MAX_EXTENSION_OCTETS:
        return f"{size} octets as JSON, more than {MAX_EXTENSION_OCTETS}"
    return None


def _gone(value: object) -> tuple[NodeId, ...]:
    if type(value) is not list or len(value) > MAX_GONE_ROWS:
        raise DecodeError(f"RAWS gone must be a list of at most {MAX_GONE_ROWS} peers")
    return tuple(node_hex(v, "RAWS gone peer") for v in value)


def _forged(value: object) -> tuple[tuple[NodeId, int], ...]:
    if not isinstance(value, dict) or len(value) > MAX_FORGED_ROWS:
        raise DecodeError(f"RAWS forged must be an object of at most {MAX_FORGED_ROWS} peers")
    return tuple((node_hex(k, "RAWS forged peer"), get_seq(v, "RAWS forged count")) for k, v in value.items())
