"""The bout's rules (doc/rules.py) and its summary (doc/summary.py): every operation that
breaks a rule is refused with the reason and records nothing; corrections are operations
whose history names who made them; the same events give the same document and summary
on every node, in any delivery order."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

import aiohttp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle.api.http import start_api
from huddle.doc import DocEngine, OperationError, bout_summary, digest
from huddle.doc.desk import DocumentDesk, Recording
from huddle.doc.rules import PENALTY_CODES
from huddle.ids import NodeId
from huddle.protocol.logstore import canonical_json
from huddle.wire import LogRecord

A = NodeId(bytes([0xA] * 16))
B = NodeId(bytes([0xB] * 16))
C = NodeId(bytes([0xC] * 16))


class Log:
    """A node's log as the desk records into it: records, in order, from one or more sources."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.source = A
        self.desk = DocumentDesk(Recording(writable=lambda: None, stamp=self._now, origin=self._origin,
                                           record=self._record))

    def _now(self) -> float:
        return float(len(self.records) + 1)

    def _origin(self) -> tuple[bytes, int]:
        return bytes(self.source), sum(r.source == self.source for r in self.records) + 1

    def _record(self, events: list[tuple[str, Any]]) -> list[LogRecord]:
        _, seq = self._origin()
        stamp = self._now()
        made = [LogRecord(self.source, seq + i, stamp, kind, canonical_json(body), 0)
                for i, (kind, body) in enumerate(events)]
        self.records += made
        self.desk.take(made)
        return made

    def apply(self, *ops: dict[str, Any]) -> list[list[str]]:
        """Record ``ops`` (one batch); the eids each made."""
        return [r["eids"] for r in self.desk.apply_ops(list(ops))]

    @property
    def digest(self) -> str:
        return digest(self.desk.engine.document.root)


def add(to: dict[str, Any], tag: str, **attrs: str) -> dict[str, Any]:
    return {"op": "add", "to": to, "children": [{"tag": tag, "attrs": {k.replace("_", "-"): v for k, v in attrs.items()}}]}


def set_(to: dict[str, Any], attribute: str, value: str) -> dict[str, Any]:
    return {"op": "set", "to": to, "attribute": attribute, "value": value}


HOME, AWAY, OFFICIALS, BOUT = {"team": "home"}, {"team": "away"}, {"team": "official"}, {"path": "bout"}
J1, J2 = {"period": 1, "jam": 1}, {"period": 1, "jam": 2}
ROSTER = [
    set_(HOME, "name", "Rollers"), set_(HOME, "league", "Derby City"), set_(HOME, "color", "black"),
    set_(AWAY, "name", "Skaters"), set_(AWAY, "color", "white"),
    *(add(HOME, "person", number=n, name=f"home {n}") for n in ("12", "7", "21", "3", "45", "8")),
    *(add(AWAY, "person", number=n, name=f"away {n}") for n in ("5", "9", "77", "1", "2", "4")),
    add(OFFICIALS, "person", name="Ray", role="head-referee"), add(OFFICIALS, "person", name="Nia", role="head-nso"),
]
EID = {"eid": "@"}  # the element the setup's last operation made


