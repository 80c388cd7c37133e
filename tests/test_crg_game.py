"""CRG ScoreBoard's game file (crg/export.py, crg/load.py): a huddle bout exported and imported
back is the same bout; a game file as CRG 5.x and 4.x write it imports as the bout it holds;
a file that is not one is refused with the reason."""

from __future__ import annotations

import json
from typing import Any

import pytest

from huddle.crg import CrgError, export_crg, import_crg
from huddle.crg.paths import seconds_of_ms, split_key
from huddle.doc import BoutDocument, bout_summary, parse_json_ops, to_xml

J = {"period": 1, "jam": 1}
J2 = {"period": 1, "jam": 2}
J21 = {"period": 2, "jam": 1}


def record(doc: BoutDocument, ops: list[dict[str, Any]]) -> BoutDocument:
    """Apply ``ops`` as a node's API would: each checked against the bout's rules, then applied."""
    for i, op in enumerate(parse_json_ops(ops)):  # the JSON form, normalised as the API does
        doc.check(op)
        doc.apply(op, (1700000000.0 + len(doc.dropped) + i, bytes([0xA] * 16), doc.applied + 1))
    assert doc.dropped == []
    return doc


def el(tag: str, **attrs: str) -> dict[str, Any]:
    return {"tag": tag, "attrs": {k.replace("_", "-"): v for k, v in attrs.items()}}


def sets(to: dict[str, Any], **attrs: str) -> list[dict[str, Any]]:
    return [{"op": "set", "to": to, "attribute": k.replace("_", "-"), "value": v} for k, v in attrs.items()]


def add(to: dict[str, Any], *children: dict[str, Any]) -> dict[str, Any]:
    return {"op": "add", "to": to, "children": list(children)}


def every_element() -> list[dict[str, Any]]:
    """A bout with every element the game file carries, in the order an import records them."""
    return [
        *sets({"path": "bout"}, name="Final of the Cup", date="2026-11-28"),
        *sets({"path": "venue"}, name="Hall 1", city="Leeds"),
        *sets({"path": "ruleset"}, name="WFTDA"),
        *sets({"team": "home"}, name="Rollers", league="Leeds Roller Derby", color="red"),
        add({"team": "home"}, el("person", number="12", name="Ada", role="captain"), el("person", number="7"),
            el("person", number="21", name="Bo"), el("person", number="3"), el("person", number="44"),
            el("person", number="9", role="alternate-captain"), el("person", name="Coach", role="bench-staff")),
        *sets({"team": "away"}, name="Bruisers", color="blue"),
        add({"team": "away"}, el("person", number="5"), el("person", number="8"), el("person", number="13"),
            el("person", number="31"), el("person", number="77"), el("person", number="88")),
        add({"team": "official"}, el("person", name="Rita", role="head-referee"),
            el("person", name="Nils", role="head-nso"), el("person", name="Jo", role="jammer-referee"),
            el("person", name="Pat", role="penalty-box-timer")),
        *sets({"period": 1}, start="1700000000", duration="1800"),
        *sets(J, start="1700000010", duration="120.5", lead="home", called="home", lost="away", injury="both",
              no_initial="away"),
        add(J, el("lineup", team="home", position="jammer", number="12"),
            el("lineup", team="home", position="pivot", number="7"),
            el("lineup", team="home", position="blocker", number="21"),
            el("lineup", team="home", position="blocker", number="3"),
            el("lineup", team="home", position="blocker", number="44"),
            el("lineup", team="away", position="jammer", number="5"),
            el("lineup", team="away", position="blocker", number="8"),
            el("lineup", team="away", position="blocker", number="13"),
            el("lineup", team="away", position="blocker", number="31"),
            el("lineup", team="away", position="blocker", number="77"),
            el("points", team="home", points="4", **{"pass": "2"}), el("points", team="home", points="3", **{"pass": "3"}),
            el("points", team="home", points="2", **{"pass": "5"}), el("points", team="away", points="1", **{"pass": "2"}),
            el("starpass", team="home", trip="4", number="7"),
            el("penalty", team="away", number="8", code="C", time="1700000030"),
            el("penalty", team="home", number="21", code="X", time="1700000040.25"),
            el("box", team="away", number="8", **{"in": "1700000031", "out": "1700000061"}),
            el("timeout", kind="official", time="1700000140")),
        *sets(J2, start="1700000200", duration="90", lead="away"),
        add(J2, el("lineup", team="away", position="jammer", number="88"),
            el("points", team="away", points="4", **{"pass": "2"}),
            el("penalty", team="away", number="88", code="A", time="1700000250"),
            el("penalty", team="away", number="8", code="N", time="1700000260"),
            el("timeout", team="home", kind="team", time="1700000300"),
            el("timeout", team="away", kind="review", result="retained", time="1700000400"),
            el("timeout", team="home", kind="review", result="lost", time="1700000500")),
        add({"period": 1}, el("timeout", kind="official", time="1700000005")),
        *sets({"period": 2}, start="1700003600", duration="1800"),
        *sets(J21, start="1700003610", duration="60", called="away", lead="away"),
        add(J21, el("box", team="home", number="12", **{"in": "1700003620", "out": "1700003650"})),
        *sets({"path": "bout"}, signed="Rita", status="final"),
    ]


