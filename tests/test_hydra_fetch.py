"""huddle's sync client over Hydra's wire (huddle/hydra/fetch.py): its FETCHes as CHUNKs, each
CHUNK-OK given back as the CONTENT of the oldest FETCH not yet answered, ids in Hydra's case
out and lowercased in, and a whole session against huddle's Hydra server (docs/hydra.md)."""

from __future__ import annotations

import hashlib

import pytest
from posts_kit import FakeLocal, FakeSource

from huddle.errors import DecodeError
from huddle.hydra.fetch import Carrier
from huddle.hydra.server import HydraServer
from huddle.hydra.wire import HydraMsg, MsgId, decode, encode
from huddle.posts.codec import Content, Error, Fetch, HelloOk, MetaOk, NextOk, NextOlder
from huddle.posts.sync import Client, Complete, Finished, SendMsg, WriteChunk


def test_fetches_go_out_as_chunks_and_chunk_oks_come_back_in_their_order() -> None:
    carrier = Carrier()
    assert carrier.out(Fetch(7, 0, 10)) == HydraMsg(MsgId.CHUNK, offset=0, octets=10)
    carrier.out(Fetch(8, 10, 10))
    assert carrier.into(HydraMsg(MsgId.CHUNK_OK, offset=0, content=b"a" * 10)) == Content(7, 0, b"a" * 10)
    assert carrier.into(HydraMsg(MsgId.CHUNK_OK, offset=10, content=b"b")) == Content(8, 10, b"b")
    # One nobody asked for answers token 0, which no FETCH has: the client refuses it as stale.
    assert carrier.into(HydraMsg(MsgId.CHUNK_OK, offset=0, content=b"x")) == Content(0, 0, b"x")


def test_ids_go_out_as_hydra_writes_them_and_come_in_lowercased() -> None:
    carrier = Carrier()
    assert carrier.out(NextOlder("HEAD")).ident == "HEAD"
    assert carrier.out(NextOlder("ab" * 20)).ident == "AB" * 20
    assert carrier.into(HydraMsg(MsgId.NEXT_OK, ident="AB" * 20)) == NextOk("ab" * 20)
    assert carrier.into(HydraMsg(MsgId.HELLO_OK, identity="I", nickname="n")) == HelloOk("I", "n")
    assert carrier.into(HydraMsg(MsgId.ERROR, status=500, reason="r")) == Error(500, "r")
    assert carrier.into(HydraMsg(MsgId.PING_OK)) is None
    seal = bytes(range(144))
    meta = carrier.into(HydraMsg(MsgId.META_OK, subject="s", timestamp="t", digest="d", mime_type="m",
                                 content_size=3, seal=seal))
    assert isinstance(meta, MetaOk)
    assert (meta.sha256, meta.author, meta.public_key, meta.signature) == (seal[:32], seal[32:48], seal[48:80],
                                                                          seal[80:])
    for client_only in (MsgId.HELLO, MsgId.CHUNK, MsgId.GOODBYE, MsgId.META):
        with pytest.raises(DecodeError):
            carrier.into(HydraMsg(client_only))


def test_a_session_fetches_a_hydra_written_post_in_chunks_with_its_id() -> None:
    """A post as a Hydra node writes it (uppercase digest), served by huddle's Hydra server,
    fetched by huddle's client in chunks of 1000 octets: the same id (lowercased)."""
    content = bytes(range(256)) * 40
    src = FakeSource()
    post = src.add("from hydra", content)
    upper = type(post)(post.subject, post.timestamp, "", post.mime_type, post.digest.upper(), post.size)
    src.posts[0] = (upper, content)
    server = HydraServer(src, "S", "server")
    local = FakeLocal()
    client = Client(local, "C", "client", chunk_size=1000, window=3)
    carrier = Carrier()
    actions, written, done = client.start(0.0), bytearray(), None
    while actions:
        more = []
        for a in actions:
            if isinstance(a, SendMsg):
                reply = server.receive(b"c", encode(carrier.out(a.msg)), 0.0)
                msg = carrier.into(decode(encode(reply)))
                assert msg is not None
                more += client.receive(msg, 0.0)
            elif isinstance(a, WriteChunk):
                written[a.offset:a.offset + len(a.data)] = a.data
            elif isinstance(a, Complete):
                done = a.post
            elif isinstance(a, Finished):
                assert a.reason == "done" and a.complete
        actions = more
    assert done is not None and done.id == upper.id and done.digest == post.digest.upper()
    assert hashlib.sha1(bytes(written)).hexdigest() == post.digest and server.counters["chunks_served"] == 11
