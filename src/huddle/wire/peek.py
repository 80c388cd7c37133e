"""A message's sender and type read without decoding it, and the type tags by name.

The mesh takes its commonest messages (CHAT, BEAT) on fast paths that look at the raw
frames before any decoding, and the driver counts CHAT's octets on its way in
(docs/architecture.md, "The CHAT fast path"): they compare these names, so that no file
outside the wire spells a tag.  Each is its class's ``TAG``, the one the table of message
types (``framing.SPECS``) encodes and decodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .delivery import Bulk, Chat, Dack, Dmsg
from .framing import SPECS, Body
from .membership import Beat, Gbye, Group, Helo, Members, Peer, Time
from .records import Gsip, Xmsg
from .reports import Raws

__all__ = [
    "TAG_BEAT", "TAG_BOUT", "TAG_BULK", "TAG_CHAT", "TAG_DACK", "TAG_DMSG", "TAG_GBYE", "TAG_GSIP", "TAG_HELO",
    "TAG_MEMB", "TAG_PEER", "TAG_RAWS", "TAG_TIME", "TAG_XMSG", "peek",
]

TAG_HELO: Final = Helo.TAG
TAG_PEER: Final = Peer.TAG
TAG_MEMB: Final = Members.TAG
TAG_BOUT: Final = Group.TAG
TAG_GBYE: Final = Gbye.TAG
TAG_BEAT: Final = Beat.TAG
TAG_TIME: Final = Time.TAG
TAG_RAWS: Final = Raws.TAG
TAG_GSIP: Final = Gsip.TAG
TAG_XMSG: Final = Xmsg.TAG
TAG_CHAT: Final = Chat.TAG
TAG_DMSG: Final = Dmsg.TAG
TAG_DACK: Final = Dack.TAG
TAG_BULK: Final = Bulk.TAG

# The types whose body is frames of their own (BULK): a message of one has 4 frames.
_FOUR_FRAMES: Final = frozenset(spec.tag for spec in SPECS if spec.body is Body.FRAMES)


def peek(frames: Sequence[bytes]) -> tuple[bytes, bytes] | None:
    """The sender's identity (frame 1, as received) and the type tag (frame 2) of the
    frames of a message, its body not read; None if they are not as many frames as a
    message has (3, or 4 for a type whose body is frames of its own).  Neither the
    identity nor the tag is checked: :func:`~huddle.wire.decode` decides whether the
    message is valid."""
    count = len(frames)
    if count == 3 or (count == 4 and type(frames[1]) is bytes and frames[1] in _FOUR_FRAMES):
        return frames[0], frames[1]
    return None
