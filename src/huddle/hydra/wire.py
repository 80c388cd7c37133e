"""Hydra's messages as bytes, as edgenet/hydra's codec writes them (``src/hydra_proto.c``,
``include/hydra_proto.h``; docs/hydra.md).

A message is **one** ZeroMQ frame (on a ROUTER, after the routing id): the signature
``AA A0``, a one-octet id, then the fields of :data:`SPEC` in order, with no version octet.
The ids are the code's (1 HELLO .. 15 ERROR); the seed's ABNF numbers GOODBYE and ERROR
otherwise and has no PING: the code wins.  Field types are zproto's: ``string`` a 1-octet
length and text, ``longstr`` a 4-octet length and text, ``chunk`` a 4-octet length and
octets, numbers unsigned big-endian.

huddle's two additions ride where Hydra's reader does not look: a META-OK may end with a
post's seal (docs/security.md, "Sealed posts": 32 + 16 + 32 + 64 octets) after its last
field, and a HELLO with :data:`HUDDLE_MARK` (a huddle client: it gets huddle's view of the
posts, hydra/server.py); ``hydra_proto.c`` reads the fields it knows and ignores the rest of
the frame, so a Hydra node reads such messages as its own.  Anything else after the last
field, a cut field, a text that is not UTF-8, an unknown id: :class:`~huddle.errors.DecodeError`.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Final

from ..errors import DecodeError

__all__ = ["HUDDLE_MARK", "HYDRA_HEADER", "SEAL_OCTETS", "SIGNATURE", "SPEC", "HydraMsg", "MsgId", "Status", "decode", "encode"]

SIGNATURE: Final = b"\xaa\xa0"
HYDRA_HEADER: Final = "X-HYDRA"  # the ZRE header a Hydra node names its server's endpoint in (src/hydra.c)
SEAL_OCTETS: Final = (32, 16, 32, 64)  # huddle's seal after a META-OK: sha256, author, public key, signature
HUDDLE_MARK: Final = b"\x00huddle/1"  # after a HELLO's last field: the client is a huddle node
_N1, _N2, _N4, _N8 = (struct.Struct(f">{c}") for c in "BHIQ")
_NUMBERS: Final = {"number1": _N1, "number2": _N2, "number4": _N4, "number8": _N8}


class MsgId(IntEnum):
    """The ids as ``hydra_proto.h`` defines them."""

    HELLO = 1
    HELLO_OK = 2
    NEXT_OLDER = 3  # "HEAD": the newest
    NEXT_NEWER = 4  # "TAIL": the oldest
    NEXT_OK = 5
    NEXT_EMPTY = 6
    META = 7
    META_OK = 8
    CHUNK = 9
    CHUNK_OK = 10
    PING = 11
    PING_OK = 12
    GOODBYE = 13
    GOODBYE_OK = 14
    ERROR = 15


class Status(IntEnum):
    """The status codes of ``hydra_proto.xml`` that huddle sends in an ERROR."""

    RESOURCE_LOCKED = 400
    NOT_FOUND = 404
    COMMAND_INVALID = 500
    INTERNAL_ERROR = 502


# The fields of each message after the id, in order, as (name, zproto type).
SPEC: Final[dict[MsgId, tuple[tuple[str, str], ...]]] = {
    MsgId.HELLO: (("identity", "string"), ("nickname", "string")),
    MsgId.HELLO_OK: (("identity", "string"), ("nickname", "string")),
    MsgId.NEXT_OLDER: (("ident", "string"),),
    MsgId.NEXT_NEWER: (("ident", "string"),),
    MsgId.NEXT_OK: (("ident", "string"),),
    MsgId.NEXT_EMPTY: (),
    MsgId.META: (),
    MsgId.META_OK: (("subject", "longstr"), ("timestamp", "string"), ("parent_id", "string"), ("digest", "string"),
                    ("mime_type", "string"), ("content_size", "number8")),
    MsgId.CHUNK: (("offset", "number8"), ("octets", "number4")),
    MsgId.CHUNK_OK: (("offset", "number8"), ("content", "chunk")),
    MsgId.PING: (),
    MsgId.PING_OK: (),
    MsgId.GOODBYE: (),
    MsgId.GOODBYE_OK: (),
    MsgId.ERROR: (("status", "number2"), ("reason", "string")),
}


@dataclass(frozen=True, slots=True)
class HydraMsg:
    """One message: its id and the fields its id has (the others keep their defaults).
    ``seal`` is huddle's addition to a META-OK (empty, or the four parts of SEAL_OCTETS joined),
    ``huddle`` to a HELLO (HUDDLE_MARK after it)."""

    id: MsgId
    identity: str = ""
    nickname: str = ""
    ident: str = ""
    subject: str = ""
    timestamp: str = ""
    parent_id: str = ""
    digest: str = ""
    mime_type: str = ""
    content_size: int = 0
    offset: int = 0
    octets: int = 0
    content: bytes | memoryview = b""
    status: int = 0
    reason: str = ""
    seal: bytes = b""
    huddle: bool = False


def _text(text: str, size: struct.Struct) -> bytes:
    raw = text.encode()
    if len(raw) >= 1 << (8 * size.size):
        raise ValueError(f"a field of {len(raw)} octets does not fit a {size.size}-octet length")
    return size.pack(len(raw)) + raw


def encode(msg: HydraMsg) -> bytes:
    """The message's one frame."""
    out = [SIGNATURE, _N1.pack(msg.id)]
    for name, kind in SPEC[msg.id]:
        value = getattr(msg, name)
        if kind == "string":
            out.append(_text(value, _N1))
        elif kind == "longstr":
            out.append(_text(value, _N4))
        elif kind == "chunk":
            out += [_N4.pack(len(value)), bytes(value)]
        else:
            out.append(_NUMBERS[kind].pack(value))
    if msg.seal:
        if msg.id is not MsgId.META_OK or len(msg.seal) != sum(SEAL_OCTETS):
            raise ValueError(f"a seal of {sum(SEAL_OCTETS)} octets follows a META-OK alone")
        out.append(msg.seal)
    if msg.huddle:
        if msg.id is not MsgId.HELLO:
            raise ValueError("huddle's mark follows a HELLO alone")
        out.append(HUDDLE_MARK)
    return b"".join(out)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 3

    def take(self, n: int, what: str) -> bytes:
        if self.pos + n > len(self.data):
            raise DecodeError(f"Hydra message cut short in {what}")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def number(self, size: struct.Struct, what: str) -> int:
        value: int = size.unpack(self.take(size.size, what))[0]
        return value

    def text(self, size: struct.Struct, what: str) -> str:
        try:
            return self.take(self.number(size, what), what).decode()
        except UnicodeDecodeError:
            raise DecodeError(f"Hydra {what} is not UTF-8") from None


