"""The group secrets a node holds, and how its mesh connections are secured.

A node holds one secret, or two while the group rotates (docs/security.md, "Rotating the
group secret"): the one **in use** and one **installed** beside it.  The rotation's three
steps are this module's three transitions, pure and checked here; the transport carries
them out (transport/rotation.py):

- :meth:`Keyring.install` a new secret of the same group beside the one in use;
- :meth:`Keyring.switch` to it: it is the one in use now, the other stays held;
- :meth:`Keyring.retire` the one no longer in use: it is dropped, and its key id
  remembered as retired (a retired secret is never installed again).

A keyring that was changed is kept in the data directory (``keyring``, mode 0600: the
held secrets' join codes, which one is in use, the retired key ids), so a node restarted
with its old ``--group-key`` runs with what it held, not with a secret retired since.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ConfigError
from .files import read_private, write_private
from .group import GroupSecret

__all__ = ["KEYRING_FILE", "MAX_HELD", "MAX_RETIRED", "Keyring", "KeyringError", "SecurityMode"]

KEYRING_FILE = "keyring"
MAX_HELD = 2  # the secret in use and the next one: a rotation at a time
MAX_RETIRED = 16  # retired key ids remembered (refused if installed again); the oldest forgotten


class SecurityMode(enum.Enum):
    """How a node admits peers to its mesh (``security.mode`` in ``GET /api/v1/node``)."""

    OPEN = "open"  # no group secret: anyone who knows the group's name (docs/security.md)
    GROUP = "group"  # CurveZMQ: whoever proves to hold the group secret
    ALLOW_LIST = "allow-list"  # CurveZMQ: only the node keys in DATA_DIR/trusted-keys (and the secret)


class KeyringError(Exception):
    """A rotation step that cannot be taken now; ``status`` is the API's answer
    (400: not a secret of this group; 404: no such key held; 409: not in this state)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclass(slots=True)
class Keyring:
    """The group secret in use, the one installed beside it during a rotation, the retired key ids."""

    current: GroupSecret
    held: list[GroupSecret] = field(default_factory=list)  # every secret held, in the order installed
    retired: list[str] = field(default_factory=list)  # key ids, oldest first

    def __post_init__(self) -> None:
        if all(s.key_id != self.current.key_id for s in self.held):
            self.held.insert(0, self.current)

    @property
    def key_id(self) -> str:
        return self.current.key_id

    @property
    def group(self) -> str:
        return self.current.group

    def secrets(self) -> tuple[GroupSecret, ...]:
        """Every secret held, the one in use first."""
        return (self.current, *(s for s in self.held if s.key_id != self.key_id))

    def find(self, key_id: str) -> GroupSecret:
        for secret in self.held:
            if secret.key_id == key_id:
                return secret
        if key_id in self.retired:
            raise KeyringError(404, f"key {key_id} was retired: it is no longer held")
        held = ", ".join(s.key_id for s in self.held)
        raise KeyringError(404, f"no key {key_id!r} is held (held: {held}); install it first: huddle group install FILE")

    def install(self, secret: GroupSecret) -> bool:
        """Hold ``secret`` beside the one in use; False if it is held already."""
        if secret.group != self.group:
            raise KeyringError(400, f"that is a secret of group {secret.group!r}, not of this node's group "
                                    f"{self.group!r}: make one with huddle group new {self.group!r}")
        if any(s.key_id == secret.key_id for s in self.held):
            return False
        if secret.key_id in self.retired:
            raise KeyringError(409, f"key {secret.key_id} was retired: a retired secret is not used again "
                                    "(make a new one with huddle group new)")
        if len(self.held) >= MAX_HELD:
            others = [s.key_id for s in self.held if s.key_id != self.key_id]
            raise KeyringError(409, f"this node holds {MAX_HELD} secrets already: retire {', '.join(others)} first "
                                    "(one rotation at a time)")
        self.held.append(secret)
        return True

    def switch(self, key_id: str) -> bool:
        """Use the held key ``key_id`` from now on; False if it is in use already."""
        secret = self.find(key_id)
        if secret.key_id == self.key_id:
            return False
        self.current = secret
        return True

    def retire(self, key_id: str) -> GroupSecret | None:
        """Drop the held key ``key_id``, which must not be the one in use; the secret dropped,
        or None if it was retired already."""
        if key_id in self.retired and all(s.key_id != key_id for s in self.held):
            return None
        secret = self.find(key_id)
        if secret.key_id == self.key_id:
            raise KeyringError(409, f"key {key_id} is the one in use: switch to another first "
                                    "(huddle group switch KEY_ID)")
        self.held.remove(secret)
        self.retired.append(key_id)
        del self.retired[:-MAX_RETIRED]
        return secret

    def describe(self) -> list[dict[str, str]]:
        """Each held key id and its state, the one in use first (never a secret)."""
        return [{"key_id": s.key_id, "state": "in-use" if s.key_id == self.key_id else "installed"}
                for s in self.secrets()]

    # ------------------------------------------------------------------ the file

    def to_text(self) -> str:
        return json.dumps({"group": self.group, "current": self.key_id, "retired": self.retired,
                           "held": [s.code for s in self.held]}, indent=1) + "\n"

    def save(self, data_dir: Path) -> None:
        write_private(data_dir / KEYRING_FILE, self.to_text())

    @classmethod
    def restore(cls, data_dir: Path, given: GroupSecret | None) -> Keyring | None:
        """The keyring a node starts with: None without a secret; the saved one if the node
        rotated before and ``given`` (its --group-key or --join) is held or retired in it;
        else ``given`` alone (a new secret given on the command line starts afresh)."""
        if given is None:
            return None
        path = data_dir / KEYRING_FILE
        if not path.exists():
            return cls(given)
        text = read_private(path, "the keyring")
        try:
            raw = json.loads(text)
            group, current, retired, codes = raw["group"], raw["current"], raw["retired"], raw["held"]
            if not (isinstance(group, str) and isinstance(current, str) and isinstance(retired, list)
                    and isinstance(codes, list) and all(isinstance(x, str) for x in [*retired, *codes])):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"the keyring {path} is damaged: remove it to start with the secret given "
                              "(--group-key or --join) alone") from None
        if group != given.group:
            return cls(given)
        held = [given if given.code == code else GroupSecret.from_code(group, code) for code in codes]
        ids = [s.key_id for s in held]
        if given.key_id not in ids and given.key_id not in retired:
            return cls(given)
        if current not in ids:
            raise ConfigError(f"the keyring {path} is damaged (its key in use is not held): remove it")
        return cls(held[ids.index(current)], held, list(retired))
