"""Post synchronisation, sans-I/O: the server and the client of the Hydra protocol.

A node runs one :class:`Server` (answering every peer's client) and one
:class:`Client` per peer it fetches from.  Neither does I/O: the server reads
through a :class:`Source` (the store, or a fake in tests) and returns the
replies; the client is fed messages and the time, and returns actions
(:class:`SendMsg`, :class:`WriteChunk`, :class:`Complete`, :class:`Release`,
:class:`Finished`) for the driver to carry out.

The client keeps, per server, the range of the server's posts it has been
through (``oldest``, ``newest``, in the server's order).  A session walks the
server's posts newest first (NEXT-OLDER from ``HEAD``); when it meets the
range's ``newest`` it jumps to below the range's ``oldest``; it skips posts it holds,
asks META for the others, then the content in chunks, with up to ``window``
FETCH requests in flight, starting where a partial file it already has stops.

Content comes back as CONTENT in BULKs, outside the reliable channel: a CONTENT
is taken only when it answers the oldest FETCH in flight (its token, offset
and size checked); one that answers no FETCH in flight is refused and
counted (``stale``); when the content stops coming for ``retry_after``
seconds, or a CONTENT overtakes one that was lost, the client asks again from
where its file stops.
"""

from __future__ import annotations

import enum
import itertools
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Protocol

from ..counters import Counters
from ..errors import RemoteProtocolError
from ..limits import PostLimits
from .codec import (
    MAX_CHUNK,
    MAX_FETCH,
    Chunk,
    ChunkOk,
    Content,
    Error,
    Fetch,
    Goodbye,
    GoodbyeOk,
    Hello,
    HelloOk,
    HydraMessage,
    Meta,
    MetaOk,
    NextEmpty,
    NextNewer,
    NextOk,
    NextOlder,
)
from .model import HEAD, TAIL, CorruptContent, Policy, Post, PostError, Range, UnknownPost, is_post_id

__all__ = [
    "Client", "ClientAction", "Complete", "Discard", "Finished", "Local", "Release", "SendMsg", "Server", "Source",
    "WriteChunk", "meta_ok", "post_of",
]

class Source(Protocol):
    """What the server reads (the store)."""

    def older(self, ident: str) -> str | None:
        """The post just older than ``ident`` ("HEAD": the newest); None: none; UnknownPost."""

    def newer(self, ident: str) -> str | None:
        """The post just newer than ``ident`` ("TAIL": the oldest); None: none; UnknownPost."""

    def meta(self, pid: str) -> Post:
        """The post's metadata; UnknownPost."""

    def read(self, pid: str, offset: int, size: int) -> bytes | memoryview:
        """Up to ``size`` octets of content from ``offset`` (its digest checked first:
        CorruptContent when it does not match); UnknownPost; OSError when the disk fails."""


def meta_ok(post: Post) -> MetaOk:
    """The META-OK of ``post``, with its seal if it has one."""
    if not post.sealed:
        return MetaOk(post.subject, post.timestamp, post.parent_id, post.digest, post.mime_type, post.size)
    return MetaOk(post.subject, post.timestamp, post.parent_id, post.digest, post.mime_type, post.size,
                  bytes.fromhex(post.sha256), bytes.fromhex(post.author), post.public_key, post.signature)


def post_of(msg: MetaOk) -> Post:
    """The post a META-OK describes (PostError if its metadata is out of range)."""
    return Post(msg.subject, msg.timestamp, msg.parent_id, msg.mime_type, msg.digest, msg.content_size,
                msg.sha256.hex(), msg.author.hex(), msg.public_key, msg.signature)


# ---------------------------------------------------------------------------- server


@dataclass(slots=True)
class _ServerSession:
    hello: bool = False
    current: str | None = None


@dataclass(slots=True)
class ServerStats(Counters):
    """What the node's sync server answered (``GET /api/v1/posts/status`` -> ``server``)."""

    sessions: int = 0
    posts_served: int = 0
    chunks_served: int = 0
    octets_served: int = 0
    errors_sent: int = 0
    corrupt_refused: int = 0


