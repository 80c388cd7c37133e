"""Two officials' devices with different roles edit the same jam on both sides of a partition
between network namespaces; when it heals, both nodes show the same document, every entry is
kept, and the cross-role write is listed as a conflict on both (docs/document.md "Roles")."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, wait_for
from test_faults import Namespaces, NsNode, netns

__all__ = ["netns"]  # the fixture, shared with test_faults
pytestmark = pytest.mark.processes

J1 = {"period": 1, "jam": 1}


def post(node: NsNode, path: str, body: Any, role: str | None = None) -> tuple[int, Any]:
    """POST JSON to ``node``'s API from inside its namespace (see NsNode.get)."""
    answer: list[tuple[int, Any]] = []
    failed: list[BaseException] = []
    query = "" if role is None else "?" + urllib.parse.urlencode({"role": role})

    def run() -> None:
        from netns import enter_netns  # bench/ is on the path: test_faults put it there

        try:
            enter_netns(node.host)
            req = urllib.request.Request(node.api + path + query, data=json.dumps(body).encode(), method="POST",
                                         headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=10) as resp:
                    answer.append((resp.status, json.loads(resp.read())))
            except urllib.error.HTTPError as exc:
                answer.append((exc.code, exc.read().decode()))
        except BaseException as exc:  # raised again in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(15)
    if failed:
        raise failed[0]
    assert answer, f"{node.name}: no answer to POST {path}"
    return answer[0]


def add(tag: str, **attrs: str) -> dict[str, Any]:
    return {"op": "add", "to": J1, "children": [{"tag": tag, "attrs": attrs}]}


def flag(attribute: str, team: str) -> dict[str, Any]:
    return {"op": "set", "to": J1, "attribute": attribute, "team": team, "value": "yes"}


def state(node: NsNode) -> tuple[Any, ...]:
    doc = node.get("/api/v1/doc?format=json&eids=1")
    conflicts = node.get("/api/v1/bout/conflicts")
    assert isinstance(doc, dict) and isinstance(conflicts, dict)
    return doc["events"], doc["document"], conflicts["conflicts"]


def test_two_roles_edit_one_jam_across_a_partition_that_heals(netns: Namespaces, tmp_path: Path) -> None:
    nodes = [NsNode(netns, i, tmp_path, 5672) for i in (1, 2)]
    a, b = nodes
    try:
        wait_for(lambda: a.alive_now() == {"h2"} and b.alive_now() == {"h1"}, 30, "the two hosts to mesh",
                 interval=0.2)
        status, _ = post(a, "/api/v1/doc/ops", [{"op": "add", "to": {"team": t}, "children": [
            {"tag": "person", "attrs": {"number": n}} for n in ("1", "2", "3")]} for t in ("home", "away")]
            + [{"op": "set", "to": J1, "attribute": "start", "value": "100"}], role="head-nso")
        assert status == 201
        wait_for(lambda: state(a) == state(b), 15, "b to hold the roster", interval=0.1)
        netns.link(2, up=False)  # h2 is cut off
        wait_for(lambda: a.alive_now() == set(), 15, "h1 to see h2 gone", interval=0.1)
        apart = [  # (node, role, operation): each side's officials carry on
            (a, "scorekeeper-home", flag("lead", "home")),
            (a, "scorekeeper-home", add("points", team="home", points="4", number="1", **{"pass": "2"})),
            (a, "lineup-tracker-home", add("lineup", team="home", position="jammer", number="1")),
            (b, "scorekeeper-away", flag("lead", "away")),  # both jammers claimed lead: one is a conflict
            (b, "scorekeeper-away", add("points", team="away", points="3", number="2", **{"pass": "2"})),
            (b, "lineup-tracker-away", add("lineup", team="away", position="jammer", number="2")),
            (b, "penalty-tracker", add("penalty", team="home", number="1", code="C")),
            (b, "penalty-tracker", add("points", team="home", points="1")),  # not the penalty tracker's field
        ]
        for node, role, op in apart:
            status, body = post(node, "/api/v1/doc/ops", op, role=role)
            assert status == 201, body
        assert (state(a)[0], state(b)[0]) == (6, 8)  # each side: the roster, the start and its own entries
        netns.link(2, up=True)  # the network returns
        wait_for(lambda: state(a)[0] == state(b)[0] == 11 and state(a) == state(b), 30,
                 "both nodes to hold every event and show the same document and conflicts", interval=0.2)
        _, document, conflicts = state(a)
        jam = next(j for p in document["children"] if p["tag"] == "period"
                   for j in p.get("children", ()) if j["tag"] == "jam")
        kept = sorted((c["tag"], c["attrs"]["team"]) for c in jam["children"])
        assert kept == [("lineup", "away"), ("lineup", "home"), ("penalty", "home"), ("points", "away"),
                        ("points", "home")], "no entry lost; the penalty tracker's trip held back"
        assert sorted((c["field"], c["by"], c["owner"]) for c in conflicts) == sorted([
            ("lead", *(("scorekeeper-away", "scorekeeper-home") if jam["attrs"]["lead"] == "home"
                       else ("scorekeeper-home", "scorekeeper-away"))),
            ("points", "penalty-tracker", "scorekeeper-home")])
    finally:
        for n in nodes:
            n.stop()


def huddle(api: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", *args, "--api", api], input=stdin,
                          capture_output=True, text=True, timeout=30, check=False)


def test_the_cli_writes_with_a_role_and_lists_the_conflicts(cluster: Cluster) -> None:
    a = cluster.start("a")
    trip = json.dumps(add("points", team="away", points="2"))
    out = huddle(a.api, "doc", "apply", "--role", "scorekeeper-away", "-", stdin=trip)
    assert out.returncode == 0 and "held" not in out.stdout, out.stderr
    out = huddle(a.api, "doc", "apply", "--role", "penalty-tracker", "-", stdin=trip)
    assert out.returncode == 0 and "held as a conflict: points is scorekeeper-away's" in out.stdout, out.stderr
    out = huddle(a.api, "doc", "apply", "--role", "referee", "-", stdin=trip)
    assert out.returncode != 0 and "invalid choice" in out.stderr
    out = huddle(a.api, "doc", "conflicts")
    assert out.returncode == 0 and "1 conflict(s), 0 resolved" in out.stdout
    assert "penalty-tracker wrote points = 'points points=2 team=away'" in out.stdout, out.stdout
    listed = json.loads(huddle(a.api, "doc", "conflicts", "--json").stdout)
    assert [c["by"] for c in listed["conflicts"]] == ["penalty-tracker"]
    summary = json.loads(urllib.request.urlopen(a.api + "/api/v1/bout/summary", timeout=10).read())
    assert summary["teams"]["away"]["score"] == 2, "the held trip is not counted"
