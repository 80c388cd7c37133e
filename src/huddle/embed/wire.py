"""The mesh side's payloads: ZRE's own messages (zre/codec.py), framed into one addressed message.

On huddle's mesh a Peer says what a ZRE peer says (HELLO with its groups, name and
headers; JOIN; LEAVE; SHOUT; WHISPER) in addressed messages (docs/protocol.md 13: in order,
exactly once, acknowledged), so ZRE's sequence numbers and PINGs have nothing to do there
(the sequence is 0).  A payload is :data:`PREFIX`, a 1-octet count of frames, then each
frame as a 4-octet length and its octets: the ZRE message's frames, the first with ZRE's
header.  Pure; :func:`unpack` raises DecodeError and nothing else.
"""

from __future__ import annotations

import struct
from typing import Final

from ..errors import DecodeError
from ..zre.codec import Bounds, MsgId, ZreMessage, decode, encode

__all__ = ["BOUNDS", "PREFIX", "SPOKEN", "pack", "unpack"]

PREFIX: Final = b"HPEER\x01"  # what marks a Peer's payload among a node's addressed messages
BOUNDS: Final = Bounds()  # ZRE's bounds, on the mesh too
SPOKEN: Final = frozenset({MsgId.HELLO, MsgId.JOIN, MsgId.LEAVE, MsgId.SHOUT, MsgId.WHISPER})
_COUNT, _LEN = struct.Struct(">B"), struct.Struct(">I")


def pack(msg: ZreMessage) -> bytes:
    frames = encode(msg)
    return PREFIX + _COUNT.pack(len(frames)) + b"".join(_LEN.pack(len(f)) + f for f in frames)


def unpack(payload: bytes) -> ZreMessage:
    """The message a payload carries; DecodeError if it is not one a Peer sends."""
    if not payload.startswith(PREFIX) or len(payload) < len(PREFIX) + 1:
        raise DecodeError("not a Peer's payload")
    at = len(PREFIX) + 1
    count = payload[at - 1]
    if not 1 <= count <= 1 + BOUNDS.frames:
        raise DecodeError(f"a Peer's payload of {count} frames")
    frames = []
    for _ in range(count):
        if at + _LEN.size > len(payload):
            raise DecodeError("a Peer's payload ends inside a length")
        (n,) = _LEN.unpack_from(payload, at)
        at += _LEN.size
        if n > BOUNDS.frame_octets or at + n > len(payload):
            raise DecodeError("a Peer's payload ends inside a frame, or a frame is too long")
        frames.append(payload[at:at + n])
        at += n
    if at != len(payload):
        raise DecodeError(f"{len(payload) - at} octets after a Peer's payload")
    msg = decode(frames, BOUNDS)
    if msg.id not in SPOKEN:
        raise DecodeError(f"a Peer does not send {msg.id.name} on the mesh")
    return msg