class Server:
    """Answers the clients of every peer from one :class:`Source`."""

    def __init__(self, source: Source, identity: str, nickname: str, max_chunk: int = MAX_CHUNK) -> None:
        self.source = source
        self.max_chunk = max(1, min(max_chunk, MAX_CHUNK))  # octets per CHUNK-OK, whatever is asked
        self.max_fetch = min(self.max_chunk, MAX_FETCH)  # octets per CONTENT
        self.identity = identity
        self.nickname = nickname
        self.sessions: dict[str, _ServerSession] = {}
        self.stats = ServerStats()

    def forget(self, peer: str) -> None:
        self.sessions.pop(peer, None)

    def current(self, peer: str) -> str | None:
        """The post a client's META / CHUNK / FETCH would be about (None: none)."""
        session = self.sessions.get(peer)
        return None if session is None else session.current

    def receive(self, peer: str, msg: HydraMessage) -> HydraMessage:
        """One client command -> the reply to send back."""
        reply = self._answer(peer, msg)
        if isinstance(reply, Error):
            self.stats.errors_sent += 1
        return reply

    def _answer(self, peer: str, msg: HydraMessage) -> HydraMessage:
        if isinstance(msg, Hello):
            self.sessions[peer] = _ServerSession(hello=True)
            self.stats.sessions += 1
            return HelloOk(self.identity, self.nickname)
        session = self.sessions.get(peer)
        if session is None:
            return Error(400, f"say HELLO first (got {type(msg).__name__.upper()})")
        if isinstance(msg, Goodbye):
            del self.sessions[peer]
            return GoodbyeOk()
        try:
            if isinstance(msg, NextOlder | NextNewer):
                session.current = None
                pid = self.source.older(msg.ident) if isinstance(msg, NextOlder) else self.source.newer(msg.ident)
                if pid is None:
                    return NextEmpty()
                session.current = pid
                return NextOk(pid)
            if isinstance(msg, Meta | Chunk | Fetch):
                if session.current is None:
                    return Error(400, f"{type(msg).__name__.upper()} needs a current post (after NEXT-OK)")
                post = self.source.meta(session.current)
                if isinstance(msg, Meta):
                    self.stats.posts_served += 1
                    return meta_ok(post)
                if msg.octets == 0:
                    return Error(400, f"{type(msg).__name__.upper()} of 0 octets")
                if msg.offset > post.size:
                    return Error(416, f"offset {msg.offset} is past the content's {post.size} octets")
                cap = self.max_fetch if isinstance(msg, Fetch) else self.max_chunk
                data = self.source.read(session.current, msg.offset, min(msg.octets, cap))
                self.stats.chunks_served += 1
                self.stats.octets_served += len(data)
                return Content(msg.token, msg.offset, data) if isinstance(msg, Fetch) else ChunkOk(msg.offset, data)
        except UnknownPost as exc:
            session.current = None
            return Error(404, f"no post {exc.args[0]} here")
        except CorruptContent as exc:
            session.current = None
            self.stats.corrupt_refused += 1
            return Error(500, str(exc))
        except OSError as exc:  # the disk failed under the content (EIO, a file gone meanwhile)
            session.current = None
            return Error(500, f"cannot read the content here: {exc.strerror or exc}")
        return Error(400, f"{type(msg).__name__.upper()} is not a client command")


# ---------------------------------------------------------------------------- client


class Local(Protocol):
    """What the client asks of its own store."""

    def holds(self, pid: str) -> bool: ...

    def claim(self, pid: str) -> bool:
        """Take ``pid`` for fetching; False if another session is fetching it."""

    def partial(self, pid: str) -> int:
        """Octets of ``pid``'s content already on disk from an interrupted fetch."""

    def used(self) -> int:
        """Octets of content held (for a size budget)."""

    def free(self) -> int:
        """Octets free on the disk under the store."""

    def count(self) -> int:
        """Posts held."""


@dataclass(frozen=True, slots=True)
class SendMsg:
    msg: HydraMessage


@dataclass(frozen=True, slots=True)
class WriteChunk:
    pid: str
    offset: int
    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class Complete:
    """All the content is written: check the digest, keep the post, release the claim."""

    post: Post


@dataclass(frozen=True, slots=True)
class Release:
    """Give up fetching ``pid`` (the partial file stays, to resume later)."""

    pid: str


@dataclass(frozen=True, slots=True)
class Discard:
    """Give up ``pid`` for good (refused: it claims more than the limits allow) and remove any
    partial file of it."""

    pid: str


@dataclass(frozen=True, slots=True)
class Finished:
    """The session is over: ``range`` to keep for this server (None: forget it); ``complete``
    when it went through every post it was offered (else another session should follow)."""

    range: Range | None
    reason: str
    complete: bool = False


