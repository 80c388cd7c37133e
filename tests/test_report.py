"""report.html from rows (no Spark): plots by Plotly, numbers for people, names that collide,
clocks apart.  tests/test_pipeline.py renders a whole run's report in Chromium at two widths."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from huddle.pipeline import plots
from huddle.pipeline.report import ReportData, render

G = "bout"
# Three nodes whose ids are alike in their first 8 digits, two of them named alike: a plot's
# category axis merges equal labels (a matrix of merged labels draws NaN-sized cells).
A, B, C = "0f2f08cc" + "a" * 24, "0f2f08cc" + "b" * 24, "0f2f08cc" + "c" * 24
NAMES = {A: "scoreboard", B: "scoreboard"}


def delay(by: str, key: str, p50: float, receipts: int = 1_234_567) -> dict[str, Any]:
    return {"group": G, "by": by, "key": key, "receipts": receipts, "p50": p50, "p90": 0.012, "p99": 0.48, "max": 2.8}


def propagation() -> ReportData:
    delays = [delay("receiver", A, -0.003), delay("receiver", B, 0.002), delay("receiver", C, 0.0011),
              delay("hops", "1", 0.001), delay("source", A, 0.001)]
    delays += [delay("link", f"{x}>{y}", 0.002, 1000 + i) for i, (x, y) in enumerate((x, y) for x in (A, B, C)
                                                                                     for y in (A, B, C) if x != y)]
    return ReportData(
        inputs=["/tmp/export"], jobs=["propagation", "system"], names=NAMES, delays=delays,
        histogram=[{"group": G, "bucket": b, "receipts": n} for b, n in ((-13, 40), (0, 900), (4, 12_000_000), (13, 3))],
        throughput=[{"group": G, "window_start": 1.7e9 + i, "originated": 2_000_000, "receipts": 4_000_000}
                    for i in range(5)],
        snapshots=[{"group": G, "node": n, "ts": 1.7e9 + 10 * i, "peers": 2, "peers_alive": 2, "received": 1, "sent": 1}
                   for i in range(4) for n in (A, B, C)],
        clocks=[{"group": G, "node": B, "peer": A, "ts": 1.7e9, "offset": -0.0042, "rtt_ms": 0.8}])


def figures(page: str) -> dict[str, dict[str, Any]]:
    """Each plot's Plotly figure, by its ``data-plot`` name, read back from the page."""
    found = re.findall(r'data-plot="([\w-]+)"></div><script>\(function \(\) \{var f = (.*?); Plotly\.newPlot', page)
    return {name: json.loads(spec) for name, spec in found}


def test_delays_are_on_log_axes_with_titles_and_a_percentile_at_or_below_zero_is_hollow_and_explained() -> None:
    page = render(propagation())
    figs = figures(page)
    assert set(figs) == {"histogram", "delay-receiver", "delay-hops", "throughput", "links", "peers"}
    for name, fig in figs.items():
        layout = fig["layout"]
        assert layout["title"]["text"] and layout["xaxis"]["title"]["text"] and layout["yaxis"]["title"]["text"], name
    assert figs["histogram"]["layout"]["xaxis"]["type"] == "log" and figs["histogram"]["layout"]["yaxis"]["type"] == "log"
    assert figs["delay-receiver"]["layout"]["xaxis"]["type"] == "log"
    # The histogram draws no bucket of zero or less; the note counts it.
    assert min(figs["histogram"]["data"][0]["x"]) >= 1 and 40 not in figs["histogram"]["data"][0]["y"]
    assert "40 of 12,000,943 receipts (0.00033 %) have a delay of zero or less" in page
    assert "Delays are corrected by the group&#x27;s measured clock offsets" in page and "±0.400 ms" in page
    p50 = next(t for t in figs["delay-receiver"]["data"] if t.get("name") == "p50")
    at = dict(zip(p50["y"], zip(p50["x"], p50["marker"]["symbol"], strict=True), strict=True))
    negative = next(label for label in at if A in label)
    assert at[negative] == (plots.FLOOR_MS, "circle-open")  # drawn at the floor, hollow: never a negative bar
    assert all(symbol == "circle" for label, (_, symbol) in at.items() if label != negative)
    assert "≤ 0: clocks apart" in " ".join(p50["text"])


