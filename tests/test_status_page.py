"""The status page (/) in a real browser: Debian's chromium, headless, driven by Playwright.
The graph is checked on a screenshot too: the node circles are counted in its pixels."""

from __future__ import annotations

import signal
import struct
import zlib
from typing import Any

import pytest
from conftest import Cluster, get, http, wait_for

pytestmark = pytest.mark.processes

OK_GREEN = (0x2E, 0x9D, 0x4A)  # the page's colour of a healthy node
ONE_WAY_RED = (0xC0, 0x39, 0x2B)


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB rows of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat = 8, b""
    width = height = channels = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind, body = data[pos + 4:pos + 8], data[pos + 8:pos + 8 + length]
        pos += 12 + length
        if kind == b"IHDR":
            width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", body)
            assert depth == 8 and interlace == 0 and color in (2, 6), (depth, color, interlace)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
    raw = zlib.decompress(idat)
    stride = width * channels
    rows: list[bytes] = []
    prev = bytearray(stride)
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(v for x in range(width) for v in line[x * channels:x * channels + 3]))
        prev = line
    return width, height, rows


def blobs(png: bytes, colour: tuple[int, int, int], min_area: int = 150) -> int:
    """How many separate patches of ``colour`` (4-connected, at least ``min_area`` pixels)."""
    width, height, rows = png_pixels(png)
    hit = [[all(abs(rows[y][3 * x + k] - colour[k]) <= 12 for k in range(3)) for x in range(width)]
           for y in range(height)]
    seen = [[False] * width for _ in range(height)]
    count = 0
    for y in range(height):
        for x in range(width):
            if hit[y][x] and not seen[y][x]:
                area, stack = 0, [(x, y)]
                seen[y][x] = True
                while stack:
                    cx, cy = stack.pop()
                    area += 1
                    for nx, ny in ((cx + 1, cy), (cx - 1, cy), (cx, cy + 1), (cx, cy - 1)):
                        if 0 <= nx < width and 0 <= ny < height and hit[ny][nx] and not seen[ny][nx]:
                            seen[ny][nx] = True
                            stack.append((nx, ny))
                if area >= min_area:
                    count += 1
    return count


def test_the_status_page_draws_the_mesh_and_shows_events_live(cluster: Cluster, browser: Any) -> None:
    from playwright.sync_api import expect

    nodes = [cluster.start(name) for name in ("ann", "ben", "cat", "dee")]
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "four nodes to mesh")
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(nodes[0].api + "/")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
    expect(page.locator("#self")).to_have_text("ann (standard)")
    expect(page.locator("#bout-link")).to_be_visible()  # the node has the bout document feature
    expect(page.locator("#count")).to_have_text("4", timeout=20_000)
    expect(page.locator("#graph g.node")).to_have_count(4)
    expect(page.locator("#graph line.link")).to_have_count(6)
    expect(page.locator("#nodes tr .badge")).to_have_text(["ok"] * 4, timeout=20_000)
    expect(page.locator("#links tr td:nth-child(2)")).to_have_text(["two-way"] * 6)
    assert blobs(page.locator("#graph").screenshot(), OK_GREEN) == 4
    # Every node's key fingerprint, its own and its peers' (all verified: new data directories).
    keys = sorted(get(n.api, "/api/v1/node")["key"] for n in nodes)
    wait_for(lambda: sorted(page.locator("#nodes tr td.key").all_inner_texts()) == keys, 20, "the keys")

    # An event recorded on another node appears in the live stream.
    assert http(nodes[2].api, "/api/v1/events", {"kind": "penalty", "body": {"skater": 12}})[0] == 201
    expect(page.locator("#feed li[data-type=event]").first).to_contain_text('penalty {"skater":12}', timeout=10_000)

    # A node leaves: the page follows the picture down to three nodes, the one that left listed grey.
    nodes[3].signal(signal.SIGTERM)
    nodes[3].wait(10)
    expect(page.locator("#feed li[data-type=peer_left]").first).to_contain_text("dee left", timeout=10_000)
    expect(page.locator("#count")).to_have_text("3 (+1 gone)", timeout=30_000)
    expect(page.locator("#nodes tr[data-state=left] .badge")).to_have_text("left")
    expect(page.locator("#graph g.node[data-state=left]")).to_have_count(1)
    assert blobs(page.locator("#graph").screenshot(), OK_GREEN) == 3
    assert errors == []


