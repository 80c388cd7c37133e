"""The group secrets a node holds, and how its mesh connections are secured.

One secret today.  Rotation (a later step of issue 22) adds a second beside it while
the group switches; everything that derives keys from the group secret asks the keyring,
so that is the one place that will change.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .group import GroupSecret

__all__ = ["Keyring", "SecurityMode"]


class SecurityMode(enum.Enum):
    """How a node admits peers to its mesh (``security.mode`` in ``GET /api/v1/node``)."""

    OPEN = "open"  # no group secret: anyone who knows the group's name (docs/security.md)
    GROUP = "group"  # CurveZMQ: whoever proves to hold the group secret
    ALLOW_LIST = "allow-list"  # CurveZMQ: only the node keys in DATA_DIR/trusted-keys (and the secret)


@dataclass(frozen=True, slots=True)
class Keyring:
    """The group secret in use (rotation will add the next one here)."""

    current: GroupSecret

    @property
    def key_id(self) -> str:
        return self.current.key_id

    def secrets(self) -> tuple[GroupSecret, ...]:
        """Every secret held, the one in use first."""
        return (self.current,)
