"""Hydra posts without processes: the id, the codec, the sync state machines, the store."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from huddle.errors import DecodeError
from huddle.ids import NodeId
from huddle.posts import codec
from huddle.posts.codec import (
    Chunk,
    ChunkOk,
    Content,
    Error,
    Fetch,
    Goodbye,
    GoodbyeOk,
    Hello,
    HelloOk,
    Meta,
    MetaOk,
    News,
    NextEmpty,
    NextNewer,
    NextOk,
    NextOlder,
    decode,
    encode,
)
from huddle.posts.model import HEAD, CorruptContent, Policy, Post, PostError, Range, UnknownPost, post_id
from huddle.posts.service import MAX_HELD, MAX_OUT, MAX_QUEUED_CONTENT, PostService, PostSettings
from huddle.posts.store import PostStore
from huddle.posts.sync import Client, Complete, Finished, Release, SendMsg, Server, WriteChunk
from huddle.protocol.delivery import BufferFull
from huddle.protocol.events import BulkReceived, MessageReceived

# ----------------------------------------------------------------------------- the id


def test_post_id_as_the_source_defines_it() -> None:
    # sha1(b"hi") = c22b5f91...; the id is the SHA1 of this text, worked out by hand with sha1sum:
    #   printf 'hello:2026-01-02T03:04:05Z::text/plain:c22b5f9178342609428d6f51b2c5af4c0bde6a42' | sha1sum
    digest = "c22b5f9178342609428d6f51b2c5af4c0bde6a42"
    assert hashlib.sha1(b"hi").hexdigest() == digest
    expected = "3d2202849b78c149e3de1d48f2a0e2e7921b1cdf"
    assert post_id("hello", "2026-01-02T03:04:05Z", "", "text/plain", digest) == expected
    assert Post("hello", "2026-01-02T03:04:05Z", "", "text/plain", digest, 2).id == expected


def test_post_id_depends_on_every_field() -> None:
    base = ("s", "2026-01-02T03:04:05Z", "", "text/plain", "0" * 40)
    seen = {post_id(*base)}
    for i, other in enumerate(("t", "2026-01-02T03:04:06Z", "1" * 40, "image/png", "2" * 40)):
        changed = list(base)
        changed[i] = other
        seen.add(post_id(*changed))
    assert len(seen) == 6


@pytest.mark.parametrize(("field_name", "value", "message"), [
    ("timestamp", "2026-01-02 03:04:05", "ISO 8601"),
    ("parent_id", "xyz", "parent id"),
    ("mime_type", "text", "TYPE/SUBTYPE"),
    ("digest", "ABC", "digest"),
    ("size", -1, "size"),
])
def test_bad_metadata_is_refused(field_name: str, value: object, message: str) -> None:
    good = {"subject": "s", "timestamp": "2026-01-02T03:04:05Z", "parent_id": "", "mime_type": "text/plain",
            "digest": "0" * 40, "size": 0}
    with pytest.raises(PostError, match=message):
        Post(**(good | {field_name: value}))  # type: ignore[arg-type]


def test_from_json_checks_the_id() -> None:
    post = Post("s", "2026-01-02T03:04:05Z", "", "text/plain", "0" * 40, 0)
    assert Post.from_json(post.to_json()) == post
    with pytest.raises(PostError, match="does not match"):
        Post.from_json(post.to_json() | {"id": "1" * 40})


# ----------------------------------------------------------------------------- the codec

text = st.text(max_size=60).filter(lambda t: len(t.encode()) <= 255)
messages = st.one_of(
    st.builds(Hello, text, text), st.builds(HelloOk, text, text), st.builds(NextOlder, text),
    st.builds(NextNewer, text), st.builds(NextOk, text), st.just(NextEmpty()), st.just(Meta()),
    st.builds(MetaOk, st.text(max_size=300), text, text, text, text, st.integers(0, 2**64 - 1)),
    st.builds(Chunk, st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)),
    st.builds(ChunkOk, st.integers(0, 2**64 - 1), st.binary(max_size=300)),
    st.just(Goodbye()), st.just(GoodbyeOk()), st.builds(Error, st.integers(0, 65535), text), st.just(News()),
    st.builds(Fetch, st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)),
)


@given(messages)
def test_codec_round_trip(msg: codec.HydraMessage) -> None:
    raw = encode(msg)
    assert raw[:2] == b"\xaa\xa0" and raw[2] == msg.ID
    assert decode(raw) == msg


@given(st.binary(max_size=200))
def test_decode_arbitrary_bytes_returns_or_raises_decode_error(raw: bytes) -> None:
    for data in (raw, b"\xaa\xa0" + raw):
        with contextlib.suppress(DecodeError):
            decode(data)


def test_the_documents_bytes() -> None:
    assert encode(NextOlder("HEAD")) == b"\xaa\xa0\x03\x04HEAD"
    assert encode(Chunk(1, 2)) == b"\xaa\xa0\x09" + (1).to_bytes(8, "big") + (2).to_bytes(4, "big")
    assert encode(ChunkOk(0, b"xy")) == b"\xaa\xa0\x0a" + bytes(8) + b"\x00\x00\x00\x02xy"
    assert encode(Error(404, "no")) == b"\xaa\xa0\x0d\x01\x94\x02no"


@pytest.mark.parametrize(("raw", "message"), [
    (b"hello", "signature"),
    (b"\xaa\xa0", "signature"),
    (b"\xaa\xa0\x63", "unknown Hydra command 99"),
    (b"\xaa\xa0\x03\x05HEAD", "cut short"),
    (b"\xaa\xa0\x06x", "extra octet"),
    (b"\xaa\xa0\x03\x01\xff", "UTF-8"),
    (b"\xaa\xa0\x0a" + bytes(8) + b"\x00\x00\x00\x09xy", "cut short in chunk"),
])
def test_decode_bad_input(raw: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        decode(raw)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.binary(max_size=300))
def test_content_round_trip_as_a_bulk(token: int, offset: int, content: bytes) -> None:
    head, data = codec.encode_bulk(Content(token, offset, content))
    assert data is content and len(head) == 19  # the content is its own frame, not copied
    assert codec.decode_bulk(head, data) == Content(token, offset, content)


@given(st.binary(max_size=40), st.binary(max_size=40))
def test_decode_bulk_of_arbitrary_bytes_returns_or_raises_decode_error(head: bytes, data: bytes) -> None:
    for h in (head, b"\xaa\xa0" + head, b"\xaa\xa0\x10" + head):
        with contextlib.suppress(DecodeError):
            codec.decode_bulk(h, data)


def test_the_bulk_bytes() -> None:
    assert encode(Fetch(7, 1, 2)) == b"\xaa\xa0\x0f" + (7).to_bytes(8, "big") + (1).to_bytes(8, "big") + b"\0\0\0\2"
    head, data = codec.encode_bulk(Content(7, 1, b"xy"))
    assert head == b"\xaa\xa0\x10" + (7).to_bytes(8, "big") + (1).to_bytes(8, "big") and data == b"xy"


@pytest.mark.parametrize(("head", "data", "message"), [
    (b"\x00\x00\x10" + bytes(16), b"x", "signature"),
    (b"\xaa\xa0\x10" + bytes(15), b"x", "head of 18 octets, not 19"),
    (b"\xaa\xa0\x10" + bytes(17), b"x", "head of 20 octets, not 19"),
    (b"\xaa\xa0\x0a" + bytes(16), b"x", "command 10 in a BULK"),
    (b"\xaa\xa0\x10" + bytes(16), b"x" * (codec.MAX_FETCH + 1), "over 1048576"),
])
def test_decode_bulk_bad_input(head: bytes, data: bytes, message: str) -> None:
    with pytest.raises(DecodeError, match=message):
        codec.decode_bulk(head, data)


def test_content_is_never_an_addressed_message() -> None:
    with pytest.raises(DecodeError, match="only as a BULK"):
        decode(b"\xaa\xa0\x10" + bytes(16))
    with pytest.raises(ValueError, match="BULK"):
        encode(Content(1, 0, b"x"))
    with pytest.raises(ValueError, match="over"):
        codec.encode_bulk(Content(1, 0, b"x" * (codec.MAX_FETCH + 1)))


def test_a_string_over_255_octets_cannot_be_encoded() -> None:
    with pytest.raises(ValueError, match="255"):
        encode(NextOk("x" * 256))


# ----------------------------------------------------------------------------- state machines


def _meta_of(subject: str, content: bytes) -> Post:
    return Post(subject, "2026-01-02T03:04:05Z", "", "text/plain", hashlib.sha1(content).hexdigest(), len(content))


@dataclass
class FakeSource:
    """The server's store in memory, oldest first."""

    posts: list[tuple[Post, bytes]] = field(default_factory=list)
    corrupt: set[str] = field(default_factory=set)

    def add(self, subject: str, content: bytes) -> Post:
        post = _meta_of(subject, content)
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


