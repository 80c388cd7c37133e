"""Hydra's server as a machine (huddle/hydra/server.py), against edgenet/hydra's
``src/hydra_server.xml``: a session per client, HELLO first, an unexpected command closes it,
a malformed frame changes nothing (docs/hydra.md)."""

from __future__ import annotations

import hashlib

import pytest
from posts_kit import FakeSource

from huddle.errors import LocalProtocolError
from huddle.hydra.server import TRANSITIONS, HydraServer, Session, SessionState, hydra_id
from huddle.hydra.wire import HydraMsg, MsgId, decode, encode
from huddle.posts.model import post_id

A, B = b"\x00client-a", b"\x00client-b"


def ask(server: HydraServer, client: bytes, msg: HydraMsg, now: float = 0.0) -> HydraMsg:
    return decode(encode(server.receive(client, encode(msg), now)))


def hello(server: HydraServer, client: bytes = A) -> None:
    assert ask(server, client, HydraMsg(MsgId.HELLO, identity="C" * 32, nickname="them")) == HydraMsg(
        MsgId.HELLO_OK, identity="ID", nickname="us")


@pytest.fixture
def source() -> FakeSource:
    src = FakeSource()
    src.add("old", b"first")
    src.add("new", b"second post")
    return src


def test_the_transition_table_is_the_only_way_a_session_moves() -> None:
    assert set(TRANSITIONS) == {(SessionState.START, SessionState.CONNECTED),
                                (SessionState.CONNECTED, SessionState.CLOSED)}
    session = Session(0.0)
    with pytest.raises(LocalProtocolError):
        session.move(SessionState.CLOSED)  # START -> CLOSED is not a move
    session.move(SessionState.CONNECTED)
    with pytest.raises(LocalProtocolError):
        session.move(SessionState.START)


def test_a_client_walks_the_posts_newest_first_with_ids_as_hydra_writes_them(source: FakeSource) -> None:
    server = HydraServer(source, "ID", "us")
    hello(server)
    old, new = (p for p, _ in source.posts)
    assert new.digest == new.digest.lower() and hydra_id(new) != new.id  # huddle writes its digests in lowercase
    first = ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="HEAD"))
    # A Hydra client gets Hydra's view: the id Hydra gives the post once it holds it, in uppercase
    # (czmq's zdigest_string), and the digest as Hydra recomputes it from the content (uppercase).
    assert first == HydraMsg(MsgId.NEXT_OK, ident=hydra_id(new).upper())
    meta = ask(server, A, HydraMsg(MsgId.META))
    assert (meta.subject, meta.digest, meta.content_size, meta.seal) == ("new", new.digest.upper(), 11, b"")
    # The id is SHA1 over the metadata as META-OK carries it (hydra_post.c, hydra_post_ident), and
    # over the digest hydra_post_set_data computes from the content: Hydra files it under that id.
    assert post_id(meta.subject, meta.timestamp, meta.parent_id, meta.mime_type, meta.digest) == hydra_id(new)
    digest = hashlib.sha1(b"second post").hexdigest().upper()  # zchunk_digest of what CHUNK-OK carries
    assert post_id(meta.subject, meta.timestamp, meta.parent_id, meta.mime_type, digest).upper() == first.ident
    assert ask(server, A, HydraMsg(MsgId.CHUNK, offset=0, octets=10 * 1024 * 1024)) == HydraMsg(
        MsgId.CHUNK_OK, offset=0, content=b"second post")
    assert ask(server, A, HydraMsg(MsgId.CHUNK, offset=7, octets=2)).content == b"po"
    assert ask(server, A, HydraMsg(MsgId.CHUNK, offset=11, octets=5)).content == b""  # the end: nothing more
    # NEXT-OLDER from the id, in either case; then nothing older.
    assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident=first.ident)).ident == hydra_id(old).upper()
    assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident=hydra_id(old))) == HydraMsg(MsgId.NEXT_EMPTY)
    assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident=old.id)) == HydraMsg(MsgId.NEXT_EMPTY)  # huddle's: too
    assert ask(server, A, HydraMsg(MsgId.NEXT_NEWER, ident="TAIL")).ident == hydra_id(old).upper()
    # An id it does not hold: NEXT-EMPTY, as Hydra's server answers (hydra_ledger_index -1).
    assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="F" * 40)) == HydraMsg(MsgId.NEXT_EMPTY)
    assert ask(server, A, HydraMsg(MsgId.PING)) == HydraMsg(MsgId.PING_OK)
    assert ask(server, A, HydraMsg(MsgId.GOODBYE)) == HydraMsg(MsgId.GOODBYE_OK)
    assert A not in server.sessions and server.counters["goodbye"] == 1


def test_before_hello_everything_else_is_an_error_and_makes_no_session(source: FakeSource) -> None:
    server = HydraServer(source, "ID", "us")
    for msg in (HydraMsg(MsgId.NEXT_OLDER, ident="HEAD"), HydraMsg(MsgId.META), HydraMsg(MsgId.PING)):
        reply = ask(server, A, msg)
        assert reply.id is MsgId.ERROR and reply.status == 500
    assert server.sessions == {}
    hello(server)  # and HELLO still opens one
    assert server.sessions[A].state is SessionState.CONNECTED


