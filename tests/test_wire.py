"""The codec: round trips for every type, and arbitrary input gives a message or DecodeError."""

from __future__ import annotations

import contextlib
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wire_strategies import json_values, messages, node_ids

from huddle import DecodeError, NodeId, decode, encode
from huddle.errors import LocalProtocolError
from huddle.wire import (
    MAX_BODY,
    MAX_BULK,
    Beacon,
    Bulk,
    Chat,
    Group,
    Helo,
    LogRecord,
    Members,
    RecordBatch,
    Time,
    Xmsg,
    group_hash,
    pack,
    unpack,
)
from huddle.wire.records import _batch, _record


@given(messages)
def test_round_trip(msg: object) -> None:
    frames = encode(msg)  # type: ignore[arg-type]
    assert len(frames) == (4 if isinstance(msg, Bulk) else 3)
    assert frames[0] == bytes(msg.sender)  # type: ignore[attr-defined]
    assert len(frames[1]) == 4 and frames[1].isalpha() and frames[1].isupper()
    assert decode(frames) == msg


@given(st.lists(st.binary(max_size=64), max_size=5))
def test_arbitrary_frames_decode_or_raise_decode_error(frames: list[bytes]) -> None:
    with contextlib.suppress(DecodeError):
        decode(frames)


kinds = st.sampled_from([b"HELO", b"PEER", b"BOUT", b"GBYE", b"CHAT", b"BEAT", b"TIME", b"XMSG", b"GSIP", b"NOPE"])


@settings(max_examples=300)
@given(st.sampled_from(["vv", "ask", "records"]), json_values)
def test_log_bodies_with_arbitrary_json(key: str, value: object) -> None:
    for kind in (b"XMSG", b"GSIP"):
        with contextlib.suppress(DecodeError):
            decode([SENDER, kind, json.dumps({key: value, "vv": {}}).encode()])


@settings(max_examples=500)
@given(node_ids, kinds, st.one_of(st.binary(max_size=200), st.text(max_size=200).map(str.encode),
                                  st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                                               lambda c: st.lists(c) | st.dictionaries(st.text(max_size=12), c),
                                               max_leaves=8).map(lambda v: json.dumps(v).encode())))
def test_arbitrary_bodies_decode_or_raise_decode_error(sender: NodeId, kind: bytes, body: bytes) -> None:
    with contextlib.suppress(DecodeError):
        decode([bytes(sender), kind, body])


@given(st.dictionaries(st.sampled_from(["version", "endpoint", "name", "incarnation", "reply", "peers", "x"]),
                       st.none() | st.booleans() | st.integers(-5, 2**40) | st.text(max_size=30) | st.floats()))
def test_helo_with_arbitrary_fields(obj: dict[str, object]) -> None:
    try:
        msg = decode([b"u" * 16, b"HELO", json.dumps(obj).encode()])
    except DecodeError:
        return
    assert isinstance(msg, Helo)


SENDER = b"\x01" * 16


