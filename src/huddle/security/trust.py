"""The allow-list of a strict group: the node keys admitted to the mesh, kept in the data
directory (``DATA_DIR/trusted-keys``, mode 0600: whoever may change it decides who joins).

One key a line, the Ed25519 public key in hex, then optionally ``# NAME``::

    # huddle trusted node keys (allow-list mode): one Ed25519 public key (hex) a line
    3b6a27bc...e9  # judge-table

A key is given as its 64 hex digits.  A key already listed may also be named by its
fingerprint (``XXXX-XXXX-XXXX-XXXX``, as ``huddle info`` shows it): enough to remove it,
not to add it (a fingerprint is a hash: the key cannot be had from it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from nacl.exceptions import CryptoError
from nacl.signing import VerifyKey

from ..errors import ConfigError
from .codes import fingerprint
from .files import read_private, write_private

__all__ = ["TRUST_FILE", "TrustList", "TrustedKey", "curve_public", "parse_public_key"]

TRUST_FILE = "trusted-keys"
MAX_NAME = 64  # octets of a key's name in the file
_HEADER = "# huddle trusted node keys (allow-list mode): one Ed25519 public key (hex) a line, then '# name'\n"
_HEX = re.compile(r"^[0-9a-fA-F]{64}$")
_FINGERPRINT = re.compile(r"^[0-9A-Za-z]{4}(-[0-9A-Za-z]{4}){3}$")


def curve_public(public_key: bytes) -> bytes:
    """The CurveZMQ (X25519) public key of an Ed25519 public key (libsodium's conversion):
    the key a node in allow-list mode dials with.  ValueError if it is not a valid key."""
    try:
        return bytes(VerifyKey(public_key).to_curve25519_public_key())
    except (CryptoError, ValueError, TypeError) as exc:
        raise ValueError(f"not an Ed25519 public key: {exc}") from None


def parse_public_key(text: str) -> bytes:
    """An Ed25519 public key given as 64 hex digits; :class:`ConfigError` saying what is wrong."""
    text = text.strip()
    if not _HEX.match(text):
        hint = " (a fingerprint names a listed key only: add the key itself, its 'public_key' in " \
               "'huddle info --json')" if _FINGERPRINT.match(text) else ""
        raise ConfigError(f"a node key is 64 hex digits, got {text!r}{hint}")
    key = bytes.fromhex(text)
    try:
        curve_public(key)
    except ValueError:
        raise ConfigError(f"{text} is not a valid Ed25519 public key") from None
    return key


@dataclass(frozen=True, slots=True)
class TrustedKey:
    public_key: bytes  # Ed25519, 32 octets
    name: str = ""

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    def as_dict(self) -> dict[str, str]:
        return {"public_key": self.public_key.hex(), "fingerprint": self.fingerprint, "name": self.name}


class TrustList:
    """The keys of ``DATA_DIR/trusted-keys``, in file order; every change is written at once."""

    def __init__(self, path: Path, keys: list[TrustedKey]) -> None:
        self.path = path
        self._keys: dict[bytes, TrustedKey] = {k.public_key: k for k in keys}

    @classmethod
    def load(cls, data_dir: Path) -> TrustList:
        """The list in ``data_dir`` (empty if there is no file yet)."""
        path = data_dir / TRUST_FILE
        if not path.exists() and not path.is_symlink():
            return cls(path, [])
        keys: list[TrustedKey] = []
        for n, line in enumerate(read_private(path, "the trusted keys").splitlines(), 1):
            body, _, comment = line.partition("#")
            if not body.strip():
                continue
            try:
                key = parse_public_key(body)
            except ConfigError as exc:
                raise ConfigError(f"{path} line {n}: {exc}") from None
            keys.append(TrustedKey(key, comment.strip()))
        return cls(path, keys)

    def entries(self) -> list[TrustedKey]:
        return list(self._keys.values())

    def __contains__(self, public_key: bytes) -> bool:
        return public_key in self._keys

    def find(self, text: str) -> TrustedKey | None:
        """The listed key ``text`` names: its hex, or its fingerprint."""
        text = text.strip()
        if _HEX.match(text):
            return self._keys.get(bytes.fromhex(text))
        wanted = text.upper()
        return next((k for k in self._keys.values() if k.fingerprint == wanted), None)

    def add(self, public_key: bytes, name: str = "") -> TrustedKey:
        """List ``public_key`` (renamed if listed already) and write the file."""
        name = " ".join(name.split())
        if len(name.encode("utf-8")) > MAX_NAME:
            raise ConfigError(f"a trusted key's name is at most {MAX_NAME} octets")
        key = TrustedKey(public_key, name)
        self._keys[public_key] = key
        self._save()
        return key

    def remove(self, public_key: bytes) -> bool:
        """Unlist ``public_key`` and write the file; False if it was not listed."""
        if self._keys.pop(public_key, None) is None:
            return False
        self._save()
        return True

    def _save(self) -> None:
        lines = [f"{k.public_key.hex()}  # {k.name}" if k.name else k.public_key.hex() for k in self._keys.values()]
        write_private(self.path, _HEADER + "".join(line + "\n" for line in lines))
