"""The status page (/) on a phone's width and on a desktop's, in Debian's chromium (Playwright).

At 390 px the page does not scroll sideways: the nodes are a stacked list of cards, each with its
name and state inside the screen; the mesh is drawn to the width, and at 32 nodes its labels
neither overlap nor leave the drawing; the other tables scroll inside their own boxes. At 1280 px
the nodes stay a table. The node serves the page and its live feed; its picture is replaced by a
made-up one of any size (the page's own refresh draws what /api/v1/system answers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, NodeProcess, http

from huddle.security import GroupSecret

pytestmark = pytest.mark.processes

PHONE = {"width": 390, "height": 844}
DESKTOP = {"width": 1280, "height": 900}
HEALTHS = ["ok", "slow", "lossy", "lagging", "degraded", "isolated", "cut-off"]
# Member states (docs/protocol.md 14.2) every few members: the badge shows a state that is not alive.
STATES = ["alive", "alive", "suspect", "alive", "failed", "alive", "left", "alive", "alive", "alive", "alive"]
SHOWN = [*HEALTHS, "suspect", "failed", "left"]


def picture(n: int) -> dict[str, Any]:
    """A full mesh of ``n`` members with long names (the last unbreakable), every health and one
    one-way link."""
    ids = [f"{i + 1:032x}" for i in range(n)]
    members = [{"uuid": u, "name": f"scoreboard-{i:02d}-rack-{i % 4}", "type": "standard",
                "health": HEALTHS[i % len(HEALTHS)], "problems": ["one-way", "slow"] if i % 5 == 1 else [],
                "rtt_ms": 0.5 + i, "age": 0.4, "rates": {"msgs_in": 1000 + i, "msgs_out": 2000, "bytes_in": 10,
                                                          "bytes_out": 123456}}
               for i, u in enumerate(ids)]
    links: list[dict[str, Any]] = [{"a": a, "b": b, "state": "two-way", "rtt_ms": 0.3}
                                   for j, a in enumerate(ids) for b in ids[j + 1:]]
    members[-1]["name"] = "scoreboard-" + "x" * 60  # one name with nowhere to break
    for i, m in enumerate(members):
        state = STATES[i % len(STATES)]
        if state != "alive":
            m |= {"state": state, "since": 1_764_000_000.5}
        if state in {"failed", "left"}:
            m |= {"health": state, "problems": [], "rtt_ms": None, "age": None, "rates": {}}
    members[0]["ext"] = {"posts": {"posts": 3, "octets": 10240, "note": "z" * 80}, "zeta": {"mode": "on"}}
    members[0]["tags"] = {"role": "scoreboard", "rack": "3"}
    members[-1]["tags"] = {f"k{t:02d}": "v" * 64 for t in range(16)}  # the most tags, the longest values
    if n > 1:
        links[0].update(state="one-way", rtt_ms=None, **{"from": ids[1], "to": ids[0]})
    return {"node": ids[0], "digest": "f" * 64, "members": members, "links": links}


def open_page(browser: Any, node: NodeProcess, viewport: dict[str, int], n: int) -> Any:
    from playwright.sync_api import expect

    pic = picture(n)
    page = browser.new_page(viewport=viewport)
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.route("**/api/v1/system", lambda route: route.fulfill(json=pic))
    page.goto(node.api + "/")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
    expect(page.locator("#graph g.node")).to_have_count(n, timeout=10_000)
    expect(page.locator("#nodes tr")).to_have_count(n)
    assert errors == []
    return page


# Measured in one go: the page redraws its tables and graph on each refresh (every 2 s), so an
# element found by one call may be gone by the next.
CARDS_JS = """() => [...document.querySelectorAll('#nodes tr')].map((tr) => [tr.cells[0], tr.querySelector('.badge')]
  .map((e) => ({text: e.textContent, left: e.getBoundingClientRect().left, right: e.getBoundingClientRect().right,
                cut: e.scrollWidth > e.clientWidth + 1, px: parseFloat(getComputedStyle(e).fontSize)})))"""
NODES_JS = """() => [document.querySelector('#graph').getBoundingClientRect().toJSON(),
  [...document.querySelectorAll('#graph g.node')].map((g) => g.getBoundingClientRect().toJSON())]"""

# Each label of the graph as its four corners on the screen (a label may be turned along its radius)
# and its letters' height in screen pixels.
LABELS_JS = """() => [...document.querySelectorAll('#graph g.node text.name')].map((t) => {
  const b = t.getBBox(), m = t.getScreenCTM();
  const pts = [[b.x, b.y], [b.x + b.width, b.y], [b.x + b.width, b.y + b.height], [b.x, b.y + b.height]]
    .map(([x, y]) => [m.a * x + m.c * y + m.e, m.b * x + m.d * y + m.f]);
  return {text: t.textContent, pts, px: parseFloat(t.getAttribute('font-size')) * Math.hypot(m.a, m.b)};
})"""


def overlap(p: list[list[float]], q: list[list[float]], slack: float = 0.5) -> bool:
    """Whether two convex quadrilaterals overlap by more than ``slack`` px (separating axes)."""
    for poly in (p, q):
        for i in range(4):
            (x1, y1), (x2, y2) = poly[i], poly[(i + 1) % 4]
            nx, ny = y1 - y2, x2 - x1
            norm = (nx * nx + ny * ny) ** 0.5 or 1.0
            a = [(x * nx + y * ny) / norm for x, y in p]
            b = [(x * nx + y * ny) / norm for x, y in q]
            if max(a) <= min(b) + slack or max(b) <= min(a) + slack:
                return False
    return True


def check_graph(page: Any, n: int, width: int) -> None:
    """The drawing within the page's width, every node inside it, labels apart and readable."""
    svg, boxes = page.evaluate(NODES_JS)
    assert svg["left"] >= 0 and svg["right"] <= width, svg
    assert len(boxes) == n
    for box in boxes:
        assert svg["left"] - 0.5 <= box["left"] and box["right"] <= svg["right"] + 0.5, (box, svg)
        assert svg["top"] - 0.5 <= box["top"] and box["bottom"] <= svg["bottom"] + 0.5, (box, svg)
    labels = page.evaluate(LABELS_JS)
    assert len(labels) == n
    for label in labels:
        assert label["px"] >= 9, f"{label['text']!r} is {label['px']:.1f} px high"
        assert 1 <= len(label["text"]) <= 12, label["text"]
    clash = [(a["text"], b["text"]) for i, a in enumerate(labels) for b in labels[i + 1:] if overlap(a["pts"], b["pts"])]
    assert clash == [], f"labels overlap at {n} nodes: {clash[:5]}"


