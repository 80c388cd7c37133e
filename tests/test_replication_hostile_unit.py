"""What a hostile peer can send the audit log, without a network: the codec's record rules
and the Replicator driven directly (as tests/test_replication.py does) with
what a hostile peer, guest or page can send.  Each refused input leaves the
log as it was, and each bound is counted."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle import NodeId
from huddle.driver import MeshDriver
from huddle.errors import DecodeError, LocalProtocolError
from huddle.limits import LogLimits
from huddle.log import SqliteStore
from huddle.log.model import SourceState
from huddle.protocol.events import Send
from huddle.protocol.logstore import MemoryStore, canonical_json
from huddle.protocol.replication import Replicator
from huddle.protocol.serving import coalesce as _coalesce
from huddle.wire import (
    MAX_BODY,
    MAX_RECORD,
    MAX_SEQ,
    Chat,
    Gsip,
    LogRecord,
    Xmsg,
    check_record,
    decode,
    encode,
    encode_parts,
    make_record,
    record_size,
    strict_json,
)
from huddle.wire.records import _body_ok

ME = NodeId(b"\x01" * 16)
PEER = NodeId(b"\x02" * 16)
OTHER = NodeId(b"\x03" * 16)


def sent(r: Replicator) -> list[object]:
    """The messages of the replicator's Send actions, each checked to encode within the body cap."""
    out = []
    for a in r.take_actions():
        if isinstance(a, Send):
            frames = encode_parts(a.message)  # raises if over MAX_BODY
            assert len(frames[1]) <= MAX_BODY
            out.append(a.message)
    return out


def with_peer(limits: LogLimits | None = None, store: MemoryStore | None = None) -> Replicator:
    r = Replicator(ME, store or MemoryStore(), now=0.0, limits=limits)
    r.peer_up(PEER, 1, 0.0)
    r.take_actions()
    return r


def untouched(r: Replicator, store: MemoryStore) -> None:
    assert r.own_seq == 0 and r.next_seq == 1
    assert store.records == {} and store.staged == []
    assert r.take_actions() == []
    assert r.stats.originated == 0 and r.stats.events_refused > 0


# -------------------------------------------------------------------- a record is valid only whole


@pytest.mark.parametrize(("kind", "body", "complaint"), [
    ("k\ud800", "1", "lone surrogate"),
    ("k", '"\ud800"', "lone surrogate"),
    ("k", "NaN", "strict"),
    ("k", "[1,-Infinity]", "strict"),
    ("k", "[1] [2]", "strict"),
    ("k", "[" + ",".join(['""'] * 300_000) + "]", "larger than"),  # 900 KB that doubles when escaped
    ("k", json.dumps("x" * MAX_BODY), "larger than"),
    ("", "1", "kind"),
    ("k" * 256, "1", "kind"),
    ("é" * 128, "1", "kind"),  # 256 octets
])
def test_a_bad_event_is_refused_and_nothing_is_recorded(kind: str, body: str, complaint: str) -> None:
    store = MemoryStore()
    r = Replicator(ME, store, now=0.0)
    with pytest.raises(LocalProtocolError, match=complaint):
        r.append(kind, body, 0.0, 0.0)
    untouched(r, store)


def test_emit_many_is_all_or_nothing() -> None:
    store = MemoryStore()
    r = Replicator(ME, store, now=0.0)
    with pytest.raises(LocalProtocolError, match=r"event 3: .*nothing was recorded"):
        r.append_many([("k", "1"), ("k", "2"), ("k", "NaN"), ("k", "4")], 0.0, 0.0)
    untouched(r, store)
    assert [x.seq for x in r.append_many([("k", "1"), ("k", "2")], 0.0, 0.0)] == [1, 2]


def test_the_largest_record_that_fits_is_exactly_max_record_and_replicates() -> None:
    store = MemoryStore()
    r = with_peer(store=store)
    probe = LogRecord(ME, 1, 0.0, "k", '""')
    body = json.dumps("x" * (MAX_RECORD - record_size(probe)))  # one octet per x
    rec = r.append("k", body, 0.0, 0.0)
    assert record_size(rec) == MAX_RECORD
    with pytest.raises(LocalProtocolError, match="larger than"):
        r.append("k", json.dumps("x" * (MAX_RECORD - record_size(probe) + 1)), 0.0, 0.0)
    (msg,) = [m for m in sent(r) if isinstance(m, Xmsg)]
    assert decode(encode(msg)) == msg
    # Forwarded with the largest hop count it still fits.
    far = replace(rec, hops=MAX_SEQ)
    assert len(encode_parts(Xmsg(PEER, (far,)))[1]) <= MAX_BODY


