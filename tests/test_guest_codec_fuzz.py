"""The Noam guest codec under Hypothesis: any bytes decode to a message or raise the
codec's own FrameError, never another exception; whatever decodes can be encoded again (so
nothing a guest sends can make the node fail later, writing it to the log or to other guests);
and every message round-trips."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from huddle.guests.codec import (
    MAX_NAME,
    Error,
    Event,
    FrameError,
    FrameReader,
    Heartbeat,
    HeartbeatAck,
    Marco,
    Message,
    Polo,
    Register,
    TextError,
    decode_datagram,
    decode_payload,
    encode,
    encode_datagram,
)

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# JSON text that is often well formed: arrays of message types with values that json.loads
# takes but cannot write back (lone surrogates, NaN, 1e999), mixed with arbitrary text.
_atoms = st.sampled_from(['"\\ud800"', '"\\udfff"', '"a\\ud83d"', '"\\ud83d\\ude00"', "NaN", "Infinity",
                          "-Infinity", "1e999", "-1e400", "1.5", "0", "true", "null", '"g"', '"t"', "{}", "[]",
                          '"register"', '"event"', '"heartbeat"', '"heartbeat_ack"', '"error"', '"marco"', '"polo"',
                          '{"heartbeat":"2"}', '"\\u0000"', "9" * 40])
_arrays = st.lists(_atoms | st.text(max_size=8).map(json.dumps), min_size=1, max_size=9).map(
    lambda items: "[" + ",".join(items) + "]")
_texts = _arrays | st.text(max_size=60)


def _reencodes(msg: Message | Marco | Polo) -> None:
    if isinstance(msg, (Marco, Polo)):
        encode_datagram(msg)
    else:
        try:
            encode(msg)
        except ValueError as exc:  # only "too long": a payload at the limit may grow on re-encoding
            assert "at most" in str(exc)


@FUZZ
@given(st.binary(max_size=200) | _texts.map(lambda t: t.encode("utf-8", "surrogatepass")))
@example(b'["event","g","t","\\ud800"]')
@example(b'["event","g","t",NaN]')
@example(b"[" * 5000)
def test_any_payload_is_a_message_or_a_frame_error(data: bytes) -> None:
    try:
        msg = decode_payload(data)
    except FrameError:
        return
    _reencodes(msg)


@FUZZ
@given(st.binary(max_size=200) | _texts.map(lambda t: t.encode("utf-8", "surrogatepass")))
@example(b'["marco","\\udc80","room","py","1"]')
def test_any_datagram_is_a_marco_a_polo_or_a_frame_error(data: bytes) -> None:
    try:
        msg = decode_datagram(data)
    except FrameError:
        return
    _reencodes(msg)


@FUZZ
@given(st.lists(st.binary(max_size=40) | _texts.map(lambda t: b"%06d" % len(t.encode("utf-8", "surrogatepass"))
                                                    + t.encode("utf-8", "surrogatepass")), max_size=6))
def test_any_stream_gives_messages_until_a_frame_error(chunks: list[bytes]) -> None:
    reader = FrameReader(max_frame=500)
    for chunk in chunks:
        try:
            msgs = reader.feed(chunk)
        except FrameError:
            return
        for m in msgs:
            _reencodes(m)
        assert reader.pending < 6 + 500


# ------------------------------------------------------------------ round trips

_names = st.text(min_size=1, max_size=20).filter(lambda s: len(s.encode()) <= MAX_NAME)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(),
    lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(), kids, max_size=4), max_leaves=15)
_messages: st.SearchStrategy[Message] = st.one_of(
    st.builds(Event, _names, _names, _json_values),
    st.builds(Heartbeat, _names),
    st.builds(HeartbeatAck, _names),
    st.builds(Error, st.text(max_size=100)),
    st.builds(lambda g, p, h, s, hb, ack: Register(g, p, tuple(h), tuple(s), "py", "1", heartbeat=hb,
                                                   heartbeat_ack=ack and bool(hb)),
              _names, st.integers(0, 65535), st.lists(_names, max_size=3), st.lists(_names, max_size=3),
              st.sampled_from([0.0, 0.5, 2.0, 30.0]), st.booleans()),
)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, Register) and isinstance(b, Register):  # options gain the heartbeat's written form
        return (a.guest, a.port, a.hears, a.speaks, a.heartbeat, a.heartbeat_ack) == (
            b.guest, b.port, b.hears, b.speaks, b.heartbeat, b.heartbeat_ack)
    return bool(a == b)


@FUZZ
@given(st.lists(_messages, min_size=1, max_size=5), st.integers(1, 50))
def test_messages_round_trip_however_the_stream_is_cut(msgs: list[Message], step: int) -> None:
    stream = b"".join(encode(m) for m in msgs)
    reader = FrameReader()
    got = [m for i in range(0, len(stream), step) for m in reader.feed(stream[i:i + step])]
    assert len(got) == len(msgs) and all(_same(a, b) for a, b in zip(msgs, got, strict=True))
    assert reader.pending == 0


@FUZZ
@given(_names, st.text(max_size=20), st.integers(0, 65535))
def test_marco_and_polo_round_trip(guest: str, room: str, port: int) -> None:
    assert decode_datagram(encode_datagram(Marco(guest, room, "py", "1"))) == Marco(guest, room, "py", "1")
    assert decode_datagram(encode_datagram(Polo(room, port))) == Polo(room, port)


@pytest.mark.parametrize("payload", [
    b'["event","g","t","\\ud800"]',
    b'["event","g","t",{"k":["\\udc00"]}]',
    b'["event","g\\ud800","t",1]',
    b'["register","g",0,["\\ud800"],[],"py","1"]',
    b'["event","g","t",NaN]',
    b'["event","g","t",-Infinity]',
    b'["event","g","t",1e999]',
])
def test_what_cannot_be_written_back_is_refused_whole(payload: bytes) -> None:
    with pytest.raises(TextError):
        decode_payload(payload)
    with pytest.raises(TextError):
        FrameReader().feed(b"%06d" % len(payload) + payload)


def test_a_surrogate_pair_is_one_character_and_taken() -> None:
    assert decode_payload(b'["event","g","t","\\ud83d\\ude00"]') == Event("g", "t", "\U0001f600")
    with pytest.raises(TextError):
        decode_datagram(b'["marco","\\udc80","room","py","1"]')