def test_client_fetches_newest_first_and_keeps_the_range() -> None:
    src = FakeSource()
    posts = [src.add(f"p{i}", bytes([i]) * (1000 * i)) for i in range(5)]
    local = FakeLocal()
    server = Server(src, "s", "server")
    client = Client(local, "c", "client", chunk_size=700, window=2)
    done, seen = run_session(client, server, local)
    assert done is not None and done.reason == "done"
    assert done.range == Range(posts[0].id, posts[4].id)
    completed = [a.post.id for a in seen if isinstance(a, Complete)]
    assert completed == [p.id for p in reversed(posts)]  # newest first
    assert all(local.held[p.id] == bytes([i]) * (1000 * i) for i, p in enumerate(posts))
    # Two new posts: the next session fetches them newest first, meets the range's newest and
    # jumps below its oldest; it asks for no post it has been through.
    new = [src.add("q1", b"one"), src.add("q2", b"two")]
    client2 = Client(local, "c", "client", range=done.range)
    done2, seen2 = run_session(client2, server, local)
    assert done2 is not None and done2.range == Range(posts[0].id, new[1].id)
    assert [a.post.id for a in seen2 if isinstance(a, Complete)] == [new[1].id, new[0].id]
    nexts = [a.msg for a in seen2 if isinstance(a, SendMsg) and isinstance(a.msg, NextOlder)]
    assert nexts == [NextOlder(HEAD), NextOlder(new[1].id), NextOlder(new[0].id), NextOlder(posts[0].id)]
    assert client2.stats.posts_fetched == 2 and client2.stats.posts_skipped == 0
    # A server that dropped the range's oldest: 404, and the client walks again from HEAD.
    src.posts = [x for x in src.posts if x[0].id != posts[0].id]
    done3, _ = run_session(Client(local, "c", "client", range=done2.range), server, local)
    assert done3 is not None and done3.reason == "done" and done3.range == Range(posts[1].id, new[1].id)