@pytest.mark.parametrize("n", [3, 8, 12, 32])
def test_on_a_phone_the_nodes_are_cards_and_nothing_scrolls_sideways(cluster: Cluster, browser: Any, n: int) -> None:
    node = cluster.start("solo", beacon=False)
    page = open_page(browser, node, PHONE, n)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    # Every node's name and state inside the screen and not cut.
    assert page.locator("#nodes").evaluate("(t) => getComputedStyle(t.closest('table').tHead).display") == "none"
    cards = page.evaluate(CARDS_JS)
    assert len(cards) == n
    for name, state in cards:
        assert name["text"].startswith("scoreboard-") and state["text"] in SHOWN, (name, state)
        for cell in (name, state):
            assert cell["left"] >= 0 and cell["right"] <= PHONE["width"] and not cell["cut"], cell
            assert cell["px"] >= 11, cell
    # Each card's measures carry their names (the table's head is hidden on a phone).
    first = page.locator("#nodes tr").first.locator("td")
    assert [first.nth(i).get_attribute("data-label") for i in (3, 5)] == ["since", "rtt ms"]
    # The tags: compact (k=v), inside the screen, also the most and longest a node may have.
    tags = page.evaluate("""() => [...document.querySelectorAll('#nodes td.tags')].map((td) => ({text: td.textContent,
      left: td.getBoundingClientRect().left, right: td.getBoundingClientRect().right}))""")
    assert tags[0]["text"] == "rack=3, role=scoreboard" and tags[1]["text"] == "\u2013", tags[:2]
    assert all(t["left"] >= 0 and t["right"] <= PHONE["width"] for t in tags), tags
    # The other tables scroll in their own boxes, never the page.
    boxes = page.evaluate("""() => [...document.querySelectorAll('#links, #features tbody')]
      .map((t) => t.closest('.scroll').getBoundingClientRect().toJSON())""")
    assert len(boxes) == 3, boxes  # the links, and a table per feature
    for box in boxes:
        assert box["left"] >= 0 and box["right"] <= PHONE["width"], box
    assert boxes[0]["height"] <= PHONE["height"] / 2, "the links scroll in a box of their own"
    check_graph(page, n, PHONE["width"])


@pytest.mark.parametrize("n", [4, 32])
def test_on_a_desktop_the_nodes_stay_a_table(cluster: Cluster, browser: Any, n: int) -> None:
    node = cluster.start("solo", beacon=False)
    page = open_page(browser, node, DESKTOP, n)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= DESKTOP["width"]
    assert page.locator("#nodes").evaluate("(t) => getComputedStyle(t.closest('table').tHead).display") != "none"
    assert page.locator("#nodes tr").first.evaluate("(r) => getComputedStyle(r).display") == "table-row"
    # Today's drawing at a few nodes: the rates under each name; at many, on hover (the node's title).
    expect_rates = n <= 8
    assert page.locator("#graph g.node text.rates").count() == (n if expect_rates else 0)
    assert "msg/s" in page.locator("#graph g.node title").first.text_content()
    check_graph(page, n, DESKTOP["width"])


def test_on_a_phone_the_join_panel_and_the_feed_wrap(cluster: Cluster, browser: Any, tmp_path: Path) -> None:
    """A secured node's join panel (its code, its QR) and a live event with a long unbreakable
    body stay inside the phone's width: the feed and the codes wrap."""
    from playwright.sync_api import expect

    key = tmp_path / "test.key"
    GroupSecret.new("test").save(key)
    node = cluster.start("solo", "--group-key", str(key), beacon=False)
    page = browser.new_page(viewport=PHONE)
    page.goto(node.api + "/")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
    expect(page.locator("#join")).to_be_visible(timeout=10_000)
    assert http(node.api, "/api/v1/events", {"kind": "note", "body": {"text": "w" * 300}})[0] == 201
    expect(page.locator("#feed li[data-type=event]").first).to_contain_text("w" * 50, timeout=10_000)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= PHONE["width"]
    for part in ("#join-code", "#join-room-key", "#join-qr", "#feed li"):
        box = page.locator(part).first.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"], (part, box)