@pytest.mark.parametrize(
    ("frames", "complaint"),
    [
        ([SENDER, b"CHAT"], "3 frames"),
        ([SENDER, b"CHAT", b"hi", b"extra"], "3 frames"),
        ([b"short", b"CHAT", b"hi"], "16 octets"),
        ([b"\x00" * 17, b"CHAT", b"hi"], "16 octets"),
        ([SENDER, b"WHAT", b""], "unknown message type"),
        ([SENDER, b"chat", b"hi"], "unknown message type"),
        ([SENDER, b"XMSG", b"<add/>"], "not JSON"),
        ([SENDER, b"XMSG", b'{"records": []}'], "at least one"),
        ([SENDER, b"XMSG", b'{"records": [[1,2,3]]}'], "source, seq"),
        ([SENDER, b"XMSG", b'{"records": [["' + b"ab" * 16 + b'", 0, 1.0, "k", "1", 0]]}'], "seq must be"),
        ([SENDER, b"XMSG", b'{"records": [["' + b"AB" * 16 + b'", 1, 1.0, "k", "1", 0]]}'], "lowercase hex"),
        ([SENDER, b"XMSG", b'{"records": [["' + b"ab" * 16 + b'", 1, 1.0, "k", "{oops", 0]]}'], "not valid JSON"),
        ([SENDER, b"XMSG", b'{"records": [["' + b"ab" * 16 + b'", 1, 1.0, "", "1", 0]]}'], "kind"),
        ([SENDER, b"XMSG", b'{"records": [["' + b"ab" * 16 + b'", 1, 1.0, "k", "1", -1]]}'], "hops"),
        ([SENDER, b"GSIP", b'{"vv": {"x": 1}}'], "hex"),
        ([SENDER, b"GSIP", b'{"vv": {}, "ask": {"' + b"ab" * 16 + b'": [[5, 2]]}}'], "last < first"),
        ([SENDER, b"GSIP", b'{"vv": {}, "ask": {"' + b"ab" * 16 + b'": []}}'], "non-empty"),
        ([SENDER, b"GSIP", b"[]"], "JSON object"),
        ([SENDER, b"CHAT", b"\xff\xfe"], "not UTF-8"),
        ([SENDER, b"CHAT", b"x" * (MAX_BODY + 1)], "exceeds"),
        ([SENDER, b"HELO", b"{}"], "lacks 'version'"),
        ([SENDER, b"HELO", b"[1,2]"], "JSON object"),
        ([SENDER, b"HELO", b"{not json"], "not JSON"),
        ([SENDER, b"HELO", b'{"version": true, "endpoint": "tcp://1.2.3.4:5", "name": "a", "incarnation": "00"}'],
         "must be int"),
        ([SENDER, b"HELO",
          b'{"version":1,"endpoint":"http://1.2.3.4:5","name":"a","incarnation":"0011223344556677"}'], "endpoint"),
        ([SENDER, b"HELO",
          b'{"version":1,"endpoint":"tcp://1.2.3.4:70000","name":"a","incarnation":"0011223344556677"}'], "endpoint"),
        ([SENDER, b"HELO",
          b'{"version":1,"endpoint":"tcp://1.2.3.4:5","name":"","incarnation":"0011223344556677"}'], "name"),
        ([SENDER, b"PEER", b'{"uuid": "abc", "endpoint": "tcp://1.2.3.4:5"}'], "32 hex"),
        ([SENDER, b"BEAT", b"x"], "must be empty"),
        ([SENDER, b"TIME", b"nan"], "decimal"),
        ([SENDER, b"TIME", b"1e999"], "out of range"),
        ([SENDER, b"TIME", b"1 2 3"], "one or two"),
        ([SENDER, b"TIME", b""], "decimal"),
        ([SENDER, b"HELO", b"[" * 100_000], "not JSON"),
        ("not frames", "3 frames"),
        ([SENDER, b"BULK", b"head"], "BULK has 4 frames"),
        ([SENDER, b"BULK", b"", b"data"], "head of 0 octets"),
        ([SENDER, b"BULK", b"h" * 256, b"data"], "head of 256 octets"),
        ([SENDER, b"BULK", b"h", b"x" * (MAX_BULK + 1)], "exceeds"),
        ([b"short", b"BULK", b"h", b"data"], "16 octets"),
        ([SENDER, b"BULK", "head", b"data"], "byte strings"),
        ([SENDER, b"BULK", b"h", b"data", b"more"], "3 frames"),
        ([SENDER, "CHAT", b"hi"], "byte strings"),
    ],
)
def test_malformed_input_says_what_is_wrong(frames: list[bytes], complaint: str) -> None:
    with pytest.raises(DecodeError, match=complaint):
        decode(frames)