def test_client_skips_held_posts_and_resumes_a_partial_file() -> None:
    src = FakeSource()
    a = src.add("a", b"A" * 5000)
    b = src.add("b", b"B" * 5000)
    local = FakeLocal(held={a.id: b"A" * 5000}, parts={b.id: bytearray(b"B" * 3000)})
    client = Client(local, "c", "client", chunk_size=1000)
    done, seen = run_session(client, Server(src, "s", "server"), local)
    assert done is not None and done.reason == "done"
    fetches = [a.msg for a in seen if isinstance(a, SendMsg) and isinstance(a.msg, Fetch)]
    assert [(f.offset, f.octets) for f in fetches] == [(3000, 1000), (4000, 1000)]
    assert client.stats.octets_fetched == 2000 and client.stats.posts_skipped == 1
    assert local.held[b.id] == b"B" * 5000


def test_policies() -> None:
    assert Policy.parse("all") == Policy()
    assert Policy.parse("newest:3") == Policy("newest", 3)
    assert Policy.parse("budget:2m") == Policy("budget", 2 * 1024 * 1024)
    for bad in ("some", "newest:x", "newest:0", "budget:", "all:3"):
        with pytest.raises(ValueError):
            Policy.parse(bad)
    src = FakeSource()
    posts = [src.add(f"p{i}", b"x" * 100 * (i + 1)) for i in range(5)]
    local = FakeLocal()
    server = Server(src, "s", "n")
    done, _ = run_session(Client(local, "c", "n", policy=Policy("newest", 2)), server, local)
    assert set(local.held) == {posts[4].id, posts[3].id}
    assert done is not None and done.complete and done.range == Range(posts[3].id, posts[4].id)
    # Again, with one new post: the two newest are the new one and posts[4]; nothing older.
    new = src.add("new", b"n")
    done, _ = run_session(Client(local, "c", "n", range=done.range, policy=Policy("newest", 2)), server, local)
    assert set(local.held) == {posts[4].id, posts[3].id, new.id} and done is not None and done.complete
    src.posts.remove((new, b"n"))
    local = FakeLocal()
    run_session(Client(local, "c", "n", policy=Policy("budget", 700)), Server(src, "s", "n"), local)
    assert set(local.held) == {posts[4].id, posts[1].id}  # 500 + 200 octets; 400 would not fit after 500


def test_corrupt_content_is_an_error_and_the_range_is_kept() -> None:
    src = FakeSource()
    a = src.add("a", b"good")
    src.corrupt.add(a.id)
    local = FakeLocal()
    server = Server(src, "s", "n")
    done, seen = run_session(Client(local, "c", "n", range=None), server, local)
    assert done is not None and "500" in done.reason and done.range is None
    assert any(isinstance(x, Release) and x.pid == a.id for x in seen)
    assert server.stats.corrupt_refused == 1 and not local.held


def test_a_busy_post_is_passed_over_and_the_range_not_saved() -> None:
    src = FakeSource()
    a, b = src.add("a", b"1"), src.add("b", b"2")
    local = FakeLocal(busy={b.id})
    done, _ = run_session(Client(local, "c", "n"), Server(src, "s", "n"), local)
    assert done is not None and done.reason == "done" and done.range is None
    assert set(local.held) == {a.id}


def test_a_forgotten_range_end_restarts_from_head() -> None:
    src = FakeSource()
    a = src.add("a", b"1")
    local = FakeLocal()
    client = Client(local, "c", "n", range=Range("9" * 40, "9" * 40))
    done, _ = run_session(client, Server(src, "s", "n"), local)
    assert done is not None and done.range == Range(a.id, a.id) and a.id in local.held


def test_metadata_that_does_not_give_the_announced_id_ends_the_session() -> None:
    local = FakeLocal()
    client = Client(local, "c", "n")
    client.start(0.0)
    client.receive(HelloOk("s", "n"), 0.0)
    client.receive(NextOk("1" * 40), 0.0)
    actions = client.receive(MetaOk("s", "2026-01-02T03:04:05Z", "", "0" * 40, "text/plain", 0), 0.0)
    assert SendMsg(Goodbye()) in actions and any(isinstance(a, Release) for a in actions)
    assert isinstance(actions[-1], Finished) and "id" in actions[-1].reason and client.done


