"""The bout's pages (docs/document.md "The pages") in a real browser: Debian's chromium, headless,
driven by Playwright, on a phone's width (390 px) and a laptop's (1280 px).

Each role's page records what it should (into the document; the role travels as ``?role=``), the
scoreboard on ANOTHER node shows an entry within a second, no page logs an error or scrolls
sideways, the head NSO's view lists a conflict and signs the bout off, and a device whose node has
lost its peers keeps recording and says so; its entries reach the peer when it returns."""

from __future__ import annotations

import re
import signal
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, NodeProcess, get, http, wait_for

from huddle.config.file import load_config

pytestmark = pytest.mark.processes

PHONE = {"width": 390, "height": 844}
LAPTOP = {"width": 1280, "height": 800}
# Quick failure detection: a peer killed is failed within seconds (tests/test_failed_members.py).
TIMING = ("--heartbeat-interval", "0.5", "--suspect-after", "1.5", "--gone-after", "3")
OVERFLOW_JS = "() => document.documentElement.scrollWidth - document.documentElement.clientWidth"


class Pages:
    """A browser's pages, each one's console errors and uncaught exceptions collected."""

    def __init__(self, browser: Any) -> None:
        self.browser = browser
        self.errors: list[str] = []
        self.pages: list[Any] = []

    def open(self, url: str, viewport: dict[str, int]) -> Any:
        from playwright.sync_api import expect

        page = self.browser.new_page(viewport=viewport)
        page.on("pageerror", lambda exc: self.errors.append(f"{url}: {exc}"))
        page.on("console", lambda m: self.errors.append(f"{url}: {m.text} {m.location}") if m.type == "error" else None)
        page.goto(url)
        expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
        self.pages.append(page)
        return page

    def legible(self) -> None:
        """No page scrolls sideways."""
        for page in self.pages:
            assert page.evaluate(OVERFLOW_JS) <= 0, page.url


def conflicts_listed(api: str) -> bool:
    """Whether the node lists conflicts (GET /api/v1/bout/conflicts; 404: not this node's version)."""
    return http(api, "/api/v1/bout/conflicts")[0] == 200


def without_missing_conflicts(errors: list[str], listed: bool) -> list[str]:
    """The errors, less the 404 of a node that does not list conflicts (the head view says so)."""
    return errors if listed else [e for e in errors if "/api/v1/bout/conflicts" not in e]


def roles_recorded(api: str) -> dict[str, set[str]]:
    """Per thing a page wrote (an added element's tag, a set attribute), the roles the log's
    ``doc`` operations name for it."""
    out: dict[str, set[str]] = {}
    for e in get(api, "/api/v1/log?limit=10000")["events"]:
        if e["kind"] != "doc":
            continue
        op = e["body"] if isinstance(e["body"], dict) else {}
        what = op.get("attribute") or ",".join(c.get("tag", "") for c in op.get("children", []))
        out.setdefault(what, set()).add(str(op.get("role")))
    return out


