"""The post store in a node's data directory.

    posts/lock          flock: one process per store
    posts/ID.json       metadata and the local arrival sequence (the server's order)
    posts/ID.data       the content
    posts/ID.part       content of an interrupted fetch (resumed where it stops)
    peers/UUID.json     per peer: the range of its posts we have been through

Content goes to and from disk in chunks and is never held whole in memory.
Its SHA1 is checked on arrival (before a post is kept; a sealed post's SHA-256 too,
model.py) and before it is served
(again whenever the file's size or modification time changed); a file that
does not match is dropped, and the peers' ranges are forgotten so that the
post is fetched again.  The node runs that check in a thread (:meth:`unchecked`,
:func:`digest_file`, :meth:`checked`) so that a large post does not hold its
event loop; :meth:`read` does it in line when nobody did.  Content is read
with ``pread`` on a descriptor kept open while the post is being served.
Fetched chunks are written (``pwrite``) by a writer thread and hashed by two
hashing threads (SHA1, SHA-256), each in the order they come, so that the node's event loop
goes on receiving meanwhile and the three run side by side (all release the
GIL); at most ``MAX_QUEUED`` chunks wait for them.
"""

from __future__ import annotations

import bisect
import contextlib
import fcntl
import hashlib
import json
import logging
import os
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import IO, Any

from ..errors import ConfigError, DataDirLocked
from ..security import NodeIdentity
from .model import HEAD, TAIL, CorruptContent, Post, PostError, Range, UnknownPost, is_post_id

__all__ = ["PostStore", "Upload", "digest_file"]

log = logging.getLogger("huddle.posts")

READ_BLOCK = 1024 * 1024
OPEN_READERS = 8  # descriptors of served posts kept open
MAX_QUEUED = 8  # fetched chunks waiting for the writer and hashing threads; one more waits for the oldest


class _Part:
    """A ``.part`` file being written by the writer thread, its chunks in the order given."""

    __slots__ = ("error", "fd")

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.error: OSError | None = None  # the first write that failed; later ones are not tried


def _write(part: _Part, offset: int, data: bytes | memoryview) -> None:
    """In the writer thread: ``data`` at ``offset``.  When a write fails (the disk is full),
    the file is cut back to where that chunk began, so that it holds only whole chunks that
    came before, and every later chunk of the file fails with the same error."""
    if part.error is not None:
        raise part.error
    view = memoryview(data)
    written = 0
    try:
        while written < len(view):
            written += os.pwrite(part.fd, view[written:], offset + written)
    except OSError as exc:
        part.error = exc
        with contextlib.suppress(OSError):
            os.ftruncate(part.fd, offset)
        raise


class _Digests:
    """The content's SHA1 (Hydra's digest) and SHA-256 (a sealed post's), fed together."""

    __slots__ = ("sha1", "sha256")

    def __init__(self) -> None:
        self.sha1 = hashlib.sha1(usedforsecurity=False)
        self.sha256 = hashlib.sha256()

    def update(self, data: bytes | memoryview) -> None:
        self.sha1.update(data)
        self.sha256.update(data)


def hash_file(path: Path) -> tuple[_Digests, int]:
    """Both digests and the size of a file, read in blocks (blocking)."""
    h = _Digests()
    size = 0
    with path.open("rb") as f:
        while block := f.read(READ_BLOCK):
            h.update(block)
            size += len(block)
    return h, size


def digest_file(path: Path) -> tuple[str, int]:
    """SHA1 (hex) and size of a file, read in blocks (blocking: may run in a thread)."""
    h = hashlib.sha1(usedforsecurity=False)
    size = 0
    with path.open("rb") as f:
        while block := f.read(READ_BLOCK):
            h.update(block)
            size += len(block)
    return h.hexdigest(), size


