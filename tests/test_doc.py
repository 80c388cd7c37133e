"""The bout document: operations (XML and JSON), deterministic application, jams, history."""

from __future__ import annotations

import json
import random
import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from huddle import NodeId
from huddle.doc import DocEngine, OperationError, jams, parse_json_ops, parse_ops, parse_xml_ops, to_xml
from huddle.doc.engine import BoutDocument
from huddle.protocol.logstore import canonical_json
from huddle.wire import LogRecord

A = NodeId(bytes([0xA] * 16))
B = NodeId(bytes([0xB] * 16))
C = NodeId(bytes([0xC] * 16))


def rec(source: NodeId, seq: int, ts: float, op: dict[str, Any] | str) -> LogRecord:
    return LogRecord(source, seq, ts, "doc", op if isinstance(op, str) else canonical_json(op), 0)


def engine_of(records: list[LogRecord]) -> DocEngine:
    e = DocEngine()
    for r in records:
        e.add(r)
    return e


# ------------------------------------------------------------------ parsing


def test_xml_and_json_forms_give_the_same_operations() -> None:
    xml = parse_xml_ops(
        '<action>'
        '<add period="1" jam="3"><lineup team="home" position="jammer" number="12"/></add>'
        '<set period="1" jam="3"><attribute name="duration">120</attribute></set>'
        '<set period="1" jam="3"><attribute>lead</attribute>home</set>'
        '<set path="venue">Hall 1</set>'
        '<remove eid="6842B56C-44CA-525C-B89D-51BEE1A2C0B6"/>'
        '</action>'
    )
    js = parse_json_ops([
        {"op": "add", "to": {"period": "1", "jam": 3},
         "children": [{"tag": "lineup", "attrs": {"team": "home", "position": "jammer", "number": 12}}]},
        {"op": "set", "to": {"period": 1, "jam": 3}, "attribute": "duration", "value": 120},
        {"op": "set", "to": {"period": 1, "jam": 3}, "attribute": "lead", "value": "home"},
        {"op": "set", "to": {"path": "bout/venue"}, "text": "Hall 1"},
        {"op": "remove", "to": {"eid": "6842b56c-44ca-525c-b89d-51bee1a2c0b6"}},
    ])
    assert xml == js
    assert xml[0] == {"op": "add", "to": {"period": 1, "jam": 3}, "children": [
        {"tag": "lineup", "attrs": {"number": "12", "position": "jammer", "team": "home"}}]}
    assert xml[1] == {"op": "set", "to": {"period": 1, "jam": 3}, "attribute": "duration", "value": "120"}
    assert parse_ops('{"op": "add", "to": {"team": "away"}, "xml": "<person number=\\"7\\"/>"}') == [
        {"op": "add", "to": {"team": "away"}, "children": [{"tag": "person", "attrs": {"number": "7"}}]}]


@pytest.mark.parametrize(("text", "message"), [
    ("<add period='1'><lineup", "malformed XML"),
    ("<replace period='1'/>", "not an operation"),
    ("<add period='1'><banana/></add>", "unknown element <banana>"),
    ("<add period='1' jam='1'><lineup colour='red'/></add>", "has no attribute 'colour'"),
    ("<add period='3'><note/></add>", "period must be a number from 1 to 2"),
    ("<add period='1' jam='0'><note/></add>", "jam must be a number from 1 to 200"),
    ("<add team='visitors'><person/></add>", "team must be one of home, away, official"),
    ("<add jam='2'><note/></add>", "cannot address by jam"),
    ("<remove period='1' jam='2'>x</remove>", "takes no payload"),
    ("<add period='1'/>", "add needs child elements or text"),
    ("<add period='1'><jam number='4'/></add>", "jams are made by referring to them"),
    ("<set eid='not-a-uuid'>x</set>", "eid must be a UUID"),
    ('{"op": "set", "to": {"team": "home"}, "attribute": "eid", "value": "x"}', "eid cannot be changed"),
    ('{"op": "set", "to": {"team": "home"}}', "set needs"),
    ("[]", "no operation given"),
    ("not json", "neither XML nor JSON"),
    ('<!DOCTYPE x [<!ENTITY a "aaaa">]><set path="venue">&a;</set>', "DTDs or entities"),
])
def test_malformed_operations_are_refused_with_the_reason(text: str, message: str) -> None:
    with pytest.raises(OperationError, match=message):
        parse_ops(text)