def test_a_bout_exported_and_imported_back_is_the_same_bout() -> None:
    ops = every_element()
    doc = record(BoutDocument(), ops)
    summary = bout_summary(doc.root)
    data = export_crg(doc.root, summary)
    # As a file: JSON, and back (CRG writes booleans and numbers as JSON values).
    data = json.loads(json.dumps(data))
    back = record(BoutDocument(), import_crg(data))
    assert to_xml(back.root) == to_xml(doc.root)
    assert bout_summary(back.root) == summary
    # And the import of the export of the import: the same again.
    assert to_xml(record(BoutDocument(), import_crg(export_crg(back.root, summary))).root) == to_xml(doc.root)


def test_the_export_says_what_crg_reads() -> None:
    doc = record(BoutDocument(), every_element())
    state = export_crg(doc.root, bout_summary(doc.root))["state"]
    g = f"ScoreBoard.Game({doc.root.eid})"
    assert state["ScoreBoard.Version(release)"].startswith("v5")
    assert state[f"{g}.Team(1).TeamName"] == "Rollers"
    assert state[f"{g}.Team(1).Score"] == 9 and state[f"{g}.Team(2).Score"] == 5
    assert state[f"{g}.Period(1).Jam(1).Duration"] == 120500
    assert state[f"{g}.Period(1).Jam(1).TeamJam(1).ScoringTrip(2).Score"] == 4
    assert state[f"{g}.Period(1).Jam(1).TeamJam(1).ScoringTrip(4).Score"] == 0  # CRG lists every trip
    assert state[f"{g}.Period(1).Jam(1).TeamJam(1).StarPassTrip"] == \
        state[f"{g}.Period(1).Jam(1).TeamJam(1).ScoringTrip(4).Id"]
    assert state[f"{g}.Period(1).Jam(1).TeamJam(1).AfterSPScore"] == 2
    assert state[f"{g}.Period(1).Jam(1).TeamJam(2).NoPivot"] is True  # four blockers: the 4th in Pivot's place
    assert state[f"{g}.Period(1).Jam(1).TeamJam(2).Fielding(Pivot).SkaterNumber"] == "77"
    assert state[f"{g}.Period(1).Jam(1).TeamJam(1).NoInitial"] is False
    assert state[f"{g}.Period(1).Jam(1).TeamJam(2).NoInitial"] is True
    assert state[f"{g}.OfficialScore"] is True and state[f"{g}.State"] == "Finished"
    owners = {v for k, v in state.items() if k.endswith(".Owner")}
    assert owners == {"O", f"{doc.root.eid}_1", f"{doc.root.eid}_2"}
    skater = next(k for k, v in state.items() if k.endswith(".RosterNumber") and v == "12" and ".Skater(" in k)
    assert state[skater.replace("RosterNumber", "Flags")] == "C"


def test_two_nodes_export_the_same_file_from_the_same_events() -> None:
    ops = every_element()
    one, two = record(BoutDocument(), ops), record(BoutDocument(), ops)
    assert export_crg(one.root, bout_summary(one.root)) == export_crg(two.root, bout_summary(two.root))