def test_time_body_is_decimal_text_as_in_the_source() -> None:
    sender = NodeId(SENDER)
    assert encode(Time(sender, 1700000000.25))[2] == b"1700000000.25"
    assert encode(Time(sender, 1.5, 1700000000.125))[2] == b"1.5 1700000000.125"
    assert decode([SENDER, b"TIME", b"1700000000"]) == Time(sender, 1700000000.0)


def test_bodies_of_chat_and_bout_are_plain_utf8() -> None:
    sender = NodeId(SENDER)
    assert encode(Chat(sender, "jam 3 is over ✓")) == [SENDER, b"CHAT", "jam 3 is over ✓".encode()]
    assert encode(Group(sender, "")) == [SENDER, b"BOUT", b""]


def test_invalid_messages_cannot_be_built() -> None:
    sender = NodeId(SENDER)
    with pytest.raises(LocalProtocolError, match="endpoint"):
        Helo(sender, endpoint="127.0.0.1:5000", name="a", incarnation="0" * 16)
    with pytest.raises(LocalProtocolError, match="group"):
        Group(sender, group="g" * 256)
    with pytest.raises(LocalProtocolError, match="finite"):
        Time(sender, float("inf"))
    with pytest.raises(LocalProtocolError, match="Unicode"):
        Chat(sender, "\udc80")


# ------------------------------------------------------------------- beacons


@given(node_ids, st.integers(1, 65535), st.text(max_size=50))
def test_beacon_round_trip(sender: NodeId, port: int, group: str) -> None:
    b = Beacon(sender, port, group_hash(group))
    data = pack(b)
    assert len(data) == 30
    assert unpack(data) == b