def jam_1(api: str) -> dict[str, Any]:
    rows = get(api, "/api/v1/bout/summary")["jams"]
    return next(r for r in rows if (r["period"], r["jam"]) == (1, 1))


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390px", "1280px"])
def test_each_role_records_what_it_should_and_the_scoreboard_on_another_node_shows_it(
        cluster: Cluster, browser: Any, viewport: dict[str, int]) -> None:
    from playwright.sync_api import expect

    a, b = cluster.start("alice"), cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "alice and bob to mesh")
    assert http(a.api, "/api/v1/doc/ops", [{"op": "set", "to": {"team": "home"}, "attribute": "name",
                                            "value": "Rollers"}])[0] == 201
    pages = Pages(browser)
    board = pages.open(b.api + "/bout/scoreboard", LAPTOP if viewport is PHONE else PHONE)
    expect(board.locator("#name-home")).to_have_text("Rollers", timeout=5_000)
    role = {r: pages.open(f"{a.api}/bout/role/{r}", viewport) for r in (
        "jam-timer", "lineup-tracker-home", "scorekeeper-home", "penalty-tracker", "penalty-box-timer")}
    for page in role.values():
        expect(page.locator("#net")).to_have_text("1 peer reached", timeout=10_000)

    # The jam timer starts the jam (S): the scoreboard on bob runs its clock.
    jt = role["jam-timer"]
    expect(jt.locator("#jam")).to_have_text("Up next: Period 1 · Jam 1")
    jt.keyboard.press("s")
    expect(jt.locator("#jam")).to_have_text("Period 1 · Jam 1 — LIVE", timeout=5_000)
    expect(board.locator("#jam-label")).to_have_text("Jam 1", timeout=1_000)
    expect(board.locator("#period")).to_have_text("Period 1")

    # The home lineup tracker: jammer 12 (J, N, number, Enter).
    lt = role["lineup-tracker-home"]
    for key in ("j", "n", "1", "2", "Enter"):
        lt.keyboard.press(key)
    expect(lt.locator("#entries li")).to_have_text(["home jammer #12"], timeout=5_000)
    assert jam_1(a.api)["home"]["jammer"] == "12"

    # The home scorekeeper: a trip of 4 (key 4) on the scoreboard of the other node within a second,
    # lead (L), a star pass (P) on the trip after it.
    sk = role["scorekeeper-home"]
    expect(sk.locator("#jam")).to_have_text("Period 1 · Jam 1 — LIVE", timeout=5_000)
    sk.keyboard.press("4")
    expect(board.locator("#score-home")).to_have_text("4", timeout=1_000)
    sk.keyboard.press("l")
    expect(board.locator("#lead-home")).to_have_class("lead on", timeout=1_000)
    expect(board.locator("#lead-away")).to_have_class("lead")
    expect(sk.locator("#ok")).to_have_text("recorded: home lead", timeout=5_000)
    sk.keyboard.press("p")
    expect(sk.locator("#ok")).to_have_text("recorded: home star pass", timeout=5_000)
    row = jam_1(a.api)["home"]
    assert (row["trips"], row["points"], row["lead"], row["star_pass"]) == ([4], 4, True, 3)

    # The penalty tracker: away #7, a back block.
    pt = role["penalty-tracker"]
    pt.keyboard.press("a")
    pt.keyboard.press("n")
    pt.keyboard.type("7")
    pt.select_option("#penalty-code", "B")
    pt.locator("#penalty-form button[type=submit]").click()
    expect(pt.locator("#ok")).to_have_text("recorded: away #7 B", timeout=5_000)
    expect(pt.locator("#entries li")).to_have_text(["away #7 penalty B"])  # its own entries, not the trips
    assert get(a.api, "/api/v1/bout/summary")["penalties"]["away"] == {"7": [{"period": 1, "jam": 1, "code": "B"}]}

    # The penalty box timer: away #7 in (Enter), then out (its button).
    bt = role["penalty-box-timer"]
    for key in ("a", "n", "7", "Enter"):
        bt.keyboard.press(key)
    expect(bt.locator("#box-list li")).to_have_count(1, timeout=5_000)
    expect(bt.locator("#box-list li")).to_contain_text("away #7")
    bt.locator("#box-list li button").click()
    expect(bt.locator("#box-list li")).to_have_count(0, timeout=5_000)
    boxes = [e for e in _jam_children(a.api) if e["tag"] == "box"]
    assert len(boxes) == 1 and boxes[0]["attrs"]["team"] == "away" and boxes[0]["attrs"]["number"] == "7"
    assert float(boxes[0]["attrs"]["out"]) >= float(boxes[0]["attrs"]["in"])

    # The jam timer stops the jam (X) and calls a home team timeout (1): the scoreboard shows it.
    jt.keyboard.press("x")
    expect(jt.locator("#jam")).to_have_text("Up next: Period 1 · Jam 2", timeout=5_000)
    jt.keyboard.press("1")
    expect(board.locator("#jam-label")).to_have_text("Timeout · home", timeout=1_000)
    expect(board.locator("#timeouts-home")).to_have_attribute("data-left", "2")
    clocks = get(b.api, "/api/v1/bout/clocks")
    assert clocks["timeout"]["running"] and clocks["timeout"]["kind"] == "team" and clocks["timeout"]["team"] == "home"
    assert not clocks["period"]["running"] and not clocks["jam"]["running"]

    # Both nodes hold the same document; no page logged an error or scrolls sideways.
    wait_for(lambda: get(a.api, "/api/v1/bout/summary") == get(b.api, "/api/v1/bout/summary"), 10, "one bout")
    if conflicts_listed(a.api):  # a node that records roles: each operation names the page's role
        assert roles_recorded(b.api) == {
            "name": {"None"}, "start": {"jam-timer"}, "duration": {"jam-timer"}, "timeout": {"jam-timer"},
            "lineup": {"lineup-tracker-home"}, "points": {"scorekeeper-home"}, "lead": {"scorekeeper-home"},
            "starpass": {"scorekeeper-home"}, "penalty": {"penalty-tracker"}, "box": {"penalty-box-timer"},
            "out": {"penalty-box-timer"}}
    pages.legible()
    assert pages.errors == []