class Upload:
    """Content being added by hand (a file, an HTTP body): hashed as it is written."""

    def __init__(self, store: PostStore) -> None:
        self._store = store
        self.path = store.posts / f"upload-{os.getpid()}-{id(self):x}.tmp"
        self._file: IO[bytes] = self.path.open("wb")
        self._hash = _Digests()
        self.size = 0

    def write(self, data: bytes) -> None:
        self._file.write(data)
        self._hash.update(data)
        self.size += len(data)

    def finish(self, subject: str, timestamp: str, parent_id: str, mime_type: str) -> tuple[Post, bool]:
        """Keep the post, sealed by the store's identity if it has one; (post, False) if the
        store already held it."""
        self._file.close()
        try:
            post = Post(subject, timestamp, parent_id, mime_type, self._hash.sha1.hexdigest(), self.size)
            if self._store.identity is not None:
                post = post.seal(self._store.identity, self._hash.sha256.hexdigest())
            if parent_id and not self._store.holds(parent_id.lower()):
                raise PostError(f"parent post {parent_id} is not in this node's store")
        except PostError:
            self.path.unlink(missing_ok=True)
            raise
        return post, self._store.keep(post, self.path)

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # its last write may fail again (a full disk)
            self._file.close()
        self.path.unlink(missing_ok=True)


