"""The asyncio driver of post sharing inside a node.

It owns the :class:`~huddle.posts.store.PostStore`, the node's one sync
:class:`~huddle.posts.sync.Server` and a :class:`~huddle.posts.sync.Client`
session per peer it is fetching from, and carries their messages in the
node's addressed messages (DMSG).  A node tells a peer's client when it has
posts to offer (NEWS): when they meet, if its store is not empty, and
whenever a post is new in its store.  The client then runs a session; NEWS
during a session gets another one after it, and a session that failed or
left posts behind is tried again ``interval`` seconds later.  Nodes with
nothing to share send nothing.

Content goes the other way as BULKs on the same connections (FETCH in an
addressed message, CONTENT in a BULK: docs/protocol.md 15.5), so it is not
cut into addressed-message frames, acknowledged and joined again.  Before a
post is served for the first time since it changed (after a restart: every
post), its digest is checked in a thread while that peer's requests wait.

The service sees its node only as a :class:`~huddle.posts.ports.PostsHost`
(its id, its live peers, three ways to send, the bulk octets queued).  What
comes from the mesh reaches it only as the events of the posts peer service
(posts/peer.py: Hydra messages, BULKs, peers up and down), given to
:meth:`PostService.handle`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import DecodeError, HuddleError
from ..ids import NodeId
from ..limits import PostLimits
from ..protocol.delivery import BufferFull
from ..protocol.events import Counters
from ..ratelog import RateLog
from .codec import (
    CLIENT_COMMANDS,
    MAX_FETCH,
    Chunk,
    Content,
    Error,
    Fetch,
    HydraMessage,
    Meta,
    News,
    decode,
    decode_bulk,
    encode,
    encode_bulk,
)
from .model import Policy, Post, PostAdded
from .peer import HydraBulk, HydraPayload, PostsInput, PostsPeerDown, PostsPeerUp
from .ports import PostsHost
from .store import PostStore, digest_file
from .sync import (
    Client,
    ClientAction,
    Complete,
    Discard,
    Finished,
    Release,
    SendMsg,
    Server,
    WriteChunk,
)

__all__ = ["MAX_HELD", "MAX_OUT", "MAX_QUEUED_CONTENT", "PostRefusals", "PostService", "PostSettings", "PostStats"]

log = logging.getLogger("huddle.posts")

# Content sent to a peer and not yet on its connection (it asks and does not read): past
# this, its FETCHes are refused with ERROR 503 instead of read from disk and queued.  An
# honest client has at most its window (8 MiB) in flight, twice that just after asking again.
MAX_QUEUED_CONTENT = 32 * 1024 * 1024
# Hydra messages waiting for room in a peer's channel; past this, further ones are dropped.
MAX_OUT = 4096
# A peer's commands held while a post's digest is checked (a client has at most its window of
# FETCHes in flight); past this, they are answered by ERROR 503.
MAX_HELD = 64


LOG_EVERY = 60.0  # seconds between two warnings about refused posts


@dataclass(slots=True)
class PostStats(Counters):
    """What post sharing did (served with :class:`PostRefusals` in ``GET /api/v1/posts/status``)."""

    sessions: int = 0  # fetching sessions started
    sessions_failed: int = 0  # ... that ended other than done
    posts_fetched: int = 0
    octets_fetched: int = 0
    bad_content: int = 0  # fetched posts whose content did not match their digest
    decode_errors: int = 0  # Hydra messages and BULKs that could not be decoded
    bulk_refused: int = 0  # CONTENTs nobody asked for (no session, or no FETCH in flight)
    bulk_unsent: int = 0  # CONTENTs the node's channel did not admit (the client asks again)
    retries: int = 0  # content asked for again
    checks: int = 0  # digests of stored posts checked before serving them
    write_errors: int = 0  # fetches stopped by a disk that could not take what came
    fetch_refused_busy: int = 0  # FETCHes answered ERROR 503 (too much queued, or held for a check)
    out_dropped: int = 0  # Hydra messages dropped: MAX_OUT were waiting for the peer's channel


@dataclass(slots=True)
class PostRefusals(Counters):
    """What the limits refused (docs/limits.md, "Posts")."""

    too_large: int = 0  # offered posts claiming more than posts.max-size octets: nothing written
    no_space: int = 0  # offered posts passed over for now: less free disk than they need and posts.min-free
    malformed: int = 0  # sync answers out of the protocol or with metadata out of range (session ended)
    uploads_refused: int = 0  # uploads over posts.max-size: 413, nothing kept
    store_full: int = 0  # fetching sessions stopped: the store holds posts.max-posts posts
    forged: int = 0  # offered posts whose seal does not verify (altered metadata, another's key): nothing kept
    unsealed: int = 0  # offered legacy posts (no seal) refused because the group is secured: nothing kept


@dataclass(frozen=True, slots=True)
class PostSettings:
    policy: Policy = field(default_factory=Policy)
    chunk_size: int = MAX_FETCH
    window: int = 8
    interval: float = 2.0
    timeout: float = 30.0
    retry_after: float = 5.0
    require_seal: bool = False  # a secured group: posts without their author's seal are refused


class PostService:
    def __init__(self, node: PostsHost, store: PostStore, settings: PostSettings,
                 publish: Callable[[PostAdded], None], limits: PostLimits | None = None) -> None:
        self.node = node
        self.store = store
        self.settings = settings
        self.limits = limits or PostLimits()
        self.refused = PostRefusals()
        self._warnings = RateLog(log, period=LOG_EVERY)  # per what is warned about
        self._counted: dict[NodeId, tuple[int, ...]] = {}  # a session's refusals counted so far
        self._publish = publish
        uuid = node.uuid
        assert uuid is not None
        # A CHUNK-OK must fit in one addressed message (its header is 15 octets).
        self.server = Server(store, str(uuid), node.config.name, max_chunk=node.config.mesh.max_message - 64)
        self.clients: dict[NodeId, Client] = {}
        self._wanted: dict[NodeId, float] = {}  # peers with posts to offer -> when to start a session
        self._work = asyncio.Event()  # set when a session starts or one is wanted: run() has timers again
        self._again: set[NodeId] = set()  # NEWS came during the session: run another after it
        self._out: dict[NodeId, deque[bytes]] = {}
        self._pumps: dict[NodeId, asyncio.Task[None]] = {}
        # FETCH tokens: from a random start, so that a CONTENT meant for an earlier run of
        # this node (still queued towards its endpoint) answers no FETCH of this one.
        self._tokens = itertools.count(int.from_bytes(os.urandom(4), "big") << 24)
        self._held: dict[NodeId, deque[HydraMessage]] = {}  # a peer's commands waiting for a digest check
        self._failed: dict[str, tuple[int, int]] = {}  # id -> stamp whose check failed (the server refuses it)
        self._checks: set[asyncio.Task[None]] = set()
        self.stats = PostStats()

    # ------------------------------------------------------------- events

    def handle(self, event: PostsInput) -> None:
        """What the posts peer service (posts/peer.py) got from the mesh."""
        if isinstance(event, HydraPayload):
            self._on_message(event.peer, event.payload)
        elif isinstance(event, HydraBulk):
            self._on_bulk(event.peer, event.head, event.data)
        elif isinstance(event, PostsPeerUp):
            if len(self.store):  # meet: tell it we have posts
                self._send(event.peer, encode(News()))
        else:
            assert isinstance(event, PostsPeerDown)
            self.server.forget(str(event.peer))
            self._held.pop(event.peer, None)  # its requests waiting for a digest check: no one to answer
            client = self.clients.get(event.peer)
            if client is not None:
                self._carry(event.peer, client.abort("peer left"))
            self._wanted.pop(event.peer, None)
            self._again.discard(event.peer)

    def _on_message(self, peer: NodeId, payload: bytes) -> None:
        try:
            msg = decode(payload)
        except DecodeError as exc:
            self.stats.decode_errors += 1
            log.warning("bad Hydra message from %s: %s", peer.short, exc)
            return
        if payload[2] in CLIENT_COMMANDS:
            self._serve(peer, msg)
            return
        if isinstance(msg, News):
            if peer in self.clients:
                self._again.add(peer)
            else:
                self._wanted[peer] = 0.0
                self._start(peer, time.monotonic())
            return
        client = self.clients.get(peer)
        if client is not None:
            self._carry_counted(peer, client, client.receive(msg, time.monotonic()))

    def _on_bulk(self, peer: NodeId, head: bytes, data: bytes | memoryview) -> None:
        try:
            msg = decode_bulk(head, data)
        except DecodeError as exc:
            self.stats.decode_errors += 1
            log.warning("bad BULK from %s: %s", peer.short, exc)
            return
        client = self.clients.get(peer)
        if client is None:  # no session: nobody asked for it
            self.stats.bulk_refused += 1
            return
        stale, retries = client.stats.stale, client.stats.retries
        self._carry_counted(peer, client, client.receive(msg, time.monotonic()))
        self.stats.bulk_refused += client.stats.stale - stale
        self.stats.retries += client.stats.retries - retries

    # ------------------------------------------------------------- serving

    def _serve(self, peer: NodeId, msg: HydraMessage) -> None:
        """Answer a client command of ``peer``'s, in order; content not checked since it
        changed is hashed in a thread first."""
        held = self._held.get(peer)
        if held is not None:
            if len(held) < MAX_HELD:
                held.append(msg)
            else:  # more than any honest client has in flight: refused, not kept
                self.stats.fetch_refused_busy += 1
                self._send(peer, encode(Error(503, "busy checking the content's digest: ask again later")))
            return
        pid = self.server.current(str(peer))
        if pid is not None and isinstance(msg, Meta | Chunk | Fetch):
            todo = self.store.unchecked(pid)
            if todo is not None and self._failed.get(pid) != todo[1]:
                self._held[peer] = deque([msg])
                task = asyncio.ensure_future(self._check(peer, pid, *todo))
                self._checks.add(task)
                task.add_done_callback(self._checks.discard)
                return
        if isinstance(msg, Fetch) and (queued := self.node.queued_bulk(peer)) >= MAX_QUEUED_CONTENT:
            self.stats.fetch_refused_busy += 1
            self._send(peer, encode(Error(503, f"{queued >> 20} MiB of content sent to you is not read yet: "
                                              "ask for less at once")))
            return
        reply = self.server.receive(str(peer), msg)
        if isinstance(reply, Content):
            if not self.node.send_bulk(peer, *encode_bulk(reply)):
                self.stats.bulk_unsent += 1  # not admitted now: the client asks again
        else:
            self._send(peer, encode(reply))

    async def _check(self, peer: NodeId, pid: str, path: Path, stamp: tuple[int, int]) -> None:
        try:
            self.stats.checks += 1
            digest, size = await asyncio.get_running_loop().run_in_executor(None, digest_file, path)
            post = self.store.get(pid)
            if post is not None and post.matches(digest, size):
                self.store.checked(pid, stamp, digest, size)
            else:  # the server's own check (in line) refuses it, with a 500, and drops it
                self._failed[pid] = stamp
        except OSError as exc:
            log.warning("cannot check post %s: %s", pid, exc)
            self._failed[pid] = stamp
        finally:
            held = self._held.pop(peer, deque())
            while held:
                self._serve(peer, held.popleft())
                if peer in self._held:  # held back again, for another post
                    self._held[peer].extend(held)
                    break

    # ------------------------------------------------------------- sessions

    async def run(self) -> None:
        while True:
            now = time.monotonic()
            alive = set(self.node.mesh.alive_peers())
            for peer in alive:
                client = self.clients.get(peer)
                if client is not None:
                    retries = client.stats.retries
                    self._carry_counted(peer, client, client.tick(now))
                    self.stats.retries += client.stats.retries - retries
                elif peer in self._wanted and now >= self._wanted[peer]:
                    self._start(peer, now)
            for peer in list(self.clients):
                if peer not in alive:
                    self._carry(peer, self.clients[peer].abort("peer not alive"))
            if self.clients or self._wanted:
                await asyncio.sleep(min(0.5, self.settings.interval))
            else:  # no session and none wanted: nothing to time until one starts (an idle node sleeps)
                self._work.clear()
                await self._work.wait()

    def _start(self, peer: NodeId, now: float) -> None:
        uuid = self.node.uuid
        assert uuid is not None
        s = self.settings
        client = Client(self.store, str(uuid), self.node.config.name, range=self.store.load_range(str(peer)),
                        policy=s.policy, chunk_size=s.chunk_size, window=s.window, timeout=s.timeout,
                        retry_after=s.retry_after, tokens=self._tokens, limits=self.limits,
                        require_seal=s.require_seal)
        self.clients[peer] = client
        self._work.set()
        self._counted.pop(peer, None)
        self.stats.sessions += 1
        self._carry(peer, client.start(now))

    def warn(self, what: str, text: str, *args: object) -> None:
        """Log ``text`` at most once per LOG_EVERY seconds for each ``what`` (refusals: never per message)."""
        self._warnings.warning(what, time.monotonic(), text, *args)

    def _carry_counted(self, peer: NodeId, client: Client, actions: list[ClientAction]) -> None:
        """:meth:`_carry`, counting (and warning about) what the client refused since last counted."""
        s, r = client.stats, self.refused
        too_large, no_space, malformed, full, forged, unsealed = self._counted.get(peer, (0, 0, 0, 0, 0, 0))
        self._counted[peer] = (s.too_large, s.no_space, s.malformed, s.store_full, s.forged, s.unsealed)
        self._carry(peer, actions)
        r.forged += s.forged - forged
        if s.forged > forged:
            self.warn("forged", "refusing posts from %s whose author's seal does not verify (altered or forged); "
                      "%d refused so far", peer.short, r.forged)
        r.unsealed += s.unsealed - unsealed
        if s.unsealed > unsealed:
            self.warn("unsealed", "refusing posts from %s without their author's seal (legacy posts are accepted "
                      "in open groups only); %d refused so far", peer.short, r.unsealed)
        r.too_large += s.too_large - too_large
        r.store_full += s.store_full - full
        if s.store_full > full:
            self.warn("store_full", "not fetching posts from %s: the store holds posts.max-posts (%d)",
                      peer.short, self.limits.max_posts)
        r.no_space += s.no_space - no_space
        r.malformed += s.malformed - malformed
        if s.too_large > too_large:
            self.warn("too_large", "refusing posts from %s that claim more than posts.max-size (%d octets); "
                      "%d refused so far", peer.short, self.limits.max_size, r.too_large)
        if s.no_space > no_space:
            self.warn("no_space", "not fetching posts from %s: the disk has less free than they need and "
                      "posts.min-free (%d octets); %d passed over so far", peer.short, self.limits.min_free,
                      r.no_space)

    def _carry(self, peer: NodeId, actions: list[ClientAction]) -> None:
        for a in actions:
            try:
                self._do(peer, a)
            except OSError as exc:  # the disk is full or failing: stop this session, keep what is written
                self._disk_failed(peer, exc)
                return

    def _disk_failed(self, peer: NodeId, exc: OSError) -> None:
        self.stats.write_errors += 1
        what = f"{exc.strerror or exc}" + (f" ({exc.filename})" if exc.filename else "")
        log.error("cannot store posts fetched from %s: %s; the fetch stops, what was written stays and is "
                  "resumed in %g s", peer.short, what, self.settings.interval)
        client = self.clients.get(peer)
        if client is not None:
            self._carry(peer, client.stop(f"cannot write here: {exc.strerror or exc}"))

    def _do(self, peer: NodeId, a: ClientAction) -> None:
        if isinstance(a, SendMsg):
            self._send(peer, encode(a.msg))
        elif isinstance(a, WriteChunk):
            self.store.write_chunk(a.pid, a.offset, a.data)
            self.stats.octets_fetched += len(a.data)
        elif isinstance(a, Complete):
            self._complete(peer, a.post)
        elif isinstance(a, Release):
            self.store.release(a.pid)
        elif isinstance(a, Discard):
            self.store.discard(a.pid)
        elif isinstance(a, Finished):
            self.clients.pop(peer, None)
            if a.reason != "done":
                self.stats.sessions_failed += 1
                log.info("post sync with %s ended: %s", peer.short, a.reason)
            self._work.set()
            if peer in self._again:  # NEWS during the session
                self._again.discard(peer)
                self._wanted[peer] = 0.0
            elif a.complete:
                self._wanted.pop(peer, None)
            else:
                self._wanted[peer] = time.monotonic() + self.settings.interval
            if a.range is not None or a.reason == "done":
                self.store.save_range(str(peer), a.range)  # last: it may fail on a full disk

    def _complete(self, peer: NodeId, post: Post) -> None:
        if self.store.complete(post):
            self.stats.posts_fetched += 1
            self._publish(PostAdded(post.to_json(), peer, time.time()))
            self._news(but=peer)
        elif not self.store.holds(post.id):
            self.stats.bad_content += 1
            self.warn("bad_content", "refusing content from %s that does not match its post's digests; "
                      "%d refused so far", peer.short, self.stats.bad_content)

    # ------------------------------------------------------------- sending

    def _send(self, peer: NodeId, payload: bytes) -> None:
        queue = self._out.setdefault(peer, deque())
        if not queue:
            try:
                self.node.send_to(peer, payload)
                return
            except BufferFull:
                pass
            except HuddleError as exc:
                log.info("cannot send a Hydra message to %s: %s", peer.short, exc)
                return
        if len(queue) >= MAX_OUT:  # the peer sends requests faster than its channel takes answers
            self.stats.out_dropped += 1
            self.warn("out_dropped", "%d Hydra messages to %s wait for its channel: dropping more (%d so far)",
                      len(queue), peer.short, self.stats.out_dropped)
            return
        queue.append(payload)
        if peer not in self._pumps or self._pumps[peer].done():
            self._pumps[peer] = asyncio.ensure_future(self._pump(peer, queue))

    async def _pump(self, peer: NodeId, queue: deque[bytes]) -> None:
        try:
            while queue:
                await self.node.send_to_wait(peer, queue[0], timeout=60.0)
                queue.popleft()
        except HuddleError as exc:
            log.info("dropping %d Hydra message(s) to %s: %s", len(queue), peer.short, exc)
            queue.clear()

    # ------------------------------------------------------------- local posts

    def added(self, post: Post) -> None:
        self._publish(PostAdded(post.to_json(), None, time.time()))
        self._news(but=None)

    def _news(self, but: NodeId | None) -> None:
        """A post is new here: tell every peer (but the one it came from)."""
        payload = encode(News())
        for peer in self.node.mesh.alive_peers():
            if peer != but:
                self._send(peer, payload)

    def describe(self) -> dict[str, Any]:
        return {"posts": len(self.store), "octets": self.store.used(), "sessions_running": len(self.clients),
                **self.stats.as_dict(), **self.refused.as_dict(), "server": self.server.stats.as_dict()}

    def close(self) -> None:
        for task in [*self._pumps.values(), *self._checks]:
            task.cancel()
        self.store.close()