def test_once_the_clocks_end_period_1_the_jam_timer_starts_period_2(cluster: Cluster, browser: Any) -> None:
    from playwright.sync_api import expect

    a = cluster.start("alice")
    now = get(a.api, "/api/v1/bout/clocks")["now"]
    # Jam 1 skated, then period 1's end recorded after it: halftime, though the node's next jam is jam 2.
    assert http(a.api, "/api/v1/doc/ops", [
        {"op": "set", "to": {"period": 1}, "attribute": "start", "value": repr(now - 100)},
        {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": repr(now - 100)},
        {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "duration", "value": "30"},
        {"op": "set", "to": {"period": 1}, "attribute": "duration", "value": "60"},
    ])[0] == 201
    assert get(a.api, "/api/v1/bout/jams")["upcoming"] == {"period": 1, "jam": 2}
    pages = Pages(browser)
    board = pages.open(a.api + "/bout/scoreboard", LAPTOP)
    expect(board.locator("#jam-label")).to_have_text("Halftime", timeout=5_000)
    jt = pages.open(a.api + "/bout/role/jam-timer", PHONE)
    expect(jt.locator("#jam")).to_have_text("Up next: Period 2 · Jam 1", timeout=5_000)
    jt.keyboard.press("s")
    expect(jt.locator("#jam")).to_have_text("Period 2 · Jam 1 — LIVE", timeout=5_000)
    expect(board.locator("#period")).to_have_text("Period 2", timeout=5_000)
    clocks = get(a.api, "/api/v1/bout/clocks")
    assert clocks["period"]["number"] == 2 and clocks["period"]["running"] and clocks["jam"]["running"]
    assert not clocks["intermission"]["running"]
    assert pages.errors == []


def _jam_children(api: str) -> list[dict[str, Any]]:
    doc = get(api, "/api/v1/doc?format=json")["document"]
    period = next(e for e in doc["children"] if e["tag"] == "period" and e["attrs"]["number"] == "1")
    jam = next(e for e in period["children"] if e["tag"] == "jam" and e["attrs"]["number"] == "1")
    return list(jam.get("children", []))


@pytest.mark.parametrize("viewport", [PHONE, LAPTOP], ids=["390px", "1280px"])
def test_the_head_nso_view_lists_conflicts_and_signs_the_bout_off(
        cluster: Cluster, browser: Any, viewport: dict[str, int]) -> None:
    from playwright.sync_api import expect

    a, b = cluster.start("alice"), cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "alice and bob to mesh")
    assert http(a.api, "/api/v1/doc/ops", [
        {"op": "add", "to": {"team": "official"}, "children": [{"tag": "person", "attrs": {"name": "Rita",
                                                                                            "role": "head-referee"}}]},
        {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "1000"},
        {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "duration", "value": "60"},
        {"op": "add", "to": {"period": 1, "jam": 1}, "children": [
            {"tag": "points", "attrs": {"team": "home", "points": "3", "pass": "2"}}]},
    ])[0] == 201
    listed = conflicts_listed(b.api)
    if listed:  # the away scorekeeper writes a home trip: the home scorekeeper's field
        assert http(a.api, "/api/v1/doc/ops?role=scorekeeper-away", [{"op": "add", "to": {"period": 1, "jam": 1},
                    "children": [{"tag": "points", "attrs": {"team": "home", "points": "4", "pass": "3"}}]}])[0] == 201
    pages = Pages(browser)
    head = pages.open(b.api + "/bout/head", viewport)
    expect(head.locator("#score")).to_contain_text("3 \u2013 0", timeout=5_000)
    expect(head.locator("#periods tr")).to_have_count(3)
    if listed:
        expect(head.locator("#conflicts li").first).to_contain_text("scorekeeper-away", timeout=5_000)
    else:  # this node has no conflicts endpoint (a node before roles): the view says so
        expect(head.locator("#conflicts-note")).to_have_text("this node does not list conflicts")
    # The head NSO's page under its role's address is this view.
    assert pages.open(b.api + "/bout/role/head-nso", viewport).locator("h1").text_content() == "Head NSO"

    # Signed, then final, in one batch: F, the name, Enter.
    head.keyboard.press("f")
    head.keyboard.type("Rita")
    head.keyboard.press("Enter")
    expect(head.locator("#status")).to_have_text("Final · signed by Rita", timeout=5_000)
    expect(head.locator("#sign")).to_be_disabled()
    wait_for(lambda: get(a.api, "/api/v1/bout/summary")["status"] == "final", 10, "the bout final on alice")
    assert get(a.api, "/api/v1/bout/summary")["signed"] == "Rita"
    pages.legible()
    assert without_missing_conflicts(pages.errors, listed) == []