@pytest.mark.parametrize(("kind", "body", "complaint"), [
    # A lone surrogate escape in the message's own JSON: refused by the parser of the whole body.
    ('"k\\ud800"', '"1"', "kind|surrogate"),
    ('"k"', '"\\"\\udc00\\""', "surrogate"),
    ('"k"', '"NaN"', "valid JSON"),
    ('"k"', '"-Infinity"', "valid JSON"),
])
def test_a_bad_record_from_a_peer_makes_its_xmsg_undecodable(kind: str, body: str, complaint: str) -> None:
    row = f'["{OTHER.hex()}",1,1.0,{kind},{body},0]'
    raw = f'{{"records":[["{OTHER.hex()}",1,1.0,"k","1",0],{row}]}}'.encode()
    with pytest.raises(DecodeError, match=complaint):
        decode([bytes(PEER), b"XMSG", raw])


def test_a_received_record_over_max_record_is_undecodable_though_its_message_fits() -> None:
    probe = LogRecord(OTHER, 1, 1.0, "k", '""')
    over = LogRecord(OTHER, 1, 1.0, "k", json.dumps("x" * (MAX_RECORD - record_size(probe) + 1)))
    raw = encode_parts(Xmsg(PEER, (over,)))[1]
    assert MAX_RECORD < len(raw) <= MAX_BODY
    with pytest.raises(DecodeError, match="record limit"):
        decode([bytes(PEER), b"XMSG", raw])
    fits = replace(over, body=over.body[:-2] + '"')
    assert decode([bytes(PEER), b"XMSG", encode_parts(Xmsg(PEER, (fits,)))[1]]) == Xmsg(PEER, (fits,))


def test_strict_json_is_rfc_8259() -> None:
    assert strict_json("1") and strict_json(' {"a": [1, 2.5e3, null]} ') and strict_json('"\\u0001"')
    assert not strict_json("NaN") and not strict_json("Infinity") and not strict_json('{"a":-Infinity}')
    assert not strict_json('"\x01"') and not strict_json("") and not strict_json("1 2")
    # An escape that spells a lone surrogate: valid JSON syntax, not a Unicode value.
    assert not strict_json('"\\ud800"') and not strict_json('["\\udc00\\ud800"]')
    assert strict_json('"\\ud83d\\ude00"') and strict_json('"\\\\ud800"')


def test_the_quick_body_check_agrees_with_strict_json() -> None:
    # orjson first (short bodies), the strict parser when it refuses: the same verdicts.
    cases = ["1", ' {"a": [1, 2.5e3, null]} ', '"\\u0001"', "NaN", "Infinity", '{"a":-Infinity}', '"\x01"', "",
             "1 2", '"\\ud800"', '["\\udc00\\ud800"]', '"\\ud83d\\ude00"', '"\\\\ud800"', "1e400", "-1e400",
             "123456789012345678901234567890", "[" * 400 + "]" * 400, "[" * 600 + "]" * 600, "[1,]", "{,}",
             '{"a":1,"a":2}', "\ufeff1", "01", "-", "1.", ".5", "1e", '"\\x"', "tru", "nul", "\t1\n", "\x0c1"]
    for body in cases:
        assert _body_ok(body) == strict_json(body), body


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=40))
def test_the_quick_body_check_agrees_with_strict_json_on_any_text(body: str) -> None:
    assert _body_ok(body) == strict_json(body)


