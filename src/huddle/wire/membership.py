"""The messages the mesh handles itself (docs/protocol.md 4): HELO, PEER, MEMB, BOUT,
GBYE, BEAT and TIME, and what HELO's signature signs.  Each type's body encoder and
decoder sit beside its class; ``framing.SPECS`` names them in one table.

Pure: no sockets, no clock.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final

from ..errors import DecodeError
from ..ids import NodeId
from .fields import (
    HELO_KEY,
    HELO_SIG,
    LOWER_HEX_RE,
    MAX_BEAT,
    MAX_LOST,
    MAX_NAME,
    PROTOCOL_VERSION,
    TYPE_RE,
    check,
    check_text,
    compact_json,
    fast_json_object,
    get_field,
    get_number,
    json_object,
    node_hex,
    valid_endpoint,
)
from .tags import NodeTags, tags_problem

__all__ = [
    "MAX_GROUP", "MAX_REASON", "Beat", "Gbye", "Group", "Helo", "MemberEntry", "Members", "Peer", "Time",
    "decode_beat", "decode_gbye", "decode_group", "decode_helo", "decode_members", "decode_peer", "decode_time",
    "encode_beat", "encode_gbye", "encode_group", "encode_helo", "encode_members", "encode_peer", "encode_time",
    "helo_signed",
]

_HELO_DOMAIN: Final = b"huddle HELO 1\n"
MAX_GROUP: Final = 255
MAX_REASON: Final = 1024
_DECIMAL_RE: Final = re.compile(r"-?[0-9]{1,20}(\.[0-9]{1,20})?([eE][-+]?[0-9]{1,3})?")
_INCARNATION_RE: Final = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, slots=True)
class Helo:
    """Introduction: who I am and where my ROUTER listens.

    ``reply`` is false when a node opens a session and true when it answers
    one; a HELO with ``reply`` false is always answered, one with ``reply``
    true never is, so two nodes cannot echo HELOs forever.
    """

    TAG: ClassVar[bytes] = b"HELO"

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
    # The sender's tags (protocol.md 4.1, "Tags"): signed with the rest when it has any.
    tags: NodeTags = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        check(isinstance(self.version, int) and 0 <= self.version < 2**31, "version must be a small integer")
        if self.tags:
            problem = tags_problem(self.tags)
            check(problem is None, f"tags: {problem}")
        check(isinstance(self.deltas, bool), "deltas must be a boolean")
        check(isinstance(self.key, bytes) and len(self.key) in (0, HELO_KEY), f"key must be {HELO_KEY} octets")
        check(isinstance(self.sig, bytes) and len(self.sig) == (HELO_SIG if self.key else 0),
               f"sig must be {HELO_SIG} octets, given with the key and only with it")
        check(isinstance(self.at, int) and not isinstance(self.at, bool) and 0 <= self.at < 2**53,
               "at must be a non-negative integer")
        check(self.to is None or isinstance(self.to, NodeId), "to must be a NodeId")
        check(
            isinstance(self.node_type, str) and (self.node_type == "" or TYPE_RE.fullmatch(self.node_type) is not None),
            "type must be 1..32 of a-z 0-9 _ - starting with a letter",
        )
        check(
            isinstance(self.beat, float) and (self.beat == 0.0 or 0.01 <= self.beat <= MAX_BEAT),
            f"beat must be 0 or 0.01..{MAX_BEAT:g} seconds",
        )
        check(isinstance(self.lost, int) and 0 <= self.lost <= MAX_LOST, f"lost must be 0..{MAX_LOST}")
        check((self.beat == 0.0) == (self.lost == 0), "beat and lost are given together or not at all")
        check(isinstance(self.rate, int) and 0 <= self.rate < 2**53, "rate must be a non-negative integer")
        check(isinstance(self.endpoint, str) and valid_endpoint(self.endpoint), f"bad endpoint {self.endpoint!r}")
        check_text(self.name, "name", MAX_NAME, empty=False)
        check(
            isinstance(self.incarnation, str) and _INCARNATION_RE.fullmatch(self.incarnation) is not None,
            "incarnation must be 16 lowercase hex digits",
        )
        check(isinstance(self.reply, bool), "reply must be a boolean")
        check(isinstance(self.guests, int) and not isinstance(self.guests, bool) and 0 <= self.guests <= 65535,
               "guests must be a port number 0..65535")
        check(isinstance(self.peers, int) and 0 <= self.peers < 2**31, "peers must be a non-negative integer")


@dataclass(frozen=True, slots=True)
class Peer:
    """Introduction of a third node: "have you met this one?"."""

    TAG: ClassVar[bytes] = b"PEER"

    sender: NodeId
    peer: NodeId
    endpoint: str

    def __post_init__(self) -> None:
        check(isinstance(self.peer, NodeId), "peer must be a NodeId")
        check(isinstance(self.endpoint, str) and valid_endpoint(self.endpoint), f"bad endpoint {self.endpoint!r}")


MemberEntry = tuple[NodeId, str, str]  # (uuid, endpoint, incarnation)


@dataclass(frozen=True, slots=True)
class Members:
    """Membership anti-entropy: the members the sender has sessions with, as
    (uuid, endpoint, incarnation).  ``reply`` true answers a list (and is never
    answered itself).  Its length is bounded by the receiver (mesh.max-members-listed)."""

    TAG: ClassVar[bytes] = b"MEMB"

    sender: NodeId
    members: tuple[MemberEntry, ...]
    reply: bool = False

    def __post_init__(self) -> None:
        check(isinstance(self.reply, bool), "reply must be a boolean")
        check(isinstance(self.members, tuple), "members must be a tuple")
        for entry in self.members:
            check(isinstance(entry, tuple) and len(entry) == 3, "a member is (uuid, endpoint, incarnation)")
            uuid, endpoint, incarnation = entry
            check(isinstance(uuid, NodeId), "member uuid must be a NodeId")
            check(isinstance(endpoint, str) and valid_endpoint(endpoint), f"bad endpoint {endpoint!r}")
            check(isinstance(incarnation, str) and _INCARNATION_RE.fullmatch(incarnation) is not None,
                   "member incarnation must be 16 lowercase hex digits")


@dataclass(frozen=True, slots=True)
class Group:
    """BOUT: the sender's group name; the empty string is a group too.  (The wire tag
    keeps the source's word for a group, "bout"; the class says what it carries, as
    "bout" is also the derby document.)"""

    TAG: ClassVar[bytes] = b"BOUT"

    sender: NodeId
    group: str

    def __post_init__(self) -> None:
        check_text(self.group, "group", MAX_GROUP)


@dataclass(frozen=True, slots=True)
class Gbye:
    """The sender is leaving, or refuses this session (reason says why)."""

    TAG: ClassVar[bytes] = b"GBYE"

    sender: NodeId
    reason: str = ""

    def __post_init__(self) -> None:
        check_text(self.reason, "reason", MAX_REASON)


@dataclass(frozen=True, slots=True)
class Beat:
    """Heartbeat: the sender is alive.  Its body is empty."""

    TAG: ClassVar[bytes] = b"BEAT"

    sender: NodeId


@dataclass(frozen=True, slots=True)
class Time:
    """Clock probe.  A request carries ``t0`` (opaque to the responder); the
    reply echoes ``t0`` and adds ``t1``, the responder's mesh time on receipt."""

    TAG: ClassVar[bytes] = b"TIME"

    sender: NodeId
    t0: float
    t1: float | None = None

    def __post_init__(self) -> None:
        check(isinstance(self.t0, float) and math.isfinite(self.t0), "t0 must be a finite float")
        check(
            self.t1 is None or (isinstance(self.t1, float) and math.isfinite(self.t1)),
            "t1 must be a finite float or None",
        )


