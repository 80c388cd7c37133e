"""The HTTP API's token: required when the API listens beyond loopback.

It is 32 random octets (``secrets``), kept in ``DATA_DIR/api-token`` (0600), created on
first need and shown once, when it is created.  Compared in constant time.
"""

from __future__ import annotations

import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

from ..errors import ConfigError
from .files import read_private, write_private

__all__ = ["TOKEN_FILE", "ApiToken", "load_or_create_token", "token_matches"]

TOKEN_FILE = "api-token"  # noqa: S105 - a file name, not a password
_TOKEN = re.compile(r"^[A-Za-z0-9_-]{43}$")  # secrets.token_urlsafe(32)


@dataclass(frozen=True, slots=True)
class ApiToken:
    value: str
    path: Path
    created: bool  # made just now: the one time it is shown

    def __repr__(self) -> str:
        return f"ApiToken(path={str(self.path)!r}, created={self.created})"


def token_matches(given: str | None, expected: str) -> bool:
    """Is ``given`` the token?  Constant time in the token's content."""
    if given is None:
        return False
    return hmac.compare_digest(given.encode("utf-8", "replace"), expected.encode("utf-8"))


def load_or_create_token(data_dir: Path) -> ApiToken:
    """The token in ``DATA_DIR/api-token``, created (0600) if there is none."""
    path = data_dir / TOKEN_FILE
    if not path.exists() and not path.is_symlink():
        value = secrets.token_urlsafe(32)
        while value.startswith("-"):  # 1 in 64: `huddle ... --token -abc` would read it as an option
            value = secrets.token_urlsafe(32)
        write_private(path, value + "\n")
        return ApiToken(value, path, created=True)
    value = read_private(path, "the API token").strip()
    if not _TOKEN.match(value):
        raise ConfigError(f"the API token {path} is damaged; remove it and a new one is made at the next start")
    return ApiToken(value, path, created=False)