def test_make_record_is_the_constructor_and_the_record_stays_frozen() -> None:
    made = make_record(OTHER, 7, 1.5, "k", '{"a":1}', 2)
    assert made == LogRecord(OTHER, 7, 1.5, "k", '{"a":1}', 2) and hash(made) == hash(LogRecord(OTHER, 7, 1.5, "k", '{"a":1}', 2))
    with pytest.raises(AttributeError):
        made.seq = 8  # type: ignore[misc]
    assert replace(made, hops=3).hops == 3 and made.hops == 2


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=12),
    lambda c: st.lists(c, max_size=4) | st.tuples(c, c) | st.dictionaries(st.text(max_size=5) | st.integers(), c, max_size=4),
    max_leaves=12)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_canonical_json_is_the_json_modules_text_whichever_encoder_wrote_it(value: object) -> None:
    # orjson writes the usual body, json the rest: the text (or the refusal) is json's.
    slow = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
    try:
        expected = slow.encode(value)
    except (TypeError, ValueError):
        with pytest.raises(LocalProtocolError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


canonical_events = st.lists(st.tuples(
    st.sampled_from(["k", "score", "k\x01" * 50, "", "\ud800", "k" * 300]),
    st.one_of(json_values.map(lambda v: json.dumps(v, ensure_ascii=False)), st.sampled_from([
        '"\ud800"', '"\udfff x"', json.dumps("x" * (MAX_RECORD // 6)), json.dumps("x" * MAX_RECORD),
        json.dumps("語" * (MAX_RECORD // 5), ensure_ascii=False)]))), min_size=1, max_size=6)


@settings(max_examples=300, deadline=None)
@given(canonical_events)
def test_append_many_of_canonical_bodies_refuses_what_check_record_refuses(events: list[tuple[str, str]]) -> None:
    # Bodies said to be canonical_json's are not parsed again; every other check holds, record by
    # record, whatever kinds repeat (the first refused is named, and nothing is recorded).
    stamp = 5.0
    expected = None
    for i, (kind, body) in enumerate(events):
        try:
            check_record(LogRecord(ME, i + 1, stamp, kind, body), canonical=True)
        except LocalProtocolError as exc:
            where = f"event {i + 1}: " if len(events) > 1 else ""
            expected = f"{where}{exc}; nothing was recorded"
            break
    store = MemoryStore()
    r = Replicator(ME, store, now=0.0)
    if expected is None:
        assert [x.body for x in r.append_many(events, 0.0, stamp, canonical=True)] == [b for _, b in events]
    else:
        with pytest.raises(LocalProtocolError) as refused:
            r.append_many(events, 0.0, stamp, canonical=True)
        assert str(refused.value) == expected
        untouched(r, store)


kinds = st.text(min_size=0, max_size=20)
bodies = st.one_of(
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                 lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=5), c, max_size=4),
                 max_leaves=10).map(lambda v: json.dumps(v, ensure_ascii=False)),
    st.text(max_size=30),
    st.sampled_from(["NaN", "[Infinity]", '"\ud800"', "1 ", " 1", "[1,]", '"\\ud800"']),
)


@settings(max_examples=400, deadline=None)
@given(kinds, bodies, st.floats(allow_nan=False, allow_infinity=False))
def test_any_record_the_log_accepts_round_trips_and_any_it_refuses_leaves_it_untouched(
    kind: str, body: str, stamp: float,
) -> None:
    store = MemoryStore()
    r = with_peer(store=store)
    try:
        rec = r.append(kind, body, 0.0, stamp)
    except LocalProtocolError:
        assert store.records == {} and r.own_seq == 0 and r.take_actions() == []
        return
    check_record(rec)
    msgs = [m for m in sent(r) if isinstance(m, Xmsg)]  # encodes within the cap
    assert [m.records for m in msgs] == [(rec,)]
    back = decode(encode(msgs[0]))
    assert back == msgs[0]
    assert record_size(rec) == len(encode_parts(Xmsg(ME, (rec,)))[1])
    assert store.records[ME][1] == rec


# ---------------------------------------------------------------------------------- our own source


def test_records_in_our_name_from_a_peer_are_dropped_and_counted() -> None:
    store = MemoryStore()
    r = with_peer(store=store)
    r.append("k", "1", 0.0, 0.0)
    r.take_actions()
    forged = (LogRecord(ME, 3, 1.0, "k", '"forged"'), LogRecord(OTHER, 1, 1.0, "k", "1"))
    r.on_xmsg(PEER, Xmsg(PEER, forged), 1.0, 1.0)
    assert r.stats.own_refused == 1
    assert r.sources[ME] == SourceState(contig=1)
    assert (ME, 3) not in store.receipts and (OTHER, 1) in store.receipts  # the honest record of the batch stays
    assert r.append("k", "2", 1.0, 1.0).seq == 2  # not 4


def test_a_claim_to_hold_more_of_our_source_is_not_believed() -> None:
    r = with_peer()
    r.append("k", "1", 0.0, 0.0)
    r.take_actions()
    r.on_gsip(PEER, Gsip(PEER, ((ME, MAX_SEQ),)), 1.0)
    r.tick(10.0)
    assert r.stats.own_claims == 1
    asks = [m for m in sent(r) if isinstance(m, Gsip) and m.ask]
    assert all(s != ME for m in asks for s, _ in m.ask)
    assert r.append("k", "2", 10.0, 10.0).seq == 2
    # Live events still go to that peer (its claim did not make it look ahead of us).
    assert any(isinstance(m, Xmsg) for m in sent(r))


def test_the_last_sequence_is_a_clear_error_not_an_overflow() -> None:
    store = MemoryStore()
    r = Replicator(ME, store, now=0.0)
    r.sources[ME] = SourceState(contig=MAX_SEQ - 1)
    assert r.append("k", "1", 0.0, 0.0).seq == MAX_SEQ
    r.take_actions()
    with pytest.raises(LocalProtocolError, match="used up"):
        r.append("k", "2", 0.0, 0.0)
    with pytest.raises(LocalProtocolError, match="used up"):
        r.append_many([("k", "2")], 0.0, 0.0)
    assert r.next_seq == MAX_SEQ + 1 and r.take_actions() == []


def test_hops_stop_at_the_largest_integer(tmp_path: Path) -> None:
    rec = LogRecord(OTHER, 1, 1.0, "k", "1", MAX_SEQ)
    store = SqliteStore(tmp_path / "log.sqlite", "g")
    store.stage([rec], PEER, 1.0)
    store.commit()
    assert store.read(OTHER, 0, 1)[0].hops == MAX_SEQ
    mem = MemoryStore()
    mem.stage([rec], PEER, 1.0)
    assert mem.records[OTHER][1].hops == MAX_SEQ


def test_records_in_our_name_that_came_from_peers_are_dropped_on_start(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "log.sqlite", "g")
    store.stage([LogRecord(ME, 1, 1.0, "k", "1"), LogRecord(ME, 2, 1.0, "k", "2")], None, 1.0)
    store.stage([LogRecord(ME, 4, 1.0, "k", '"forged"'), LogRecord(OTHER, 1, 1.0, "k", "1")], PEER, 1.0)
    store.commit()
    assert store.drop_returned(ME) == 1
    r = Replicator(ME, store, now=0.0)
    assert r.sources[ME] == SourceState(contig=2) and r.sources[OTHER].contig == 1
    assert r.append("k", "3", 0.0, 0.0).seq == 3


# -------------------------------------------------------------------------- sources, vectors, asks


def xmsg_of_sources(n: int, start: int = 0) -> Xmsg:
    return Xmsg(PEER, tuple(LogRecord(NodeId((start + i).to_bytes(16, "big")), 1, 1.0, "k", "1")
                            for i in range(1, n + 1)))


def test_new_sources_are_bounded_per_message_per_peer_and_in_all() -> None:
    limits = LogLimits(max_sources=40, max_new_sources_per_peer=25, max_new_sources_per_message=10)
    r = with_peer(limits)
    r.on_xmsg(PEER, xmsg_of_sources(15), 1.0, 1.0)
    assert len(r.sources) == 1 + 10 and r.stats.sources_refused == 5
    r.on_xmsg(PEER, xmsg_of_sources(15, 100), 1.0, 1.0)
    r.on_xmsg(PEER, xmsg_of_sources(15, 200), 1.0, 1.0)
    assert len(r.sources) == 1 + 25  # this peer's 25
    other = NodeId(b"\x04" * 16)
    r.peer_up(other, 2, 1.0)
    r.on_gsip(other, Gsip(other, tuple((NodeId((300 + i).to_bytes(16, "big")), 5) for i in range(10))), 1.0)
    r.on_gsip(other, Gsip(other, tuple((NodeId((400 + i).to_bytes(16, "big")), 5) for i in range(10))), 1.0)
    assert len(r.sources) == 40  # in all
    assert r.stats.sources_refused == 5 + 5 + 10 + 6
    sent(r)


def test_sources_a_departed_peer_named_and_we_hold_nothing_of_are_forgotten() -> None:
    r = with_peer()
    r.on_gsip(PEER, Gsip(PEER, tuple((NodeId((i + 10).to_bytes(16, "big")), 9) for i in range(100))), 1.0)
    assert len(r.sources) == 101
    r.on_xmsg(PEER, Xmsg(PEER, (LogRecord(OTHER, 1, 1.0, "k", "1"),)), 1.0, 1.0)
    r.peer_down(PEER)
    assert set(r.sources) == {ME, OTHER}
    r.tick(5.0)
    sent(r)


def test_gsips_naming_20000_sources_never_make_an_oversized_gsip() -> None:
    """With 20 000 sources known, the node's own GSIPs and asks still stay within the body cap."""
    limits = LogLimits(max_sources=50_000, max_new_sources_per_peer=50_000, max_new_sources_per_message=50_000)
    r = with_peer(limits)
    for part in range(2):
        vv = tuple((NodeId((part * 10_000 + i + 10).to_bytes(16, "big")), MAX_SEQ) for i in range(10_000))
        msg = Gsip(PEER, vv)
        assert len(encode_parts(msg)[1]) <= MAX_BODY
        r.on_gsip(PEER, msg, 1.0)
    assert len(r.sources) == 20_001
    gsips = [m for m in sent(r) if isinstance(m, Gsip)]  # every one within MAX_BODY
    asked = {s for m in gsips for s, _ in m.ask}
    assert 0 < len(asked) < 20_000 and r.stats.asks_deferred > 0
    # Records of all of them arrive: the version vector no longer fits one GSIP.
    for part in range(20):
        recs = tuple(LogRecord(NodeId((part * 1000 + i + 10).to_bytes(16, "big")), q, 1.0, "k", "1")
                     for i in range(1000) for q in (1, 2))
        r.on_xmsg(PEER, Xmsg(PEER, recs), 2.0, 2.0)
    sent(r)
    r.tick(20.0)
    gsips = [m for m in sent(r) if isinstance(m, Gsip)]
    assert len(gsips) >= 2 and r.stats.gsip_split >= 1
    named = [s for m in gsips for s, _ in m.vv]
    assert len(named) == len(set(named)) == len(r.version_vector())


def test_ranges_beyond_a_gap_are_bounded() -> None:
    r = with_peer(LogLimits(max_gap_ranges=50, max_ask_ranges=20))
    recs = tuple(LogRecord(OTHER, q, 1.0, "k", "1") for q in range(2, 400, 2))
    r.on_xmsg(PEER, Xmsg(PEER, recs), 1.0, 1.0)
    assert len(r.sources[OTHER].ahead) == 50
    assert r.stats.gaps_refused == len(recs) - 50
    (ask,) = [m for m in sent(r) if isinstance(m, Gsip) and m.ask]
    assert len(ask.ask[0][1]) == 20
    # A record next to a held range still comes in; so does the first gap's.
    r.on_xmsg(PEER, Xmsg(PEER, (LogRecord(OTHER, 3, 1.0, "k", "1"), LogRecord(OTHER, 1, 1.0, "k", "1"))), 1.0, 1.0)
    assert r.sources[OTHER].contig == 4
    assert SourceState(contig=3, ahead=[(10, 12)]).opens_range(6, 7)
    assert not SourceState(contig=3, ahead=[(10, 12)]).opens_range(7, 9)
    assert not SourceState(contig=3, ahead=[(10, 12)]).opens_range(13, 20)
    assert not SourceState(contig=3, ahead=[(10, 12)]).opens_range(4, 5)


# ------------------------------------------------------------------------------ GSIP amplification


def holder(n: int, limits: LogLimits | None = None, body: str = "1") -> Replicator:
    r = with_peer(limits)
    for _ in range(n // 1000):
        r.append_many([("k", body)] * 1000, 0.0, 0.0)
    r.take_actions()
    return r


def served(r: Replicator) -> list[LogRecord]:
    return [rec for m in sent(r) if isinstance(m, Xmsg) for rec in m.records]


def test_one_gsip_is_served_one_window_across_all_its_asks() -> None:
    r = holder(10_000, LogLimits(serve_records=1_500))
    asks = ((ME, tuple((q, q + 199) for q in range(1, 10_000, 200))),)  # 50 ranges of 200
    r.on_gsip(PEER, Gsip(PEER, (), asks), 1.0)
    assert len(served(r)) == 1_500 and r.stats.serve_trimmed == 1
    r.on_gsip(PEER, Gsip(PEER, (), ((ME, ((1, 0),)),)), 10.0)  # a stream: the same window
    assert len(served(r)) == 1_500


def test_the_serve_window_counts_ranges_too() -> None:
    r = holder(10_000, LogLimits(serve_ranges=30))
    asks = ((ME, tuple((q, q) for q in range(1, 10_000, 2))), (OTHER, ((1, 0),)))
    r.on_gsip(PEER, Gsip(PEER, (), asks), 1.0)
    assert [x.seq for x in served(r)] == list(range(1, 60, 2)) and r.stats.serve_trimmed == 1


def test_the_serve_window_counts_octets_too() -> None:
    body = json.dumps("x" * 10_000)
    r = holder(2_000, LogLimits(serve_bytes=1024 * 1024), body=body)
    r.on_gsip(PEER, Gsip(PEER, (), ((ME, ((1, 1000), (1001, 2000))),)), 1.0)
    got = served(r)
    assert 90 <= len(got) <= 110  # ~1 MiB of 10 KB records
    assert sum(len(x.body) for x in got) <= 1024 * 1024 + 20_000


def test_the_issue_s_amplifying_gsip_gets_one_window() -> None:
    """The amplifying ask as it was first seen: 200 ranges of 2 000 in one GSIP (2 257 octets)."""
    r = holder(40_000)
    asks = ((ME, tuple((q, q + 1999) for q in range(1, 400_000, 2000))),)
    msg = Gsip(PEER, (), asks)
    got = served(r) if r.on_gsip(PEER, msg, 1.0) is None else []
    assert len(got) == LogLimits().serve_records
    octets = sum(len(encode_parts(Xmsg(ME, (x,)))[1]) for x in got[:100]) * len(got) // 100
    assert octets < 200 * len(encode_parts(msg)[1]) * 10  # not x34 000


# ----------------------------------------------------------------- batches within the body cap


def test_live_batches_of_wide_characters_fit_the_body_cap() -> None:
    r = with_peer()
    wide = json.dumps("語" * 120_000, ensure_ascii=False)  # 3 octets a character
    r.append_many([("k\x01" * 50, wide)] * 8, 0.0, 0.0)
    msgs = [m for m in sent(r) if isinstance(m, Xmsg)]
    assert sum(len(m.records) for m in msgs) == 8


# ------------------------------------------------------------------ the driver survives an action


class _FakeMesh:
    def __init__(self, actions: list[object], tick_fails: int = 0) -> None:
        self.actions, self.tick_fails, self.ticks = actions, tick_fails, 0
        self.ticked: asyncio.Event | None = None

    def take_actions(self) -> list[object]:
        actions, self.actions = self.actions, []
        return actions

    def tick(self, now: float) -> None:
        self.ticks += 1
        if self.ticks >= 3 and self.ticked is not None:
            self.ticked.set()
        if self.ticks <= self.tick_fails:
            raise RuntimeError("a bug in a state machine")

    def next_deadline(self, now: float) -> float:
        return now + 0.001


class _FakeTransport:
    def __init__(self) -> None:
        self.sent: list[tuple[int, list[bytes]]] = []

    def send(self, conn: int, frames: list[bytes]) -> None:
        if conn == 2:
            raise OSError("the connection is gone")
        self.sent.append((conn, frames))

    def poll(self) -> None:
        pass


def test_the_driver_survives_an_action_it_cannot_carry_out_and_counts_it() -> None:
    driver = MeshDriver(time.monotonic, lambda event: None)
    bad = Xmsg(ME, (LogRecord(ME, 1, 1.0, "k\ud800", "1"),))  # made without the checks: cannot be encoded
    good = Chat(ME, "fine")
    transport = _FakeTransport()
    huge = Xmsg(ME, (LogRecord(ME, 1, 1.0, "k", "1" * MAX_BODY),))  # over the body cap
    driver.mesh = _FakeMesh([Send(1, bad), Send(3, bad), Send(2, good), Send(1, huge),
                             Send(1, good), Send(3, good)])  # type: ignore[assignment]
    driver.transport = transport  # type: ignore[assignment]
    driver.execute()
    assert [conn for conn, _ in transport.sent] == [1, 3]
    assert driver.stats.action_failures == 4


def test_the_timer_loop_survives_a_turn_that_raises() -> None:
    driver = MeshDriver(time.monotonic, lambda event: None)
    mesh = _FakeMesh([], tick_fails=2)
    driver.mesh = mesh  # type: ignore[assignment]
    driver.transport = _FakeTransport()  # type: ignore[assignment]

    async def run() -> None:
        mesh.ticked = asyncio.Event()
        task = asyncio.create_task(driver.run(60.0, lambda now: None))
        try:
            await asyncio.wait_for(mesh.ticked.wait(), 5.0)
        finally:
            task.cancel()

    asyncio.run(run())
    assert mesh.ticks >= 3 and driver.stats.tick_failures == 2


def test_one_gsip_asking_for_the_same_records_many_times_gets_them_once() -> None:
    assert _coalesce([(1, 2000)] * 199) == [(1, 2000)]
    assert _coalesce([(5, 9), (1, 3), (4, 4), (20, 0), (30, 40)]) == [(1, 9), (20, 0)]
    assert _coalesce([(1, 3), (10, 12)]) == [(1, 3), (10, 12)]
