"""The officials' page (/bout) in a real browser: Debian's chromium, headless, driven by Playwright."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import Cluster, get, wait_for

pytestmark = pytest.mark.processes


def test_an_entry_on_one_node_appears_on_the_other(cluster: Cluster, browser: Any) -> None:
    from playwright.sync_api import expect

    a, b = cluster.start("alice"), cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "alice and bob to mesh")
    page_a, page_b = browser.new_page(), browser.new_page()
    errors: list[str] = []
    for page in (page_a, page_b):
        page.on("pageerror", lambda exc: errors.append(str(exc)))
    page_a.goto(a.api + "/bout")
    page_b.goto(b.api + "/bout")
    for page in (page_a, page_b):
        expect(page.locator("#conn")).to_have_text("live", timeout=10_000)
        expect(page.locator("#jam")).to_have_text("Up next: Period 1 · Jam 1")
        expect(page.locator("#start")).to_be_enabled()
        expect(page.locator("#stop")).to_be_disabled()

    # Alice starts the jam with the keyboard; both pages show it live.
    page_a.keyboard.press("s")
    for page in (page_a, page_b):
        expect(page.locator("#jam")).to_have_text("Period 1 · Jam 1 — LIVE", timeout=10_000)

    # Alice enters a lineup (L, number, Enter); it appears on Bob's page, credited to alice.
    page_a.keyboard.press("l")
    page_a.keyboard.type("12")
    page_a.keyboard.press("Enter")
    expect(page_b.locator("#entries li")).to_have_text(["home jammer #12"], timeout=10_000)
    expect(page_b.locator("#feed li").first).to_contain_text("alice")

    # Bob records a penalty for the away team (A, K, number, Tab, code, Enter); Alice sees it.
    page_b.keyboard.press("a")
    page_b.keyboard.press("k")
    page_b.keyboard.type("7")
    page_b.keyboard.press("Tab")
    page_b.keyboard.type("B")
    page_b.keyboard.press("Enter")
    expect(page_a.locator("#entries li")).to_have_text(["home jammer #12", "away #7 penalty B"], timeout=10_000)

    # Bob stops the jam (X): both pages move on to jam 2, and the document agrees.
    page_b.keyboard.press("x")
    for page in (page_a, page_b):
        expect(page.locator("#jam")).to_have_text("Up next: Period 1 · Jam 2", timeout=10_000)
        expect(page.locator("#done")).to_have_text("last: Period 1 · Jam 1")
    jams = get(a.api, "/api/v1/bout/jams")
    assert jams["just_completed"]["jam"] == 1 and jams["just_completed"]["duration"] >= 0

    # Stopping again is refused, with the reason shown on the page.
    page_a.keyboard.press("x")
    expect(page_a.locator("#error")).to_have_text("no jam is being skated")
    assert errors == []