# (what, the setup after the roster, the refused operation, the reason it gives)
CASES: list[tuple[str, list[dict[str, Any]], dict[str, Any], str]] = [
    ("points not a number", [], add(J1, "points", team="home", points="lots"), "points must be a whole number from 0 to 4"),
    ("points negative", [], add(J1, "points", team="home", points="-5"), "from 0 to 4, not '-5'"),
    ("five points on one trip", [], add(J1, "points", team="home", points="5"), "from 0 to 4, not '5'"),
    ("a trip of no team", [], add(J1, "points", points="3"), "team must be home, away"),
    ("a team that is not playing", [], add(J1, "points", team="purple", points="3"), "not 'purple'"),
    ("the officials score", [], add(J1, "points", team="official", points="3"), "not 'official'"),
    ("a trip recorded twice", [add(J1, "points", team="home", points="4", **{"pass": "2"})],
     add(J1, "points", team="home", points="3", **{"pass": "2"}), "trip 2 of home is recorded already"),
    ("a trip number of none", [], add(J1, "points", team="home", points="3", **{"pass": "0"}), "pass must be"),
    ("a jammer not on the roster scores", [], add(J1, "points", team="home", points="3", number="99"),
     "skater '99' is not on the home roster"),
    ("fix a trip to nonsense", [add(J1, "points", team="home", points="4")], set_(EID, "points", "9"), "from 0 to 4"),
    ("an unknown penalty code", [], add(J1, "penalty", team="away", number="5", code="ZZZZZZ"),
     "'ZZZZZZ' is not a WFTDA penalty code"),
    ("a penalty with no skater", [], add(J1, "penalty", team="away", code="B"), "the skater's number is missing"),
    ("a penalty to a skater not on the roster", [], add(J1, "penalty", team="away", number="12", code="B"),
     "skater '12' is not on the away roster"),
    ("a penalty code fixed to nonsense", [add(J1, "penalty", team="away", number="5", code="B")],
     set_(EID, "code", "Q"), "not a WFTDA penalty code"),
    ("a lineup position that is not one", [], add(J1, "lineup", team="home", position="goalie", number="12"),
     "position must be jammer, pivot, blocker"),
    ("a second jammer", [add(J1, "lineup", team="home", position="jammer", number="12")],
     add(J1, "lineup", team="home", position="jammer", number="7"), "home has a jammer in this jam already"),
    ("a second pivot", [add(J1, "lineup", team="home", position="pivot", number="7")],
     add(J1, "lineup", team="home", position="pivot", number="3"), "home has a pivot in this jam already"),
    ("a fifth blocker", [add(J1, "lineup", team="home", position="pivot", number="7"),
                         *(add(J1, "lineup", team="home", position="blocker", number=n) for n in ("21", "3", "45"))],
     add(J1, "lineup", team="home", position="blocker", number="8"), "four blockers"),
    ("two jammers in one add", [], {"op": "add", "to": J1, "children": [
        {"tag": "lineup", "attrs": {"team": "away", "position": "jammer", "number": n}} for n in ("5", "9")]},
     "away has a jammer in this jam already"),
    ("a skater twice in a lineup", [add(J1, "lineup", team="home", position="blocker", number="21")],
     add(J1, "lineup", team="home", position="pivot", number="21"), "is in this jam's lineup already"),
    ("a lineup skater not on the roster", [], add(J1, "lineup", team="away", position="jammer", number="12"),
     "not on the away roster"),
    ("lead to no team", [], set_(J1, "lead", "purple"), "lead must be home, away or nothing"),
    ("called off by both", [], set_(J1, "called", "both"), "called must be home, away or nothing"),
    ("lost by nobody known", [], set_(J1, "lost", "yes"), "lost must be home, away, both or nothing"),
    ("no initial of a stranger", [], set_(J1, "no-initial", "x"), "no-initial must be"),
    ("a jam start that is no time", [], set_(J1, "start", "soon"), "start must be a number of seconds"),
    ("a negative jam duration", [], set_(J1, "duration", "-3"), "duration must be a number of seconds"),
    ("a period of infinite length", [], set_({"period": 1}, "duration", "inf"), "a number of seconds"),
    ("a second star pass", [add(J1, "starpass", team="home", trip="2", number="7")],
     add(J1, "starpass", team="home", trip="3", number="7"), "passed the star in this jam already"),
    ("a star pass to a blocker", [add(J1, "lineup", team="home", position="pivot", number="7")],
     add(J1, "starpass", team="home", trip="2", number="21"), "the star goes to the pivot, and home's pivot in this jam is 7"),
    ("a star pass on trip 0", [], add(J1, "starpass", team="home", trip="0"), "trip must be a whole number"),
    ("a star pass moved to no trip", [add(J1, "starpass", team="home", trip="2")], set_(EID, "trip", "x"),
     "trip must be"),
    ("a box exit before the entry", [], add(J1, "box", team="away", number="5", **{"in": "100", "out": "90"}),
     "cannot leave the box before entering it"),
    ("a box entry of a stranger", [], add(J1, "box", team="away", number="66"), "not on the away roster"),
    ("a fourth team timeout", [add({"period": 1}, "timeout", team="home", kind="team") for _ in range(3)],
     add(J1, "timeout", team="home", kind="team"), "home has taken its 3 team timeouts"),
    ("a timeout of no kind", [], add(J1, "timeout", team="home", kind="coffee"), "kind must be team, review, official"),
    ("an official review of nobody", [], add(J1, "timeout", kind="review"), "team must be home, away"),
    ("a review's result unknown", [], add(J1, "timeout", team="away", kind="review", result="maybe"),
     "result must be retained, lost"),
    ("a team timeout with a result", [], add(J1, "timeout", team="away", kind="team", result="lost"), "has no result"),
    ("an official timeout with a result", [], add(J1, "timeout", kind="official", result="lost"), "has no result"),
    ("a skater numbered 12345", [], add(HOME, "person", number="12345"), "up to four digits, not '12345'"),
    ("a skater with no number", [], add(AWAY, "person", name="Anon"), "up to four digits, not ''"),
    ("a number twice on a roster", [], add(HOME, "person", number="12", name="again"), "12 is on the home roster"),
    ("a number changed to a taken one", [], set_({"team": "home", "person": "7"}, "number", "12"), "already"),
    ("a skater role that is not one", [], add(HOME, "person", number="88", role="mascot"), "role must be"),
    ("an official with no name", [], add(OFFICIALS, "person", role="jam-timer"), "the name is missing"),
    ("an official role that is not one", [], add(OFFICIALS, "person", name="Bo", role="mascot"), "role must be"),
    ("a trip in a team", [], add(HOME, "points", team="home", points="1"), "a <points> belongs in a <jam>"),
    ("a skater in a jam", [], add(J1, "person", number="66"), "a <person> belongs in a <team>"),
    ("a lineup hidden in a note", [],
     {"op": "add", "to": J1, "children": [{"tag": "note", "children": [{"tag": "lineup"}]}]},
     "a <lineup> belongs in a <jam>, not in a <note>"),
    ("a final with no sign-off", [], set_(BOUT, "status", "final"), "needs the head official's sign-off"),
    ("a sign-off by someone else", [], set_(BOUT, "signed", "Bo"), "'Bo' is not the head referee or head NSO"),
    ("a status that is not one", [], set_(BOUT, "status", "done"), "status must be final or nothing"),
]