ClientAction = SendMsg | WriteChunk | Complete | Release | Discard | Finished


class _State(enum.Enum):
    IDLE = "idle"
    HELLO = "hello"
    NEXT = "next"  # waiting for NEXT-OK / NEXT-EMPTY
    META = "meta"
    CHUNKS = "chunks"
    GOODBYE = "goodbye"
    DONE = "done"


@dataclass(slots=True)
class ClientStats(Counters):
    """What one fetching session saw (the service sums them into its own counters)."""

    posts_seen: int = 0
    posts_skipped: int = 0
    posts_fetched: int = 0
    octets_fetched: int = 0
    stale: int = 0  # messages passed over while waiting for HELLO-OK, and CONTENTs refused (no FETCH in flight)
    retries: int = 0  # content asked for again (stopped coming, or one was lost)
    too_large: int = 0  # posts refused: their metadata claims more than limits.max_size octets
    no_space: int = 0  # posts passed over for now: the disk has less free than they need and limits.min_free
    malformed: int = 0  # answers out of the protocol or with metadata out of range (the session ended)
    store_full: int = 0  # sessions stopped: the store holds limits.max_posts posts
    forged: int = 0  # posts refused: a seal that does not verify (altered metadata, or another's key)
    unsealed: int = 0  # posts refused: no seal, and this node requires one (a secured group)