def test_the_client_times_out_with_a_fake_clock() -> None:
    client = Client(FakeLocal(), "c", "n", timeout=30.0)
    client.start(100.0)
    assert client.tick(129.0) == []
    client.receive(HelloOk("s", "n"), 129.0)  # heard: the clock restarts
    assert client.tick(158.0) == []
    out = client.tick(159.5)
    assert isinstance(out[-1], Finished) and "no answer" in out[-1].reason


def test_stale_replies_before_hello_ok_are_passed_over() -> None:
    src = FakeSource()
    src.add("a", b"x")
    client = Client(FakeLocal(), "c", "n")
    client.start(0.0)
    assert client.receive(ChunkOk(0, b"old"), 0.0) == []
    assert client.receive(NextEmpty(), 0.0) == []
    assert client.stats.stale == 2
    assert client.receive(HelloOk("s", "n"), 0.0) == [SendMsg(NextOlder(HEAD))]


def test_out_of_order_chunk_is_a_protocol_error() -> None:
    src = FakeSource()
    p = src.add("a", b"x" * 10)
    client = Client(FakeLocal(), "c", "n", chunk_size=5)
    client.start(0.0)
    client.receive(HelloOk("s", "n"), 0.0)
    client.receive(NextOk(p.id), 0.0)
    client.receive(MetaOk(p.subject, p.timestamp, "", p.digest, p.mime_type, p.size), 0.0)
    out = client.receive(Content(1, 5, b"xxxxx"), 0.0)  # FETCH 1 asked for offset 0
    assert isinstance(out[-1], Finished) and "answers a FETCH of 5 octets at 0" in out[-1].reason


@pytest.mark.parametrize(("msg", "status"), [
    (Meta(), 400), (Chunk(0, 10), 400), (NextOlder("1" * 40), 404), (NextOk("x"), 400),
])
def test_server_errors(msg: codec.HydraMessage, status: int) -> None:
    server = Server(FakeSource(), "s", "n")
    assert server.receive("c", Meta()) == Error(400, "say HELLO first (got META)")
    server.receive("c", Hello("c", "n"))
    reply = server.receive("c", msg)
    assert isinstance(reply, Error) and reply.status == status


def test_server_refuses_an_offset_past_the_content() -> None:
    src = FakeSource()
    p = src.add("a", b"abc")
    server = Server(src, "s", "n")
    server.receive("c", Hello("c", "n"))
    assert server.receive("c", NextOlder(HEAD)) == NextOk(p.id)
    assert server.receive("c", Chunk(1, 100)) == ChunkOk(1, b"bc")
    reply = server.receive("c", Chunk(4, 1))
    assert isinstance(reply, Error) and reply.status == 416


def test_a_read_that_fails_on_disk_is_an_error_500_not_a_crash(tmp_path: Path) -> None:
    """The content's file cannot be read (here: it became a directory behind the store's back):
    the server answers ERROR 500 with the system's reason, and the session can go on."""
    store = PostStore(tmp_path)
    up = store.upload()
    up.write(b"0123456789")
    post, _ = up.finish("s", "2026-01-02T03:04:05Z", "", "text/plain")
    server = Server(store, "s", "n")
    server.receive("c", Hello("c", "n"))
    assert server.receive("c", NextOlder(HEAD)) == NextOk(post.id)
    data = tmp_path / "posts" / f"{post.id}.data"
    store._verified[post.id] = (10, data.stat().st_mtime_ns)  # checked once; then the file goes bad
    data.unlink()
    data.mkdir()
    store._verified[post.id] = (data.stat().st_size, data.stat().st_mtime_ns)
    reply = server.receive("c", Fetch(1, 0, 10))
    assert reply == Error(500, "cannot read the content here: Is a directory")
    assert server.receive("c", NextOlder(HEAD)) == NextOk(post.id)  # the session goes on
    store.close()


def test_a_chunk_that_cannot_be_written_fails_the_later_ones_and_leaves_whole_chunks(tmp_path: Path) -> None:
    """A full disk while fetching: the partial file is cut back to the whole chunks before the
    one that failed, and the failure is raised to the caller (who stops the session)."""
    import resource

    store = PostStore(tmp_path)
    post = _meta_of("s", b"".join(bytes([i]) * 1000 for i in range(4)))
    pid = post.id
    assert store.claim(pid)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (2500, hard))  # Python ignores SIGXFSZ: writes fail with EFBIG
    failed: OSError | None = None
    try:
        for i in range(4):  # the third chunk (2000..3000) crosses the limit
            store.write_chunk(pid, i * 1000, bytes([i]) * 1000)
        store.complete(post)  # the failure comes out here, or at the fourth chunk if it was quick
    except OSError as exc:
        failed = exc
        store.release(pid)  # as the service does, stopping the session
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert failed is not None and failed.errno == errno.EFBIG, failed
    assert not store.holds(pid)
    part = tmp_path / "posts" / f"{pid}.part"
    assert part.read_bytes() == b"\0" * 1000 + b"\1" * 1000  # whole chunks only, no partial third
    assert store.partial(pid) == 2000 and store.claim(pid)  # released: a later session resumes at 2000
    store.close()


