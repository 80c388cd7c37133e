"""``[zre]``: whether a node speaks ZRE to Zyre and pyre peers, on which port and interface.

Read by the node's configuration (docs/configuration.md): each field is a TOML key of
the ``[zre]`` table and the flag ``--zre-KEY``; ``enabled`` is ``--zre``.  A node loads
this module whether or not it speaks ZRE, so it imports nothing else of the package.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import ConfigError

__all__ = ["DEFAULT_ZRE_PORT", "ZreSection"]

DEFAULT_ZRE_PORT = 5670  # RFC 36's beacon port, Zyre's and pyre's default


@dataclass(frozen=True)
class ZreSection:
    """``[zre]``: speak ZRE (beacons on UDP ``port``, on ``interface``'s broadcast address)."""

    TABLE: ClassVar[str] = "zre"
    FLAG_PREFIX: ClassVar[str] = "zre-"

    enabled: bool = field(default=False, metadata={"flag": "zre"})
    port: int = DEFAULT_ZRE_PORT  # UDP port of the beacons
    interface: str | None = None  # None: the node's own interface (--interface)
    # A secured group's node speaks ZRE over CURVE with v3 beacons (docs/zre.md, "CURVE"); plain:
    # without, in clear, v2 beacons (what pyre and a Zyre node without a key speak).
    plain: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.port <= 65535:
            raise ConfigError(f"ZRE beacon port must be 1..65535, got {self.port}")
