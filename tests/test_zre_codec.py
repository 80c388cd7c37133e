"""ZRE's beacons and messages, octet for octet (huddle.zre.codec, docs/zre.md).

The golden octets are written out by hand from the sources' field tables and checked
against the sources' own encoders where they exist:
- zeromq/zyre ``src/zre_msg.xml``: the header (signature ``AA A1``, id, version 2, a 16-bit
  sequence) and every message's fields in order, ELECT 8, LEADER 9 and GOODBYE 10 included;
  the zproto types (string: 1-octet length; strings: 4-octet count of 4-octet-length
  strings; hash: 4-octet count of (string, longstr)).
- zeromq/zyre ``src/zyre_node.c``: the beacon, ``'Z' 'R' 'E'``, version 0x01 (22 octets) or
  0x03 (54 octets, a 32-octet CURVE public key after the port), the port big-endian.
- zeromq/pyre ``pyre/zre_msg.py`` (``ZreMsg.send``, ``pack_hello``) and ``pyre/pyre_node.py``
  (the beacon's ``struct.pack('cccb16sH', ...)``): the installed package encodes ids 1-7 and
  the v2 beacon in the test below, and must give the same octets.
"""

from __future__ import annotations

import socket
import struct
import uuid
from typing import Any

import pytest
import zmq
from hypothesis import given
from hypothesis import strategies as st
from pyre.zre_msg import ZreMsg

from huddle.errors import DecodeError
from huddle.zre.codec import (
    BEACON_V2,
    BEACON_V3,
    SPEC,
    Beacon,
    Bounds,
    MsgId,
    ZreMessage,
    decode,
    decode_beacon,
    encode,
    encode_beacon,
)

UUID = bytes(range(16))
ENDPOINT = "tcp://127.0.0.1:5000"  # 20 octets: 0x14

# (message, its frames): the header then the fields, as zre_msg.xml orders them.
GOLDEN: list[tuple[ZreMessage, list[bytes]]] = [
    (ZreMessage(MsgId.HELLO, 1, endpoint=ENDPOINT, groups=("test",), status=0, name="h1",
                headers=(("X-HUDDLE", "tcp://127.0.0.1:6000"),)),
     [bytes.fromhex("aaa1" "01" "02" "0001"  # signature, HELLO, version 2, sequence 1
                    "14") + ENDPOINT.encode()  # endpoint: string
      + bytes.fromhex("00000001" "00000004") + b"test"  # groups: strings (count, then longstrs)
      + bytes.fromhex("00" "02") + b"h1"  # status, name: string
      + bytes.fromhex("00000001" "08") + b"X-HUDDLE"  # headers: hash (count, key: string,
      + bytes.fromhex("00000014") + b"tcp://127.0.0.1:6000"]),  # value: longstr)
    (ZreMessage(MsgId.WHISPER, 2, content=(b"hi",)), [bytes.fromhex("aaa1" "02" "02" "0002"), b"hi"]),
    (ZreMessage(MsgId.SHOUT, 3, group="test", content=(b"a", b"b")),
     [bytes.fromhex("aaa1" "03" "02" "0003" "04") + b"test", b"a", b"b"]),
    (ZreMessage(MsgId.JOIN, 4, group="test", status=1), [bytes.fromhex("aaa1" "04" "02" "0004" "04") + b"test\x01"]),
    (ZreMessage(MsgId.LEAVE, 5, group="test", status=2), [bytes.fromhex("aaa1" "05" "02" "0005" "04") + b"test\x02"]),
    (ZreMessage(MsgId.PING, 6), [bytes.fromhex("aaa1" "06" "02" "0006")]),
    (ZreMessage(MsgId.PING_OK, 7), [bytes.fromhex("aaa1" "07" "02" "0007")]),
    (ZreMessage(MsgId.ELECT, 8, group="g", challenger_id="c"), [bytes.fromhex("aaa1" "08" "02" "0008" "0167" "0163")]),
    (ZreMessage(MsgId.LEADER, 9, group="g", leader_id="l"), [bytes.fromhex("aaa1" "09" "02" "0009" "0167" "016c")]),
    (ZreMessage(MsgId.GOODBYE, 65535), [bytes.fromhex("aaa1" "0a" "02" "ffff")]),
]


@pytest.mark.parametrize(("msg", "frames"), GOLDEN, ids=[m.id.name for m, _ in GOLDEN])
def test_golden_octets_decode_and_encode_identically(msg: ZreMessage, frames: list[bytes]) -> None:
    assert decode(frames) == msg
    assert encode(msg) == frames
    assert encode(decode(frames)) == frames


class _Capture:
    """A stand-in for pyre's output socket: the frames its ZreMsg.send writes."""

    type = zmq.DEALER

    def __init__(self) -> None:
        self.frames: list[bytes] = []

    def send(self, data: bytes, flags: int = 0) -> None:
        self.frames.append(data)

    def send_multipart(self, frames: list[bytes]) -> None:
        self.frames.extend(frames)


@pytest.mark.parametrize(("msg", "frames"), [g for g in GOLDEN if g[0].id <= MsgId.PING_OK],
                         ids=[m.id.name for m, _ in GOLDEN if m.id <= MsgId.PING_OK])
def test_pyres_own_encoder_gives_the_golden_octets(msg: ZreMessage, frames: list[bytes]) -> None:
    theirs = ZreMsg(int(msg.id))
    values: dict[str, Any] = {"sequence": msg.sequence, "endpoint": msg.endpoint, "groups": list(msg.groups),
                              "status": msg.status, "name": msg.name, "headers": dict(msg.headers),
                              "group": msg.group, "content": list(msg.content)}
    for key, value in values.items():
        setattr(theirs, key, value)
    out = _Capture()
    theirs.send(out)
    assert out.frames == frames


