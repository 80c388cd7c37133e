"""The Hydra sync state machines (sans-I/O): a client and a server back to back, with fake
stores and a fake clock; content in BULKs (FETCH and CONTENT)."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from posts_kit import FakeLocal, FakeSource, fetches, fetching, meta_of, run_session

from huddle.posts import codec
from huddle.posts.codec import (
    Chunk,
    ChunkOk,
    Content,
    Error,
    Fetch,
    Goodbye,
    Hello,
    HelloOk,
    Meta,
    MetaOk,
    NextEmpty,
    NextOk,
    NextOlder,
)
from huddle.posts.model import HEAD, Policy, Range
from huddle.posts.store import PostStore
from huddle.posts.sync import Client, Complete, Finished, Release, SendMsg, Server, WriteChunk


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
    post = meta_of("s", b"".join(bytes([i]) * 1000 for i in range(4)))
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