# A game file as CRG ScoreBoard 5.x saves it (html/game-data/json/NAME.json: the game's keys
# under "state", sorted; its JSONStateSnapshotter).  Built from the key names of
# rollerderby/scoreboard's src/.../core/interfaces/*.java (Game, Team, Skater, Period, Jam,
# TeamJam, Fielding, ScoringTrip, Penalty, BoxTrip, Timeout, Official): its repository has no
# saved game among its test resources.  Only the facts needed, with some of CRG's other keys
# (clocks, rules, settings) that the import leaves alone.
GID = "9a0c3c5e-1111-4c4c-8888-0123456789ab"
S1, S2, S3 = "aaaaaaaa-0000-4000-8000-000000000001", "aaaaaaaa-0000-4000-8000-000000000002", \
    "aaaaaaaa-0000-4000-8000-000000000003"
T1 = "bbbbbbbb-0000-4000-8000-000000000001"


def crg5_file() -> dict[str, Any]:
    g = f"ScoreBoard.Game({GID})"
    tj = f"{g}.Period(1).Jam(1).TeamJam"
    state: dict[str, Any] = {
        "ScoreBoard.Version(release)": "v5.0.11",
        "ScoreBoard.CurrentGame.Game": GID,
        "ScoreBoard.Settings.Setting(ScoreBoard.Clock.Sync)": "true",
        f"{g}.Name": "2025-05-01 Rollers vs Bruisers", f"{g}.State": "Finished", f"{g}.OfficialScore": True,
        f"{g}.EventInfo(Venue)": "Hall 1", f"{g}.EventInfo(City)": "Leeds", f"{g}.EventInfo(Date)": "2025-05-01",
        f"{g}.RulesetName": "Custom", f"{g}.Rule(Period.Number)": "2", f"{g}.Clock(Period).Time": 0,
        f"{g}.HR": "ref-1", f"{g}.Ref(ref-1).Name": "Rita", f"{g}.Ref(ref-1).Role": "Head Referee",
        f"{g}.Nso(nso-1).Name": "Nils", f"{g}.Nso(nso-1).Role": "Head Non-Skating Official",
        f"{g}.Team(1).Name": "Rollers", f"{g}.Team(1).TeamName": "Rollers", f"{g}.Team(1).LeagueName": "Leeds",
        f"{g}.Team(1).UniformColor": "red", f"{g}.Team(1).Score": 7,
        f"{g}.Team(1).Skater({S1}).RosterNumber": "12", f"{g}.Team(1).Skater({S1}).Name": "Ada",
        f"{g}.Team(1).Skater({S1}).Flags": "C",
        f"{g}.Team(1).Skater({S2}).RosterNumber": "7", f"{g}.Team(1).Skater({S2}).Flags": "",
        f"{g}.Team(1).Skater({S2}).Penalty(0).Code": "EXP",  # an expulsion: no penalty code of the document
        f"{g}.Team(1).Skater({S2}).Penalty(1).Code": "B", f"{g}.Team(1).Skater({S2}).Penalty(1).PeriodNumber": 1,
        f"{g}.Team(1).Skater({S2}).Penalty(1).JamNumber": 1, f"{g}.Team(1).Skater({S2}).Penalty(1).Time": 1746100030000,
        f"{g}.Team(1).BoxTrip(box-1).CurrentSkater": S2, f"{g}.Team(1).BoxTrip(box-1).StartJamNumber": 1,
        f"{g}.Team(1).BoxTrip(box-1).WalltimeStart": 1746100031000, f"{g}.Team(1).BoxTrip(box-1).WalltimeEnd": 1746100061000,
        f"{g}.Team(2).TeamName": "Bruisers", f"{g}.Team(2).Skater({S3}).RosterNumber": "5",
        f"{g}.Period(1).WalltimeStart": 1746100000000, f"{g}.Period(1).Duration": 1800000,
        f"{g}.Period(1).Jam(1).WalltimeStart": 1746100010000, f"{g}.Period(1).Jam(1).Duration": 95000,
        f"{tj}(1).Lead": True, f"{tj}(1).Calloff": True, f"{tj}(1).NoInitial": False, f"{tj}(1).StarPass": True,
        f"{tj}(1).StarPassTrip": T1, f"{tj}(1).NoPivot": False,
        f"{tj}(1).Fielding(Jammer).Skater": S1, f"{tj}(1).Fielding(Jammer).SkaterNumber": "12",
        f"{tj}(1).Fielding(Pivot).Skater": S2, f"{tj}(1).Fielding(Pivot).SkaterNumber": "7",
        f"{tj}(1).Fielding(Blocker1).Skater": None, f"{tj}(1).Fielding(Blocker1).SkaterNumber": "?",
        f"{tj}(1).ScoringTrip(1).Score": 0, f"{tj}(1).ScoringTrip(1).AfterSP": False,
        f"{tj}(1).ScoringTrip(2).Score": 4, f"{tj}(1).ScoringTrip(2).AfterSP": False,
        f"{tj}(1).ScoringTrip(3).Id": T1, f"{tj}(1).ScoringTrip(3).Score": 3, f"{tj}(1).ScoringTrip(3).AfterSP": True,
        f"{tj}(2).NoInitial": True, f"{tj}(2).Fielding(Jammer).Skater": S3,
        # The upcoming jam CRG always holds: not started, nothing in it.
        f"{g}.Period(1).Jam(2).WalltimeStart": 0, f"{g}.Period(1).Jam(2).Duration": 0,
        f"{g}.Period(1).Jam(2).TeamJam(1).NoInitial": True,
        f"{g}.Period(1).Timeout(to-1).Owner": f"{GID}_2", f"{g}.Period(1).Timeout(to-1).Review": True,
        f"{g}.Period(1).Timeout(to-1).RetainedReview": True, f"{g}.Period(1).Timeout(to-1).PrecedingJamNumber": 1,
        f"{g}.Period(1).Timeout(to-1).WalltimeStart": 1746100200000,
        f"{g}.Period(1).Timeout(to-2).Owner": "", f"{g}.Period(1).Timeout(to-2).PrecedingJamNumber": 1,
    }
    return {"state": dict(sorted(state.items()))}


