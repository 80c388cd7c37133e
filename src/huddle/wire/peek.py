"""A message's sender and type read without decoding it, and the tags the fast paths compare.

The mesh takes its commonest messages (CHAT, BEAT) on fast paths that look at the raw frames
before any decoding (docs/architecture.md, "The CHAT fast path"): these names keep the type
tags in the wire, where the codec spells them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TAG_BEAT", "TAG_CHAT", "peek"]

TAG_CHAT: Final = b"CHAT"
TAG_BEAT: Final = b"BEAT"


def peek(frames: list[bytes]) -> tuple[bytes, bytes] | None:
    """The sender frame and the type tag of a message's frames (None: too few frames to tell);
    nothing is checked: :func:`~huddle.wire.decode` decides whether the message is valid."""
    if len(frames) < 2:
        return None
    return frames[0], frames[1]