# ----------------------------------------------------------------------------- the store


def test_store_keeps_verifies_and_drops(tmp_path: Path) -> None:
    store = PostStore(tmp_path)
    up = store.upload()
    for block in (b"abc", b"def"):
        up.write(block)
    post, new = up.finish("s", "2026-01-02T03:04:05Z", "", "text/plain")
    assert new and post.digest == hashlib.sha1(b"abcdef").hexdigest()
    assert store.read(post.id, 2, 3) == b"cde"
    assert store.older(HEAD) == post.id and store.older(post.id) is None
    up2 = store.upload()
    with pytest.raises(PostError, match="parent"):
        up2.finish("s", "2026-01-02T03:04:05Z", "1" * 40, "text/plain")
    store.save_range("peer", Range(post.id, post.id))
    store.close()
    store = PostStore(tmp_path)  # reopened: the post and the range are still there
    assert store.holds(post.id) and store.load_range("peer") == Range(post.id, post.id)
    store.data_path(post.id).write_bytes(b"abcdeX")  # tampered, same size
    with pytest.raises(CorruptContent):
        store.read(post.id, 0, 6)
    assert not store.holds(post.id) and store.load_range("peer") is None
    store.close()


def test_store_resumes_a_partial_fetch_and_refuses_a_bad_digest(tmp_path: Path) -> None:
    store = PostStore(tmp_path)
    post = _meta_of("s", b"0123456789")
    assert store.claim(post.id) and not store.claim(post.id)
    store.write_chunk(post.id, 0, b"01234")
    store.release(post.id)
    assert store.partial(post.id) == 5
    assert store.claim(post.id)
    store.write_chunk(post.id, 5, b"56789")
    assert store.complete(post) and store.holds(post.id)
    bad = _meta_of("t", b"good")
    store.claim(bad.id)
    store.write_chunk(bad.id, 0, b"evil")
    assert not store.complete(bad) and not store.holds(bad.id) and store.partial(bad.id) == 0
    store.close()


def test_one_store_per_directory(tmp_path: Path) -> None:
    from huddle.errors import DataDirLocked

    store = PostStore(tmp_path)
    with pytest.raises(DataDirLocked):
        PostStore(tmp_path)
    store.close()


@pytest.mark.parametrize(("changes", "message"), [
    ({"posts_policy": "some"}, "policy must be"),
    ({"posts_policy": "newest:0"}, "N >= 1"),
    ({"posts_chunk": 10}, "posts chunk must be"),
    ({"posts_interval": 0}, "interval must be positive"),
])
def test_posts_settings_are_checked(changes: dict[str, object], message: str) -> None:
    from huddle.config import NodeConfig
    from huddle.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        NodeConfig(**changes)  # type: ignore[arg-type]


def test_server_caps_a_chunk() -> None:
    src = FakeSource()
    src.add("a", b"x" * 100)
    server = Server(src, "s", "n", max_chunk=30)
    server.receive("c", Hello("c", "n"))
    server.receive("c", NextOlder(HEAD))
    reply = server.receive("c", Chunk(0, 100))
    assert isinstance(reply, ChunkOk) and len(reply.content) == 30


def test_a_server_that_caps_chunks_below_the_clients_size() -> None:
    src = FakeSource()
    content = bytes(range(256)) * 40
    p = src.add("a", content)
    local = FakeLocal()
    client = Client(local, "c", "n", chunk_size=1000, window=4)
    done, _ = run_session(client, Server(src, "s", "n", max_chunk=300), local)
    assert done is not None and done.reason == "done" and local.held[p.id] == content


def test_a_next_ok_that_is_not_a_post_id_ends_the_session() -> None:
    client = Client(FakeLocal(), "c", "n")
    client.start(0.0)
    client.receive(HelloOk("s", "n"), 0.0)
    out = client.receive(NextOk("../../etc/passwd"), 0.0)
    assert SendMsg(Goodbye()) in out and isinstance(out[-1], Finished) and "not a post id" in out[-1].reason


# ----------------------------------------------------------------------------- content in BULKs


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


def test_server_answers_fetch_with_content_capped_and_checked() -> None:
    src = FakeSource()
    p = src.add("a", b"abcdef")
    server = Server(src, "s", "n", max_chunk=4)
    server.receive("c", Hello("c", "n"))
    assert server.receive("c", Fetch(1, 0, 2)) == Error(400, "FETCH needs a current post (after NEXT-OK)")
    assert server.receive("c", NextOlder(HEAD)) == NextOk(p.id)
    assert server.current("c") == p.id and server.current("other") is None
    assert server.receive("c", Fetch(9, 1, 100)) == Content(9, 1, b"bcde")  # the server's cap, the client's token
    reply = server.receive("c", Fetch(10, 7, 1))
    assert isinstance(reply, Error) and reply.status == 416
    assert server.stats.octets_served == 4