def test_beacons_v2_and_v3_and_leaving() -> None:
    v2 = b"ZRE\x01" + UUID + b"\x16\x26"  # port 5670
    assert decode_beacon(v2) == Beacon(UUID, 5670) and encode_beacon(Beacon(UUID, 5670)) == v2
    assert len(v2) == 22 and Beacon(UUID, 5670).version == BEACON_V2
    key = bytes(range(100, 132))
    v3 = b"ZRE\x03" + UUID + b"\x16\x26" + key
    assert decode_beacon(v3) == Beacon(UUID, 5670, key) and encode_beacon(Beacon(UUID, 5670, key)) == v3
    assert len(v3) == 54 and decode_beacon(v3).version == BEACON_V3
    assert decode_beacon(b"ZRE\x01" + UUID + b"\x00\x00").port == 0  # leaving
    # pyre's own beacon (pyre/pyre_node.py packs it with the port through htons, native order).
    theirs = struct.pack("cccb16sH", b"Z", b"R", b"E", 1, UUID, socket.htons(5670))
    assert theirs == v2


@pytest.mark.parametrize("data", [
    b"", b"ZRE\x01" + UUID,  # short
    b"ZRE\x01" + UUID + b"\x16\x26\x00",  # 23 octets
    b"ZRF\x01" + UUID + b"\x16\x26",  # not ZRE
    b"ZRE\x02" + UUID + b"\x16\x26",  # no version 2 beacon
    b"ZRE\x03" + UUID + b"\x16\x26",  # v3 announced, 22 octets
    b"ZRE\x01" + UUID + b"\x16\x26" + bytes(32),  # v2 announced, 54 octets
    b"ZRE\x01" + bytes(1000),
])
def test_malformed_beacons_are_refused(data: bytes) -> None:
    with pytest.raises(DecodeError):
        decode_beacon(data)


HELLO = GOLDEN[0][1][0]


@pytest.mark.parametrize(("frames", "why"), [
    ([], "empty"),
    ([b"\xaa\xa1\x06"], "shorter than its header"),
    ([b"\xaa\xa0\x06\x02\x00\x01"], "signature"),
    ([b"\xaa\xa1\x06\x03\x00\x01"], "version 3"),
    ([b"\xaa\xa1\x0b\x02\x00\x01"], "unknown id 11"),
    ([b"\xaa\xa1\x00\x02\x00\x01"], "unknown id 0"),
    ([HELLO[:-1]], "ends inside a field"),
    ([HELLO + b"\x00"], "octets after"),
    ([b"\xaa\xa1\x06\x02\x00\x01", b"x"], "content frames"),
    ([b"\xaa\xa1\x04\x02\x00\x01\x02\xff\xfe\x01"], "not UTF-8"),
    ([b"\xaa\xa1\x01\x02\x00\x01\x00\xff\xff\xff\xff"], "groups"),
])
def test_malformed_messages_are_refused(frames: list[bytes], why: str) -> None:
    with pytest.raises(DecodeError):
        decode(frames)


def test_every_bound_is_applied_as_the_message_is_read() -> None:
    bounds = Bounds(frames=2, frame_octets=64, groups=1, headers=1, longstr=8)
    shout = ZreMessage(MsgId.SHOUT, 1, group="g", content=(b"a", b"b", b"c"))
    with pytest.raises(DecodeError, match="frames"):
        decode(encode(shout), bounds)
    with pytest.raises(DecodeError, match="octets"):
        decode(encode(ZreMessage(MsgId.WHISPER, 1, content=(bytes(65),))), bounds)
    with pytest.raises(DecodeError, match="groups"):
        decode(encode(ZreMessage(MsgId.HELLO, 1, groups=("a", "b"))), bounds)
    with pytest.raises(DecodeError, match="headers"):
        decode(encode(ZreMessage(MsgId.HELLO, 1, headers=(("a", "1"), ("b", "2")))), bounds)
    with pytest.raises(DecodeError, match="long string"):
        decode(encode(ZreMessage(MsgId.HELLO, 1, groups=("123456789",))), bounds)
    assert decode(encode(ZreMessage(MsgId.HELLO, 1, groups=("12345678",))), bounds).groups == ("12345678",)


def test_a_string_field_over_255_octets_is_not_encoded() -> None:
    with pytest.raises(ValueError, match="255"):
        encode(ZreMessage(MsgId.JOIN, 1, group="g" * 256))


_text = st.text(max_size=40)
_short = st.text(max_size=20).filter(lambda s: len(s.encode()) <= 255)


@given(st.sampled_from(list(MsgId)), st.integers(0, 65535), _short, st.lists(_text, max_size=5), st.integers(0, 255),
       st.lists(st.tuples(_short, _text), max_size=5), st.lists(st.binary(max_size=50), max_size=4))
def test_any_message_round_trips(ident: MsgId, seq: int, text: str, groups: list[str], status: int,
                                 headers: list[tuple[str, str]], content: list[bytes]) -> None:
    fields = {name for name, _ in SPEC[ident]}
    values: dict[str, Any] = {"endpoint": text, "groups": tuple(groups), "status": status, "name": text,
                              "headers": tuple(headers), "group": text, "content": tuple(content),
                              "challenger_id": text, "leader_id": text}
    msg = ZreMessage(ident, seq, **{k: v for k, v in values.items() if k in fields})
    assert decode(encode(msg)) == msg


def test_uuid_of_a_beacon_is_the_senders() -> None:
    u = uuid.uuid4()
    assert decode_beacon(encode_beacon(Beacon(u.bytes, 1))).uuid == u.bytes
