"""The Hydra sync codec: round trips, any bytes decode or raise DecodeError, the document's
bytes, CONTENT in a BULK."""

from __future__ import annotations

import contextlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from huddle.errors import DecodeError
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
