"""The Hydra sync messages as bytes, carried in addressed messages (DMSG).

Every message starts with the source's signature ``AA A0`` and a one-octet
command; fields follow in the source's grammar (docs/protocol.md section 15):
strings are a 1-octet length and text, long strings a 4-octet length, numbers
unsigned big-endian.  Text is UTF-8.  A payload that does not start with the
signature is not Hydra's (it is a plain addressed message).

CONTENT, the answer to FETCH, is not an addressed message: it travels as a
BULK (docs/protocol.md 15.5) whose head is ``AA A0 10`` token offset and whose
data frame is the content itself; :func:`encode_bulk` / :func:`decode_bulk`
give and take those two frames, and the content is never copied into a
message.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from ..errors import DecodeError

__all__ = [
    "CLIENT_COMMANDS", "MAX_CHUNK", "MAX_FETCH", "SIGNATURE", "Chunk", "ChunkOk", "Content", "Error", "Fetch",
    "Goodbye", "GoodbyeOk", "Hello", "HelloOk", "HydraMessage", "Meta", "MetaOk", "News", "NextEmpty", "NextNewer",
    "NextOk", "NextOlder", "decode", "decode_bulk", "encode", "encode_bulk", "is_hydra",
]

SIGNATURE = b"\xaa\xa0"
MAX_CHUNK = 4 * 1024 * 1024  # the largest chunk a server sends in a CHUNK-OK, whatever a client asks
MAX_FETCH = 1024 * 1024  # the largest CONTENT (a BULK's data frame, wire.MAX_BULK)
_CONTENT_HEAD = struct.Struct(">2sBQQ")  # signature, command, token, offset
SEAL_OCTETS = (32, 16, 32, 64)  # a META-OK's seal: sha256, author, public key, signature


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
    # huddle's seal (protocol.md 15.7; all or none, after content-size): the content's SHA-256, the
    # author's node id, its Ed25519 public key and signature.  A META-OK without it is a legacy post's.
    sha256: bytes = b""
    author: bytes = b""
    public_key: bytes = b""
    signature: bytes = b""


@dataclass(frozen=True, slots=True)
class Chunk:
    ID: ClassVar[int] = 9
    offset: int
    octets: int


@dataclass(frozen=True, slots=True)
class ChunkOk:
    ID: ClassVar[int] = 10
    offset: int
    content: bytes | memoryview


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


@dataclass(frozen=True, slots=True)
class Fetch:
    """huddle's: up to ``octets`` of the current post's content from ``offset``, answered by a
    CONTENT in a BULK (or an ERROR); ``token`` is the client's, echoed in the CONTENT."""

    ID: ClassVar[int] = 15
    token: int
    offset: int
    octets: int


@dataclass(frozen=True, slots=True)
class Content:
    """huddle's: the answer to FETCH ``token``: content from ``offset``.  Only ever a BULK.
    The content may be a view (of the frame received, of the buffer it was read into)."""

    ID: ClassVar[int] = 16
    token: int
    offset: int
    content: bytes | memoryview


HydraMessage = (Hello | HelloOk | NextOlder | NextNewer | NextOk | NextEmpty | Meta | MetaOk | Chunk | ChunkOk
                | Goodbye | GoodbyeOk | Error | News | Fetch | Content)
# Commands a client sends (to the peer's server); the others go to the peer's client.
CLIENT_COMMANDS = frozenset({Hello.ID, NextOlder.ID, NextNewer.ID, Meta.ID, Chunk.ID, Goodbye.ID, Fetch.ID})


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
    """The payload of the addressed message carrying ``msg`` (CONTENT: :func:`encode_bulk`)."""
    head = SIGNATURE + bytes([msg.ID])
    match msg:
        case Content():
            raise ValueError("CONTENT is sent as a BULK (encode_bulk), not in an addressed message")
        case Hello() | HelloOk():
            return head + _string(msg.identity) + _string(msg.nickname)
        case NextOlder() | NextNewer() | NextOk():
            return head + _string(msg.ident)
        case MetaOk():
            seal = (msg.sha256, msg.author, msg.public_key, msg.signature)
            if any(seal) and tuple(len(f) for f in seal) != SEAL_OCTETS:
                raise ValueError(f"a META-OK's seal is {SEAL_OCTETS} octets, not {tuple(len(f) for f in seal)}")
            return (head + _string(msg.subject, long=True) + _string(msg.timestamp) + _string(msg.parent_id)
                    + _string(msg.digest) + _string(msg.mime_type) + struct.pack(">Q", msg.content_size)
                    + b"".join(seal))
        case Chunk():
            return head + struct.pack(">QI", msg.offset, msg.octets)
        case Fetch():
            return head + struct.pack(">QQI", msg.token, msg.offset, msg.octets)
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
        if r.pos < len(payload):  # huddle's seal: all of it (a legacy META-OK ends here)
            sha256, author, public_key, signature = (r.take(n, "seal") for n in SEAL_OCTETS)
            msg = MetaOk(msg.subject, msg.timestamp, msg.parent_id, msg.digest, msg.mime_type, msg.content_size,
                         sha256, author, public_key, signature)
    elif cmd == Chunk.ID:
        msg = Chunk(r.number(8, "offset"), r.number(4, "octets"))
    elif cmd == ChunkOk.ID:
        offset, size = r.number(8, "offset"), r.number(4, "chunk size")
        msg = ChunkOk(offset, r.take(size, "chunk"))
    elif cmd == Fetch.ID:
        msg = Fetch(r.number(8, "token"), r.number(8, "offset"), r.number(4, "octets"))
    elif cmd == Content.ID:
        raise DecodeError("CONTENT comes only as a BULK, not in an addressed message")
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


def encode_bulk(msg: Content) -> tuple[bytes, bytes | memoryview]:
    """CONTENT as the head and data of a BULK."""
    if len(msg.content) > MAX_FETCH:
        raise ValueError(f"CONTENT of {len(msg.content)} octets is over {MAX_FETCH}")
    return _CONTENT_HEAD.pack(SIGNATURE, Content.ID, msg.token, msg.offset), msg.content


def decode_bulk(head: bytes, data: bytes | memoryview) -> Content:
    """A BULK's head and data -> CONTENT; raises DecodeError for anything else.  The data
    is taken as it is (not copied)."""
    if not is_hydra(head):
        raise DecodeError("BULK head without the Hydra signature AA A0")
    if len(head) != _CONTENT_HEAD.size:
        raise DecodeError(f"Hydra BULK head of {len(head)} octets, not {_CONTENT_HEAD.size}")
    _, cmd, token, offset = _CONTENT_HEAD.unpack(head)
    if cmd != Content.ID:
        raise DecodeError(f"Hydra command {cmd} in a BULK (only CONTENT, {Content.ID}, comes as a BULK)")
    if len(data) > MAX_FETCH:
        raise DecodeError(f"CONTENT of {len(data)} octets is over {MAX_FETCH}")
    return Content(token, offset, data)