# ------------------------------------------------------------------ applying


def test_the_default_bout_has_three_teams_two_periods_venue_and_ruleset() -> None:
    assert to_xml(BoutDocument().root) == (
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<bout><venue/><ruleset><halftime duration="900"/></ruleset><team type="home"/><team type="away"/>'
        '<team type="official"/><period number="1"/><period number="2"/></bout>\n'
    )


def test_operations_apply_in_timestamp_source_sequence_order() -> None:
    set_b = {"op": "set", "to": {"path": "venue"}, "attribute": "name", "value": "B's hall"}
    set_a = {"op": "set", "to": {"path": "venue"}, "attribute": "name", "value": "A's hall"}
    # Same timestamp: the larger source applies last and wins; a later timestamp beats both.
    e = engine_of([rec(B, 1, 10.0, set_b), rec(A, 1, 10.0, set_a)])
    assert '<venue name="B\'s hall"/>' in to_xml(e.document.root)
    e.add(rec(A, 2, 11.0, set_a))
    assert '<venue name="A\'s hall"/>' in to_xml(e.document.root)
    assert e.rebuilds == 1  # B#1 arrived first; A#1 sorts before it


def test_referring_to_a_jam_creates_it_in_number_order() -> None:
    e = engine_of([
        rec(A, 1, 1.0, {"op": "set", "to": {"period": 1, "jam": 3}, "attribute": "start", "value": "30"}),
        rec(A, 2, 2.0, {"op": "add", "to": {"period": 1, "jam": 1}, "children": [{"tag": "note"}]}),
    ])
    period = e.document.root.find("period", number="1")
    assert period is not None
    assert [j.attrs["number"] for j in period.children] == ["1", "3"]


def test_an_add_under_an_element_removed_earlier_in_the_order_is_dropped_and_recorded() -> None:
    person = {"op": "add", "to": {"team": "home"}, "children": [{"tag": "person", "attrs": {"number": "5"}}]}
    remove = {"op": "remove", "to": {"team": "home", "person": "5"}}
    late_add = {"op": "add", "to": {"team": "home", "person": "5"}, "text": "captain"}
    e = engine_of([rec(B, 1, 3.0, late_add), rec(A, 2, 2.0, remove), rec(A, 1, 1.0, person)])
    doc = e.document
    assert '<team type="home"/>' in to_xml(doc.root)
    assert len(doc.dropped) == 1
    assert doc.dropped[0]["source"] == B.hex() and "no person numbered or named '5'" in doc.dropped[0]["reason"]
    # Ordered before the remove, the same add is applied and then removed with its parent.
    e2 = engine_of([rec(B, 1, 1.5, late_add), rec(A, 2, 2.0, remove), rec(A, 1, 1.0, person)])
    assert e2.document.dropped == [] and '<team type="home"/>' in to_xml(e2.document.root)


def test_an_unreadable_body_from_a_peer_is_dropped_not_fatal() -> None:
    e = engine_of([rec(A, 1, 1.0, "{not json"), rec(A, 2, 2.0, '{"op": "explode", "to": {"team": "home"}}'),
                   rec(A, 3, 3.0, {"op": "set", "to": {"path": "venue"}, "text": "ok"})])
    assert [d["seq"] for d in e.document.dropped] == [1, 2]
    assert "<venue>ok</venue>" in to_xml(e.document.root)


