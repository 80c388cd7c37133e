"""What the mesh carries from one node to others (docs/protocol.md 4.7, 13): CHAT, a line
for humans; DMSG and DACK, the addressed-message channel's frames and acknowledgements
(binary bodies); BULK, octets in a fourth frame of their own.  Each type's encoder and
decoder sit beside its class; ``framing.SPECS`` names them in one table.

Pure: no sockets, no clock.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, cast

from ..errors import DecodeError, LocalProtocolError
from ..ids import NodeId
from .fields import MAX_BODY, MAX_SEQ, check, check_text

__all__ = [
    "MAX_BULK", "MAX_BULK_HEAD", "MAX_FRAGMENTS", "Bulk", "Chat", "Dack", "Dmsg", "decode_bulk", "decode_chat",
    "decode_dack", "decode_dmsg", "encode_bulk", "encode_chat", "encode_dack", "encode_dmsg",
]

MAX_FRAGMENTS: Final = 2**20
MAX_BULK: Final = 1024 * 1024  # octets of a BULK's data frame
MAX_BULK_HEAD: Final = 255  # octets of a BULK's head
_DMSG_HEADER: Final = struct.Struct(">QQII")
_DACK_BODY: Final = struct.Struct(">Q")


@dataclass(frozen=True, slots=True)
class Chat:
    """A line of text for humans."""

    TAG: ClassVar[bytes] = b"CHAT"

    sender: NodeId
    text: str

    def __post_init__(self) -> None:
        text = self.text  # ASCII text within the limit passes at once: a chat line is built per message sent
        if type(text) is not str or len(text) > MAX_BODY or not text.isascii():
            check_text(text, "text", MAX_BODY)


@dataclass(frozen=True, slots=True)
class Dmsg:
    """One frame of an addressed message: frame sequence ``fseq`` (per
    sender-receiver channel, from 1), message sequence ``mseq``, fragment
    ``index`` of ``count``, and that fragment's octets."""

    TAG: ClassVar[bytes] = b"DMSG"

    sender: NodeId
    fseq: int
    mseq: int
    index: int
    count: int
    payload: bytes

    def __post_init__(self) -> None:
        check(1 <= self.fseq <= MAX_SEQ and 1 <= self.mseq <= MAX_SEQ, "DMSG sequences must be 1..2^63-1")
        check(0 <= self.index < self.count <= MAX_FRAGMENTS, f"DMSG fragment must be 0 <= index < count <= {MAX_FRAGMENTS}")


@dataclass(frozen=True, slots=True)
class Dack:
    """Acknowledges every frame of the channel up to ``upto`` (0: none yet)."""

    TAG: ClassVar[bytes] = b"DACK"

    sender: NodeId
    upto: int

    def __post_init__(self) -> None:
        check(0 <= self.upto <= MAX_SEQ, "DACK sequence must be 0..2^63-1")


@dataclass(frozen=True, slots=True)
class Bulk:
    """Octets for one peer outside the addressed-message channel: ``head`` says
    what they are (for the application that asked for them), ``data`` is carried
    as a frame of its own.  Not acknowledged, not re-sent, not fragmented: the
    receiver asked for it and asks again if it does not come."""

    TAG: ClassVar[bytes] = b"BULK"

    sender: NodeId
    head: bytes
    data: bytes | memoryview  # a view is sent and received without a copy

    def __post_init__(self) -> None:
        check(1 <= len(self.head) <= MAX_BULK_HEAD, f"BULK head must be 1..{MAX_BULK_HEAD} octets")
        check(len(self.data) <= MAX_BULK, f"BULK data must be at most {MAX_BULK} octets")


# --------------------------------------------------------------------------- encode


def encode_chat(msg: Chat) -> bytes:
    return msg.text.encode("utf-8")


def encode_dmsg(msg: Dmsg) -> bytes:
    return _DMSG_HEADER.pack(msg.fseq, msg.mseq, msg.index, msg.count) + msg.payload


def encode_dack(msg: Dack) -> bytes:
    return _DACK_BODY.pack(msg.upto)


def encode_bulk(msg: Bulk) -> list[bytes]:
    """A BULK's frames after its type: its head, and its data as a frame of its own (sizes
    checked by the constructor; ZeroMQ sends a memoryview as it does bytes)."""
    return [msg.head, cast(bytes, msg.data)]


# --------------------------------------------------------------------------- decode


def decode_chat(sender: NodeId, body: str) -> Chat:
    return Chat(sender=sender, text=body)


def decode_dmsg(sender: NodeId, body: bytes) -> Dmsg:
    if len(body) < _DMSG_HEADER.size:
        raise LocalProtocolError(f"body of {len(body)} octets is shorter than its {_DMSG_HEADER.size}-octet header")
    fseq, mseq, index, count = _DMSG_HEADER.unpack_from(body)
    return Dmsg(sender, fseq, mseq, index, count, body[_DMSG_HEADER.size:])


def decode_dack(sender: NodeId, body: bytes) -> Dack:
    if len(body) != _DACK_BODY.size:
        raise LocalProtocolError(f"body must be {_DACK_BODY.size} octets, got {len(body)}")
    return Dack(sender, _DACK_BODY.unpack(body)[0])


def decode_bulk(frames: Sequence[bytes]) -> Bulk:
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