# --------------------------------------------------------------------------- encode


def encode_helo(msg: Helo) -> bytes:
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
    if msg.tags:
        body["tags"] = msg.tags
    if msg.key:
        body["key"] = msg.key.hex()
        body["sig"] = msg.sig.hex()
        body["at"] = msg.at
        if msg.to is not None:
            body["to"] = msg.to.hex()
    return compact_json(body)


def encode_peer(msg: Peer) -> bytes:
    return compact_json({"uuid": msg.peer.hex(), "endpoint": msg.endpoint})


def encode_members(msg: Members) -> bytes:
    return compact_json({"reply": msg.reply, "members": [[u.hex(), e, i] for u, e, i in msg.members]})


def encode_group(msg: Group) -> bytes:
    return msg.group.encode("utf-8")


def encode_gbye(msg: Gbye) -> bytes:
    return msg.reason.encode("utf-8")


def encode_beat(msg: Beat) -> bytes:
    return b""


def encode_time(msg: Time) -> bytes:
    text = repr(msg.t0) if msg.t1 is None else f"{msg.t0!r} {msg.t1!r}"
    return text.encode("ascii")


# --------------------------------------------------------------------------- decode


def _decimal(text: str, kind: str) -> float:
    if _DECIMAL_RE.fullmatch(text) is None:
        raise DecodeError(f"{kind} value {text[:40]!r} is not a decimal number")
    value = float(text)
    if not math.isfinite(value):
        raise DecodeError(f"{kind} value {text[:40]!r} is out of range")
    return value


