"""A node's data directory: the lock against two nodes sharing it, the node's
persistent UUID (``node-id``) and the nodes it excluded (``excluded.json``).

The event log (``log.sqlite``), its mark and the previous identities kept by
``huddle repair`` live in the same directory (:mod:`huddle.log.integrity`);
the post store under ``posts/`` (:mod:`huddle.posts.store`).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

from ..errors import ConfigError, DataDirLocked
from ..ids import NodeId

__all__ = ["DataDir"]


class DataDir:
    """A node's directory: its persistent UUID and a lock against sharing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_fd: int | None = None

    def lock(self) -> None:
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create data dir {self.path}: {exc.strerror}") from None
        lock_path = self.path / "lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise DataDirLocked(
                f"data dir {self.path} is in use by another huddle node (pid {holder}); "
                "give each node its own --data-dir"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def excluded(self) -> dict[NodeId, str]:
        """The nodes this node excluded, from ``excluded.json`` (kept for good)."""
        path = self.path / "excluded.json"
        if not path.exists():
            return {}
        try:
            raw = json.loads(path.read_text())
            return {NodeId.from_hex(k): str(v) for k, v in raw.items()}
        except (ValueError, AttributeError) as exc:
            raise ConfigError(f"{path} is corrupt ({exc}); fix or remove it (it lists excluded nodes)") from None

    def save_excluded(self, excluded: dict[NodeId, str]) -> None:
        path = self.path / "excluded.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({str(k): v for k, v in sorted(excluded.items())}, indent=1) + "\n")
        os.replace(tmp, path)

    def node_id(self, new: NodeId | None = None) -> NodeId:
        """The UUID kept in ``node-id``; created on first use, as ``new`` when given (a
        node passes the id its key gives, so its id is bound to its key), else random."""
        path = self.path / "node-id"
        if path.exists():
            text = path.read_text().strip()
            try:
                return NodeId.from_hex(text)
            except ValueError:
                raise ConfigError(f"{path} is corrupt ({text[:40]!r}); remove it to take a new UUID") from None
        node_id = NodeId.random() if new is None else new
        tmp = path.with_suffix(".tmp")
        tmp.write_text(f"{node_id}\n")
        os.replace(tmp, path)
        return node_id