def decode(frame: bytes) -> HydraMsg:
    """One frame -> the message; DecodeError for anything else (nothing read past the frame)."""
    if len(frame) < 3 or frame[:2] != SIGNATURE:
        raise DecodeError("not a Hydra message (no AA A0 signature and id)")
    try:
        mid = MsgId(frame[2])
    except ValueError:
        raise DecodeError(f"unknown Hydra message id {frame[2]}") from None
    r = _Reader(frame)
    fields: dict[str, Any] = {}
    for name, kind in SPEC[mid]:
        if kind == "string":
            fields[name] = r.text(_N1, name)
        elif kind == "longstr":
            fields[name] = r.text(_N4, name)
        elif kind == "chunk":
            fields[name] = r.take(r.number(_N4, name), name)
        else:
            fields[name] = r.number(_NUMBERS[kind], name)
    rest = len(frame) - r.pos
    if mid is MsgId.META_OK and rest == sum(SEAL_OCTETS):
        fields["seal"] = r.take(rest, "seal")
    elif mid is MsgId.HELLO and rest == len(HUDDLE_MARK) and r.take(rest, "mark") == HUDDLE_MARK:
        fields["huddle"] = True
    elif rest:
        raise DecodeError(f"{rest} octet(s) after Hydra's {mid.name}")
    return dataclasses.replace(HydraMsg(mid), **fields)
