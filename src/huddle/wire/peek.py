"""The type tags the mesh's fast paths compare with a message's raw frames.

The mesh takes its commonest messages (CHAT, BEAT) on fast paths that look at the frames
before any decoding (docs/architecture.md, "The CHAT fast path"): these names keep the tags
in the wire, where the codec spells them, so that no core module spells one.
"""

from __future__ import annotations

from typing import Final

__all__ = ["TAG_BEAT", "TAG_CHAT"]

TAG_CHAT: Final = b"CHAT"
TAG_BEAT: Final = b"BEAT"
