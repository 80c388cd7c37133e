"""``[pairing]``: the pairing door of a member, and how a device without the secret asks to join
(docs/security.md, "Pairing").

Read by the node's configuration (docs/configuration.md): each field is a TOML key of the
``[pairing]`` table and the flag ``--pair-KEY`` (``with`` is ``--pair-with``).  It checks
itself, and imports nothing of the door's: a node loads it whether or not it pairs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ..errors import ConfigError

__all__ = ["PairingSection"]


@dataclass(frozen=True)
class PairingSection:
    """``[pairing]``: the door's port, how long a request waits, the newcomer's listening and its doors."""

    TABLE: ClassVar[str] = "pairing"
    FLAG_PREFIX: ClassVar[str] = "pair-"

    port: int = 0  # the door's TCP port on the mesh's interface; 0: a free one
    request_ttl: float = 600.0  # seconds a request waits for a member's answer (and a refusal is remembered)
    listen: float = 3.0  # seconds a device without the secret listens for doors before it founds the group
    # Doors to ask (HOST:PORT; a member's 'huddle info' shows its door), for set-ups without beacons.
    pair_with: tuple[str, ...] = field(default=(), metadata={"key": "with"})

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"pairing port must be 0..65535, got {self.port}")
        if not 10 <= self.request_ttl <= 86400:
            raise ConfigError("pairing request-ttl must be 10..86400 seconds")
        if not 0 <= self.listen <= 600:
            raise ConfigError("pairing listen must be 0..600 seconds")
        for door in self.pair_with:
            host, _, port = door.rpartition(":")
            if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
                raise ConfigError(f"--pair-with {door!r}: expected HOST:PORT (a member's door: huddle info)")
