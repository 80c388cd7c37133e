"""The huddle message codec: frames <-> typed messages, through one table of types.

A message on the wire is a ZeroMQ multipart of three frames as the
receiving ROUTER socket sees them::

    frame 1  sender   16 octets, the sender's UUID (its DEALER routing identity)
    frame 2  type     4 ASCII capital letters
    frame 3  body     UTF-8 text, at most MAX_BODY octets

except BULK, which has a fourth frame: its data (at most MAX_BULK octets),
kept apart from the head in frame 3 so that it is never sliced or copied.

:data:`SPECS` is the one table of message types: per type its class (whose ``TAG``
is frame 2), its body's encoder and decoder, how the body is read (UTF-8 text, binary,
or the frames whole) and whether the mesh handles it itself.  Everything else is
derived from it: the :data:`Message` union (checked against the table by
tests/test_wire_table.py), :data:`TAGS` (the traffic counters' types),
:data:`MESH_TYPES`, the decoders by tag and the encoders by class (and, in
``peek.py``, the tags named for the fast paths).  A new type is a
class in its concern's module, one row here, a Hypothesis strategy
(tests/wire_strategies.py) and a section of ``docs/protocol.md``; the same test fails
until all four are there.

This module is pure: no sockets, no clock.  :func:`decode` raises
:class:`~huddle.errors.DecodeError` for any malformed input and nothing else;
:func:`encode` is its inverse.  See ``docs/protocol.md`` for the grammar.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from ..errors import DecodeError, LocalProtocolError
from ..ids import NodeId
from .delivery import (
    Bulk,
    Chat,
    Dack,
    Dmsg,
    decode_bulk,
    decode_chat,
    decode_dack,
    decode_dmsg,
    encode_bulk,
    encode_chat,
    encode_dack,
    encode_dmsg,
)
from .fields import MAX_BODY
from .membership import (
    Beat,
    Gbye,
    Group,
    Helo,
    Members,
    Peer,
    Time,
    decode_beat,
    decode_gbye,
    decode_group,
    decode_helo,
    decode_members,
    decode_peer,
    decode_time,
    encode_beat,
    encode_gbye,
    encode_group,
    encode_helo,
    encode_members,
    encode_peer,
    encode_time,
)
from .records import Gsip, Xmsg, decode_gsip, decode_xmsg, encode_gsip, encode_xmsg
from .reports import Raws, decode_raws, encode_raws

__all__ = ["MESH_TYPES", "SPECS", "TAGS", "Body", "Message", "MessageSpec", "decode", "encode", "encode_parts"]


class Body(enum.Enum):
    """How a type's body is carried, and so what its encoder returns and its decoder takes."""

    TEXT = "text"  # frame 3, UTF-8: encode(msg) -> bytes; decode(sender, str) -> message
    BINARY = "binary"  # frame 3, octets: encode(msg) -> bytes; decode(sender, bytes) -> message
    FRAMES = "frames"  # frames 3 and 4 (BULK): encode(msg) -> [frame 3, frame 4]; decode(frames) -> message


@dataclass(frozen=True, slots=True)
class MessageSpec:
    """One message type: its class (``cls.TAG`` is its type frame), its body's ``encode``
    and ``decode`` (their shapes are ``body``'s), and whether the mesh handles it itself
    (``mesh``: membership, time, chat; no peer service may claim it) or a peer service
    does (protocol/service.py)."""

    cls: type[Any]
    encode: Callable[..., Any]
    decode: Callable[..., Any]
    body: Body
    mesh: bool

    @property
    def tag(self) -> bytes:
        tag: bytes = self.cls.TAG
        return tag


# The one table of message types, in the order the traffic counters list them (TAGS).
SPECS: Final[tuple[MessageSpec, ...]] = (
    MessageSpec(Helo, encode_helo, decode_helo, Body.TEXT, mesh=True),
    MessageSpec(Peer, encode_peer, decode_peer, Body.TEXT, mesh=True),
    MessageSpec(Members, encode_members, decode_members, Body.TEXT, mesh=True),
    MessageSpec(Group, encode_group, decode_group, Body.TEXT, mesh=True),
    MessageSpec(Gbye, encode_gbye, decode_gbye, Body.TEXT, mesh=True),
    MessageSpec(Beat, encode_beat, decode_beat, Body.TEXT, mesh=True),
    MessageSpec(Time, encode_time, decode_time, Body.TEXT, mesh=True),
    MessageSpec(Raws, encode_raws, decode_raws, Body.TEXT, mesh=False),
    MessageSpec(Gsip, encode_gsip, decode_gsip, Body.TEXT, mesh=False),
    MessageSpec(Xmsg, encode_xmsg, decode_xmsg, Body.TEXT, mesh=False),
    MessageSpec(Chat, encode_chat, decode_chat, Body.TEXT, mesh=True),
    MessageSpec(Dmsg, encode_dmsg, decode_dmsg, Body.BINARY, mesh=False),
    MessageSpec(Dack, encode_dack, decode_dack, Body.BINARY, mesh=False),
    MessageSpec(Bulk, encode_bulk, decode_bulk, Body.FRAMES, mesh=False),
)