def decode_helo(sender: NodeId, body: str) -> Helo:
    obj = json_object(body, "HELO")
    return Helo(
        sender=sender,
        version=get_field(obj, "version", "HELO", int),
        endpoint=get_field(obj, "endpoint", "HELO", str),
        name=get_field(obj, "name", "HELO", str),
        incarnation=get_field(obj, "incarnation", "HELO", str),
        reply=get_field(obj, "reply", "HELO", bool) if "reply" in obj else False,
        peers=get_field(obj, "peers", "HELO", int) if "peers" in obj else 0,
        node_type=get_field(obj, "type", "HELO", str) if "type" in obj else "",
        beat=get_number(obj, "beat", "HELO") if "beat" in obj else 0.0,
        lost=get_field(obj, "lost", "HELO", int) if "lost" in obj else 0,
        rate=get_field(obj, "rate", "HELO", int) if "rate" in obj else 0,
        guests=get_field(obj, "guests", "HELO", int) if "guests" in obj else 0,
        key=_hex_field(obj, "key", HELO_KEY) if "key" in obj else b"",
        sig=_hex_field(obj, "sig", HELO_SIG) if "key" in obj else b"",
        at=get_field(obj, "at", "HELO", int) if "key" in obj else 0,
        to=NodeId(_hex_field(obj, "to", 16)) if "key" in obj and "to" in obj else None,
        deltas=get_field(obj, "deltas", "HELO", bool) if "deltas" in obj else False,
        tags=get_field(obj, "tags", "HELO", dict) if "tags" in obj else {},
    )


def _hex_field(obj: dict[str, Any], key: str, size: int) -> bytes:
    value = get_field(obj, key, "HELO", str)
    if len(value) != 2 * size or LOWER_HEX_RE.fullmatch(value) is None:
        raise DecodeError(f"HELO field {key!r} must be {2 * size} lowercase hex digits")
    return bytes.fromhex(value)


def helo_signed(m: Helo) -> bytes:
    """The octets a HELO's ``sig`` signs: every member but ``sig`` itself, in a fixed
    order (not the JSON text, which another encoder may write otherwise); the tags, sorted by
    key, only when there are any (a HELO without signs what it signed before tags existed)."""
    fields: list[object] = [
        bytes(m.sender).hex(), "" if m.to is None else bytes(m.to).hex(), m.at, m.key.hex(), m.version,
        m.endpoint, m.name, m.incarnation, m.reply, m.peers, m.node_type, m.beat, m.lost, m.rate, m.guests]
    if m.tags:
        fields.append(sorted(m.tags.items()))
    return _HELO_DOMAIN + json.dumps(fields, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def decode_peer(sender: NodeId, body: str) -> Peer:
    obj = json_object(body, "PEER")
    try:
        peer = NodeId.from_hex(get_field(obj, "uuid", "PEER", str))
    except ValueError as exc:
        raise DecodeError(f"PEER uuid: {exc}") from None
    return Peer(sender=sender, peer=peer, endpoint=get_field(obj, "endpoint", "PEER", str))


def decode_members(sender: NodeId, body: str) -> Members:
    obj = fast_json_object(body, "MEMB")
    rows = get_field(obj, "members", "MEMB", list)
    members = []
    for i, row in enumerate(rows):
        if type(row) is not list or len(row) != 3 or type(row[1]) is not str or type(row[2]) is not str:
            raise DecodeError(f"MEMB member {i} must be [uuid, endpoint, incarnation]")
        members.append((node_hex(row[0], f"MEMB member {i} uuid"), row[1], row[2]))
    reply = get_field(obj, "reply", "MEMB", bool) if "reply" in obj else False
    return Members(sender=sender, members=tuple(members), reply=reply)


def decode_time(sender: NodeId, body: str) -> Time:
    parts = body.split(" ")
    if len(parts) == 1:
        return Time(sender=sender, t0=_decimal(parts[0], "TIME"))
    if len(parts) == 2:
        return Time(sender=sender, t0=_decimal(parts[0], "TIME"), t1=_decimal(parts[1], "TIME"))
    raise DecodeError("TIME body is one or two decimal numbers separated by a space")


def decode_beat(sender: NodeId, body: str) -> Beat:
    if body:
        raise DecodeError("BEAT body must be empty")
    return Beat(sender=sender)


def decode_group(sender: NodeId, body: str) -> Group:
    return Group(sender=sender, group=body)


def decode_gbye(sender: NodeId, body: str) -> Gbye:
    return Gbye(sender=sender, reason=body)