def test_a_crg5_game_file_imports_as_its_bout() -> None:
    doc = record(BoutDocument(), import_crg(crg5_file()))
    s = bout_summary(doc.root)
    assert s["teams"]["home"]["name"] == "Rollers" and s["teams"]["home"]["league"] == "Leeds"
    assert s["teams"]["home"]["color"] == "red" and s["teams"]["away"]["name"] == "Bruisers"
    assert s["teams"]["home"]["skaters"] == [{"number": "12", "name": "Ada", "role": "captain"}, {"number": "7"}]
    # In the file's order (CRG sorts its keys: Nso before Ref).
    assert s["officials"] == [{"name": "Nils", "role": "head-nso"}, {"name": "Rita", "role": "head-referee"}]
    assert s["teams"]["home"]["score"] == 7 and s["periods"][0]["home"] == 7
    assert len(s["jams"]) == 1  # the upcoming jam CRG holds is not a jam of the bout
    home = s["jams"][0]["home"]
    assert home["trips"] == [4, 3] and home["lead"] and home["called"] and not home["no_initial"]
    assert home["jammer"] == "12" and home["pivot"] == "7" and home["blockers"] == [] and home["star_pass"] == 3
    assert s["jams"][0]["away"]["no_initial"] and s["jams"][0]["away"]["jammer"] == "5"
    assert s["penalties"]["home"] == {"7": [{"period": 1, "jam": 1, "code": "B"}]}
    assert s["teams"]["away"]["reviews"] == 1 and s["teams"]["away"]["reviews_retained"] == 1
    assert s["status"] == "final" and s["signed"] == "Rita"
    jam = next(j for j in doc.root.walk() if j.tag == "jam")
    assert jam.attrs["start"] == "1746100010" and jam.attrs["duration"] == "95"
    box = next(c for c in jam.children if c.tag == "box")
    assert box.attrs == {"team": "home", "number": "7", "in": "1746100031", "out": "1746100061"}
    assert doc.root.find("venue") is not None and doc.root.find("venue").attrs == {"name": "Hall 1", "city": "Leeds"}  # type: ignore[union-attr]