def _fill(op: dict[str, Any], made: list[list[str]]) -> dict[str, Any]:
    if op["to"] == EID:
        return {**op, "to": {"eid": made[-1][0]}}
    return op


@pytest.mark.parametrize(("setup", "bad", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_every_rule_refuses_with_its_reason_and_records_nothing(setup: list[dict[str, Any]], bad: dict[str, Any],
                                                                reason: str) -> None:
    log = Log()
    log.apply(*ROSTER)
    made = [log.apply(op)[0] for op in setup]
    before, held = log.digest, list(log.records)
    with pytest.raises(OperationError) as refused:
        log.apply(_fill(bad, made))
    assert reason in str(refused.value)
    assert log.records == held and log.digest == before, "nothing recorded, the document unchanged"
    # In a batch after a valid operation: the batch is refused whole, naming the operation.
    with pytest.raises(OperationError, match="operation 2: "):
        log.apply(set_(J1, "start", "500"), _fill(bad, made))
    assert log.records == held and log.digest == before


def test_before_a_roster_a_skater_is_any_number_and_after_it_one_of_the_roster() -> None:
    log = Log()
    log.apply(add(J1, "lineup", team="home", position="jammer", number="12"),
              add(J1, "points", team="home", points="4", number="12"))  # no roster yet: any number of four digits
    with pytest.raises(OperationError, match="up to four digits"):
        log.apply(add(J1, "penalty", team="home", number="twelve", code="B"))
    log.apply(add(HOME, "person", number="7"))
    with pytest.raises(OperationError, match="not on the home roster"):
        log.apply(add(J1, "penalty", team="home", number="12", code="B"))
    log.apply(add(J1, "penalty", team="away", number="12", code="B"))  # the away team still has no roster


def test_the_existing_operations_keep_working() -> None:
    """DerbyXML operations that make sense are accepted as before: venue, jams, lead, notes, text."""
    log = Log()
    log.apply({"op": "set", "to": {"path": "venue"}, "text": "Hall 1"}, set_({"path": "venue"}, "city", "Ghent"),
              set_(J1, "start", "100.5"), set_(J1, "lead", "home"), set_(J1, "lead", ""), set_(J1, "duration", "120"),
              set_({"path": "ruleset/halftime"}, "duration", "600"),
              add(J1, "lineup", team="home", position="jammer", number="12"),
              add(J1, "penalty", team="away", number="7", code="B"),
              {"op": "add", "to": J1, "children": [{"tag": "note", "attrs": {"by": "ray"}, "text": "ok"}]},
              {"op": "remove", "to": J1})
    assert len(log.records) == 11


def test_every_wftda_code_is_accepted() -> None:
    log = Log()
    log.apply(*(add(J1, "penalty", team="home", number="12", code=code) for code in PENALTY_CODES))
    assert set(bout_summary(log.desk.engine.document.root)["penalties"]["home"]["12"][i]["code"]
               for i in range(len(PENALTY_CODES))) == set(PENALTY_CODES) == set("ABCDEFGHILMNPX")


def _bout(log: Log) -> dict[str, list[str]]:
    """Two jams of a bout: lineups, trips, a star pass, penalties, box, timeouts, a review, the sign-off."""
    log.apply(*ROSTER)
    log.apply(set_(J1, "start", "1000"), add(J1, "lineup", team="home", position="jammer", number="12"),
              add(J1, "lineup", team="home", position="pivot", number="7"),
              add(J1, "lineup", team="away", position="jammer", number="5"))
    trips = log.apply(set_(J1, "lead", "home"),
                      add(J1, "points", team="home", points="4", number="12", **{"pass": "2"}),
                      add(J1, "points", team="home", points="3", number="12", **{"pass": "3"}),
                      add(J1, "points", team="away", points="2", number="5", **{"pass": "2"}),
                      set_(J1, "called", "home"), set_(J1, "duration", "95"))
    log.apply(add(J1, "penalty", team="away", number="9", code="B"), add(J1, "box", team="away", number="9", **{
        "in": "1030", "out": "1060"}), add(J1, "penalty", team="away", number="9", code="X"))
    log.apply(add({"period": 1}, "timeout", team="away", kind="team"),
              add({"period": 1}, "timeout", team="home", kind="review", result="retained"),
              add({"period": 1}, "timeout", kind="official"))
    star = log.apply(set_(J2, "start", "1200"), set_(J2, "no-initial", "away"), set_(J2, "lost", "home"),
                     add(J2, "starpass", team="home", trip="2", number="7"),
                     add(J2, "points", team="home", points="4", **{"pass": "2"}),
                     set_(J2, "duration", "120"))
    log.apply(set_({"period": 2, "jam": 1}, "start", "3000"), add({"period": 2, "jam": 1}, "points", team="away",
                                                                   points="1"))
    return {"trip": trips[1], "star": star[3]}


def test_the_summary_adds_the_bout_up() -> None:
    log = Log()
    _bout(log)
    log.apply(set_(BOUT, "signed", "Ray"), set_(BOUT, "status", "final"))  # one batch: signed, then final
    s = bout_summary(log.desk.engine.document.root)
    assert s["teams"]["home"]["name"] == "Rollers" and s["teams"]["away"]["color"] == "white"
    assert s["teams"]["home"]["score"] == 11 and s["teams"]["away"]["score"] == 3
    assert s["periods"] == [{"period": 1, "home": 11, "away": 2}, {"period": 2, "home": 0, "away": 1}]
    j1, j2 = s["jams"][0], s["jams"][1]
    assert j1["home"]["trips"] == [4, 3] and j1["home"]["lead"] and j1["home"]["called"] and not j1["away"]["lead"]
    assert j1["home"]["jammer"] == "12" and j1["home"]["pivot"] == "7" and j1["away"]["jammer"] == "5"
    assert j2["home"]["star_pass"] == 2 and j2["home"]["lost"] and j2["away"]["no_initial"]
    assert s["penalties"]["away"] == {"9": [{"period": 1, "jam": 1, "code": "B"}, {"period": 1, "jam": 1, "code": "X"}]}
    assert s["teams"]["away"]["timeouts_left"] == 2 and s["teams"]["home"]["timeouts_left"] == 3
    assert s["teams"]["home"]["reviews"] == s["teams"]["home"]["reviews_retained"] == 1
    assert s["official_timeouts"] == 1
    assert s["status"] == "final" and s["signed"] == "Ray"
    assert {"name": "Ray", "role": "head-referee"} in s["officials"]


def test_corrections_are_operations_that_name_who_made_them_and_replay_alike() -> None:
    log = Log()
    made = _bout(log)
    log.source = B  # another device corrects
    log.apply(set_({"eid": made["trip"][0]}, "points", "2"),  # fix a trip: 4 -> 2
              set_({"eid": made["star"][0]}, "trip", "3"),  # move the star pass to trip 3
              {"op": "remove", "to": {"period": 2, "jam": 1}})  # remove a jam entered by mistake
    s = bout_summary(log.desk.engine.document.root)
    assert s["jams"][0]["home"]["trips"] == [2, 3] and s["teams"]["home"]["score"] == 9
    assert s["jams"][1]["home"]["star_pass"] == 3 and len(s["jams"]) == 2 and s["teams"]["away"]["score"] == 2
    history = log.desk.engine.document.history_of(made["trip"][0])
    assert history is not None
    assert [(h["op"], h["source"]) for h in history] == [("add", bytes(A).hex()), ("set", bytes(B).hex())]
    assert history[1]["value"] == "2"
    # Every node, whatever order the events arrive in, duplicates and all, shows the same.
    for seed in range(5):
        records = log.records + log.records[:7]
        random.Random(seed).shuffle(records)
        other = DocEngine()
        other.load(records)
        assert digest(other.document.root) == log.digest
        assert bout_summary(other.document.root) == s


def test_the_summary_reads_nonsense_in_the_log_without_failing() -> None:
    """Events recorded before the rules, or by a peer that ignores them, still replay; the summary counts
    what makes sense of them."""
    bodies = [add(J1, "points", team="home", points="lots"), add(J1, "points", team="purple", points="3"),
              add(J1, "points", team="home", points="3", **{"pass": "x"}), add(J1, "penalty", code="ZZZZZZ"),
              add(J1, "lineup", team="home", position="jammer", number="1"),
              add(J1, "lineup", team="home", position="jammer", number="2"),
              add({"period": 1}, "timeout", team="home", kind="team"), set_(J1, "lead", "purple")]
    engine = DocEngine()
    engine.load([LogRecord(C, i + 1, float(i + 1), "doc", canonical_json(b), 0) for i, b in enumerate(bodies)])
    assert engine.document.dropped == []
    s = bout_summary(engine.document.root)
    assert s["teams"]["home"]["score"] == 3 and s["jams"][0]["home"]["trips"] == [0, 3]
    assert s["jams"][0]["home"]["jammer"] == "1" and not s["jams"][0]["home"]["lead"]
    assert s["penalties"] == {"home": {}, "away": {}} and s["teams"]["home"]["timeouts_left"] == 2


# ----------------------------------------------------------------- random bouts, any delivery order

SIDE = st.sampled_from(["home", "away"])
NUMBER = st.sampled_from(["12", "7", "21", "5", "9", "99"])
JAM = st.builds(lambda p, j: {"period": p, "jam": j}, st.integers(1, 2), st.integers(1, 4))
CANDIDATE = st.one_of(
    st.builds(lambda to, t, pts, trip: add(to, "points", team=t, points=str(pts), **({"pass": str(trip)} if trip else {})),
              JAM, SIDE, st.integers(0, 5), st.integers(0, 4)),
    st.builds(lambda to, t, n, pos: add(to, "lineup", team=t, number=n, position=pos), JAM, SIDE, NUMBER,
              st.sampled_from(["jammer", "pivot", "blocker"])),
    st.builds(lambda to, t, n, code: add(to, "penalty", team=t, number=n, code=code), JAM, SIDE, NUMBER,
              st.sampled_from(["B", "X", "Z"])),
    st.builds(lambda to, t, trip: add(to, "starpass", team=t, trip=str(trip)), JAM, SIDE, st.integers(1, 4)),
    st.builds(set_, JAM, st.sampled_from(["lead", "called", "lost", "start"]),
              st.sampled_from(["home", "away", "both", "", "12"])),
    st.builds(lambda t, n: add({"team": t}, "person", number=n), SIDE, NUMBER),
    st.builds(lambda to, t, kind: add(to, "timeout", team=t, kind=kind), JAM, SIDE, st.sampled_from(["team", "review"])),
    st.builds(lambda to: {"op": "remove", "to": to}, JAM),
    st.builds(lambda i, v: ("fix", i, v), st.integers(0, 50), st.integers(0, 4)),  # fix an earlier trip
)


@given(st.lists(st.tuples(CANDIDATE, st.sampled_from([A, B, C])), min_size=1, max_size=40), st.randoms())
@settings(max_examples=60, deadline=None)
def test_random_bouts_replayed_in_any_order_give_the_same_document(
        steps: list[tuple[Any, NodeId]], rnd: random.Random) -> None:
    """Operations from three devices, each checked by the rules (the refused ones record nothing), then
    every record delivered to other nodes in any order, with duplicates: one document, one summary."""
    log = Log()
    trips: list[str] = []
    for candidate, source in steps:
        log.source = source
        op = candidate
        if isinstance(candidate, tuple):
            if not trips:
                continue
            op = set_({"eid": trips[candidate[1] % len(trips)]}, "points", str(candidate[2]))
        held = len(log.records)
        try:
            made = log.apply(op)
        except OperationError:
            assert len(log.records) == held
            continue
        if op["op"] == "add" and op["children"][0]["tag"] == "points":
            trips += made[0]
    want = (log.digest, bout_summary(log.desk.engine.document.root))
    for _ in range(3):
        records = log.records + rnd.sample(log.records, min(3, len(log.records)))
        rnd.shuffle(records)
        engine = DocEngine()
        for r in records:
            engine.add(r)
        assert (digest(engine.document.root), bout_summary(engine.document.root)) == want


# ----------------------------------------------------------------- over HTTP


class _Docs:
    def __init__(self, desk: DocumentDesk) -> None:
        self.desk = desk
        self.event_renderers: dict[type, Any] = {}

    def routes(self, app: Any) -> None:
        from huddle.api.doc_http import add_doc_routes

        add_doc_routes(app, self)


class _Node:
    def __init__(self, desk: DocumentDesk) -> None:
        self.features = [_Docs(desk)]

    async def until_recording(self, timeout: float) -> None:
        return None


def test_over_http_a_bad_operation_is_a_422_with_the_reason_and_the_summary_is_json() -> None:
    log = Log()
    log.apply(*ROSTER)
    held = list(log.records)

    async def run() -> tuple[tuple[int, Any], ...]:
        runner, url = await start_api(_Node(log.desk), "127.0.0.1:0")  # type: ignore[arg-type]
        try:
            async with aiohttp.ClientSession() as session:
                out = []
                for body, ctype in (
                        (json.dumps(add(J1, "points", team="home", points="lots")), "application/json"),
                        ('<add period="1" jam="1"><penalty team="away" number="5" code="ZZZZZZ"/></add>',
                         "application/xml"),
                        (json.dumps(add(J1, "points", team="home", points="4", number="12")), "application/json")):
                    async with session.post(url + "/api/v1/doc/ops", data=body,
                                            headers={"Content-Type": ctype}) as resp:
                        out.append((resp.status, await resp.json()))
                async with session.get(url + "/api/v1/bout/summary") as resp:
                    out.append((resp.status, await resp.json()))
                return tuple(out)
        finally:
            await runner.cleanup()

    points, penalty, good, summary = asyncio.run(run())
    assert points[0] == 422 and "points must be a whole number from 0 to 4, not 'lots'" in points[1]["error"]
    assert penalty[0] == 422 and "'ZZZZZZ' is not a WFTDA penalty code" in penalty[1]["error"]
    assert good[0] == 201 and len(log.records) == len(held) + 1, "only the good operation was recorded"
    assert log.desk.refused == 2, "the refusals are counted (the document feature's facts)"
    assert summary[0] == 200 and summary[1]["teams"]["home"]["score"] == 4
    assert summary[1]["teams"]["home"]["name"] == "Rollers"