def test_content_nobody_asked_for_is_refused_and_nothing_is_written() -> None:
    client, p = fetching(b"x" * 10, chunk_size=5, window=2)
    assert client.receive(Content(99, 0, b"evil!"), 0.0) == []  # no FETCH 99 in flight
    assert client.stats.stale == 1 and not client.done
    out = client.receive(Content(1, 0, b"xxxxx"), 0.0)  # the real answer still counts
    assert WriteChunk(p.id, 0, b"xxxxx") in out
    # After the session: a CONTENT arriving late is refused too.
    client.receive(Content(2, 5, b"xxxxx"), 0.0)
    assert client.receive(Content(2, 5, b"xxxxx"), 0.0) == [] and client.stats.stale == 2


@pytest.mark.parametrize(("content", "why"), [
    (Content(1, 3, b"xxxxx"), "at 3"),  # the offset of another FETCH's, or none
    (Content(1, 0, b"x" * 6), "6 octets"),  # more than asked
    (Content(1, 0, b""), "0 octets"),  # nothing
])
def test_content_with_the_wrong_offset_or_size_ends_the_session_unwritten(content: Content, why: str) -> None:
    client, p = fetching(b"x" * 10, chunk_size=5, window=2)
    out = client.receive(content, 0.0)
    assert not any(isinstance(a, WriteChunk) for a in out)
    assert Release(p.id) in out and SendMsg(Goodbye()) in out
    assert isinstance(out[-1], Finished) and why in out[-1].reason and not out[-1].complete


def test_content_that_overtakes_a_lost_one_is_asked_again_in_order() -> None:
    client, p = fetching(b"x" * 20, chunk_size=5, window=3)
    client.receive(Content(1, 0, b"xxxxx"), 0.0)  # asks FETCH 4 for 15
    out = client.receive(Content(3, 10, b"xxxxx"), 0.0)  # FETCH 2 (offset 5) was lost
    assert not any(isinstance(a, WriteChunk) for a in out)
    assert fetches(out) == [(5, 5, 5), (6, 10, 5), (7, 15, 5)] and client.stats.retries == 1
    assert client.receive(Content(2, 5, b"xxxxx"), 0.0) == []  # given up: refused
    assert WriteChunk(p.id, 5, b"xxxxx") in client.receive(Content(5, 5, b"xxxxx"), 0.0)


def test_no_content_for_a_while_is_asked_again_then_the_session_ends() -> None:
    client, p = fetching(b"x" * 10, chunk_size=5, window=2, retry_after=5.0, timeout=30.0)
    assert client.tick(4.0) == []
    out = client.tick(5.5)  # nothing since 0: the FETCHes in flight are given up and asked again
    assert fetches(out) == [(3, 0, 5), (4, 5, 5)] and client.stats.retries == 1
    assert client.tick(10.0) == []  # not again before retry_after since the last time
    assert WriteChunk(p.id, 0, b"xxxxx") in client.receive(Content(3, 0, b"xxxxx"), 12.0)
    assert fetches(client.tick(17.5)) == [(5, 5, 5)]
    out = client.tick(42.5)  # no content for 30 s
    assert SendMsg(Goodbye()) in out and Release(p.id) in out
    assert isinstance(out[-1], Finished) and "no content for 30 s" in out[-1].reason


def test_tokens_are_the_nodes_not_the_sessions() -> None:
    import itertools

    tokens = itertools.count(1000)
    first, _ = fetching(b"x" * 10, chunk_size=5, tokens=tokens)  # type: ignore[arg-type]
    second, _ = fetching(b"y" * 10, chunk_size=5, tokens=tokens)  # type: ignore[arg-type]
    assert [t for t, _, _ in first._asked] == [1000, 1001]
    assert [t for t, _, _ in second._asked] == [1002, 1003]
    assert second.receive(Content(1000, 0, b"xxxxx"), 0.0) == []  # the first session's: refused


def test_hostile_content_never_reaches_the_store(tmp_path: Path) -> None:
    """A real store fed as the node feeds it: unasked, misplaced and oversized CONTENT leave the
    partial file as the good CONTENTs made it, and the post is kept with its digest checked."""
    content = bytes(range(256)) * 40  # 10240 octets
    store = PostStore(tmp_path)

    def carry(actions: list[object]) -> None:
        for a in actions:
            if isinstance(a, WriteChunk):
                store.write_chunk(a.pid, a.offset, a.data)
            elif isinstance(a, Complete):
                assert store.complete(a.post)
            elif isinstance(a, Release):
                store.release(a.pid)

    client, p = fetching(content, store, chunk_size=4096, window=2)
    assert store.claim(p.id) is False  # the client claimed it
    carry(client.receive(Content(1, 0, content[:4096]), 0.0))
    carry(client.receive(Content(77, 4096, b"\0" * 4096), 0.0))  # unasked: refused
    carry(client.receive(Content(2, 4096, b"\0" * 5000), 0.0))  # more than asked: the session ends
    assert client.done
    assert (tmp_path / "posts" / f"{p.id}.part").read_bytes() == content[:4096]
    # The next session resumes from the good prefix and keeps the post.
    client, _ = fetching(content, store, chunk_size=8192, window=2)
    assert [(o, n) for _, o, n in client._asked] == [(4096, 6144)]
    carry(client.receive(Content(client._asked[0][0], 4096, content[4096:]), 0.0))
    assert store.holds(p.id) and store.read(p.id, 0, len(content)) == content
    store.close()