def test_a_crg4_game_file_imports_too() -> None:
    """4.x kept its one game at the root, and 4.0 named a roster number Number."""
    state = {
        "ScoreBoard.Version(release)": "v4.0.1",
        "ScoreBoard.Team(1).Name": "Rollers", f"ScoreBoard.Team(1).Skater({S1}).Number": "12",
        f"ScoreBoard.Team(2).Skater({S3}).Number": "5",
        "ScoreBoard.Period(1).Jam(1).WalltimeStart": 1500000000000, "ScoreBoard.Period(1).Jam(1).Duration": 120000,
        "ScoreBoard.Period(1).Jam(1).TeamJam(2).Fielding(Jammer).Skater": S3,
        "ScoreBoard.Period(1).Jam(1).TeamJam(2).ScoringTrip(2).Score": 4,
        "ScoreBoard.Period(1).Jam(1).TeamJam(2).Lead": "true",
        "ScoreBoard.Period(1).Timeout(t).Owner": "1", "ScoreBoard.Period(1).Timeout(t).PrecedingJamNumber": 1,
        "ScoreBoard.Settings.Setting(Overlay.Interactive)": "On",
    }
    s = bout_summary(record(BoutDocument(), import_crg({"state": state})).root)
    assert s["teams"]["home"]["name"] == "Rollers" and s["teams"]["away"]["score"] == 4
    assert s["jams"][0]["away"]["lead"] and s["jams"][0]["away"]["jammer"] == "5"
    assert s["teams"]["home"]["timeouts"] == 1


@pytest.mark.parametrize(("data", "reason"), [
    ([], "not a CRG game file"),
    ({"state": "x"}, "not a CRG game file"),
    ({"state": {}}, "holds no game"),
    ({"state": {"ScoreBoard.Settings.Setting(x)": "1"}}, "holds no game"),
    ({"state": {f"ScoreBoard.Game({GID}).Name": {"nested": 1}}}, "a value must be"),
])
def test_what_is_not_a_game_file_is_refused_with_the_reason(data: Any, reason: str) -> None:
    with pytest.raises(CrgError, match=reason):
        import_crg(data)


def test_hostile_keys_and_values_are_left_out_not_obeyed() -> None:
    g = f"ScoreBoard.Game({GID})"
    state: dict[str, Any] = {
        f"{g}.Team(1).TeamName": "Rollers", f"{g}.Team(1.Name": "unbalanced", f"{g}..Name": "x", "x" * 5000: 1,
        f"{g}.Period(1).Jam(999999999).Duration": 1000, f"{g}.Period(7).Jam(1).Duration": 1000,
        f"{g}.Period(1).Jam(1).WalltimeStart": "soon", f"{g}.Period(1).Jam(1).Duration": -5,
        f"{g}.Team(1).Skater(s).RosterNumber": "12", f"{g}.Team(1).Skater(s).Penalty(1).Code": "ZZZZ",
        f"{g}.Team(1).Skater(s).Penalty(1).PeriodNumber": 1, f"{g}.Team(1).Skater(s).Penalty(1).JamNumber": 1,
    }
    ops = import_crg({"state": state})
    # Only what made sense: the team's name and its skater; a jam number past the document's is
    # left to the node's check (refused there with the reason, as any write).
    doc = BoutDocument()
    kept = [op for op in ops if op.get("to", {}).get("jam") != 999999999]
    record(doc, kept)
    s = bout_summary(doc.root)
    assert s["teams"]["home"]["name"] == "Rollers" and s["penalties"]["home"] == {}
    assert s["jams"] == []


def test_keys_and_times() -> None:
    assert split_key("Game(x).Rule(Period.Number)") == [("Game", "x"), ("Rule", "Period.Number")]
    assert split_key("A(b(c)).D") == [("A", "b(c)"), ("D", None)]
    for bad in ("", "A(", "A.", ".A", "A)b", "A(b)c"):
        with pytest.raises(CrgError):
            split_key(bad)
    assert seconds_of_ms(120500) == "120.5" and seconds_of_ms("60000") == "60" and seconds_of_ms(0) is None
    assert seconds_of_ms(True) is None and seconds_of_ms(1) == "0.001"