def test_the_graph_marks_one_way_and_slow_links(cluster: Cluster, browser: Any) -> None:
    """The drawing of a picture with a one-way and a slow link (the picture itself is tested in
    test_picture.py and, one-way through a real firewall, in test_faults.py)."""
    from playwright.sync_api import expect

    a = cluster.start("solo", beacon=False)
    ids = [c * 32 for c in "123"]
    picture = {
        "node": ids[0], "digest": "f" * 64,
        "members": [{"uuid": u, "name": n, "type": "standard", "health": h, "problems": p, "rtt_ms": 1.0, "age": 0.5,
                     "rates": {"msgs_in": 1, "msgs_out": 2, "bytes_in": 10, "bytes_out": 20}}
                    for u, n, h, p in zip(ids, ("x", "y", "z"), ("degraded", "degraded", "slow"),
                                          (["one-way"], ["one-way", "slow"], ["slow"]), strict=True)],
        "links": [{"a": ids[0], "b": ids[1], "state": "one-way", "from": ids[1], "to": ids[0], "rtt_ms": None},
                  {"a": ids[0], "b": ids[2], "state": "two-way", "rtt_ms": 0.3},
                  {"a": ids[1], "b": ids[2], "state": "slow", "rtt_ms": 400.0}],
    }
    # The page's own refresh (on connecting, every 2 s, on each peer event) draws this picture: it is
    # what the node answers. (Drawing it by hand raced with a refresh already under way.)
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.route("**/api/v1/system", lambda route: route.fulfill(json=picture))
    page.goto(a.api + "/")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
    expect(page.locator("#graph g.node")).to_have_count(3)
    one_way = page.locator("#graph line[data-state=one-way]")
    expect(one_way).to_have_attribute("marker-end", "url(#arrow)")
    expect(page.locator("#graph line[data-state=slow]")).to_have_attribute("stroke-dasharray", "8 5")
    expect(page.locator("#links tr td:nth-child(2)")).to_have_text(["one-way y → x", "two-way", "slow"])
    expect(page.locator("#nodes tr .badge")).to_have_text(["degraded", "degraded", "slow"])
    shot = page.locator("#graph").screenshot()
    assert blobs(shot, ONE_WAY_RED) >= 2, "two degraded nodes and the red arrow"
    assert blobs(shot, OK_GREEN) == 0


def test_the_features_facts_show_as_a_table_per_feature(cluster: Cluster, browser: Any) -> None:
    """Each member's ``ext`` (protocol.md 14.1), drawn with no knowledge of any feature: a table
    per feature, a row per member that reports it, a column per fact."""
    from playwright.sync_api import expect

    a = cluster.start("solo", beacon=False)
    ids = [c * 32 for c in "12"]
    exts = [{"posts": {"posts": 3, "octets": 10240}, "zeta": {"mode": "on", "ready": True}},
            {"posts": {"posts": 1, "octets": 20, "sealed": None}}]
    picture = {
        "node": ids[0], "digest": "f" * 64, "links": [{"a": ids[0], "b": ids[1], "state": "two-way", "rtt_ms": 0.3}],
        "members": [{"uuid": u, "name": n, "type": "standard", "health": "ok", "problems": [], "rtt_ms": 1.0,
                     "age": 0.5, "rates": {}, "ext": ext} for u, n, ext in zip(ids, ("x", "y"), exts, strict=True)],
    }
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    page.route("**/api/v1/system", lambda route: route.fulfill(json=picture))
    page.goto(a.api + "/")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
    expect(page.locator("#features table")).to_have_count(2, timeout=10_000)
    expect(page.locator("#features h2")).to_have_text(["posts", "zeta"])
    expect(page.locator("#features table[data-feature=posts] th")).to_have_text(["name", "posts", "octets", "sealed"])
    dash = "\u2013"  # the page's sign of a fact a member does not give
    expect(page.locator("#features table[data-feature=posts] tbody tr")).to_have_text(["x310240" + dash, "y120null"])
    expect(page.locator("#features table[data-feature=zeta] tbody tr td")).to_have_text(["x", "on", "true"])


