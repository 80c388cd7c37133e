"""``huddle bout export --statsbook`` and ``huddle bout import --igrf`` against real nodes: a bout
recorded on one node, its statsbook written by the command, its IGRF set up on a fresh node of
another group; the same IGRF again is refused by that node's rules and records nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import openpyxl
import pytest
from conftest import Cluster, get, http
from test_bout_rules import J1, ROSTER, add, set_

pytestmark = pytest.mark.processes


def huddle(api: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", *args, "--api", api], capture_output=True, text=True,
                          timeout=60, check=False)


def test_a_bout_exported_from_one_node_sets_up_another_through_its_igrf(cluster: Cluster, tmp_path: Path) -> None:
    # two groups, no beacons: b's bout is its own, fresh
    a, b = cluster.start("a", beacon=False), cluster.start("b", group="other", beacon=False)
    status, body = http(a.api, "/api/v1/doc/ops", [
        *ROSTER, set_(J1, "start", "1000"), add(J1, "lineup", team="home", position="jammer", number="12"),
        add(J1, "points", team="home", points="4", **{"pass": "2"}), set_(J1, "lead", "home"),
        add(J1, "penalty", team="away", number="9", code="C"), set_(J1, "duration", "80")])
    assert status == 201, body
    book = tmp_path / "bout.xlsx"
    out = huddle(a.api, "bout", "export", "--statsbook", str(book))
    assert out.returncode == 0 and f"saved the statsbook to {book}" in out.stdout, out.stderr
    wb = openpyxl.load_workbook(book)
    assert [wb["Score"][c].value for c in ("A4", "B4", "D4", "H4")] == [1, "12", "X", 4]
    assert (wb["Penalties"]["Q14"].value, wb["Penalties"]["Q15"].value) == ("C", 1)  # away 9: sixth of 1 2 4 5 77 9
    assert wb["Game Clock"]["B11"].value == 80 and wb["IGRF"]["B11"].value == "Rollers"

    out = huddle(b.api, "bout", "import", "--igrf", str(book))
    assert out.returncode == 0 and "set the bout up from" in out.stdout, out.stderr
    want, got = get(a.api, "/api/v1/bout/summary"), get(b.api, "/api/v1/bout/summary")
    for side in ("home", "away"):
        assert {k: got["teams"][side][k] for k in ("name", "league", "color")} == {
            k: want["teams"][side][k] for k in ("name", "league", "color")}
        assert sorted(s["number"] for s in got["teams"][side]["skaters"]) == sorted(
            s["number"] for s in want["teams"][side]["skaters"])
    assert sorted(got["officials"], key=str) == sorted(want["officials"], key=str)
    events = get(b.api, "/api/v1/node")["features"]["doc"]["events"]

    again = huddle(b.api, "bout", "import", "--igrf", str(book))  # the rosters are there: refused whole
    assert again.returncode == 1 and "422" in again.stderr and "roster" in again.stderr, again.stderr
    assert get(b.api, "/api/v1/node")["features"]["doc"]["events"] == events
