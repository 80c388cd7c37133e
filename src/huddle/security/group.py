"""The group secret: a join code people can read aloud, the secret it gives, and the keys
derived from that secret for each mechanism that uses it (docs/security.md).

- The join code is 100 random bits with a 20-bit check (:mod:`.codes`).
- The secret is ``scrypt(code, salt = context || group name)``: memory-hard, so guessing
  codes offline costs memory as well as time, and bound to the group's name, so one code
  gives different secrets in different groups.  The code alone (with the group's name)
  suffices to join: the group file only saves typing it.
- Each use of the secret has its own key, ``BLAKE2b(key=secret, person=context)`` with
  a distinct context per use: the CurveZMQ server and client keypairs, the naming
  broker announcements' MAC key, the guests' room key.  No use of one key can be
  replayed as another.
"""

from __future__ import annotations

import base64
import hashlib
import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

from nacl.public import PrivateKey

from ..errors import ConfigError
from .codes import BadCode, new_join_code, parse_join_code
from .files import read_private, write_private
from .identity import CurveKeypair

__all__ = ["GROUP_FILE", "OPEN_GROUP", "GroupSecret", "load_group_file", "parse_group_file"]

GROUP_FILE = "group.key"  # the default name `huddle group new` writes
MAX_GROUP_OCTETS = 255  # the wire's cap on a group name (wire/membership.py MAX_GROUP)

# scrypt's cost: 32 MiB and about 0.1 s per derivation here; a node derives once at start.
_SCRYPT_N, _SCRYPT_R, _SCRYPT_P = 2**15, 8, 1
_SCRYPT_SALT = b"huddle group secret v1\x00"

# One context per derived key (BLAKE2b's personalisation: at most 16 octets).
_CONTEXTS = {
    "curve-server": b"huddle-curve-srv",
    "curve-client": b"huddle-curve-cli",
    "naming": b"huddle-naming-mc",
    "room": b"huddle-room-key1",
}


def _derive_secret(group: str, code: str) -> bytes:
    canonical = code.replace("-", "").encode("ascii")
    return hashlib.scrypt(canonical, salt=_SCRYPT_SALT + group.encode("utf-8"), n=_SCRYPT_N, r=_SCRYPT_R,
                          p=_SCRYPT_P, maxmem=64 * 1024 * 1024, dklen=32)


def _check_group(group: str) -> None:
    if not group or len(group.encode("utf-8", "surrogatepass")) > MAX_GROUP_OCTETS:
        raise ConfigError(f"a secured group needs a name of 1..{MAX_GROUP_OCTETS} octets of UTF-8, got {group!r}")


@dataclass(frozen=True, slots=True)
class GroupSecret:
    """A group's name, its join code and the secret they give."""

    group: str
    code: str  # canonical: XXXX-XXXX-XXXX-XXXX-XXXX-XXXX
    secret: bytes  # 32 octets

    def __repr__(self) -> str:  # never print the secret (nor the code, which gives it)
        return f"GroupSecret(group={self.group!r}, key_id={self.key_id!r})"

    @classmethod
    def new(cls, group: str) -> GroupSecret:
        """A fresh secret for ``group``."""
        _check_group(group)
        code = new_join_code()
        return cls(group, code, _derive_secret(group, code))

    @classmethod
    def from_code(cls, group: str, code: str) -> GroupSecret:
        """The secret a join code gives in ``group``; :class:`ConfigError` naming the mistake."""
        _check_group(group)
        try:
            canonical = parse_join_code(code)
        except BadCode as exc:
            raise ConfigError(f"bad join code: {exc}") from None
        return cls(group, canonical, _derive_secret(group, canonical))

    @property
    def key_id(self) -> str:
        """A short public name of this secret (which one a node holds, for rotation): 8 hex digits."""
        return hashlib.blake2b(self.secret, digest_size=4, person=b"huddle-key-id").hexdigest()

    def derive(self, use: str) -> bytes:
        """The 32-octet key for ``use`` (one of curve-server, curve-client, naming, room)."""
        return hashlib.blake2b(key=self.secret, person=_CONTEXTS[use], digest_size=32).digest()

    def _curve(self, use: str) -> CurveKeypair:
        private = PrivateKey(self.derive(use))
        return CurveKeypair(public=bytes(private.public_key), secret=bytes(private))

    def curve_server(self) -> CurveKeypair:
        """The mesh ROUTER's CurveZMQ keypair: only holders of the secret can act as a member's server."""
        return self._curve("curve-server")

    def curve_client(self) -> CurveKeypair:
        """The CurveZMQ keypair a member dials with: proof to the server that it holds the secret."""
        return self._curve("curve-client")

    def naming_key(self) -> bytes:
        """The MAC key of naming broker announcements."""
        return self.derive("naming")

    def room_key(self) -> bytes:
        """The guests' room key."""
        return self.derive("room")

    def room_key_text(self) -> str:
        """The guests' room key as people type it (a guest's register gives it): 120 bits of
        :meth:`room_key` in base32 (RFC 4648), six groups of four, ``XXXX-XXXX-XXXX-XXXX-XXXX-XXXX``."""
        text = base64.b32encode(self.room_key()[:15]).decode("ascii")
        return "-".join(text[i:i + 4] for i in range(0, len(text), 4))

    def file_text(self) -> str:
        name = json.dumps(self.group, ensure_ascii=False).replace("\x7f", "\\u007f")  # a TOML basic string
        return ("# huddle group secret. Whoever holds this file or its join code can join the group:\n"
                "# keep it private (mode 0600), and give the join code only to members.\n"
                f"group = {name}\nkey-id = \"{self.key_id}\"\njoin-code = \"{self.code}\"\n"
                f"secret = \"{self.secret.hex()}\"\n")

    def save(self, path: Path) -> None:
        """Write the group file (0600); refuses to overwrite one."""
        if path.exists() or path.is_symlink():
            raise ConfigError(f"{path} exists already: a group file is never overwritten (choose another --out)")
        write_private(path, self.file_text())


def load_group_file(path: Path) -> GroupSecret:
    """The group file at ``path``, checked whole: its secret must be the one its join code gives."""
    return parse_group_file(read_private(path, "the group file"), str(path))


def parse_group_file(text: str, path: str = "given") -> GroupSecret:
    """A group file's text (``path`` names it in errors), checked whole as :func:`load_group_file` does."""
    try:
        raw = tomllib.loads(text)
        group, code, secret_hex, key_id = raw["group"], raw["join-code"], raw["secret"], raw["key-id"]
        if not all(isinstance(v, str) for v in (group, code, secret_hex, key_id)):
            raise TypeError
        secret = bytes.fromhex(secret_hex)
    except (tomllib.TOMLDecodeError, KeyError, TypeError, ValueError):
        raise ConfigError(f"the group file {path} is damaged (it needs group, key-id, join-code and secret); "
                          "remove it and join with --group NAME --join CODE, or restore it from a backup") from None
    loaded = GroupSecret.from_code(group, code)
    if loaded.secret != secret or loaded.key_id != key_id:
        raise ConfigError(f"the group file {path} is damaged: its secret is not the one its join code gives")
    return loaded


# What a node says about its group's protection (start-up log, status page, GET /api/v1/node).
OPEN_GROUP = ("open group: anyone on this network can join and read (chosen with --open: no group secret, so events, "
              "messages and posts travel in clear and anyone who knows the group's name is admitted; "
              "see docs/security.md)")
