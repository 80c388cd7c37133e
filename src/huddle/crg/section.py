"""``[crg]``: CRG ScoreBoard's WebSocket on the node's API (docs/crg.md, "/WS").

Read by the node's configuration (docs/configuration.md): each field is a TOML key of the
``[crg]`` table and the flag ``--crg-KEY``.  A node loads this module whether or not a CRG
client ever connects, so it imports nothing else of the package.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

__all__ = ["CrgSection"]


@dataclass(frozen=True)
class CrgSection:
    """``[crg]``: whether ``/WS`` takes CRG's ``Set`` (read-only by default)."""

    TABLE: ClassVar[str] = "crg"
    FLAG_PREFIX: ClassVar[str] = "crg-"

    # A Set of what the document holds (team names, a jam's flags, a trip's points) becomes
    # operations, checked by the bout's rules as any write; off: every Set is refused.
    ws_writable: bool = False
