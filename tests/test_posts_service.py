"""The Hydra post service inside a node, with a fake node: first serves hash in a thread,
answers to a stuck or slow peer are bounded; and the posts settings checked."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

import pytest

from huddle.ids import NodeId
from huddle.posts import codec
from huddle.posts.codec import (
    Content,
    Error,
    Fetch,
    Hello,
    HelloOk,
    Meta,
    MetaOk,
    NextOk,
    NextOlder,
    decode,
    encode,
)
from huddle.posts.model import HEAD, Post
from huddle.posts.peer import HydraBulk, HydraPayload
from huddle.posts.service import MAX_HELD, MAX_OUT, MAX_QUEUED_CONTENT, PostService, PostSettings
from huddle.posts.store import PostStore
from huddle.protocol.delivery import BufferFull


@pytest.mark.parametrize(("changes", "message"), [
    ({"policy": "some"}, "policy must be"),
    ({"policy": "newest:0"}, "N >= 1"),
    ({"chunk": 10}, "posts chunk must be"),
    ({"interval": 0}, "interval must be positive"),
])
def test_posts_settings_are_checked(changes: dict[str, object], message: str) -> None:
    from huddle.errors import ConfigError
    from huddle.posts.section import PostsSection

    with pytest.raises(ConfigError, match=message):
        PostsSection(**changes)  # type: ignore[arg-type]


class FakeNode:
    """What the post service uses of a node: its identity, and sending (decoded here)."""

    def __init__(self) -> None:
        self.uuid = NodeId(b"\x0a" * 16)
        self.config = SimpleNamespace(name="a", mesh=SimpleNamespace(max_message=128 * 1024 * 1024))
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
            service.handle(HydraPayload(peer, encode(msg)))

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
        service.handle(HydraBulk(peer, *codec.encode_bulk(Content(1, 0, b"x"))))
        service.handle(HydraBulk(peer, b"\xaa\xa0\x0a", b"x"))
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
            service.handle(HydraPayload(peer, encode(msg)))
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
            service.handle(HydraPayload(peer, encode(msg)))
        await until(lambda: len(node.sent) == 3, "META-OK after the first check")
        node.queued = MAX_QUEUED_CONTENT
        for token in range(100):
            service.handle(HydraPayload(peer, encode(Fetch(token, 0, 2**20))))
        refusals = node.sent[3:]
        assert len(refusals) == 100 and not node.bulks
        assert all(isinstance(r, Error) and r.status == 503 and "not read yet" in r.reason for r in refusals)
        assert service.stats.fetch_refused_busy == 100 and service.server.stats.chunks_served == 0
        node.queued = 0
        service.handle(HydraPayload(peer, encode(Fetch(7, 0, 2**20))))
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
            service.handle(HydraPayload(peer, encode(Hello("c", "n"))))
        assert len(service._out[peer]) == MAX_OUT and service.stats.out_dropped == 500
        service.close()

    asyncio.run(main())


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
            service.handle(HydraPayload(peer, encode(msg)))
        for token in range(MAX_HELD + 100):
            service.handle(HydraPayload(peer, encode(Fetch(token, 0, 10))))
        assert peer in service._held and len(service._held[peer]) == MAX_HELD  # the check has not run yet
        refused = [m for m in node.sent if isinstance(m, Error)]
        assert len(refused) == 101 and all(m.status == 503 for m in refused)  # META and 63 FETCHes kept
        await until(lambda: len(node.bulks) == MAX_HELD - 1, "the held FETCHes answered after the check")
        assert [b.token for b in node.bulks] == list(range(MAX_HELD - 1))
        assert any(isinstance(m, MetaOk) and post.digest == m.digest for m in node.sent)
        service.close()

    asyncio.run(main())