@given(st.binary(max_size=64))
def test_beacon_arbitrary_bytes(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        unpack(data)


def test_beacon_rejects_other_protocols() -> None:
    good = pack(Beacon(NodeId(SENDER), 5000, group_hash("g")))
    with pytest.raises(DecodeError, match="magic"):
        unpack(b"ZRE" + good[3:])
    with pytest.raises(DecodeError, match="version 2"):
        unpack(good[:3] + b"\x02" + good[4:])
    with pytest.raises(DecodeError, match="30 octets"):
        unpack(good + b"x")
    assert group_hash("a") != group_hash("b")
    assert group_hash("") == group_hash("")


def test_node_id_text_forms() -> None:
    nid = NodeId.from_hex("0123456789abcdef0123456789ABCDEF")
    assert str(nid) == "0123456789abcdef0123456789abcdef"
    assert NodeId.from_hex("01234567-89ab-cdef-0123-456789abcdef") == nid
    with pytest.raises(ValueError, match="32 hex"):
        NodeId.from_hex("xyz")
    with pytest.raises(ValueError, match="16 octets"):
        NodeId(b"abc")


def test_bulk_has_its_data_in_a_fourth_frame() -> None:
    sender = NodeId(SENDER)
    msg = Bulk(sender, b"head", b"d" * MAX_BULK)
    frames = encode(msg)
    assert frames[1:3] == [b"BULK", b"head"] and frames[3] is msg.data  # not copied
    assert decode(frames) == msg
    # As the transport receives it: the data as a memoryview on ZeroMQ's buffer.
    got = decode([SENDER, b"BULK", b"head", memoryview(b"abc")])
    assert isinstance(got, Bulk) and bytes(got.data) == b"abc"
    with pytest.raises(LocalProtocolError, match="head"):
        Bulk(sender, b"", b"")
    with pytest.raises(LocalProtocolError, match="data"):
        Bulk(sender, b"h", b"x" * (MAX_BULK + 1))


# ----------------------------------------------- XMSG records decoded as one batch of columns

SOURCE_HEX = "ab" * 16
SENDER_ID = NodeId(SENDER)
# What a hostile peer might put in a record's fields (in place of a good value).
odd_values = st.sampled_from([
    True, False, None, 0, -1, 2**63, 1.0, 1.5, float("inf"), "", "x", "AB" * 16, "ab" * 15, "cd" * 16, [], {},
    "NaN", "{", "[1", "1 2", " 1", "\x01", '"\x1f"', '"\\ud800"', "é", '"é"', "1e400", "[" * 2000 + "]" * 2000,
    "k" * 256,
])


def _good_rows(n: int, first: int) -> list[list[object]]:
    return [[SOURCE_HEX, first + i, 1000.0 + i, "bench.tick", f'{{"i":{i},"note":"penalty box"}}', i % 3]
            for i in range(n)]


@given(st.integers(1, 40), st.integers(1, 2**63 - 41), st.lists(
    st.tuples(st.integers(0, 39), st.integers(0, 5), odd_values), max_size=3))
def test_a_batch_of_columns_accepts_what_each_record_alone_is_accepted_as(
    n: int, first: int, changes: list[tuple[int, int, object]],
) -> None:
    """The columnar decode of an XMSG's records accepts exactly the batches whose every record
    the per-record decode accepts (it may leave a batch to it), and gives the same records."""
    rows = _good_rows(n, first)
    for row, field, value in changes:
        rows[row % n][field] = value
    try:
        alone: tuple[LogRecord, ...] | None = tuple(_record(r, {}) for r in rows)
    except DecodeError:
        alone = None
    batch = _batch(rows, {})
    if alone is None:
        assert batch is None
    elif batch is not None:
        assert batch == alone
        assert tuple(batch) == alone
        assert batch[1:] == alone[1:]


def test_the_usual_xmsg_decodes_to_one_batch_of_columns() -> None:
    source = NodeId(bytes.fromhex(SOURCE_HEX))
    records = tuple(LogRecord(source, 7 + i, 1000.0, "bench.tick", f'{{"i":{i}}}', 0) for i in range(500))
    msg = decode(encode(Xmsg(SENDER_ID, records)))
    assert isinstance(msg, Xmsg) and isinstance(msg.records, RecordBatch)
    assert msg.records == records and msg == Xmsg(SENDER_ID, records)
    assert list(msg.records) == list(records) and msg.records[-1] == records[-1]
    part = msg.records[100:200]
    assert isinstance(part, RecordBatch) and part.first == 107 and part == records[100:200]
    assert encode(msg) == encode(Xmsg(SENDER_ID, records))
    # Not consecutive, or two sources: each record on its own, as before.
    assert not isinstance(decode(encode(Xmsg(SENDER_ID, records[::2]))).records, RecordBatch)
    mixed = (*records[:3], LogRecord(SENDER_ID, 10, 1000.0, "k", "1", 0))
    assert decode(encode(Xmsg(SENDER_ID, mixed))) == Xmsg(SENDER_ID, mixed)


def test_a_known_node_id_is_made_once_and_its_text_still_checked() -> None:
    # Every member list, report and GSIP names the same peers: a NodeId is made once per text.
    # Only the exact text seen (checked) is taken as known: upper case, a dash, a list, still refused.
    sender, member = NodeId(b"\x05" * 16), NodeId(b"\xab" * 16)
    listed = Members(sender, members=((member, "tcp://10.0.0.6:5000", "66" * 8),))
    first, again = decode(encode(listed)), decode(encode(listed))
    assert isinstance(first, Members) and isinstance(again, Members) and first == listed
    assert first.members[0][0] is again.members[0][0]
    frames = encode(listed)
    for bad in (member.hex().upper(), member.hex()[:31] + "-", member.hex()[:31]):
        spoilt = frames[2].replace(member.hex().encode(), bad.encode())
        with pytest.raises(DecodeError):
            decode([frames[0], frames[1], spoilt])
    with pytest.raises(DecodeError):
        decode([frames[0], frames[1], frames[2].replace(f'"{member.hex()}"'.encode(), b'["' + member.hex().encode() + b'"]')])
