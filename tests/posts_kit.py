"""What the Hydra posts tests share: a server's store and a client's side in memory,
driving a client and a server back to back (tests/test_posts_sync.py, _store.py, _service.py),
and a node's posts through its API (tests/test_hostile_posts.py, test_posts_seal.py)."""

from __future__ import annotations

import hashlib
import urllib.parse
from dataclasses import dataclass, field

from conftest import get, http

from huddle.posts import codec
from huddle.posts.codec import (
    Content,
    Fetch,
    HelloOk,
    MetaOk,
    NextOk,
    decode,
    encode,
)
from huddle.posts.model import HEAD, CorruptContent, Post, UnknownPost
from huddle.posts.store import PostStore
from huddle.posts.sync import Client, Complete, Finished, Release, SendMsg, Server, WriteChunk


def meta_of(subject: str, content: bytes) -> Post:
    return Post(subject, "2026-01-02T03:04:05Z", "", "text/plain", hashlib.sha1(content).hexdigest(), len(content))


@dataclass
class FakeSource:
    """The server's store in memory, oldest first."""

    posts: list[tuple[Post, bytes]] = field(default_factory=list)
    corrupt: set[str] = field(default_factory=set)

    def add(self, subject: str, content: bytes) -> Post:
        post = meta_of(subject, content)
        self.posts.append((post, content))
        return post

    def _i(self, pid: str) -> int:
        for i, (p, _) in enumerate(self.posts):
            if p.id == pid:
                return i
        raise UnknownPost(pid)

    def older(self, ident: str) -> str | None:
        i = len(self.posts) if ident == HEAD else self._i(ident)
        return self.posts[i - 1][0].id if i > 0 else None

    def newer(self, ident: str) -> str | None:
        i = -1 if ident == "TAIL" else self._i(ident)
        return self.posts[i + 1][0].id if i + 1 < len(self.posts) else None

    def meta(self, pid: str) -> Post:
        return self.posts[self._i(pid)][0]

    def read(self, pid: str, offset: int, size: int) -> bytes:
        if pid in self.corrupt:
            raise CorruptContent(f"post {pid}: content does not match its digest; dropped")
        return self.posts[self._i(pid)][1][offset:offset + size]


@dataclass
class FakeLocal:
    held: dict[str, bytes] = field(default_factory=dict)
    parts: dict[str, bytearray] = field(default_factory=dict)
    claimed: set[str] = field(default_factory=set)
    busy: set[str] = field(default_factory=set)

    def holds(self, pid: str) -> bool:
        return pid in self.held

    def claim(self, pid: str) -> bool:
        if pid in self.busy:
            return False
        self.claimed.add(pid)
        return True

    def partial(self, pid: str) -> int:
        return len(self.parts.get(pid, b""))

    def used(self) -> int:
        return sum(len(c) for c in self.held.values())

    free_octets: int = 2**62

    def free(self) -> int:
        return self.free_octets

    def count(self) -> int:
        return len(self.held)


def carried(msg: codec.HydraMessage) -> codec.HydraMessage:
    """``msg`` as the peer gets it: CONTENT in a BULK's head and data, the rest in an addressed message."""
    if isinstance(msg, Content):
        return codec.decode_bulk(*codec.encode_bulk(msg))
    return decode(encode(msg))


def run_session(client: Client, server: Server, local: FakeLocal, now: float = 0.0,
                stop_after: int | None = None) -> tuple[Finished | None, list[object]]:
    """Drive a client and a server back to back; returns the Finished action and every action."""
    queue = list(client.start(now))
    seen: list[object] = []
    sent = 0
    while queue:
        action = queue.pop(0)
        seen.append(action)
        if isinstance(action, SendMsg):
            sent += 1
            if stop_after is not None and sent > stop_after:
                return None, seen
            reply = server.receive("client", decode(encode(action.msg)))
            queue.extend(client.receive(carried(reply), now))
        elif isinstance(action, WriteChunk):
            part = local.parts.setdefault(action.pid, bytearray())
            assert len(part) == action.offset
            part.extend(action.data)
        elif isinstance(action, Complete):
            data = bytes(local.parts.pop(action.post.id, b""))
            assert hashlib.sha1(data).hexdigest() == action.post.digest
            local.held[action.post.id] = data
        elif isinstance(action, Release):
            local.claimed.discard(action.pid)
        elif isinstance(action, Finished):
            return action, seen
    return None, seen


def fetching(content: bytes, local: FakeLocal | PostStore | None = None, **settings: float) -> tuple[Client, Post]:
    """A client that has had META-OK for a post of ``content`` and sent its first FETCHes."""
    src = FakeSource()
    p = src.add("a", content)
    client = Client(local if local is not None else FakeLocal(), "c", "n", **settings)  # type: ignore[arg-type]
    client.start(0.0)
    client.receive(HelloOk("s", "n"), 0.0)
    client.receive(NextOk(p.id), 0.0)
    client.receive(MetaOk(p.subject, p.timestamp, "", p.digest, p.mime_type, p.size), 0.0)
    return client, p


def fetches(actions: list[object]) -> list[tuple[int, int, int]]:
    return [(a.msg.token, a.msg.offset, a.msg.octets) for a in actions
            if isinstance(a, SendMsg) and isinstance(a.msg, Fetch)]


def add_post(api: str, content: bytes, subject: str) -> dict[str, object]:
    status, body = http(api, "/api/v1/posts?" + urllib.parse.urlencode({"subject": subject}), raw=content)
    assert status in (200, 201), (status, body)
    assert isinstance(body, dict)
    return body


def ids(api: str) -> set[str]:
    return {p["id"] for p in get(api, "/api/v1/posts")}


def post_stats(api: str) -> dict[str, int]:
    result: dict[str, int] = get(api, "/api/v1/posts/stats")
    return result