def test_names_and_ids_alike_keep_their_own_rows_and_cells() -> None:
    figs = figures(render(propagation()))
    links = figs["links"]["data"][0]
    assert len(set(links["x"])) == 3 and len(set(links["y"])) == 3  # three nodes, three columns and rows
    assert all(sum(v is not None for v in row) == 2 for row in links["z"])  # each sends to the two others
    receivers = next(t for t in figs["delay-receiver"]["data"] if t.get("name") == "p99")["y"]
    assert len(set(receivers)) == 3  # three receivers: none merged
    assert sorted(receivers) == sorted(["0f2f08cc", f"scoreboard (0f2f08cc) [{A} {G}]", f"scoreboard (0f2f08cc) [{B} {G}]"])


def test_numbers_and_times_are_for_people() -> None:
    page = render(propagation())
    tables = page.split("<h3>Delay by source</h3>")[1]
    cells = re.findall(r"<td class=\w+>(.*?)</td>", tables)
    assert "1,234,567" in cells and "2,800" in cells and "480" in cells and "1.00" in cells  # counts and ms
    assert "-3.00" in cells and "<td class=neg>-3.00</td>" in tables  # a negative delay stands out
    assert "2023-11-14 22:13:20.000" in cells  # a clock_synced row's mesh time, in UTC
    assert "scoreboard (0f2f08cc) &gt; scoreboard (0f2f08cc)" in tables  # a link's ends by name
    text = re.sub(r"<(script|style)>.*?</\1>", "", page, flags=re.S)
    assert not re.search(r"\d[eE][+-]?\d", text)  # no scientific notation anywhere in the page's text


class _Attrs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.links: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.links += [v or "" for k, v in attrs if k in ("src", "href")]


def test_the_page_is_one_file_and_plotly_comes_only_with_plots() -> None:
    page = render(propagation())
    parsed = _Attrs()
    parsed.feed(page)
    assert parsed.links == [] and "table" in parsed.tags
    assert page.count(plots.library()) == 1  # inlined once, before the plots' scripts
    assert page.index(plots.library()) < page.index("Plotly.newPlot")
    bare = render(ReportData(inputs=["x"], jobs=["convergence"], missing_by_node=[{"group": G, "node": A, "events": 2,
                                                                                 "ranges": 1}]))
    assert "Plotly" not in bare and len(bare) < 20_000
    assert '<meta name=viewport content="width=device-width, initial-scale=1">' in bare
    assert "<table class=sortable>" in bare and "aria-sort" in bare  # sortable by a click on a head


def test_text_from_the_inputs_is_text_in_plots_too() -> None:
    hostile = '<a href="http://127.0.0.1:9/">x</a>'
    data = propagation()
    data.names = {A: hostile}
    page = render(data)
    assert hostile not in page
    labels = json.dumps(figures(page))
    assert "&lt;a href=&quot;http://127.0.0.1:9/&quot;&gt;x&lt;/a&gt;" in labels  # Plotly shows entities as text


def test_alike_names_draw_without_error_in_chromium(browser: Any, tmp_path: Path) -> None:
    """Merged category labels made Plotly draw NaN-sized cells ("<rect> attribute height"): none now,
    at a phone's width, with every request but the page's own refused."""
    report = tmp_path / "report.html"
    report.write_text(render(propagation()))
    page = browser.new_page(viewport={"width": 390, "height": 844})
    problems: list[str] = []
    page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
               else (problems.append(route.request.url), route.abort()))
    page.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
    page.on("pageerror", lambda exc: problems.append(str(exc)))
    page.goto(report.as_uri())
    page.wait_for_function("[...document.querySelectorAll('.plot')].every(p => p.querySelector('.main-svg'))",
                           timeout=30_000)
    assert page.evaluate("document.querySelectorAll('.plot .main-svg').length") >= 6
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    assert problems == []
