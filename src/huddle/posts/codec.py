"""The Hydra sync messages as bytes, carried in addressed messages (DMSG).

Every message starts with the source's signature ``AA A0`` and a one-octet
command; fields follow in the source's grammar (docs/protocol.md section 15):
strings are a 1-octet length and text, long strings a 4-octet length, numbers
unsigned big-endian.  Text is UTF-8.  A payload that does not start with the
signature is not Hydra's (it is a plain addressed message).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from ..errors import DecodeError

__all__ = [
    "CLIENT_COMMANDS", "MAX_CHUNK", "SIGNATURE", "Chunk", "ChunkOk", "Error", "Goodbye", "GoodbyeOk",
    "Hello", "HelloOk", "HydraMessage", "Meta", "MetaOk", "News", "NextEmpty", "NextNewer", "NextOk", "NextOlder",
    "decode", "encode", "is_hydra",
]

SIGNATURE = b"\xaa\xa0"
MAX_CHUNK = 4 * 1024 * 1024  # the largest chunk a server sends, whatever a client asks


@dataclass(frozen=True, slots=True)
class Hello:
    ID: ClassVar[int] = 1
    identity: str
    nickname: str


@dataclass(frozen=True, slots=True)
class HelloOk:
    ID: ClassVar[int] = 2
    identity: str
    nickname: str


@dataclass(frozen=True, slots=True)
class NextOlder:
    ID: ClassVar[int] = 3
    ident: str  # "HEAD": the newest


@dataclass(frozen=True, slots=True)
class NextNewer:
    ID: ClassVar[int] = 4
    ident: str  # "TAIL": the oldest


@dataclass(frozen=True, slots=True)
class NextOk:
    ID: ClassVar[int] = 5
    ident: str


@dataclass(frozen=True, slots=True)
class NextEmpty:
    ID: ClassVar[int] = 6


@dataclass(frozen=True, slots=True)
class Meta:
    ID: ClassVar[int] = 7


@dataclass(frozen=True, slots=True)
class MetaOk:
    ID: ClassVar[int] = 8
    subject: str
    timestamp: str
    parent_id: str
    digest: str
    mime_type: str
    content_size: int


@dataclass(frozen=True, slots=True)
class Chunk:
    ID: ClassVar[int] = 9
    offset: int
    octets: int


@dataclass(frozen=True, slots=True)
class ChunkOk:
    ID: ClassVar[int] = 10
    offset: int
    content: bytes


@dataclass(frozen=True, slots=True)
class Goodbye:
    ID: ClassVar[int] = 11


@dataclass(frozen=True, slots=True)
class GoodbyeOk:
    ID: ClassVar[int] = 12


@dataclass(frozen=True, slots=True)
class Error:
    ID: ClassVar[int] = 13
    status: int
    reason: str


@dataclass(frozen=True, slots=True)
class News:
    """huddle's addition: a server tells a peer's client it has posts (at a meeting) or a new one."""

    ID: ClassVar[int] = 14


HydraMessage = (Hello | HelloOk | NextOlder | NextNewer | NextOk | NextEmpty | Meta | MetaOk | Chunk | ChunkOk
                | Goodbye | GoodbyeOk | Error | News)
# Commands a client sends (to the peer's server); the others go to the peer's client.
CLIENT_COMMANDS = frozenset({Hello.ID, NextOlder.ID, NextNewer.ID, Meta.ID, Chunk.ID, Goodbye.ID})


def is_hydra(payload: bytes) -> bool:
    return payload[:2] == SIGNATURE


def _string(text: str, long: bool = False) -> bytes:
    raw = text.encode("utf-8")
    if long:
        return struct.pack(">I", len(raw)) + raw
    if len(raw) > 255:
        raise ValueError(f"string longer than 255 octets: {text[:40]!r}...")
    return bytes([len(raw)]) + raw


def encode(msg: HydraMessage) -> bytes:
    head = SIGNATURE + bytes([msg.ID])
    match msg:
        case Hello() | HelloOk():
            return head + _string(msg.identity) + _string(msg.nickname)
        case NextOlder() | NextNewer() | NextOk():
            return head + _string(msg.ident)
        case MetaOk():
            return (head + _string(msg.subject, long=True) + _string(msg.timestamp) + _string(msg.parent_id)
                    + _string(msg.digest) + _string(msg.mime_type) + struct.pack(">Q", msg.content_size))
        case Chunk():
            return head + struct.pack(">QI", msg.offset, msg.octets)
        case ChunkOk():
            return head + struct.pack(">QI", msg.offset, len(msg.content)) + msg.content
        case Error():
            return head + struct.pack(">H", msg.status) + _string(msg.reason)
        case _:
            return head


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 3

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise DecodeError(f"Hydra message cut short in {what}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def number(self, n: int, what: str) -> int:
        return int.from_bytes(self.take(n, what), "big")

    def string(self, what: str, long: bool = False) -> str:
        size = self.number(4 if long else 1, what)
        try:
            return self.take(size, what).decode("utf-8")
        except UnicodeDecodeError:
            raise DecodeError(f"Hydra {what} is not UTF-8") from None

    def end(self, name: str) -> None:
        if self.pos != len(self.data):
            raise DecodeError(f"{len(self.data) - self.pos} extra octet(s) after Hydra {name}")


def decode(payload: bytes) -> HydraMessage:
    """Bytes -> message; raises DecodeError for anything else."""
    if len(payload) < 3 or not is_hydra(payload):
        raise DecodeError("not a Hydra message (no AA A0 signature and command)")
    r = _Reader(payload)
    cmd = payload[2]
    msg: HydraMessage
    if cmd in (Hello.ID, HelloOk.ID):
        identity, nickname = r.string("identity"), r.string("nickname")
        msg = Hello(identity, nickname) if cmd == Hello.ID else HelloOk(identity, nickname)
    elif cmd in (NextOlder.ID, NextNewer.ID, NextOk.ID):
        ident = r.string("ident")
        msg = NextOlder(ident) if cmd == NextOlder.ID else NextNewer(ident) if cmd == NextNewer.ID else NextOk(ident)
    elif cmd == NextEmpty.ID:
        msg = NextEmpty()
    elif cmd == Meta.ID:
        msg = Meta()
    elif cmd == MetaOk.ID:
        msg = MetaOk(r.string("subject", long=True), r.string("timestamp"), r.string("parent_id"),
                     r.string("digest"), r.string("mime_type"), r.number(8, "content_size"))
    elif cmd == Chunk.ID:
        msg = Chunk(r.number(8, "offset"), r.number(4, "octets"))
    elif cmd == ChunkOk.ID:
        offset, size = r.number(8, "offset"), r.number(4, "chunk size")
        msg = ChunkOk(offset, r.take(size, "chunk"))
    elif cmd == Goodbye.ID:
        msg = Goodbye()
    elif cmd == GoodbyeOk.ID:
        msg = GoodbyeOk()
    elif cmd == News.ID:
        msg = News()
    elif cmd == Error.ID:
        msg = Error(r.number(2, "status"), r.string("reason"))
    else:
        raise DecodeError(f"unknown Hydra command {cmd}")
    r.end(type(msg).__name__)
    return msg