# ----------------------------------------------------------------------------- the service


class FakeNode:
    """What the post service uses of a node: its identity, and sending (decoded here)."""

    def __init__(self) -> None:
        self.uuid = NodeId(b"\x0a" * 16)
        self.config = SimpleNamespace(name="a", max_message=128 * 1024 * 1024)
        self.mesh = SimpleNamespace(alive_peers=list)
        self.sent: list[codec.HydraMessage] = []
        self.bulks: list[Content] = []

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        self.sent.append(decode(payload))
        return len(self.sent)

    def send_bulk(self, peer: NodeId, head: bytes, data: bytes) -> bool:
        self.bulks.append(codec.decode_bulk(head, data))
        return True

    queued = 0  # octets of content sent and not yet on the peer's connection

    def queued_bulk(self, peer: NodeId) -> int:
        return self.queued


async def until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        await asyncio.sleep(0.005)


def _stored(tmp_path: Path, content: bytes) -> Post:
    store = PostStore(tmp_path)
    up = store.upload()
    up.write(content)
    post, _ = up.finish("big", "2026-01-02T03:04:05Z", "", "application/octet-stream")
    store.close()
    return post


def test_first_serve_hashes_in_a_thread_and_keeps_the_order(tmp_path: Path) -> None:
    content = os.urandom(3 * 1024 * 1024)
    post = _stored(tmp_path, content)
    peer = NodeId(b"\x0b" * 16)

    async def main() -> None:
        node = FakeNode()
        service = PostService(node, PostStore(tmp_path), PostSettings(), lambda e: None)  # type: ignore[arg-type]

        def ask(msg: codec.HydraMessage) -> None:
            assert service.handle(MessageReceived(peer, 1, encode(msg)))

        for msg in (Hello("c", "n"), NextOlder(HEAD), Meta(), Fetch(5, 0, 10)):
            ask(msg)
        # Reopened, the store has not checked the content since: META and FETCH wait for it.
        assert node.sent == [HelloOk(str(node.uuid), "a"), NextOk(post.id)] and node.bulks == []
        await until(lambda: bool(node.bulks), "the CONTENT after the check")
        assert isinstance(node.sent[2], MetaOk) and node.bulks == [Content(5, 0, content[:10])]
        assert service.stats.checks == 1
        ask(Fetch(6, 10, 2**20))  # checked now: answered at once, a whole MiB
        assert node.bulks[1] == Content(6, 10, content[10:10 + 2**20]) and service.stats.checks == 1
        # A BULK from a peer we are not fetching from, and one that is not a CONTENT.
        assert service.handle(BulkReceived(peer, *codec.encode_bulk(Content(1, 0, b"x"))))
        assert service.handle(BulkReceived(peer, b"\xaa\xa0\x0a", b"x"))
        assert service.stats.bulk_refused == 1 and service.stats.decode_errors == 1
        service.close()

    asyncio.run(main())


def test_a_corrupt_post_found_on_first_serve_is_refused(tmp_path: Path) -> None:
    post = _stored(tmp_path, b"0123456789" * 1000)
    with (tmp_path / "posts" / f"{post.id}.data").open("r+b") as f:
        f.write(b"tampered")
    peer = NodeId(b"\x0b" * 16)

    async def main() -> None:
        node = FakeNode()
        service = PostService(node, PostStore(tmp_path), PostSettings(), lambda e: None)  # type: ignore[arg-type]
        for msg in (Hello("c", "n"), NextOlder(HEAD), Meta(), Fetch(1, 0, 10)):
            service.handle(MessageReceived(peer, 1, encode(msg)))
        await until(lambda: len(node.sent) == 4, "the answers to META and FETCH")
        assert isinstance(node.sent[2], MetaOk)
        assert isinstance(node.sent[3], Error) and node.sent[3].status == 500 and not node.bulks
        assert service.server.stats.corrupt_refused == 1 and not service.store.holds(post.id)
        service.close()

    asyncio.run(main())


