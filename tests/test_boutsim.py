"""The simulated bout (docs/demo.md, "The simulated bout"): the plan is deterministic per
seed, obeys the bout's rules, and adds up to the trips it made; played over real nodes,
every node ends with the same bout."""

from __future__ import annotations

import asyncio
import urllib.request
from collections import Counter
from typing import Any

import pytest
from conftest import Cluster, get, wait_for

from huddle.boutsim import DEVICES, Write, plan_bout
from huddle.boutsim.play import assign, simulate
from huddle.doc.engine import BoutDocument, jams
from huddle.doc.ops import OperationError, normalise
from huddle.doc.rules import PENALTY_CODES
from huddle.doc.summary import bout_summary


def applied(plan: list[Write]) -> tuple[BoutDocument, list[str]]:
    """The plan's operations checked against the bout's rules and applied, in order, as a node's
    API would; the document and the refusals' reasons."""
    doc, refused, n = BoutDocument(), [], 0
    for w in plan:
        for raw in w.ops:
            n += 1
            op = normalise(raw)
            try:
                doc.check(op)
            except OperationError as exc:
                refused.append(f"{w.what}: {exc}")
                continue
            assert doc.apply(op, (float(n), bytes(16), n)) is None
    return doc, refused


def generated_score(plan: list[Write]) -> dict[str, int]:
    """The final score from the plan's own trips: each trip's points as added, unless a later set
    on its eid fixed them (computed here, not by the document's summary)."""
    trips: dict[str, tuple[str, int]] = {}
    for w in plan:
        for op in w.ops:
            if op["op"] == "add":
                for child in op.get("children", ()):
                    if child["tag"] == "points":
                        trips[child["eid"]] = (child["attrs"]["team"], int(child["attrs"]["points"]))
            elif op["op"] == "set" and op["attribute"] == "points":
                team, _ = trips[op["to"]["eid"]]
                trips[op["to"]["eid"]] = (team, int(op["value"]))
    score = dict.fromkeys(("home", "away"), 0)
    for team, points in trips.values():
        score[team] += points
    return score


def test_the_same_seed_plans_the_same_bout_and_another_seed_another() -> None:
    assert plan_bout(5, jams=3, t0=1000.0) == plan_bout(5, jams=3, t0=1000.0)
    assert plan_bout(5, jams=3) != plan_bout(6, jams=3)
    # t0 only moves the document's times
    moved = plan_bout(5, jams=3, t0=1000.0)
    assert [(w.at, w.role, w.what) for w in moved] == [(w.at, w.role, w.what) for w in plan_bout(5, jams=3)]


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_full_bout_breaks_no_rule_and_scores_the_trips_it_made(seed: int) -> None:
    plan = plan_bout(seed, t0=1.8e9)
    doc, refused = applied(plan)
    assert refused == []
    assert doc.dropped == []
    summary = bout_summary(doc.root)
    score = {team: summary["teams"][team]["score"] for team in ("home", "away")}
    assert score == generated_score(plan)
    assert all(50 < points < 400 for points in score.values()), score
    assert summary["status"] == "final" and summary["signed"]
    rows = summary["jams"]
    assert {j["period"] for j in rows} == {1, 2} and 25 <= len(rows) <= 60
    for j in rows:
        for team in ("home", "away"):
            row = j[team]
            assert row["jammer"] and row["pivot"] and len(row["blockers"]) == 3
            assert all(0 <= p <= 4 for p in row["trips"])
        assert not (j["home"]["lead"] and j["away"]["lead"])
    # every period's clock ran out during its last jam: after period 1 comes period 2 jam 1, and
    # before the sign-off the bout is over by the document's own rule ("What jam are we on?")
    halftime = next(i for i, w in enumerate(plan) if w.what == "period 1 ends") + 1
    assert jams(applied(plan[:halftime])[0].root)["upcoming"] == {"period": 2, "jam": 1}
    assert jams(applied(plan[:-1])[0].root)["bout_over"]
    penalties = [p for by in summary["penalties"].values() for ps in by.values() for p in ps]
    assert penalties and all(p["code"] in PENALTY_CODES for p in penalties)
    assert all(summary["teams"][t]["timeouts"] <= 3 for t in ("home", "away"))
    assert sum(summary["teams"][t]["reviews"] for t in ("home", "away")) == 1
    assert summary["official_timeouts"] == 1


def test_each_write_is_made_by_a_device_that_holds_its_role_and_corrections_are_there() -> None:
    plan = plan_bout(4, jams=3)
    roles = {d.name: set(d.roles) for d in DEVICES}
    assert len(DEVICES) == 5
    assert all(w.role in roles[w.device] for w in plan)
    assert [w.at for w in plan] == sorted(w.at for w in plan)
    by_role = Counter(w.role for w in plan)
    assert set(by_role) == {r for d in DEVICES for r in d.roles}
    # corrections: a set of points (a scorekeeper, each period) and of a penalty's code (the head NSO)
    fixes = [(w.role, op["attribute"]) for w in plan for op in w.ops if op["op"] == "set" and "eid" in op["to"]]
    assert ("head-nso", "code") in fixes
    assert sum(1 for role, attr in fixes if attr == "points" and role.startswith("scorekeeper-")) >= 2
    with pytest.raises(ValueError, match="at least one jam"):
        plan_bout(1, jams=0)


def test_devices_go_to_every_node_but_the_last_which_only_shows() -> None:
    apis = ["http://a", "http://b", "http://c"]
    assert set(assign(apis).values()) == {"http://a", "http://b"}
    assert set(assign(apis[:2]).values()) == {"http://a"}
    assert set(assign(apis[:1]).values()) == {"http://a"}


@pytest.mark.processes
def test_a_short_bout_over_four_nodes_ends_with_the_same_summary_everywhere(cluster: Cluster) -> None:
    nodes = [cluster.start(name) for name in ("a", "b", "c", "d")]
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "four nodes to mesh")
    plan, played = asyncio.run(simulate([n.api for n in nodes], seed=3, jams=2, speed=400.0))
    assert played.refused == [] and played.writes == len(plan)
    summaries: list[dict[str, Any]] = []

    def agreed() -> bool:
        summaries[:] = [get(n.api, "/api/v1/bout/summary") for n in nodes]
        return all(s == summaries[0] for s in summaries) and summaries[0]["status"] == "final"

    wait_for(agreed, 20, "every node's bout summary to agree")
    score = {team: summaries[0]["teams"][team]["score"] for team in ("home", "away")}
    assert score == generated_score(plan)
    # the last node wrote nothing: it shows what the five devices recorded elsewhere
    assert get(nodes[-1].api, "/api/v1/node")["features"]["doc"]["refused"] == 0
    xml = [doc_xml(n.api) for n in nodes]
    assert all(x == xml[0] for x in xml)
    assert get(nodes[-1].api, "/api/v1/bout/conflicts")["conflicts"] == []  # each device wrote its role's fields


def doc_xml(api: str) -> str:
    with urllib.request.urlopen(api + "/api/v1/doc?eids=1", timeout=10) as resp:
        return str(resp.read().decode())
