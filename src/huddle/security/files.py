"""Secret files in a node's data directory or beside it: written 0600 and atomically,
refused when another user could read them (a key others can read is a key others hold)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from ..errors import ConfigError

__all__ = ["read_private", "write_private"]


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (0600), replacing it atomically."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # O_CREAT's mode is masked by the umask, and an old tmp keeps its own
            os.write(fd, text.encode("utf-8"))
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        raise ConfigError(f"cannot write {path}: {exc.strerror}") from None


def read_private(path: Path, what: str) -> str:
    """The text of ``path``; a :class:`ConfigError` if it cannot be read, is not a regular file,
    or its mode lets anyone but its owner read or write it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except FileNotFoundError:
        raise ConfigError(f"{what} {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} {path} is not a regular file")
        if st.st_mode & 0o077:
            raise ConfigError(f"{what} {path} can be read or changed by other users (mode "
                              f"{stat.S_IMODE(st.st_mode):04o}); make it private: chmod 600 {path}")
        raw = os.read(fd, 64 * 1024)
    finally:
        os.close(fd)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{what} {path} is damaged (not text)") from None
