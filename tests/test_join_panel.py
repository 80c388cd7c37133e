"""The join panel (docs/security.md, "The join panel"): a secured group's join code as text and as a QR code (SVG, made by
segno) on the status page, with the guests' room key; only on loopback or with the API token,
and only when the node has a group secret."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster
from test_api_token import request

from huddle.api.join import join_svg, join_uri
from huddle.security import GroupSecret

pytestmark = pytest.mark.processes

GROUP = "derby skaters"  # a name a URI must escape
SECRET = GroupSecret.new(GROUP)


def test_the_join_uri_names_the_group_and_the_code() -> None:
    assert join_uri(SECRET) == f"huddle:join?group=derby%20skaters&code={SECRET.code}"
    svg = join_svg(SECRET)
    assert svg.startswith(b"<?xml") and b'xmlns="http://www.w3.org/2000/svg"' in svg and b"<path" in svg


def test_a_secured_node_shows_its_join_code_on_loopback(cluster: Cluster) -> None:
    node = cluster.start("a", "--join", SECRET.code, group=GROUP, beacon=False)
    status, headers, body = request(node.api + "/api/v1/join")
    assert status == 200 and headers["Cache-Control"] == "no-store", (status, body)
    assert body == (b'{"group": "derby skaters", "key_id": "%s", "join_code": "%s", "room_key": "%s", "uri": "%s"}'
                    % (SECRET.key_id.encode(), SECRET.code.encode(), SECRET.room_key_text().encode(),
                       join_uri(SECRET).encode()))
    status, headers, svg = request(node.api + "/api/v1/join.svg")
    assert status == 200 and headers["Content-Type"].startswith("image/svg+xml")
    assert svg == join_svg(SECRET)  # the QR code of the join URI, as segno draws it


def test_an_open_node_has_no_join_code(cluster: Cluster) -> None:
    node = cluster.start("a", beacon=False, secure=False)  # open (--open): this test is about open mode
    for path in ("/api/v1/join", "/api/v1/join.svg"):
        status, _, body = request(node.api + path)
        assert status == 404 and b"open group" in body


def test_the_join_code_needs_the_token_when_the_api_does(cluster: Cluster, tmp_path: Path) -> None:
    node = cluster.start("a", "--join", SECRET.code, "--api-require-token", group=GROUP, beacon=False)
    token = (tmp_path / "a" / "api-token").read_text().strip()
    for path in ("/api/v1/join", "/api/v1/join.svg"):
        status, _, body = request(node.api + path)
        assert status == 401 and SECRET.code.encode() not in body
        assert request(node.api + path, {"Authorization": "Bearer " + token})[0] == 200


def test_the_status_page_shows_the_join_panel_in_chromium(cluster: Cluster, browser: Any) -> None:
    from playwright.sync_api import expect

    secured = cluster.start("a", "--join", SECRET.code, group=GROUP, beacon=False)
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(secured.api + "/")
    expect(page.locator("#join")).to_be_visible(timeout=10_000)
    expect(page.locator("#join-code")).to_have_text(SECRET.code)
    expect(page.locator("#join-room-key")).to_have_text(SECRET.room_key_text())
    page.wait_for_function("document.getElementById('join-qr').complete "
                           "&& document.getElementById('join-qr').naturalWidth > 100", timeout=10_000)
    open_node = cluster.start("b", beacon=False, secure=False)  # open (--open): it has no join panel
    page.goto(open_node.api + "/")
    expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
    expect(page.locator("#join")).to_be_hidden()
    assert not errors, errors
