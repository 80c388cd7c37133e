"""The Hydra posts' on-disk store: keeping, verifying, dropping, resuming a partial fetch,
one store per directory, and what a hostile peer's CONTENT can make it write."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from posts_kit import fetching, meta_of

from huddle.posts.codec import (
    Content,
)
from huddle.posts.model import HEAD, CorruptContent, PostError, Range
from huddle.posts.store import PostStore
from huddle.posts.sync import Complete, Release, WriteChunk


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
    post = meta_of("s", b"0123456789")
    assert store.claim(post.id) and not store.claim(post.id)
    store.write_chunk(post.id, 0, b"01234")
    store.release(post.id)
    assert store.partial(post.id) == 5
    assert store.claim(post.id)
    store.write_chunk(post.id, 5, b"56789")
    assert store.complete(post) and store.holds(post.id)
    bad = meta_of("t", b"good")
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
