"""``[guests]``: whether a node hosts Noam guests, and on which ports (the guests feature's settings).

Read by the node's configuration (docs/configuration.md): each field is a TOML
key of the ``[guests]`` table and the flag ``--guest-KEY``; ``enabled`` is
``--guests``.  It checks itself.  A node loads this module whether or not it
hosts guests, so it imports nothing of the guests' side.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import ConfigError

__all__ = ["GuestsSection"]


@dataclass(frozen=True)
class GuestsSection:
    """``[guests]``: host guests (marco / polo, TCP and WebSocket) and their ports."""

    TABLE: ClassVar[str] = "guests"
    FLAG_PREFIX: ClassVar[str] = "guest-"

    enabled: bool = field(default=False, metadata={"flag": "guests"})
    marco_port: int = 1030  # UDP port of marco / polo
    port: int = 0  # TCP port guests connect to; 0: a free one
    ws_port: int = 8089  # WebSocket port for guests (browsers); 0: a free one
    max_message: int = 999_999  # octets; a longer length prefix gets the guest an error and a disconnect
    # A secured group's room takes guests that give no room key too (Noam lemmas as written send
    # none), each marked keyless in the room and in the log (docs/guests.md, "Keyless guests").
    keyless: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.marco_port <= 65535:
            raise ConfigError(f"guest marco port must be 1..65535, got {self.marco_port}")
        for what, port in (("guest port", self.port), ("guest WebSocket port", self.ws_port)):
            if not 0 <= port <= 65535:
                raise ConfigError(f"{what} must be 0..65535, got {port}")
        if not 2 <= self.max_message <= 999_999:
            raise ConfigError(f"guest max message must be 2..999999 octets (6 digits), got {self.max_message}")