@dataclass(slots=True)
class Client:
    """One session with one server.  ``start``, then ``receive`` every reply and ``tick``."""

    local: Local
    identity: str
    nickname: str
    range: Range | None = None
    policy: Policy = field(default_factory=Policy)
    chunk_size: int = MAX_FETCH
    window: int = 8  # FETCH requests in flight
    timeout: float = 30.0  # no reply (in CHUNKS: no content) for this long ends the session
    retry_after: float = 5.0  # no content for this long: ask again from where the file stops
    tokens: Iterator[int] = field(default_factory=lambda: itertools.count(1))  # FETCH tokens, unique per node
    limits: PostLimits = field(default_factory=PostLimits)
    require_seal: bool = False  # a secured group: legacy (unsealed) posts are refused
    state: _State = _State.IDLE
    stats: ClientStats = field(default_factory=ClientStats)
    _cursor: str = HEAD
    _known: Range | None = None  # the range of earlier sessions, passed over in one step when met
    _oldest: str | None = None
    _newest: str | None = None
    _dirty: bool = False
    _current: str | None = None
    _post: Post | None = None
    _next_request: int = 0  # next offset to ask for
    _written: int = 0  # octets of content on disk
    _asked: deque[tuple[int, int, int]] = field(default_factory=deque)  # FETCHes in flight: (token, offset, octets)
    _progress: float = 0.0  # when content last arrived (or CHUNKS began)
    _retried: float = 0.0  # when content was last asked for again (or CHUNKS began)
    _seen_now: int = 0  # posts offered this session (newest:N stops after N)
    _last_heard: float = 0.0
    _actions: list[ClientAction] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not 1 <= self.chunk_size <= MAX_FETCH:
            raise ValueError(f"chunk size must be 1..{MAX_FETCH} octets")
        if self.retry_after <= 0:
            raise ValueError("retry_after must be positive")
        if self.window < 1:
            raise ValueError("window must be >= 1")
        if self.range is not None:
            self._known = self.range

    @property
    def done(self) -> bool:
        return self.state is _State.DONE

    def start(self, now: float) -> list[ClientAction]:
        if self.state is not _State.IDLE:
            raise RuntimeError("a client session starts once")
        self._last_heard = now
        self._send(Hello(self.identity, self.nickname))
        self.state = _State.HELLO
        return self._take()

    def tick(self, now: float) -> list[ClientAction]:
        if self.state is _State.CHUNKS:
            if now - self._progress > self.timeout:
                self._send(Goodbye())
                self._finish(f"no content for {self.timeout:g} s", failed=True)
            elif now - max(self._progress, self._retried) > self.retry_after:
                self.stats.retries += 1
                self._retried = now
                self._ask_again()
        elif self.state not in (_State.IDLE, _State.DONE) and now - self._last_heard > self.timeout:
            self._finish(f"no answer for {self.timeout:g} s", failed=True)
        return self._take()

    def abort(self, reason: str) -> list[ClientAction]:
        """The server went away: end now (a partial file stays for later)."""
        if self.state is not _State.DONE:
            self._finish(reason, failed=True)
        return self._take()

    def stop(self, reason: str) -> list[ClientAction]:
        """End the session from this side (e.g. the disk is full): GOODBYE, and the partial
        file stays, to be resumed by a later session."""
        if self.state is not _State.DONE:
            self._send(Goodbye())
            self._finish(reason, failed=True)
        return self._take()

    def receive(self, msg: HydraMessage, now: float) -> list[ClientAction]:
        if self.state is _State.DONE:
            return []
        self._last_heard = now
        try:
            self._receive(msg)
        except (RemoteProtocolError, PostError) as exc:
            self.stats.malformed += 1
            self._send(Goodbye())
            self._finish(f"bad answer from the server: {exc}", failed=True)
        return self._take()

    # ------------------------------------------------------------------ moves

    def _receive(self, msg: HydraMessage) -> None:
        if self.state is _State.HELLO and not isinstance(msg, HelloOk):
            # Replies to an earlier session (ours before a restart, re-sent by the channel to this
            # incarnation) come before the answer to our HELLO: pass them over.
            self.stats.stale += 1
            return
        if isinstance(msg, Error):
            if msg.status == 404 and self.state is _State.NEXT and self._cursor not in (HEAD, TAIL):
                # The server no longer has our range's end: start again from its newest.
                self._oldest = self._newest = self._known = None
                self._dirty = False
                self._cursor = HEAD
                self._next()
                return
            self._send(Goodbye())
            self._finish(f"server error {msg.status}: {msg.reason}", failed=True)
            return
        if isinstance(msg, Content):
            self._on_content(msg)
            return
        expected = {
            _State.HELLO: HelloOk, _State.NEXT: NextOk | NextEmpty, _State.META: MetaOk,
            _State.GOODBYE: GoodbyeOk,
        }.get(self.state)
        if expected is None or not isinstance(msg, expected):
            raise RemoteProtocolError(f"{type(msg).__name__} in state {self.state.value}")
        if isinstance(msg, HelloOk):
            self._cursor = HEAD
            self._next()
        elif isinstance(msg, NextEmpty):
            self._goodbye()
        elif isinstance(msg, NextOk):
            known = self._known
            if known is not None and msg.ident == known.newest and self.policy.mode != "newest":
                # The posts down to known.oldest were seen in earlier sessions: go on below them.
                self._newest = self._newest or known.newest
                self._oldest = self._cursor = known.oldest
                self._known = None
                self._next()
            else:
                self._on_next(msg.ident)
        elif isinstance(msg, MetaOk):
            self._on_meta(msg)
        elif isinstance(msg, GoodbyeOk):
            self._finish("done", failed=False)

    def _next(self) -> None:
        self._current = self._post = None
        self._send(NextOlder(self._cursor))
        self.state = _State.NEXT

    def _passed(self, pid: str) -> None:
        """We are done with ``pid`` (held, fetched or skipped): extend the range."""
        if self._newest is None:
            self._newest = pid
        self._oldest = self._cursor = pid
        self._next()

    def _on_next(self, pid: str) -> None:
        if not is_post_id(pid):  # it names files here: only 40 lowercase hex digits
            raise RemoteProtocolError(f"NEXT-OK names {pid[:60]!r}, not a post id")
        if self.policy.mode == "newest" and self._seen_now >= self.policy.limit:
            self._goodbye()  # the server's N newest are held (or being fetched): no further
            return
        self._seen_now += 1
        self.stats.posts_seen += 1
        if self.local.holds(pid):
            self.stats.posts_skipped += 1
            self._passed(pid)
            return
        if self.local.count() >= self.limits.max_posts:
            self.stats.store_full += 1
            self._dirty = True  # look again when there is room
            self._goodbye()
            return
        if not self.local.claim(pid):
            self._dirty = True  # another session is fetching it; look again next time
            self._passed(pid)
            return
        self._current = pid
        self._send(Meta())
        self.state = _State.META

    def _on_meta(self, msg: MetaOk) -> None:
        pid = self._current
        assert pid is not None
        post = post_of(msg)
        if post.id != pid:
            self._actions.append(Release(pid))
            raise RemoteProtocolError(f"META-OK of {pid} has metadata whose id is {post.id}")
        refused = not post.seal_ok() if post.sealed else self.require_seal
        if refused:
            # Refused for good from this server (the range covers it), nothing written: an altered or
            # forged seal, or a legacy post where seals are required.  A partial file of the post
            # (from an honest server) stays: this one's offer says nothing about it.
            if post.sealed:
                self.stats.forged += 1
            else:
                self.stats.unsealed += 1
            self._actions.append(Release(pid))
            self._passed(pid)
            return
        if post.size > self.limits.max_size:
            # Refused before anything is written, for good (the range covers it); a partial
            # file of it (from before the limit was lowered) is removed.
            self.stats.too_large += 1
            self._actions.append(Discard(pid))
            self._passed(pid)
            return
        if self.policy.mode == "budget" and self.local.used() + post.size > self.policy.limit:
            # Over the budget: passed over for good (the range covers it), not retried.
            self._actions.append(Release(pid))
            self._passed(pid)
            return
        start = self.local.partial(pid)
        if start > post.size:
            start = 0
        if self.local.free() < post.size - start + self.limits.min_free:
            # Not now: the disk may have room later, so the range is not saved (looked at again).
            self.stats.no_space += 1
            self._dirty = True
            self._actions.append(Release(pid))
            self._passed(pid)
            return
        self._post = post
        self._written = self._next_request = start
        self._asked.clear()
        if start == post.size:
            self._complete()
            return
        self.state = _State.CHUNKS
        self._progress = self._retried = self._last_heard
        self._request_chunks()

    def _request_chunks(self) -> None:
        post = self._post
        assert post is not None
        while len(self._asked) < self.window and self._next_request < post.size:
            n = min(self.chunk_size, post.size - self._next_request)
            token = next(self.tokens)
            self._send(Fetch(token, self._next_request, n))
            self._asked.append((token, self._next_request, n))
            self._next_request += n

    def _ask_again(self) -> None:
        """Give up the FETCHes in flight (their CONTENTs will be refused) and ask from where the file stops."""
        self._asked.clear()
        self._next_request = self._written
        self._request_chunks()

    def _on_content(self, msg: Content) -> None:
        index = next((i for i, (token, _, _) in enumerate(self._asked) if token == msg.token), None)
        if self.state is not _State.CHUNKS or index is None:
            # Answers no FETCH in flight: one given up (asked again, or an earlier session's),
            # or never asked.  Refused: nothing is written.
            self.stats.stale += 1
            return
        post, pid = self._post, self._current
        assert post is not None and pid is not None
        _, offset, asked = self._asked[index]
        size = len(msg.content)
        if msg.offset != offset or not 0 < size <= asked or offset + size > post.size:
            raise RemoteProtocolError(f"CONTENT {msg.token} at {msg.offset} ({size} octets) answers a FETCH "
                                      f"of {asked} octets at {offset} (content of {post.size})")
        if index > 0:  # the CONTENTs before it were lost (a connection dropped): ask again
            self.stats.retries += 1
            self._ask_again()
            return
        self._asked.popleft()
        self._actions.append(WriteChunk(pid, offset, msg.content))
        self._written += size
        self._progress = self._last_heard
        self.stats.octets_fetched += size
        if self._written == post.size:
            self._complete()
            return
        if size < asked:  # the server sends less than asked (its cap): go on from where it stops
            self._ask_again()
            return
        self._request_chunks()

    def _complete(self) -> None:
        post = self._post
        assert post is not None
        self._actions.append(Complete(post))
        self.stats.posts_fetched += 1
        self._passed(post.id)

    def _goodbye(self) -> None:
        self._send(Goodbye())
        self.state = _State.GOODBYE

    def _finish(self, reason: str, failed: bool) -> None:
        if self._current is not None and self.state in (_State.META, _State.CHUNKS):
            self._actions.append(Release(self._current))
        keep: Range | None = None
        if not failed and not self._dirty and self._oldest is not None and self._newest is not None:
            keep = Range(self._oldest, self._newest)
        elif failed and not self._dirty and self.range is not None:
            keep = self.range  # what we had before still holds
        self.state = _State.DONE
        self._actions.append(Finished(keep, reason, complete=not failed and not self._dirty))

    def _send(self, msg: HydraMessage) -> None:
        self._actions.append(SendMsg(msg))

    def _take(self) -> list[ClientAction]:
        out, self._actions = self._actions, []
        return out