class PostStore:
    def __init__(self, data_dir: Path, identity: NodeIdentity | None = None) -> None:
        self.identity = identity  # seals the posts added here (uploads); None: they go out unsealed
        self.posts = data_dir / "posts"
        self.peers = data_dir / "peers"
        try:
            self.posts.mkdir(parents=True, exist_ok=True)
            self.peers.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ConfigError(f"cannot create the post store in {data_dir}: {exc.strerror}") from None
        self._lock = os.open(self.posts / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock)
            raise DataDirLocked(f"the post store {self.posts} is in use by another process") from None
        self._meta: dict[str, Post] = {}
        self._seq: dict[str, int] = {}
        self._order: list[tuple[int, str]] = []  # (seq, id), oldest first
        self._used = 0
        self._claimed: set[str] = set()
        self._parts: dict[str, _Part] = {}  # id -> the .part being written
        self._hashes: dict[str, tuple[_Digests, int]] = {}  # id -> (digests so far, octets hashed) of a .part
        self._verified: dict[str, tuple[int, int]] = {}  # id -> (size, mtime_ns) whose digest matched
        self._readers: dict[str, tuple[int, int]] = {}  # id -> (descriptor, inode) of content being served
        self._writer: ThreadPoolExecutor | None = None  # started with the first fetched chunk
        self._hasher: ThreadPoolExecutor | None = None  # likewise (SHA1)
        self._hasher256: ThreadPoolExecutor | None = None  # likewise (SHA-256, beside SHA1: not after it)
        self._queued: dict[str, deque[Future[None]]] = {}  # id -> its chunks' writes and hashes, oldest first
        for f in self.posts.glob("upload-*.tmp"):
            f.unlink(missing_ok=True)
        for f in self.posts.glob("*.json"):
            self._load(f)
        self._order.sort()

    def _load(self, path: Path) -> None:
        pid = path.stem
        try:
            raw = json.loads(path.read_text())
            post = Post.from_json(raw["post"])
            seq = int(raw["seq"])
        except (OSError, ValueError, KeyError, TypeError, PostError) as exc:
            log.warning("dropping %s: unreadable metadata (%s)", path.name, exc)
            path.unlink(missing_ok=True)
            return
        data = self.posts / f"{pid}.data"
        if post.id != pid or not data.exists() or data.stat().st_size != post.size:
            log.warning("dropping post %s: its content is missing or of the wrong size", pid)
            path.unlink(missing_ok=True)
            data.unlink(missing_ok=True)
            return
        self._meta[pid] = post
        self._seq[pid] = seq
        self._order.append((seq, pid))
        self._used += post.size

    def close(self) -> None:
        for pid in list(self._queued):
            with contextlib.suppress(OSError):
                self._drain(pid)
        for pool in (self._writer, self._hasher, self._hasher256):
            if pool is not None:
                pool.shutdown()
        for part in self._parts.values():
            os.close(part.fd)
        self._parts.clear()
        for pid in list(self._readers):
            self._close_reader(pid)
        os.close(self._lock)

    # ------------------------------------------------------------- reading

    def __len__(self) -> int:
        return len(self._meta)

    def holds(self, pid: str) -> bool:
        return pid in self._meta

    def get(self, pid: str) -> Post | None:
        return self._meta.get(pid)

    def used(self) -> int:
        return self._used

    def count(self) -> int:
        return len(self._meta)

    def free(self) -> int:
        """Octets free on the disk under the store (for a user without special rights)."""
        st = os.statvfs(self.posts)
        return st.f_bavail * st.f_frsize

    def newest_first(self, limit: int | None = None) -> list[Post]:
        """By creation timestamp, newest first (ties: the later arrival here first).  The sync
        uses the arrival order instead, which differs: a fetcher gets the newest posts first."""
        ids = sorted(self._meta, key=lambda p: (self._meta[p].timestamp, self._seq[p]), reverse=True)
        return [self._meta[p] for p in ids[:limit]]

    def data_path(self, pid: str) -> Path:
        return self.posts / f"{pid}.data"

    def verify(self, pid: str) -> Path:
        """The content's path after checking its digest (cached while the file is unchanged);
        UnknownPost, or CorruptContent after dropping the post."""
        return self._verify(pid)[0]

    def _verify(self, pid: str) -> tuple[Path, int]:
        """(path, inode) of the content, checked as :meth:`verify` says."""
        post = self._meta.get(pid)
        if post is None:
            raise UnknownPost(pid)
        path = self.data_path(pid)
        try:
            st = path.stat()
        except FileNotFoundError:
            self.drop(pid, "its content file is gone")
            raise UnknownPost(pid) from None
        stamp = (st.st_size, st.st_mtime_ns)
        if self._verified.get(pid) != stamp:
            self.checked(pid, stamp, *digest_file(path))
        return path, st.st_ino

    def unchecked(self, pid: str) -> tuple[Path, tuple[int, int]] | None:
        """For a held post whose content changed since its digest was last checked (or was
        never checked since the start): its path and (size, mtime_ns) stamp; else None."""
        if pid not in self._meta:
            return None
        path = self.data_path(pid)
        try:
            st = path.stat()
        except FileNotFoundError:
            return None  # verify() drops it
        stamp = (st.st_size, st.st_mtime_ns)
        return None if self._verified.get(pid) == stamp else (path, stamp)

    def checked(self, pid: str, stamp: tuple[int, int], digest: str, size: int) -> None:
        """The content with ``stamp`` hashed to ``digest`` (``size`` octets): remember that it
        matched, or drop the post and raise CorruptContent."""
        post = self._meta.get(pid)
        if post is None:
            raise UnknownPost(pid)
        if not post.matches(digest, size):
            self.drop(pid, f"content digest {digest} ({size} octets) does not match {post.digest}")
            raise CorruptContent(f"post {pid}: content does not match its digest; dropped")
        self._verified[pid] = stamp

    # Source, for the sync server
    def older(self, ident: str) -> str | None:
        if ident == HEAD:
            return self._order[-1][1] if self._order else None
        i = self._index(ident)
        return self._order[i - 1][1] if i > 0 else None

    def newer(self, ident: str) -> str | None:
        if ident == TAIL:
            return self._order[0][1] if self._order else None
        i = self._index(ident)
        return self._order[i + 1][1] if i + 1 < len(self._order) else None

    def _index(self, pid: str) -> int:
        seq = self._seq.get(pid)
        if seq is None:
            raise UnknownPost(pid)
        return bisect.bisect_left(self._order, (seq, pid))

    def meta(self, pid: str) -> Post:
        post = self._meta.get(pid)
        if post is None:
            raise UnknownPost(pid)
        return post

    def read(self, pid: str, offset: int, size: int) -> bytes:
        path, inode = self._verify(pid)
        reader = self._readers.get(pid)
        if reader is None or reader[1] != inode:
            if reader is not None:
                self._close_reader(pid)
            elif len(self._readers) >= OPEN_READERS:
                self._close_reader(next(iter(self._readers)))  # the one opened first
            self._readers[pid] = reader = (os.open(path, os.O_RDONLY), inode)
        return os.pread(reader[0], size, offset)

    def _close_reader(self, pid: str) -> None:
        reader = self._readers.pop(pid, None)
        if reader is not None:
            os.close(reader[0])

    def iter_content(self, pid: str, start: int = 0, end: int | None = None) -> Iterator[bytes]:
        path = self.verify(pid)
        with path.open("rb") as f:
            f.seek(start)
            left = (self._meta[pid].size if end is None else end) - start
            while left > 0 and (block := f.read(min(READ_BLOCK, left))):
                left -= len(block)
                yield block

    # ------------------------------------------------------------- writing

    def upload(self) -> Upload:
        return Upload(self)

    def keep(self, post: Post, content: Path) -> bool:
        """Move ``content`` (already checked against ``post.digest``) in as ``post``; False if held."""
        pid = post.id
        if pid in self._meta:
            content.unlink(missing_ok=True)
            return False
        seq = self._order[-1][0] + 1 if self._order else 1
        data = self.data_path(pid)
        meta = self.posts / f"{pid}.json"
        tmp = meta.with_suffix(".jtmp")
        try:
            tmp.write_text(json.dumps({"seq": seq, "post": post.to_json()}, indent=1) + "\n")
            os.replace(content, data)
            os.replace(tmp, meta)
        except OSError:  # a full disk: nothing is kept, the content stays where it was
            tmp.unlink(missing_ok=True)
            raise
        st = data.stat()
        self._verified[pid] = (st.st_size, st.st_mtime_ns)  # its digest was just checked
        self._meta[pid] = post
        self._seq[pid] = seq
        self._order.append((seq, pid))
        self._used += post.size
        return True

    def drop(self, pid: str, why: str) -> None:
        post = self._meta.pop(pid, None)
        if post is None:
            return
        log.warning("dropping post %s: %s", pid, why)
        seq = self._seq.pop(pid)
        self._order.remove((seq, pid))
        self._used -= post.size
        self._verified.pop(pid, None)
        self._close_reader(pid)
        (self.posts / f"{pid}.json").unlink(missing_ok=True)
        self.data_path(pid).unlink(missing_ok=True)
        self.forget_ranges()  # so that every peer is asked for it again

    # Local, for the sync client
    def claim(self, pid: str) -> bool:
        if pid in self._claimed or pid in self._meta:
            return False
        self._claimed.add(pid)
        return True

    def release(self, pid: str) -> None:
        self._claimed.discard(pid)
        with contextlib.suppress(OSError):  # a failed write: the next fetch resumes from what is there
            self._drain(pid)
        self._hashes.pop(pid, None)
        part = self._parts.pop(pid, None)
        if part is not None:
            os.close(part.fd)

    def discard(self, pid: str) -> None:
        """Release ``pid`` and remove its partial file: a post refused for good."""
        self.release(pid)
        (self.posts / f"{pid}.part").unlink(missing_ok=True)

    def partial(self, pid: str) -> int:
        try:
            return (self.posts / f"{pid}.part").stat().st_size
        except FileNotFoundError:
            return 0

    def write_chunk(self, pid: str, offset: int, data: bytes | memoryview) -> None:
        """Give ``data`` (kept, not copied, until written) to the writer thread; raises OSError
        if an earlier chunk of ``pid`` could not be written."""
        part = self._parts.get(pid)
        if part is None:
            part = self._parts[pid] = _Part(os.open(self.posts / f"{pid}.part", os.O_RDWR | os.O_CREAT, 0o644))
        fd = part.fd
        queued = self._queued.setdefault(pid, deque())
        while queued and (queued[0].done() or len(queued) >= 3 * MAX_QUEUED):  # 3 futures a chunk
            queued.popleft().result()  # waits for the oldest when the queue is full
        if offset == 0:
            self._drain(pid)
            if os.fstat(fd).st_size:
                # Only when there is something to cut: on ext4, truncating a file to 0 (even an
                # empty one) makes its close write the whole content out (auto_da_alloc).
                os.ftruncate(fd, 0)
            self._hashes[pid] = (_Digests(), 0)
        elif pid not in self._hashes:  # resuming: hash what is already there, once
            self._drain(pid)
            h = _Digests()
            done = 0
            while done < offset and (block := os.pread(fd, min(READ_BLOCK, offset - done), done)):
                h.update(block)
                done += len(block)
            self._hashes[pid] = (h, done)
        h, done = self._hashes[pid]
        in_order = done == offset  # chunks come in order: the digest grows as the file does
        if in_order:
            self._hashes[pid] = (h, done + len(data))
        if self._writer is None or self._hasher is None or self._hasher256 is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="huddle-posts-writer")
            self._hasher = ThreadPoolExecutor(max_workers=1, thread_name_prefix="huddle-posts-hasher")
            self._hasher256 = ThreadPoolExecutor(max_workers=1, thread_name_prefix="huddle-posts-hasher256")
        queued = self._queued.setdefault(pid, deque())
        queued.append(self._writer.submit(_write, part, offset, data))
        if in_order:  # else complete() hashes the file
            queued.append(self._hasher.submit(h.sha1.update, data))
            queued.append(self._hasher256.submit(h.sha256.update, data))

    def _drain(self, pid: str) -> None:
        """Wait until every chunk of ``pid`` given to the writer is written; OSError if one was not."""
        queued = self._queued.pop(pid, None)
        while queued:
            queued.popleft().result()

    def complete(self, post: Post) -> bool:
        """The fetched content is all on disk: check it and keep the post; False (and the
        partial file dropped) if its digest does not match.  OSError (the claim released,
        the partial file kept as far as it was written) if a chunk could not be written."""
        pid = post.id
        try:
            self._drain(pid)
        except OSError:
            self.release(pid)
            raise
        writing = self._parts.pop(pid, None)
        if writing is not None:
            os.close(writing.fd)
        self._claimed.discard(pid)
        part = self.posts / f"{pid}.part"
        if post.size == 0:
            part.touch()
        running = self._hashes.pop(pid, None)
        if running is not None and running[1] == post.size == part.stat().st_size:
            digests, size = running[0], post.size  # hashed as it was written
        else:
            digests, size = hash_file(part)
        digest = digests.sha1.hexdigest()
        if not post.matches(digest, size) or (post.sealed and digests.sha256.hexdigest() != post.sha256):
            log.debug("fetched content of %s does not match its digests (%s, %d octets): dropped", pid, digest, size)
            part.unlink(missing_ok=True)
            return False
        return self.keep(post, part)

    # ------------------------------------------------------------- peers

    def load_range(self, peer: str) -> Range | None:
        path = self.peers / f"{peer}.json"
        with contextlib.suppress(FileNotFoundError, ValueError, KeyError, TypeError):
            raw: dict[str, Any] = json.loads(path.read_text())
            oldest, newest = raw["oldest"], raw["newest"]
            if is_post_id(oldest) and is_post_id(newest):
                return Range(oldest, newest)
        return None

    def save_range(self, peer: str, rng: Range | None) -> None:
        path = self.peers / f"{peer}.json"
        if rng is None:
            path.unlink(missing_ok=True)
            return
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"oldest": rng.oldest, "newest": rng.newest}) + "\n")
        os.replace(tmp, path)

    def forget_ranges(self) -> None:
        for f in self.peers.glob("*.json"):
            f.unlink(missing_ok=True)
