"""A node's data directory: the lock against two nodes sharing it, the node's
persistent UUID (``node-id``) and the nodes it excluded (``excluded.json``).

The event log (``log.sqlite``), its mark and the previous identities kept by
``huddle repair`` live in the same directory (:mod:`huddle.log.integrity`);
the post store under ``posts/`` (:mod:`huddle.posts.store`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import time
from pathlib import Path
from typing import Final

from ..errors import ConfigError, DataDirLocked
from ..ids import NodeId

__all__ = ["LOCK_WAIT", "DataDir"]

log = logging.getLogger("huddle.log")

# The lock file holds the holder's pid, and the word "stopping" once it stops: a node started
# on the directory then waits this many seconds at most for it to let go (a node stops in well
# under a second), rather than refusing at once.  A node that let go cleanly empties the file;
# a pid found in it by a node that takes the lock is one that did not (it crashed, or was killed).
LOCK_WAIT: Final = 3.0
_STOPPING = "stopping"


class DataDir:
    """A node's directory: its persistent UUID and a lock against sharing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock_fd: int | None = None

    def lock(self, wait: float = LOCK_WAIT) -> None:
        """Take the directory's lock, or raise DataDirLocked saying who holds it.  A holder
        that is stopping is waited for, ``wait`` seconds at most."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create data dir {self.path}: {exc.strerror}") from None
        lock_path = self.path / "lock"
        fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                pid, stopping = self._holder(fd)
                if stopping and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                os.close(fd)
                if stopping:
                    raise DataDirLocked(f"data dir {self.path} is held by huddle node pid {pid}, still stopping "
                                        f"after {wait:g} s; start this node again once that one has exited") from None
                raise DataDirLocked(
                    f"data dir {self.path} is in use by another huddle node (pid {pid}); "
                    "give each node its own --data-dir"
                ) from None
        pid, _ = self._holder(fd)
        if pid != "unknown":
            log.warning("data dir %s: took over the lock of huddle node pid %s, which did not stop cleanly "
                        "(it crashed or was killed)", self.path, pid)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._lock_fd = fd

    @staticmethod
    def _holder(fd: int) -> tuple[str, bool]:
        """The pid in the lock file ("unknown" if none) and whether it is marked stopping."""
        words = os.pread(fd, 64, 0).decode(errors="replace").split()
        return (words[0] if words else "unknown"), _STOPPING in words[1:]

    def stopping(self) -> None:
        """Mark the lock as this node's, stopping: a node started on the directory meanwhile
        waits for it to let go (:meth:`lock`)."""
        if self._lock_fd is not None:
            os.pwrite(self._lock_fd, f"{os.getpid()} {_STOPPING}\n".encode(), 0)

    def unlock(self) -> None:
        """Let go of the lock, cleanly: the file emptied first, so the next holder finds no pid in it."""
        if self._lock_fd is not None:
            os.ftruncate(self._lock_fd, 0)
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