def test_a_peer_that_asks_for_content_and_does_not_read_it_is_refused_with_503(tmp_path: Path) -> None:
    """Past MAX_QUEUED_CONTENT not yet on its connection, a peer's FETCHes are answered by ERROR
    503 and nothing is read or queued for it; once it reads, it is served again."""
    content = os.urandom(2 * 1024 * 1024)
    _stored(tmp_path, content)
    peer = NodeId(b"\x0b" * 16)

    async def main() -> None:
        node = FakeNode()
        store = PostStore(tmp_path)
        service = PostService(node, store, PostSettings(), lambda e: None)  # type: ignore[arg-type]
        for msg in (Hello("c", "n"), NextOlder(HEAD), Meta()):
            service.handle(MessageReceived(peer, 1, encode(msg)))
        await until(lambda: len(node.sent) == 3, "META-OK after the first check")
        node.queued = MAX_QUEUED_CONTENT
        for token in range(100):
            service.handle(MessageReceived(peer, 1, encode(Fetch(token, 0, 2**20))))
        refusals = node.sent[3:]
        assert len(refusals) == 100 and not node.bulks
        assert all(isinstance(r, Error) and r.status == 503 and "not read yet" in r.reason for r in refusals)
        assert service.stats.fetch_refused_busy == 100 and service.server.stats.chunks_served == 0
        node.queued = 0
        service.handle(MessageReceived(peer, 1, encode(Fetch(7, 0, 2**20))))
        assert node.bulks == [Content(7, 0, content[:2**20])]
        service.close()

    asyncio.run(main())


class StuckNode(FakeNode):
    """A peer whose channel never has room: every Hydra message waits."""

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        raise BufferFull(f"no room for {peer}")

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_answers_waiting_for_a_stuck_channel_are_bounded(tmp_path: Path) -> None:
    peer = NodeId(b"\x0b" * 16)

    async def main() -> None:
        node = StuckNode()
        service = PostService(node, PostStore(tmp_path), PostSettings(), lambda e: None)  # type: ignore[arg-type]
        for _ in range(MAX_OUT + 500):  # a client that floods requests and takes no answer
            service.handle(MessageReceived(peer, 1, encode(Hello("c", "n"))))
        assert len(service._out[peer]) == MAX_OUT and service.stats.out_dropped == 500
        service.close()

    asyncio.run(main())


def test_tune_malloc_leaves_the_users_own_settings_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    from huddle import memtune

    monkeypatch.setenv("MALLOC_ARENA_MAX", "2")
    assert memtune.tune_malloc() is False
    monkeypatch.delenv("MALLOC_ARENA_MAX")
    monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.trim_threshold=1")
    assert memtune.tune_malloc() is False


_FAULTS = """
import collections, os, resource, sys
from huddle.memtune import tune_malloc
applied = tune_malloc()
fd = os.open(sys.argv[1], os.O_RDONLY)
held = collections.deque()  # 8 chunks in flight, as a node serving a post keeps them
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):
    held.append(os.pread(fd, 1 << 20, (i % 16) << 20))
    if len(held) > 8:
        held.popleft()
print(applied, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc",
                    reason="tune_malloc only changes glibc's malloc; this C library is not glibc")
def test_a_tuned_node_process_reuses_its_chunk_buffers(tmp_path: Path) -> None:
    """200 reads of 1 MiB with 8 held: tuned, the process faults in about the pages of the 9
    buffers once; with glibc's defaults (kept when the user sets MALLOC_*), about twice that."""
    import subprocess
    import sys

    src = tmp_path / "src.bin"
    src.write_bytes(os.urandom(16 << 20))

    def faults(env: dict[str, str]) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", _FAULTS, str(src)], capture_output=True, text=True,
                             env=env, check=True).stdout.split()
        return out[0], int(out[1])

    env = {k: v for k, v in os.environ.items() if k != "GLIBC_TUNABLES" and not k.startswith("MALLOC_")}
    applied, tuned = faults(env)
    assert applied == "True" and tuned < 9 * 256 * 1.3, tuned
    applied, plain = faults(env | {"MALLOC_ARENA_MAX": "8"})
    assert applied == "False" and plain > 1.5 * tuned, (plain, tuned)


def test_requests_held_for_a_digest_check_are_bounded(tmp_path: Path) -> None:
    """While a post's digest is checked (after a restart), a peer's requests wait; a flood of them
    past MAX_HELD is answered by ERROR 503 instead of kept, and those kept are answered in order."""
    content = os.urandom(64 * 1024 * 1024)  # large enough that the check is still running below
    post = _stored(tmp_path, content)
    peer = NodeId(b"\x0b" * 16)

    async def main() -> None:
        node = FakeNode()
        service = PostService(node, PostStore(tmp_path), PostSettings(), lambda e: None)  # type: ignore[arg-type]
        for msg in (Hello("c", "n"), NextOlder(HEAD), Meta()):
            service.handle(MessageReceived(peer, 1, encode(msg)))
        for token in range(MAX_HELD + 100):
            service.handle(MessageReceived(peer, 1, encode(Fetch(token, 0, 10))))
        assert peer in service._held and len(service._held[peer]) == MAX_HELD  # the check has not run yet
        refused = [m for m in node.sent if isinstance(m, Error)]
        assert len(refused) == 101 and all(m.status == 503 for m in refused)  # META and 63 FETCHes kept
        await until(lambda: len(node.bulks) == MAX_HELD - 1, "the held FETCHes answered after the check")
        assert [b.token for b in node.bulks] == list(range(MAX_HELD - 1))
        assert any(isinstance(m, MetaOk) and post.digest == m.digest for m in node.sent)
        service.close()

    asyncio.run(main())