def test_the_apps_show_per_node_with_their_orders(cluster: Cluster, browser: Any) -> None:
    """Every node's apps (its ``apps`` facts) in their states' colours, each with start / stop /
    restart carried to its node (``?node=ID``), and node orders only once confirmed
    (docs/control.md, "Orders from any node"); at a phone's width, inside the screen."""
    from playwright.sync_api import expect

    a = cluster.start("solo", beacon=False)
    ids = [c * 32 for c in "12"]
    exts = [{"apps": {"scoreboard": "running", "clock": "exited (0)"},
             "apps-info": {"scoreboard": "pid=4242 restarts=2 since=880.0 exit=3 one-of-type"}}, {"posts": {"posts": 1}}]
    picture = {
        "node": ids[0], "digest": "f" * 64, "links": [], "time": 1000.0,
        "members": [{"uuid": u, "name": n, "type": "standard", "health": "ok", "problems": [], "rtt_ms": 1.0,
                     "age": 0.5, "rates": {}, "ext": ext} for u, n, ext in zip(ids, ("x", "y"), exts, strict=True)],
    }
    posted: list[tuple[str, str | None]] = []

    def answer(route: Any) -> None:
        posted.append((route.request.url.removeprefix(a.api), route.request.post_data))
        route.fulfill(json={"state": "stopping", "stopping": True})

    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.route("**/api/v1/system", lambda route: route.fulfill(json=picture))
    page.route("**/api/v1/apps/**", answer)
    page.route("**/api/v1/control/**", answer)
    page.goto(a.api + "/")
    expect(page.locator("#apps .node")).to_have_count(1, timeout=10_000)  # y runs no app: not listed
    expect(page.locator("#apps .app")).to_have_count(2)
    expect(page.locator("#apps .app[data-app=scoreboard] .badge")).to_have_class("badge a-running")
    expect(page.locator("#apps .app[data-app=clock] .badge")).to_have_class("badge a-exited")
    # Its details from the apps-info facts, the uptime from the picture's mesh time (docs/control.md).
    expect(page.locator("#apps .app[data-app=scoreboard] .info")).to_have_text(
        "pid 4242 · up 2 min · 2 restarts · last exit 3 · one-of-type, runs on x")
    expect(page.locator("#apps .app[data-app=clock] .info")).to_have_count(0)  # nothing to say of it
    expect(page.locator("#features table[data-feature=apps-info]")).to_have_count(0)  # raw words: not shown
    page.locator("#apps .app[data-app=scoreboard] button[title^=stop]").click()
    expect(page.locator("#apps-said")).to_have_text("stop scoreboard on x: stopping", timeout=10_000)
    assert posted == [(f"/api/v1/apps/scoreboard/stop?node={ids[0]}", "{}")]
    page.once("dialog", lambda dialog: dialog.dismiss())  # not confirmed: nothing sent
    page.locator("#apps button", has_text="reboot node").click()
    page.once("dialog", lambda dialog: dialog.accept())
    page.locator("#apps button", has_text="stop node").click()
    expect(page.locator("#apps-said")).to_have_text("stop x: stopping", timeout=10_000)
    assert len(posted) == 2 and posted[1] == ("/api/v1/control/stop", '{"node":"' + ids[0] + '"}')
    right = page.evaluate("() => Math.max(...[...document.querySelectorAll('#apps .app, #apps button')]"
                          ".map((e) => e.getBoundingClientRect().right))")
    assert right <= 390, right