def test_permanent_elements_and_identifying_attributes_cannot_be_changed() -> None:
    doc = BoutDocument()
    with pytest.raises(OperationError, match="cannot be removed"):
        doc.check({"op": "remove", "to": {"team": "away"}})
    with pytest.raises(OperationError, match="identifies it"):
        doc.check({"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "number", "value": "9"})
    doc.check({"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "9"})  # a new jam: fine
    with pytest.raises(OperationError, match="nothing to remove"):
        doc.check({"op": "remove", "to": {"period": 1, "jam": 1}})
    with pytest.raises(OperationError, match="the next is jam 1, not 2"):  # jam numbers leave no gap
        doc.check({"op": "set", "to": {"period": 1, "jam": 2}, "attribute": "start", "value": "9"})


def test_history_names_every_change_of_an_element() -> None:
    e = engine_of([
        rec(A, 1, 1.0, {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "100"}),
        rec(B, 4, 2.0, {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "duration", "value": "90"}),
        rec(C, 2, 3.0, {"op": "remove", "to": {"period": 1, "jam": 1}}),
    ])
    jam_eid = "a071bc17-7715-52fb-a893-c7207d01db22"  # derived from "bout/period/1/jam/1", fixed forever
    history = e.document.history_of(jam_eid)
    assert history is not None
    assert [(h["source"][:2], h["seq"], h["op"]) for h in history] == [
        ("0a", 1, "create"), ("0a", 1, "set"), ("0b", 4, "set"), ("0c", 2, "remove")]
    assert history[2]["attribute"] == "duration" and history[2]["value"] == "90" and history[2]["timestamp"] == 2.0


# ------------------------------------------------------------------ jams


def jam_state(*jam_attrs: tuple[int, int, dict[str, str]], periods: dict[int, dict[str, str]] | None = None,
              status: str | None = None) -> dict[str, Any]:
    doc = BoutDocument()
    key = (0.0, bytes(16), 0)

    def apply(op: dict[str, Any]) -> None:
        assert doc.apply(parse_json_ops(op)[0], key) is None

    for p, j, attrs in jam_attrs:
        for name, value in attrs.items():
            apply({"op": "set", "to": {"period": p, "jam": j}, "attribute": name, "value": value})
        if not attrs:
            apply({"op": "add", "to": {"period": p, "jam": j}, "children": [{"tag": "note"}]})
    for p, attrs in (periods or {}).items():
        for name, value in attrs.items():
            apply({"op": "set", "to": {"period": p}, "attribute": name, "value": value})
    if status:
        apply({"op": "set", "to": {"path": "bout"}, "attribute": "status", "value": status})
    return jams(doc.root)


def brief(j: dict[str, Any] | None) -> tuple[int, int] | None:
    return None if j is None else (j["period"], j["jam"])


def test_at_the_start_the_upcoming_jam_is_period_one_jam_one() -> None:
    s = jam_state()
    assert (s["active"], s["just_completed"], brief(s["upcoming"])) == (None, None, (1, 1))
    s = jam_state((1, 2, {}))  # referred to (a lineup entered early) but not started
    assert brief(s["upcoming"]) == (1, 1)


def test_a_started_jam_without_duration_is_active_and_there_is_no_upcoming_jam() -> None:
    s = jam_state((1, 1, {"start": "100", "duration": "120"}), (1, 2, {"start": "250"}))
    assert brief(s["active"]) == (1, 2)
    assert brief(s["just_completed"]) == (1, 1)
    assert s["upcoming"] is None


def test_after_a_jam_ends_the_upcoming_jam_is_the_next_number() -> None:
    s = jam_state((1, 1, {"start": "100", "duration": "120"}), (1, 2, {"start": "250", "duration": "60"}))
    assert s["active"] is None
    assert (brief(s["just_completed"]), brief(s["upcoming"])) == ((1, 2), (1, 3))


def test_only_the_most_recently_started_jam_can_be_active() -> None:
    # Jam 1 was never stopped, but jam 2 started after it and ended: nothing is being skated.
    s = jam_state((1, 1, {"start": "100"}), (1, 2, {"start": "250", "duration": "60"}))
    assert s["active"] is None and brief(s["just_completed"]) == (1, 2) and brief(s["upcoming"]) == (1, 3)


def test_a_period_one_jam_ending_after_the_period_ends_is_followed_by_period_two_jam_one() -> None:
    periods = {1: {"start": "0", "duration": "1800"}}
    s = jam_state((1, 14, {"start": "1750", "duration": "100"}), periods=periods)  # ends at 1850 > 1800
    assert brief(s["upcoming"]) == (2, 1)
    s = jam_state((1, 14, {"start": "1650", "duration": "100"}), periods=periods)  # ends at 1750 < 1800
    assert brief(s["upcoming"]) == (1, 15)
    s = jam_state((1, 14, {"start": "1750", "duration": "100"}))  # period end unknown: no switch
    assert brief(s["upcoming"]) == (1, 15)


def test_no_upcoming_jam_once_the_bout_is_over() -> None:
    periods = {1: {"start": "0", "duration": "1800"}, 2: {"start": "2700", "duration": "1800"}}
    s = jam_state((2, 12, {"start": "4450", "duration": "100"}), periods=periods)  # ends 4550 > 4500
    assert s["bout_over"] and s["upcoming"] is None and brief(s["just_completed"]) == (2, 12)
    s = jam_state((2, 3, {"start": "3000", "duration": "100"}), status="final")
    assert s["bout_over"] and s["upcoming"] is None


# ------------------------------------------------------------------ convergence


ADDRESSES = st.one_of(
    st.builds(lambda p, j: {"period": p, "jam": j}, st.integers(1, 2), st.integers(1, 4)),
    st.sampled_from([{"team": "home"}, {"team": "away"}, {"path": "venue"}, {"path": "ruleset/halftime"}]),
    st.builds(lambda n: {"team": "home", "person": str(n)}, st.integers(1, 3)),
)
OPS = st.one_of(
    st.builds(lambda to, v: {"op": "set", "to": to, "text": v}, ADDRESSES, st.sampled_from(["x", "y", "z"])),
    st.builds(lambda p, j, v: {"op": "set", "to": {"period": p, "jam": j}, "attribute": "start", "value": v},
              st.integers(1, 2), st.integers(1, 4), st.sampled_from(["10", "20"])),
    st.builds(lambda n: {"op": "add", "to": {"team": "home"},
                         "children": [{"tag": "person", "attrs": {"number": str(n)}}]}, st.integers(1, 3)),
    st.builds(lambda to: {"op": "add", "to": to, "children": [{"tag": "note"}], "text": "+"}, ADDRESSES),
    st.builds(lambda p, j: {"op": "remove", "to": {"period": p, "jam": j}}, st.integers(1, 2), st.integers(1, 4)),
    st.builds(lambda n: {"op": "remove", "to": {"team": "home", "person": str(n)}}, st.integers(1, 3)),
)


class Convergence(RuleBasedStateMachine):
    """Random operations on random nodes; every delivery order, with duplicates, gives one document."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[LogRecord] = []
        self.seqs = {A: 0, B: 0, C: 0}
        self.reference = DocEngine()  # fed in creation order, applied incrementally

    @rule(source=st.sampled_from([A, B, C]), op=OPS, ts=st.integers(0, 20))
    def record(self, source: NodeId, op: dict[str, Any], ts: int) -> None:
        self.seqs[source] += 1
        r = rec(source, self.seqs[source], float(ts), op)
        self.records.append(r)
        self.reference.add(r)

    @invariant()
    def any_order_with_duplicates_gives_the_same_document(self) -> None:
        expected = to_xml(self.reference.document.root, eids=True)
        for seed in range(3):
            rnd = random.Random(seed)
            delivery = self.records + rnd.sample(self.records, len(self.records) // 3)
            rnd.shuffle(delivery)
            e = engine_of(delivery)
            assert to_xml(e.document.root, eids=True) == expected
            assert e.document.dropped == self.reference.document.dropped
        general = DocEngine(fast=False)  # every operation the general way: the same document
        general.load(self.records)
        assert to_xml(general.document.root, eids=True) == expected
        assert general.document.dropped == self.reference.document.dropped


Convergence.TestCase.settings = settings(max_examples=60, stateful_step_count=25, deadline=None)
test_convergence = Convergence.TestCase


def test_the_simulator_compares_every_nodes_document() -> None:
    from huddle.sim import SimNetwork, check_documents
    from huddle.simlog import Origin, RangeStore

    origin = Origin()
    net = SimNetwork()
    nodes = [net.add(f"n{i}", "g", store=RangeStore(origin)) for i in range(3)]
    run = origin.register(A, 1, 40, 5.0)
    for node in nodes:
        assert node.store is not None
        node.store.stage(run, None, 5.0)
    assert check_documents(nodes, seed=1) == []
    other = RangeStore(origin)
    other.stage(run[:39], None, 5.0)  # one event short: seq 40 removes a jam
    nodes[2].store = other
    assert check_documents(nodes, seed=1) == ["n2's document differs from n0's"]


def test_eids_of_added_elements_resolve_and_histories_outlive_removal() -> None:
    add = {"op": "add", "to": {"period": 2, "jam": 4},
           "children": [{"tag": "lineup", "attrs": {"number": "1"}, "children": [{"tag": "note"}]}]}
    e = engine_of([rec(A, 1, 1.0, add)])
    doc = e.document
    # The documented rule: uuid5(huddle's namespace, "SOURCE:SEQ:N"), N counting the operation's elements.
    ns = uuid.UUID("5b1e9a52-3c1f-4f4e-9d43-6b7d0c1e2f10")
    lineup_eid = str(uuid.uuid5(ns, "0a" * 16 + ":1:1"))
    note_eid = str(uuid.uuid5(ns, "0a" * 16 + ":1:2"))
    assert doc.index[lineup_eid].tag == "lineup" and doc.index[note_eid].tag == "note"
    e.add(rec(B, 1, 2.0, {"op": "set", "to": {"eid": note_eid}, "text": "fast start"}))
    e.add(rec(B, 2, 3.0, {"op": "remove", "to": {"eid": lineup_eid}}))
    e.add(rec(C, 1, 4.0, {"op": "set", "to": {"eid": note_eid}, "text": "too late"}))
    doc = e.document
    assert lineup_eid not in doc.index and note_eid not in doc.index
    assert [d["seq"] for d in doc.dropped] == [1] and doc.dropped[0]["source"] == C.hex()
    assert [h["op"] for h in doc.history_of(note_eid) or []] == ["add", "set"]
    assert [h["op"] for h in doc.history_of(lineup_eid) or []] == ["add", "remove"]
    # A jam removed and referred to again keeps one history.
    jam = str(uuid.uuid5(ns, "bout/period/2/jam/4"))
    e.add(rec(C, 2, 5.0, {"op": "remove", "to": {"period": 2, "jam": 4}}))
    e.add(rec(C, 3, 6.0, {"op": "set", "to": {"period": 2, "jam": 4}, "attribute": "start", "value": "9"}))
    assert e.document.history_of(jam) is not None
    assert [h["op"] for h in e.document.history_of(jam) or []] == ["create", "add", "remove", "create", "set"]


JUNK = st.recursive(
    st.none() | st.booleans() | st.integers(-3, 300) | st.sampled_from(["", "x", "home", "jam", "lineup", "eid"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["op", "to", "tag", "attrs", "text", "children", "period", "jam", "team", "person",
                         "attribute", "value", "number", "eid", "path"]), inner, max_size=4),
    max_leaves=12,
)


@given(st.one_of(OPS, JUNK, OPS.map(lambda op: {**op, "to": {**op["to"], "jam": 0}})))
@settings(max_examples=400, deadline=None)
def test_the_fast_check_accepts_only_what_normalise_leaves_unchanged(value: Any) -> None:
    from huddle.doc.ops import is_normal, normalise

    try:
        normal: dict[str, Any] | None = normalise(value)
    except OperationError:
        normal = None
    if is_normal(value):
        assert normal == value
    if normal is not None:
        assert is_normal(normal)  # every stored body takes the fast path


# ------------------------------------------------------------------ the short path

ODD = st.one_of(
    st.sampled_from(["", "x", "home", "start", "lead", "number", "eid", "lineup", "note", "jam"]),
    st.integers(-1, 3), st.just(2**70), st.floats(allow_nan=True), st.booleans(), st.none(), st.text(max_size=2),
)
FAST_SHAPED = st.fixed_dictionaries(
    {"op": st.sampled_from(["add", "set", "add", "set", "remove", "move"]),
     "to": st.fixed_dictionaries({"period": st.sampled_from([1, 2, 1, 0, 3, "1", True, 1.0]),
                                  "jam": st.sampled_from([1, 2, 200, 201, 0, "2", False, 2.0])},
                                 optional={"team": st.just("home")})},
    optional={
        "children": st.lists(st.fixed_dictionaries(
            {"tag": st.sampled_from(["lineup", "note", "points", "jam", "team", "bogus", 1])},
            optional={"attrs": st.dictionaries(st.sampled_from(["team", "number", "by", "code", "x", "eid"]), ODD,
                                               max_size=3) | ODD,
                      "text": ODD, "eid": st.just("6842b56c-44ca-525c-b89d-51bee1a2c0b6") | ODD,
                      "children": st.just([{"tag": "note"}]) | ODD}), max_size=2) | ODD,
        "attribute": st.sampled_from(["start", "duration", "lead", "called", "number", "eid", "name"]) | ODD,
        "value": ODD, "text": ODD, "xml": st.just("<note/>")},
)
JAM = st.builds(lambda p, j: {"period": p, "jam": j}, st.integers(1, 2), st.integers(1, 3))
COMMON = st.one_of(
    st.builds(lambda to, tag, attrs, text: {"op": "add", "to": to, "children": [
        {"tag": tag, **({"attrs": attrs} if attrs else {}), **({"text": text} if text else {})}]},
        JAM, st.sampled_from(["lineup", "note", "points", "penalty", "timeout", "person"]),
        st.dictionaries(st.sampled_from(["team", "number", "by", "points"]), st.sampled_from(["home", "1", ""]),
                        max_size=2), st.sampled_from(["", "ok"])),
    st.builds(lambda to, name, value: {"op": "set", "to": to, "attribute": name, "value": value},
              JAM, st.sampled_from(["start", "duration", "lead", "called", "number"]), st.sampled_from(["1", ""])),
    st.builds(lambda to: {"op": "remove", "to": to}, JAM),
)
BODIES = st.one_of(
    COMMON.map(canonical_json),
    FAST_SHAPED.map(lambda op: json.dumps(op, sort_keys=True)),
    FAST_SHAPED.map(json.dumps),
    st.sampled_from([
        '{"op":"set","to":{"period":1,"jam":1},"attribute":"start","value":NaN}',
        '{"op":"set","to":{"period":1,"jam":1},"attribute":"start","value":1e999}',
        '{"op":"set","to":{"period":1,"jam":1},"attribute":"start","value":123456789012345678901234567890}',
        '{"op":"set","to":{"period":1,"jam":123456789012345678901234567890},"attribute":"start","value":"1"}',
        '{"op":"set","to":{"period":1,"jam":1},"attribute":"start","value":"\\ud800"}',
        '{"op":"set","to":{"period":1,"jam":1},"attribute":"start","value":"a","value":"b"}',
        '{"op":"add","to":{"period":1,"jam":1},"children":[{"tag":"note","text":"x","tag":"lineup"}]}',
        '{"op":"add","to":{"period":1,"jam":1},"children":[{"tag":"note"}]} ', "{", "[]", "null",
    ]),
)


@given(st.lists(BODIES, min_size=1, max_size=6))
@settings(max_examples=300, deadline=None)
def test_the_short_path_gives_what_the_general_path_gives(bodies: list[str]) -> None:
    """Bodies near the short path's shapes (set a jam's attribute, add one element to a jam), valid or
    not, parsed by orjson or not: the document, drops and histories are those of the general path."""
    outcomes = []
    for fast in (True, False):
        doc = BoutDocument()
        for i, body in enumerate(bodies):
            doc.apply_body(body, (float(i), bytes(A), i + 1), fast=fast)
        outcomes.append((to_xml(doc.root, eids=True), doc.dropped, doc.applied,
                         {eid: doc.history_of(eid) for eid in sorted(doc.index)}))
    assert outcomes[0] == outcomes[1]


def test_paused_collections_leave_the_collector_as_they_found_it() -> None:
    import gc

    from huddle.gcutil import paused_collections

    for collect in (True, False):
        with paused_collections(collect=collect):
            assert not gc.isenabled()
            with paused_collections(collect=collect):
                assert not gc.isenabled()
            assert not gc.isenabled()  # the outer block still pauses
            young = [[i] for i in range(1000)]
        assert gc.isenabled() and gc.get_freeze_count() == 0
        assert gc.get_count()[0] < 100 and all(gc.is_tracked(x) for x in young)
