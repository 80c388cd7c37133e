"""Hydra's messages as bytes, against edgenet/hydra's own codec (docs/hydra.md).

The golden octets are written out by hand from ``src/hydra_proto.c`` (edgenet/hydra): its
``hydra_proto_send`` writes ``PUT_NUMBER2 (0xAAA0)``, ``PUT_NUMBER1 (id)``, then each field
(``PUT_STRING``: one octet of length; ``PUT_LONGSTR`` and a chunk: four; numbers big-endian),
all in one frame; the ids are ``include/hydra_proto.h``'s.  The values are the ones its
selftest (``hydra_proto_test``) sends: "Life is short but Now lasts for ever", 123, and the
chunk "Captcha Diem".
"""

from __future__ import annotations

import pytest

from huddle.errors import DecodeError
from huddle.hydra.wire import HUDDLE_MARK, SEAL_OCTETS, HydraMsg, MsgId, decode, encode

LIFE = b"Life is short but Now lasts for ever"
S = bytes([len(LIFE)]) + LIFE  # a string field of hydra_proto.c
N8 = (123).to_bytes(8, "big")
TEXT = LIFE.decode()

GOLDEN: list[tuple[HydraMsg, bytes]] = [
    (HydraMsg(MsgId.HELLO, identity=TEXT, nickname=TEXT), b"\xaa\xa0\x01" + S + S),
    (HydraMsg(MsgId.HELLO_OK, identity=TEXT, nickname=TEXT), b"\xaa\xa0\x02" + S + S),
    (HydraMsg(MsgId.NEXT_OLDER, ident=TEXT), b"\xaa\xa0\x03" + S),
    (HydraMsg(MsgId.NEXT_NEWER, ident=TEXT), b"\xaa\xa0\x04" + S),
    (HydraMsg(MsgId.NEXT_OK, ident=TEXT), b"\xaa\xa0\x05" + S),
    (HydraMsg(MsgId.NEXT_EMPTY), b"\xaa\xa0\x06"),
    (HydraMsg(MsgId.META), b"\xaa\xa0\x07"),
    (HydraMsg(MsgId.META_OK, subject=TEXT, timestamp=TEXT, parent_id=TEXT, digest=TEXT, mime_type=TEXT,
              content_size=123),
     b"\xaa\xa0\x08" + len(LIFE).to_bytes(4, "big") + LIFE + S + S + S + S + N8),
    (HydraMsg(MsgId.CHUNK, offset=123, octets=123), b"\xaa\xa0\x09" + N8 + (123).to_bytes(4, "big")),
    (HydraMsg(MsgId.CHUNK_OK, offset=123, content=b"Captcha Diem"),
     b"\xaa\xa0\x0a" + N8 + b"\x00\x00\x00\x0c" + b"Captcha Diem"),
    (HydraMsg(MsgId.PING), b"\xaa\xa0\x0b"),
    (HydraMsg(MsgId.PING_OK), b"\xaa\xa0\x0c"),
    (HydraMsg(MsgId.GOODBYE), b"\xaa\xa0\x0d"),
    (HydraMsg(MsgId.GOODBYE_OK), b"\xaa\xa0\x0e"),
    (HydraMsg(MsgId.ERROR, status=123, reason=TEXT), b"\xaa\xa0\x0f\x00\x7b" + S),
]


@pytest.mark.parametrize(("msg", "octets"), GOLDEN, ids=[m.id.name for m, _ in GOLDEN])
def test_every_message_is_the_octets_hydra_writes_and_back(msg: HydraMsg, octets: bytes) -> None:
    assert encode(msg) == octets
    assert decode(octets) == msg
    assert encode(decode(octets)) == octets


def test_the_ids_are_the_codes_not_the_seed_abnfs() -> None:
    # hydra_proto.h: PING 11, PING-OK 12, GOODBYE 13, GOODBYE-OK 14, ERROR 15 (the seed's ABNF
    # has GOODBYE 11, GOODBYE-OK 12, ERROR 13 and no PING).
    assert [m.value for m in MsgId] == list(range(1, 16))
    assert (MsgId.PING, MsgId.GOODBYE, MsgId.ERROR) == (11, 13, 15)
    assert decode(b"\xaa\xa0\x0d").id is MsgId.GOODBYE


def test_a_meta_ok_may_carry_huddles_seal_after_its_fields() -> None:
    seal = bytes(range(sum(SEAL_OCTETS)))
    msg = HydraMsg(MsgId.META_OK, subject="s", timestamp="2026-01-02T03:04:05Z", digest="0" * 40,
                   mime_type="text/plain", content_size=5, seal=seal)
    octets = encode(msg)
    assert octets.endswith(seal) and decode(octets) == msg
    # What hydra_proto.c reads of it: the fields, up to content_size (the seal is past its needle).
    assert decode(octets[:-len(seal)]) == HydraMsg(MsgId.META_OK, subject="s", timestamp="2026-01-02T03:04:05Z",
                                                   digest="0" * 40, mime_type="text/plain", content_size=5)
    with pytest.raises(ValueError, match="seal"):
        encode(HydraMsg(MsgId.NEXT_OK, ident="x", seal=seal))


def test_a_hello_may_carry_huddles_mark_after_its_fields() -> None:
    msg = HydraMsg(MsgId.HELLO, identity="C" * 32, nickname="them", huddle=True)
    octets = encode(msg)
    assert octets.endswith(HUDDLE_MARK) and decode(octets) == msg
    # What hydra_proto.c reads of it: a HELLO as any client's (the mark is past its fields).
    assert decode(octets[:-len(HUDDLE_MARK)]) == HydraMsg(MsgId.HELLO, identity="C" * 32, nickname="them")
    with pytest.raises(ValueError, match="mark"):
        encode(HydraMsg(MsgId.NEXT_OK, ident="x", huddle=True))


@pytest.mark.parametrize("octets", [
    b"",
    b"\xaa",
    b"\xaa\xa0",  # no id
    b"\xaa\xa1\x01\x00\x00",  # ZRE's signature, not Hydra's
    b"\xaa\xa0\x00",  # id 0
    b"\xaa\xa0\x10",  # id 16
    b"\xaa\xa0\xff",
    b"\xaa\xa0\x01\x05abc",  # a string cut short
    b"\xaa\xa0\x01\x00",  # HELLO without its nickname
    b"\xaa\xa0\x08\xff\xff\xff\xff",  # a longstr that claims 4 GiB
    b"\xaa\xa0\x09" + N8,  # CHUNK without octets
    b"\xaa\xa0\x0a" + N8 + b"\x00\x00\x01\x00abc",  # a chunk cut short
    b"\xaa\xa0\x0f\x01",  # ERROR cut in its status
    b"\xaa\xa0\x03\x02\xff\xfe",  # not UTF-8
    b"\xaa\xa0\x07\x00",  # an octet after META
    b"\xaa\xa0\x03\x04HEADx",  # an octet after NEXT-OLDER's ident
    b"\xaa\xa0\x01\x00\x00" + b"\x00huddle/2",  # a HELLO with a mark that is not huddle's
    b"\xaa\xa0\x02\x00\x00" + HUDDLE_MARK,  # huddle's mark after a HELLO-OK
])
def test_malformed_frames_are_refused(octets: bytes) -> None:
    with pytest.raises(DecodeError):
        decode(octets)


def test_fields_that_do_not_fit_are_refused_as_they_are_encoded() -> None:
    with pytest.raises(ValueError, match="1-octet length"):
        encode(HydraMsg(MsgId.NEXT_OK, ident="x" * 256))