# Every class of SPECS (tests/test_wire_table.py checks the two agree).
Message = Helo | Peer | Group | Gbye | Chat | Beat | Time | Xmsg | Gsip | Dmsg | Dack | Raws | Bulk | Members

TAGS: Final = tuple(spec.tag for spec in SPECS)
# The messages the mesh handles itself: no peer service may claim them.
MESH_TYPES: Final = frozenset(spec.cls for spec in SPECS if spec.mesh)

# Derived from SPECS: the decoders by tag, one dict per body shape (decode looks its tag
# up once), and the encoders by class (encode_parts looks the class up once).
_DECODERS: Final[dict[bytes, Callable[[NodeId, str], Message]]] = {
    s.tag: s.decode for s in SPECS if s.body is Body.TEXT}
_BINARY_DECODERS: Final[dict[bytes, Callable[[NodeId, bytes], Message]]] = {
    s.tag: s.decode for s in SPECS if s.body is Body.BINARY}
_FRAMES_DECODERS: Final[dict[bytes, Callable[[Sequence[bytes]], Message]]] = {
    s.tag: s.decode for s in SPECS if s.body is Body.FRAMES}
_ENCODERS: Final[dict[type[Any], tuple[bytes, Callable[[Any], Any], bool]]] = {
    s.cls: (s.tag, s.encode, s.body is Body.FRAMES) for s in SPECS}


# --------------------------------------------------------------------------- encode


def encode(msg: Message) -> list[bytes]:
    """Encode ``msg`` as the frames a ROUTER receives: sender, type, body (and a BULK's data)."""
    return [bytes(msg.sender), *encode_parts(msg)]


def encode_parts(msg: Message) -> list[bytes]:
    """The frames a DEALER sends: type and body (and a BULK's data).  Its
    identity, the sender's UUID, reaches the ROUTER as frame 1."""
    try:
        kind, encoder, frames = _ENCODERS[type(msg)]
    except KeyError:
        raise LocalProtocolError(f"not a huddle message: {msg!r}") from None
    if frames:  # its body in frames of its own, each bounded by the constructor
        return [kind, *encoder(msg)]
    body: bytes = encoder(msg)
    if len(body) > MAX_BODY:
        raise LocalProtocolError(f"{kind.decode()} body of {len(body)} octets exceeds {MAX_BODY}")
    return [kind, body]


# --------------------------------------------------------------------------- decode


def decode(frames: Sequence[bytes]) -> Message:
    """Decode the frames a ROUTER received into a message.

    Raises :class:`DecodeError` (and nothing else) if the frames are not a
    valid huddle message.
    """
    try:
        count = len(frames)
    except TypeError:
        raise DecodeError("frames must be a sequence of byte strings") from None
    if count == 4 and type(frames[1]) is bytes:
        whole = _FRAMES_DECODERS.get(frames[1])
        if whole is not None:
            return whole(frames)
    if count != 3:
        raise DecodeError(f"a message has 3 frames (4 for BULK), got {count}")
    raw_sender, kind, raw_body = frames[0], frames[1], frames[2]
    if not all(isinstance(f, bytes) for f in (raw_sender, kind, raw_body)):
        raise DecodeError("frames must be byte strings")
    if kind in _FRAMES_DECODERS:
        raise DecodeError(f"{kind.decode()} has 4 frames (sender, type, head, data), got 3")
    if len(raw_sender) != 16:
        raise DecodeError(f"sender UUID must be 16 octets, got {len(raw_sender)}")
    if len(raw_body) > MAX_BODY:
        raise DecodeError(f"body of {len(raw_body)} octets exceeds {MAX_BODY}")
    decoder = _DECODERS.get(kind)
    if decoder is None:
        binary = _BINARY_DECODERS.get(kind)
        if binary is None:
            raise DecodeError(f"unknown message type {kind[:8]!r}")
        try:
            return binary(NodeId(raw_sender), raw_body)
        except (LocalProtocolError, struct.error) as exc:
            raise DecodeError(f"{kind.decode()}: {exc}") from None
    try:
        body = raw_body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DecodeError(f"{kind.decode()} body is not UTF-8: {exc.reason} at octet {exc.start}") from None
    try:
        return decoder(NodeId(raw_sender), body)
    except LocalProtocolError as exc:
        raise DecodeError(f"{kind.decode()}: {exc}") from None
