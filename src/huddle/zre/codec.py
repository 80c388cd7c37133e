"""ZRE's beacons and messages as bytes, as Zyre sends them (docs/zre.md).

A beacon is one UDP datagram: ``'Z' 'R' 'E'``, a version octet, the sender's 16-octet
UUID and its ROUTER's TCP port (big-endian; 0: it is leaving).  Version 1 is the
22-octet beacon of RFC 36; version 3 is Zyre's 54-octet beacon, the same followed by
the sender's 32-octet CURVE public key (Zyre sends it only when it has a secret key).

A message is one ZeroMQ multipart message on a peer's DEALER: the first frame is
``AA A1``, the message id, the version (2 in every mode Zyre has, v3 beacons or not)
and a 16-bit sequence, then the fields of :data:`SPEC` in order; a ``msg`` field
(WHISPER's and SHOUT's content) is the frames after the first.  The field types are
zproto's, as ``zre_msg.xml`` names them: ``string`` a 1-octet length and text,
``longstr`` a 4-octet length and text, ``strings`` a 4-octet count of longstrs,
``hash`` a 4-octet count of (string key, longstr value), numbers big-endian.

:data:`SPEC` is the one table of messages: :func:`encode` and :func:`decode` both read
it.  Every length is bounded (:class:`Bounds`); anything outside them, or malformed,
raises :class:`~huddle.errors.DecodeError`, and nothing is read past the frame.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Final

from ..errors import DecodeError

__all__ = [
    "BEACON_SIZES",
    "BEACON_V2",
    "BEACON_V3",
    "HEADER",
    "SIGNATURE",
    "SPEC",
    "VERSION",
    "Beacon",
    "Bounds",
    "MsgId",
    "ZreMessage",
    "decode",
    "decode_beacon",
    "encode",
    "encode_beacon",
    "peek_header",
]

SIGNATURE: Final = b"\xaa\xa1"
VERSION: Final = 2  # the version octet of every message Zyre sends
BEACON_V2: Final = 1  # the 22-octet beacon's version octet
BEACON_V3: Final = 3  # the 54-octet beacon's (with a CURVE public key)
_BEACON = struct.Struct(">3sB16sH")
BEACON_SIZES: Final = {BEACON_V2: 22, BEACON_V3: 54}
HEADER = struct.Struct(">2sBBH")  # signature, id, version, sequence
_N1, _N4 = struct.Struct(">B"), struct.Struct(">I")


class MsgId(IntEnum):
    HELLO = 1
    WHISPER = 2
    SHOUT = 3
    JOIN = 4
    LEAVE = 5
    PING = 6
    PING_OK = 7
    ELECT = 8  # Zyre's leader election (zre_msg.xml); not in RFC 36
    LEADER = 9
    GOODBYE = 10  # Zyre sends it as it stops when it gossips


# The fields of each message after the header, in order, as (name, zproto type).
SPEC: Final[dict[MsgId, tuple[tuple[str, str], ...]]] = {
    MsgId.HELLO: (("endpoint", "string"), ("groups", "strings"), ("status", "number1"), ("name", "string"),
                  ("headers", "hash")),
    MsgId.WHISPER: (("content", "msg"),),
    MsgId.SHOUT: (("group", "string"), ("content", "msg")),
    MsgId.JOIN: (("group", "string"), ("status", "number1")),
    MsgId.LEAVE: (("group", "string"), ("status", "number1")),
    MsgId.PING: (),
    MsgId.PING_OK: (),
    MsgId.ELECT: (("group", "string"), ("challenger_id", "string")),
    MsgId.LEADER: (("group", "string"), ("leader_id", "string")),
    MsgId.GOODBYE: (),
}


@dataclass(frozen=True, slots=True)
class Bounds:
    """What one message may hold; more is refused as it is read."""

    frames: int = 16  # content frames of a WHISPER or SHOUT
    frame_octets: int = 256 * 1024  # one frame, the first included
    groups: int = 64  # groups named in a HELLO
    headers: int = 32  # headers of a HELLO
    longstr: int = 4096  # a group's name, a header's value


@dataclass(frozen=True, slots=True)
class Beacon:
    uuid: bytes  # 16 octets
    port: int  # the sender's ROUTER port; 0: it is leaving
    public_key: bytes | None = None  # 32 octets: a v3 beacon

    @property
    def version(self) -> int:
        return BEACON_V2 if self.public_key is None else BEACON_V3


def encode_beacon(beacon: Beacon) -> bytes:
    if len(beacon.uuid) != 16 or not 0 <= beacon.port <= 65535:
        raise ValueError("a beacon has a 16-octet UUID and a port 0..65535")
    data = _BEACON.pack(b"ZRE", beacon.version, beacon.uuid, beacon.port)
    if beacon.public_key is not None:
        if len(beacon.public_key) != 32:
            raise ValueError("a v3 beacon's public key is 32 octets")
        data += beacon.public_key
    return data


def decode_beacon(data: bytes) -> Beacon:
    """A 22-octet v2 or a 54-octet v3 beacon; anything else raises DecodeError."""
    if len(data) not in BEACON_SIZES.values() or data[:3] != b"ZRE":
        raise DecodeError(f"not a ZRE beacon ({len(data)} octets)")
    _, version, uuid, port = _BEACON.unpack_from(data)
    if BEACON_SIZES.get(version) != len(data):
        raise DecodeError(f"a {len(data)}-octet beacon of version {version}")
    return Beacon(uuid, port, data[22:] if version == BEACON_V3 else None)


@dataclass(frozen=True, slots=True)
class ZreMessage:
    """One message: its id, its sequence and the fields its id has (the others keep their defaults)."""

    id: MsgId
    sequence: int = 0
    endpoint: str = ""
    groups: tuple[str, ...] = ()
    status: int = 0
    name: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    group: str = ""
    content: tuple[bytes, ...] = ()
    challenger_id: str = ""
    leader_id: str = ""


def _string(text: str, long: bool) -> bytes:
    raw = text.encode()
    if not long and len(raw) > 255:
        raise ValueError(f"a string field holds 255 octets at most, got {len(raw)}")
    return (_N4.pack(len(raw)) if long else _N1.pack(len(raw))) + raw


def encode(msg: ZreMessage) -> list[bytes]:
    """The message's frames: the encoded first frame, then its content's frames."""
    if not 0 <= msg.sequence <= 0xFFFF:
        raise ValueError("a sequence is 16 bits")
    out = [HEADER.pack(SIGNATURE, msg.id, VERSION, msg.sequence)]
    for name, kind in SPEC[msg.id]:
        value = getattr(msg, name)
        if kind == "string":
            out.append(_string(value, long=False))
        elif kind == "number1":
            out.append(_N1.pack(value))
        elif kind == "strings":
            out.append(_N4.pack(len(value)) + b"".join(_string(s, long=True) for s in value))
        elif kind == "hash":
            out.append(_N4.pack(len(value)) + b"".join(_string(k, False) + _string(v, True) for k, v in value))
    return [b"".join(out), *msg.content] if MsgId(msg.id) in (MsgId.WHISPER, MsgId.SHOUT) else [b"".join(out)]


class _Reader:
    """Reads one frame's fields, never past its end, each within its bound."""

    def __init__(self, data: bytes, bounds: Bounds) -> None:
        self.data, self.at, self.bounds = data, 0, bounds

    def take(self, n: int) -> bytes:
        if self.at + n > len(self.data):
            raise DecodeError("a ZRE message ends inside a field")
        out = self.data[self.at:self.at + n]
        self.at += n
        return out

    def number(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def text(self, long: bool) -> str:
        n = self.number(4 if long else 1)
        if long and n > self.bounds.longstr:
            raise DecodeError(f"a ZRE long string of {n} octets (at most {self.bounds.longstr})")
        try:
            return self.take(n).decode()
        except UnicodeDecodeError:
            raise DecodeError("a ZRE string that is not UTF-8") from None

    def count(self, most: int, what: str) -> int:
        n = self.number(4)
        if n > most:
            raise DecodeError(f"{n} {what} in a ZRE message (at most {most})")
        return n


def peek_header(first: bytes) -> tuple[int, int]:
    """(id, sequence) of a first frame whose signature and version are ZRE's; DecodeError if not."""
    if len(first) < HEADER.size:
        raise DecodeError("a ZRE message shorter than its header")
    signature, ident, version, sequence = HEADER.unpack_from(first)
    if signature != SIGNATURE:
        raise DecodeError("not a ZRE message (signature)")
    if version != VERSION:
        raise DecodeError(f"a ZRE message of version {version} (Zyre sends 2)")
    return ident, sequence


def decode(frames: list[bytes], bounds: Bounds = Bounds()) -> ZreMessage:
    """A message from its frames (the ROUTER's identity frame taken off); DecodeError if it is not one."""
    if not frames:
        raise DecodeError("an empty ZRE message")
    if len(frames) > 1 + bounds.frames:
        raise DecodeError(f"a ZRE message of {len(frames)} frames (at most {1 + bounds.frames})")
    if any(len(f) > bounds.frame_octets for f in frames):
        raise DecodeError(f"a ZRE frame over {bounds.frame_octets} octets")
    ident, sequence = peek_header(frames[0])
    try:
        msg_id = MsgId(ident)
    except ValueError:
        raise DecodeError(f"a ZRE message of unknown id {ident}") from None
    reader = _Reader(frames[0], bounds)
    reader.at = HEADER.size
    values: dict[str, object] = {}
    for name, kind in SPEC[msg_id]:
        if kind == "string":
            values[name] = reader.text(long=False)
        elif kind == "number1":
            values[name] = reader.number(1)
        elif kind == "strings":
            values[name] = tuple(reader.text(long=True) for _ in range(reader.count(bounds.groups, "groups")))
        elif kind == "hash":
            values[name] = tuple((reader.text(long=False), reader.text(long=True))
                                 for _ in range(reader.count(bounds.headers, "headers")))
        else:  # "msg": the frames after the first
            values[name] = tuple(frames[1:])
    if reader.at != len(frames[0]):
        raise DecodeError(f"{len(frames[0]) - reader.at} octets after a ZRE {msg_id.name}")
    if "content" not in values and len(frames) > 1:
        raise DecodeError(f"a ZRE {msg_id.name} with content frames")
    return ZreMessage(msg_id, sequence, **values)  # type: ignore[arg-type]  # the SPEC names the fields