def test_a_device_alone_keeps_recording_and_its_entries_reach_the_peer_when_it_returns(
        cluster: Cluster, browser: Any) -> None:
    from playwright.sync_api import expect

    a, b = cluster.start("alice", *TIMING), cluster.start("bob", *TIMING)
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "alice and bob to mesh")
    assert http(a.api, "/api/v1/bout/start", method="POST")[0] == 201
    pages = Pages(browser)
    sk = pages.open(a.api + "/bout/role/scorekeeper-home", PHONE)
    board = pages.open(a.api + "/bout/scoreboard", PHONE)
    others = [pages.open(a.api + path, PHONE) for path in ("/bout", "/bout/head", "/bout/role")]
    for page in (sk, board, *others):
        expect(page.locator("#net")).to_have_text("1 peer reached", timeout=10_000)

    # Bob's node is gone: alice's pages say they are alone, and the scorekeeper keeps recording.
    b.signal(signal.SIGKILL)
    b.wait(10)
    for page in (sk, board, *others):
        expect(page.locator("#net")).to_have_text("alone — entries sync when the network returns", timeout=15_000)
    expect(sk.locator("#jam")).to_have_text("Period 1 · Jam 1 — LIVE")
    sk.keyboard.press("2")
    expect(sk.locator("#ok")).to_have_text("recorded: home +2", timeout=5_000)
    expect(board.locator("#score-home")).to_have_text("2", timeout=1_000)

    # Bob returns: the pages reach him again, and he holds the entry made while alice was alone.
    bob: NodeProcess = cluster.start("bob", *TIMING)
    for page in (sk, board, *others):
        expect(page.locator("#net")).to_have_text("1 peer reached", timeout=20_000)
    wait_for(lambda: get(bob.api, "/api/v1/bout/summary")["teams"]["home"]["score"] == 2, 20,
             "the entry made alone on bob")
    assert without_missing_conflicts(pages.errors, conflicts_listed(a.api)) == []


def test_the_display_node_of_the_docs_runs_the_scoreboard_in_kiosk_mode(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parent.parent / "docs" / "document.md").read_text()
    block = re.search(r"```toml\n(type = \"display\".*?)```", text, re.DOTALL)
    assert block is not None
    path = tmp_path / "display.toml"
    path.write_text(block.group(1))
    config = load_config(path)
    kind = config.type_spec()
    assert (kind.name, kind.on_cut_off) == ("display", "empty")  # the built-in display, apps added
    ((of, (app,)),) = config.type_apps
    assert of == "display" and app.name == "scoreboard"
    assert "--kiosk" in app.command[-1] and '"$HUDDLE_API/bout/scoreboard"' in app.command[-1]


def test_the_pages_addresses_refuse_what_is_not_a_page_and_the_node_stays_up(cluster: Cluster) -> None:
    a = cluster.start("alice")

    def status(path: str) -> int:
        try:
            with urllib.request.urlopen(a.api + path, timeout=10) as r:
                return int(r.status)
        except urllib.error.HTTPError as exc:
            return exc.code

    for path in ("/bout/role/" + "x" * 41, "/bout/role/%3Cscript%3E", "/bout/role/../../etc/passwd",
                 "/bout/role/jam-timer/more", "/bout/nothing", "/bout/bout.js/x"):
        assert status(path) == 404, path
    assert status("/bout/role/no-such-role") == 200  # the page offers the roles
    for path in ("/bout/role", "/bout/scoreboard", "/bout/head", "/bout/bout.js", "/bout"):
        assert status(path) == 200, path
    assert get(a.api, "/api/v1/bout/clocks")["jam"] == {"number": 0, "running": False, "elapsed": 0.0,
                                                        "remaining": 120.0}
