"""Officials' roles and single writers (docs/document.md "Roles"): every field of the bout has one
owning role; another role's write is recorded but not applied, and listed as a conflict until the
head NSO writes the field; corrections (insert / remove a jam) renumber jams deterministically;
jam numbers leave no gap at the door."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_bout_rules import AWAY, BOUT, HOME, J1, J2, OFFICIALS, ROSTER, Log, _Node, add, set_

from huddle.api.http import start_api
from huddle.doc import DocEngine, OperationError, bout_summary, digest, parse_json_ops, to_xml
from huddle.doc.roles import HEAD, OWNERS, ROLES

TRIP = {"eid": "@trip"}  # the trip the setup made
STAR = {"eid": "@star"}  # the star pass the setup made


def flag(attribute: str, team: str, value: str = "yes") -> dict[str, Any]:
    return {"op": "set", "to": J1, "attribute": attribute, "team": team, "value": value}


# (field, its owner, the write).  Every jam-level field, a team's fields, the penalty and box
# officials', and the head NSO's.
FIELDS: list[tuple[str, str, dict[str, Any]]] = [
    ("jam start", "jam-timer", set_(J1, "start", "100")),
    ("jam duration", "jam-timer", set_(J1, "duration", "120")),
    ("period start", "jam-timer", set_({"period": 1}, "start", "50")),
    ("period duration", "jam-timer", set_({"period": 1}, "duration", "1800")),
    ("team timeout", "jam-timer", add(J1, "timeout", team="home", kind="team")),
    ("official review", "jam-timer", add(J1, "timeout", team="away", kind="review", result="retained")),
    ("official timeout", "jam-timer", add({"period": 1}, "timeout", kind="official")),
    ("home lead", "scorekeeper-home", flag("lead", "home")),
    ("away lead", "scorekeeper-away", flag("lead", "away")),
    ("home call-off", "scorekeeper-home", flag("called", "home")),
    ("away lost lead", "scorekeeper-away", flag("lost", "away")),
    ("home injury", "scorekeeper-home", flag("injury", "home")),
    ("away no initial", "scorekeeper-away", flag("no-initial", "away")),
    ("home lead, whole attribute", "scorekeeper-home", set_(J1, "lead", "home")),
    ("home trip", "scorekeeper-home", add(J1, "points", team="home", points="4", **{"pass": "3"})),
    ("away trip", "scorekeeper-away", add(J1, "points", team="away", points="3")),
    ("fix a home trip", "scorekeeper-home", set_(TRIP, "points", "2")),
    ("home star pass", "scorekeeper-home", add(J2, "starpass", team="home", trip="2")),
    ("move a home star pass", "scorekeeper-home", set_(STAR, "trip", "3")),
    ("home lineup", "lineup-tracker-home", add(J1, "lineup", team="home", position="jammer", number="12")),
    ("away lineup", "lineup-tracker-away", add(J1, "lineup", team="away", position="pivot", number="9")),
    ("penalty", "penalty-tracker", add(J1, "penalty", team="away", number="5", code="B")),
    ("box entry", "penalty-box-timer", add(J1, "box", team="away", number="5", **{"in": "1030"})),
    ("team name", HEAD, set_(HOME, "name", "Rockets")),
    ("roster", HEAD, add(AWAY, "person", number="88", name="new")),
    ("officials", HEAD, add(OFFICIALS, "person", name="Zed", role="jam-timer")),
    ("sign-off", HEAD, set_(BOUT, "signed", "Nia")),
    ("remove a trip", "scorekeeper-home", {"op": "remove", "to": TRIP}),
    ("the team of a home trip", "scorekeeper-home", set_(TRIP, "number", "")),
    ("insert a jam", "jam-timer", {"op": "insert-jam", "to": J1}),
    ("remove a jam", "jam-timer", {"op": "remove-jam", "to": J2}),
]


def setup() -> tuple[Log, dict[str, str]]:
    """The roster, jams 1 and 2, a home trip and star pass in jam 1 (no role: nobody's conflict)."""
    log = Log()
    log.apply(*ROSTER, add(J1, "note"), add(J2, "note"))
    trip, star = log.apply(add(J1, "points", team="home", points="4", number="12", **{"pass": "2"}),
                           add(J1, "starpass", team="home", trip="1"))
    return log, {"@trip": trip[0], "@star": star[0]}


def fill(op: dict[str, Any], eids: dict[str, str], role: str) -> dict[str, Any]:
    to = op["to"]
    return {**op, "to": {"eid": eids[to["eid"]]} if "eid" in to and to["eid"] in eids else to, "role": role}


def xml(log: Log) -> str:
    """The document without eids: two writes of the same field agree whoever made them."""
    return to_xml(log.desk.engine.document.root)


def write(log: Log, op: dict[str, Any]) -> dict[str, Any]:
    [answer] = log.desk.apply_ops(parse_json_ops(op))
    return answer


def test_every_element_with_fields_has_an_owner_and_every_role_owns_one() -> None:
    owned = {o.replace("TEAM", t) for o in OWNERS.values() for t in ("home", "away")}
    assert set(ROLES) <= owned
    assert {owner for _, owner, _ in FIELDS} == set(ROLES)  # the table below covers every role


@pytest.mark.parametrize("role", ROLES)
@pytest.mark.parametrize(("owner", "op"), [f[1:] for f in FIELDS], ids=[f[0] for f in FIELDS])
def test_a_field_is_written_by_its_owner_and_another_roles_write_is_a_conflict_until_the_head_nso_writes_it(
        owner: str, op: dict[str, Any], role: str) -> None:
    log, eids = setup()
    reference, _ = setup()  # the owner's write, for comparison
    write(reference, fill(op, eids, owner))
    owners_value = xml(reference)
    before, held = xml(log), len(log.records)
    answer = write(log, fill(op, eids, role))
    assert len(log.records) == held + 1, "every write is recorded: the log is who did what"
    doc = log.desk.engine.document
    if role in (owner, HEAD):
        assert "conflict" not in answer and doc.conflicts == []
        assert xml(log) == owners_value != before
        return
    # Another role: recorded, the owner's value kept, a conflict listed (and answered).
    assert xml(log) == before, "the document keeps the owner's value"
    [conflict] = doc.conflicts
    assert answer["conflict"] == conflict
    assert conflict["owner"] == owner and conflict["by"] == role
    assert conflict["source"] == bytes(log.source).hex() and conflict["seq"] == answer["seq"]
    assert set(conflict) >= {"eid", "field", "owner", "by", "source", "seq", "value", "time"}
    # The head NSO writes the field: it wins, the conflict is resolved.
    resolve = fill(op, eids, HEAD)
    if op["op"] == "add":  # accepted: the element the held add would have made, by its eid
        resolve["children"] = [{**resolve["children"][0], "eid": conflict["eid"]}]
    write(log, resolve)
    assert doc.conflicts == [] == log.desk.engine.document.conflicts
    assert log.desk.engine.document.ledger.resolved[0]["by"] == role
    assert xml(log) == owners_value


def test_the_head_nso_dismisses_a_held_add_by_removing_the_element_it_would_have_made() -> None:
    log, _ = setup()
    before = xml(log)
    answer = write(log, {**add(J1, "penalty", team="home", number="12", code="X"), "role": "scorekeeper-away"})
    eid = answer["conflict"]["eid"]
    write(log, {"op": "remove", "to": {"eid": eid}, "role": HEAD})
    doc = log.desk.engine.document
    assert doc.conflicts == [] and doc.ledger.resolved[0]["eid"] == eid and xml(log) == before and doc.dropped == []
    with pytest.raises(OperationError, match="no element has eid"):  # only the head NSO dismisses
        write(log, {"op": "remove", "to": {"eid": eid}, "role": "penalty-tracker"})


def test_each_scorekeeper_owns_its_teams_part_of_a_flag_and_a_claim_on_the_other_is_a_conflict() -> None:
    log, _ = setup()
    write(log, {**flag("lost", "home"), "role": "scorekeeper-home"})
    write(log, {**flag("lost", "away"), "role": "scorekeeper-away"})  # both parts: "both", no conflict
    write(log, {**flag("lead", "home"), "role": "scorekeeper-home"})
    jam = log.desk.engine.document._jams[(1, 1)]
    assert jam.attrs["lost"] == "both" and jam.attrs["lead"] == "home" and log.desk.engine.document.conflicts == []
    write(log, {**flag("lost", "home", "no"), "role": "scorekeeper-home"})  # explicit: set, never toggled
    write(log, {**flag("lost", "home", "no"), "role": "scorekeeper-home"})  # again: still no
    assert jam.attrs["lost"] == "away"
    answer = write(log, {**flag("lead", "away"), "role": "scorekeeper-away"})  # the home jammer holds it
    assert jam.attrs["lead"] == "home"
    assert answer["conflict"]["owner"] == "scorekeeper-home" and answer["conflict"]["team"] == "away"
    with pytest.raises(OperationError, match="yes or no"):
        write(log, {**flag("lead", "home", "toggle"), "role": "scorekeeper-home"})


def test_moving_an_entry_to_the_other_team_is_both_teams_field() -> None:
    log, eids = setup()
    answer = write(log, {**set_({"eid": eids["@star"]}, "team", "away"), "role": "scorekeeper-home"})
    assert answer["conflict"]["owner"] == "scorekeeper-away" and answer["conflict"]["field"] == "team"


def test_a_write_with_no_role_is_nobodys_conflict() -> None:
    log, _ = setup()
    write(log, {**flag("lead", "home"), "role": "scorekeeper-home"})
    write(log, set_(J1, "lead", "away"))  # an old client, a script: as before roles
    assert log.desk.engine.document._jams[(1, 1)].attrs["lead"] == "away"
    assert log.desk.engine.document.conflicts == []


def test_an_unknown_role_is_refused_and_nothing_recorded() -> None:
    log, _ = setup()
    held = list(log.records)
    for bad in ("referee", "", 3, None, ["head-nso"]):
        with pytest.raises(OperationError, match="unknown role"):
            write(log, {**set_(J1, "start", "1"), "role": bad})
    assert log.records == held


def test_conflicts_and_the_document_are_the_same_in_any_delivery_order() -> None:
    log, _ = setup()
    for op, role in [(flag("lead", "home"), "scorekeeper-home"), (flag("lead", "away"), "scorekeeper-away"),
                     (add(J1, "penalty", team="away", number="5", code="B"), "lineup-tracker-away"),
                     (set_(J1, "start", "10"), "penalty-box-timer"), (set_(J1, "start", "12"), "jam-timer")]:
        write(log, {**op, "role": role})
    doc = log.desk.engine.document
    want = (log.digest, doc.conflicts, doc.ledger.resolved)
    assert len(doc.conflicts) == 3
    for seed in range(6):
        records = log.records + log.records[:4]
        random.Random(seed).shuffle(records)
        other = DocEngine()
        for r in records:
            other.add(r)
        assert (digest(other.document.root), other.document.conflicts, other.document.ledger.resolved) == want


# ----------------------------------------------------------------- corrections: insert and remove a jam


def jam_numbers(log: Log | DocEngine, period: int = 1) -> list[tuple[int, str]]:
    """(number, the jam's first trip's points or "") per jam of the period, in order."""
    doc = log.desk.engine.document if isinstance(log, Log) else log.document
    p = next(e for e in doc.root.children if e.tag == "period" and e.attrs["number"] == str(period))
    return [(int(j.attrs["number"]), next((c.attrs["points"] for c in j.children if c.tag == "points"), ""))
            for j in p.children if j.tag == "jam"]


def test_insert_and_remove_a_jam_renumber_the_later_jams_and_keep_their_eids() -> None:
    log = Log()
    log.apply(*(add({"period": 1, "jam": j}, "points", team="home", points=str(j)) for j in (1, 2, 3)))
    eids = {j: log.desk.engine.document._jams[(1, j)].eid for j in (1, 2, 3)}
    log.apply({"op": "insert-jam", "to": {"period": 1, "jam": 2}})
    assert jam_numbers(log) == [(1, "1"), (2, ""), (3, "2"), (4, "3")]
    doc = log.desk.engine.document
    assert doc._jams[(1, 3)].eid == eids[2] and doc._jams[(1, 4)].eid == eids[3]
    assert doc._jams[(1, 2)].eid not in eids.values()
    history = doc.history_of(eids[3])
    assert history is not None and history[-1]["op"] == "renumber" and history[-1]["number"] == 4
    log.apply(add({"period": 1, "jam": 2}, "points", team="home", points="0"))  # numbers name jams as they are now
    log.apply({"op": "remove-jam", "to": {"eid": eids[2]}})
    assert jam_numbers(log) == [(1, "1"), (2, "0"), (3, "3")]
    log.apply(set_({"period": 1, "jam": 4}, "start", "9"))  # its place's eid is held by a renumbered jam
    assert len({j.eid for j in log.desk.engine.document._jams.values()}) == 4
    log.apply({"op": "remove-jam", "to": {"period": 1, "jam": 4}}, {"op": "insert-jam", "to": {"period": 1, "jam": 4}})
    assert jam_numbers(log) == [(1, "1"), (2, "0"), (3, "3"), (4, "")]


def test_jam_numbers_beyond_the_last_plus_one_are_refused_and_nothing_recorded() -> None:
    log = Log()
    log.apply(set_(J1, "start", "1"), set_(J2, "start", "2"))  # one batch: jam 2 follows the jam 1 it makes
    held = list(log.records)
    for bad, reason in [(set_({"period": 1, "jam": 4}, "start", "5"), "the next is jam 3, not 4"),
                        (add({"period": 2, "jam": 2}, "note"), "the next is jam 1, not 2"),
                        ({"op": "insert-jam", "to": {"period": 1, "jam": 4}}, "inserted at 3 at most, not 4"),
                        ({"op": "remove-jam", "to": {"period": 1, "jam": 3}}, "has no jam 3"),
                        ({"op": "remove-jam", "to": {"period": 1}}, "addresses a jam"),
                        ({"op": "insert-jam", "to": J1, "children": []}, "takes no payload")]:
        with pytest.raises(OperationError, match=reason):
            log.apply(*parse_json_ops(bad))
    assert log.records == held
    log.apply({"op": "insert-jam", "to": {"period": 1, "jam": 3}}, set_({"period": 1, "jam": 4}, "start", "3"))


CORRECTION = st.one_of(
    st.builds(lambda j, pts: add({"period": 1, "jam": j}, "points", team="home", points=str(pts)),
              st.integers(1, 5), st.integers(0, 4)),
    st.builds(lambda j: {"op": "insert-jam", "to": {"period": 1, "jam": j}}, st.integers(1, 5)),
    st.builds(lambda j: {"op": "remove-jam", "to": {"period": 1, "jam": j}}, st.integers(1, 5)),
    st.builds(lambda j, role: {"op": "insert-jam", "to": {"period": 1, "jam": j}, "role": role},
              st.integers(1, 5), st.sampled_from(["jam-timer", "scorekeeper-home", HEAD])),
    st.builds(lambda j, v: set_({"period": 1, "jam": j}, "lead", v), st.integers(1, 5), st.sampled_from(["home", ""])),
)


@given(st.lists(st.tuples(CORRECTION, st.sampled_from([0xA, 0xB, 0xC]), st.integers(0, 3)), min_size=1, max_size=30),
       st.randoms())
@settings(max_examples=60, deadline=None)
def test_insert_and_remove_jam_replayed_in_any_order_give_the_same_document(
        steps: list[tuple[dict[str, Any], int, int]], rnd: random.Random) -> None:
    """Three devices insert, remove and write jams by number; each device records against what it
    has (so numbers are resolved in the log's order, not the device's view), and every delivery
    order with duplicates gives one document, one summary, one conflict list."""
    from huddle.ids import NodeId

    log = Log()
    for op, source, _ in steps:
        log.source = NodeId(bytes([source] * 16))
        held = len(log.records)
        try:
            log.apply(*parse_json_ops(op))
        except OperationError:
            assert len(log.records) == held
    doc = log.desk.engine.document
    want = (log.digest, bout_summary(doc.root), doc.conflicts)
    for _ in range(3):
        records = log.records + rnd.sample(log.records, min(3, len(log.records)))
        rnd.shuffle(records)
        engine = DocEngine()
        for r in records:
            engine.add(r)
        assert (digest(engine.document.root), bout_summary(engine.document.root), engine.document.conflicts) == want


# ----------------------------------------------------------------- over HTTP


def test_over_http_the_role_parameter_and_the_conflicts_endpoint() -> None:
    log, _ = setup()

    async def run() -> None:
        runner, url = await start_api(_Node(log.desk), "127.0.0.1:0")  # type: ignore[arg-type]
        try:
            async with aiohttp.ClientSession() as session:
                async def post(path: str, body: Any = None, **query: str) -> tuple[int, Any]:
                    async with session.post(url + path, params=query, data=json.dumps(body),
                                            headers={"Content-Type": "application/json"}) as resp:
                        return resp.status, await (resp.json() if resp.status < 300 else resp.text())

                held = len(log.records)
                for bad in ("referee", "HEAD-NSO", ""):
                    status, text = await post("/api/v1/doc/ops", set_(J1, "start", "1"), role=bad)
                    assert status == 400 and "unknown role" in text
                    status, text = await post("/api/v1/bout/start", role=bad)
                    assert status == 400
                status, text = await post("/api/v1/doc/ops", {**set_(J1, "start", "1"), "role": "jam-timer"},
                                          role="scorekeeper-home")
                assert status == 400 and "another role" in text
                assert len(log.records) == held, "nothing recorded"
                status, body = await post("/api/v1/bout/start", role="scorekeeper-home")  # not the jam timer's
                assert status == 201 and body["active"] is None
                status, body = await post("/api/v1/doc/ops", flag("lead", "home"), role="scorekeeper-home")
                assert status == 201 and "conflict" not in body["ops"][0]
                status, body = await post("/api/v1/bout/start", role="jam-timer")
                assert status == 201 and body["active"]["jam"] == 1
                async with session.get(url + "/api/v1/bout/conflicts") as resp:
                    listed = await resp.json()
                [c] = listed["conflicts"]
                assert (c["field"], c["owner"], c["by"]) == ("start", "jam-timer", "scorekeeper-home")
                assert records_roles(log) == [None] * held + ["scorekeeper-home", "scorekeeper-home", "jam-timer"]
                status, body = await post("/api/v1/doc/ops", set_(J1, "start", "1"), role=HEAD)
                async with session.get(url + "/api/v1/bout/conflicts") as resp:
                    listed = await resp.json()
                assert listed["conflicts"] == [] and listed["resolved"][0]["by"] == "scorekeeper-home"
        finally:
            await runner.cleanup()

    asyncio.run(run())


def records_roles(log: Log) -> list[str | None]:
    """The role each recorded operation names, in the log."""
    return [json.loads(r.body).get("role") for r in log.records]


ROLE_BODY = st.builds(
    lambda op, role: json.dumps({**op, "role": role}),
    st.one_of(
        st.builds(lambda j, name, v: set_({"period": 1, "jam": j}, name, v), st.integers(1, 3),
                  st.sampled_from(["start", "duration", "lead", "lost", "called"]), st.sampled_from(["1", "home", "both", ""])),
        st.builds(lambda j, tag, t: add({"period": 1, "jam": j}, tag, team=t), st.integers(1, 3),
                  st.sampled_from(["points", "lineup", "penalty", "box", "note"]), st.sampled_from(["home", "away"])),
    ),
    st.sampled_from([*ROLES, "nobody"]))


@given(st.lists(ROLE_BODY, min_size=1, max_size=12))
@settings(max_examples=80, deadline=None)
def test_the_short_path_gives_what_the_general_path_gives_for_writes_with_a_role(bodies: list[str]) -> None:
    """An owner's common write takes the short path: the document and the conflicts are what the general
    path gives (a body naming no known role is dropped on both)."""
    from huddle.ids import NodeId
    from huddle.wire import LogRecord

    records = [LogRecord(NodeId(bytes([0xA] * 16)), i + 1, float(i + 1), "doc", body, 0) for i, body in enumerate(bodies)]
    engines = [DocEngine(fast=fast) for fast in (True, False)]
    for engine in engines:
        engine.load(records)
    fast, general = (e.document for e in engines)
    assert (digest(fast.root), fast.conflicts, len(fast.dropped)) == (
        digest(general.root), general.conflicts, len(general.dropped))


def test_a_peers_event_with_a_bad_role_or_correction_is_dropped_and_recorded_not_fatal() -> None:
    """Stored bodies are read again at replay: a role no official has, a per-team set of nonsense, a
    correction with a payload or of no jam, an insert past the last jam: dropped, recorded, the rest applied."""
    from huddle.ids import NodeId
    from huddle.wire import LogRecord

    bodies = [{**set_(J1, "start", "1"), "role": "referee"}, {**set_(J1, "start", "1"), "role": "x" * 100_000},
              {**flag("lead", "home"), "value": "maybe"}, {**flag("lead", "purple")}, {**flag("start", "home")},
              {"op": "insert-jam", "to": J1, "text": "x"}, {"op": "remove-jam", "to": {"period": 1}},
              {"op": "insert-jam", "to": {"period": 1, "jam": 9}}, {"op": "remove-jam", "to": {"period": 1, "jam": 7}},
              {"op": "remove-jam", "to": {"eid": "00000000-0000-5000-8000-000000000000"}},
              {**set_(J1, "start", "5"), "role": "jam-timer"}]
    engine = DocEngine()
    engine.load([LogRecord(NodeId(bytes([0xC] * 16)), i + 1, float(i + 1), "doc", json.dumps(b), 0)
                 for i, b in enumerate(bodies)])
    doc = engine.document
    assert len(doc.dropped) == len(bodies) - 1 and doc._jams[(1, 1)].attrs["start"] == "5"
    assert "unusable operation" in doc.dropped[0]["reason"] and "at most" in doc.dropped[7]["reason"]