@pytest.mark.parametrize("unexpected", [
    HydraMsg(MsgId.HELLO, identity="x", nickname="y"),  # a second HELLO
    HydraMsg(MsgId.HELLO_OK, identity="x", nickname="y"),  # a server's message
    HydraMsg(MsgId.NEXT_OK, ident="x"),
    HydraMsg(MsgId.CHUNK_OK, offset=0, content=b"x"),
    HydraMsg(MsgId.ERROR, status=500, reason="x"),
])
def test_an_unexpected_command_gets_error_and_closes_the_session(source: FakeSource, unexpected: HydraMsg) -> None:
    server = HydraServer(source, "ID", "us")
    hello(server)
    hello(server, B)
    reply = ask(server, A, unexpected)
    assert reply.id is MsgId.ERROR and reply.status == 500
    assert A not in server.sessions and B in server.sessions  # the other client's session goes on
    assert ask(server, A, HydraMsg(MsgId.META)).id is MsgId.ERROR  # closed: HELLO first again
    assert server.counters["closed_on_error"] == 1


def test_meta_or_chunk_without_a_current_post_is_an_error_not_a_crash(source: FakeSource) -> None:
    server = HydraServer(source, "ID", "us")  # Hydra's server asserts here (fetch_post_metadata)
    hello(server)
    assert ask(server, A, HydraMsg(MsgId.META)).status == 500
    assert A not in server.sessions


def test_a_malformed_frame_gets_error_and_changes_nothing(source: FakeSource) -> None:
    server = HydraServer(source, "ID", "us")
    hello(server)
    ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="HEAD"))
    before = (dict(server.sessions), server.current(A))
    for frame in (b"", b"\xaa\xa0", b"\xaa\xa0\x63", b"\xaa\xa0\x09\x00", b"junk", b"\xaa\xa0\x03\x05HE"):
        reply = decode(encode(server.receive(A, frame, 1.0)))
        assert reply.id is MsgId.ERROR and reply.status == 500 and "malformed" in reply.reason
    assert (dict(server.sessions), server.current(A)) == before
    assert server.counters["malformed"] == 6
    assert ask(server, A, HydraMsg(MsgId.META)).subject == "new"  # the session goes on where it was


def test_sessions_are_bounded_and_the_silent_expire(source: FakeSource) -> None:
    server = HydraServer(source, "ID", "us", max_sessions=1, idle=60.0)
    hello(server)
    refused = ask(server, B, HydraMsg(MsgId.HELLO, identity="x", nickname="y"))
    assert refused.id is MsgId.ERROR and refused.status == 400 and server.counters["sessions_full"] == 1
    server.expire(59.0)
    assert A in server.sessions
    server.expire(60.0)
    assert server.sessions == {} and server.counters["expired"] == 1
    hello(server, B)


def test_a_post_gone_or_corrupt_is_an_error_that_closes(source: FakeSource) -> None:
    server = HydraServer(source, "ID", "us")
    hello(server)
    ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="HEAD"))
    source.corrupt.add(source.posts[1][0].id)
    reply = ask(server, A, HydraMsg(MsgId.CHUNK, offset=0, octets=4))
    assert reply.id is MsgId.ERROR and reply.status == 502 and A not in server.sessions


def test_chunks_are_capped_whatever_is_asked() -> None:
    src = FakeSource()
    src.add("big", b"x" * 100)
    server = HydraServer(src, "ID", "us", max_chunk=30)
    hello(server)
    ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="HEAD"))
    assert len(ask(server, A, HydraMsg(MsgId.CHUNK, offset=0, octets=0)).content) == 30  # 0: the rest, capped
    assert len(ask(server, A, HydraMsg(MsgId.CHUNK, offset=90, octets=4096)).content) == 10
    assert hashlib.sha1(b"x" * 100).hexdigest() == src.posts[0][0].digest


def test_a_huddle_client_gets_the_posts_as_huddle_holds_them(source: FakeSource) -> None:
    """A HELLO with huddle's mark (a huddle node's client): huddle's ids, digests as written, seals."""
    server = HydraServer(source, "ID", "us")
    assert ask(server, A, HydraMsg(MsgId.HELLO, identity="C" * 32, nickname="them", huddle=True)).id is MsgId.HELLO_OK
    old, new = (p for p, _ in source.posts)
    assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="HEAD")).ident == new.id.upper()
    meta = ask(server, A, HydraMsg(MsgId.META))
    assert post_id(meta.subject, meta.timestamp, meta.parent_id, meta.mime_type, meta.digest) == new.id
    assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident=new.id)).ident == old.id.upper()
    assert "hydra_ids_indexed" not in server.counters


def test_a_hydra_id_never_named_here_is_found_by_one_walk_of_the_store_a_minute(source: FakeSource) -> None:
    """Hydra's client asks from a post it holds, maybe named by an earlier run of this server."""
    server = HydraServer(source, "ID", "us")
    hello(server)
    old, new = (p for p, _ in source.posts)
    assert ask(server, A, HydraMsg(MsgId.NEXT_NEWER, ident=hydra_id(old).upper())).ident == hydra_id(new).upper()
    assert server.counters["hydra_ids_indexed"] == 1
    for _ in range(100):  # ids nobody gave out: NEXT-EMPTY, and no walk until a minute has passed
        assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="A" * 40), now=30.0).id is MsgId.NEXT_EMPTY
    assert server.counters["hydra_ids_indexed"] == 1
    assert ask(server, A, HydraMsg(MsgId.NEXT_OLDER, ident="A" * 40), now=61.0).id is MsgId.NEXT_EMPTY
    assert server.counters["hydra_ids_indexed"] == 2
