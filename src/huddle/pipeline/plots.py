"""The report's plots, drawn by Plotly (plotly.py builds and checks each figure;
plotly.js, inlined once in the page by :func:`library`, draws it in the browser).

Pure: plain Python rows in, a ``<div>`` and its ``<script>`` out.  Delays are
drawn on log axes (a p99 a hundred times the p50 stays readable beside it),
counts with thousands separators, never in scientific notation.  Text that
came from the inputs (node names, groups) is HTML-escaped before Plotly sees
it: Plotly draws a few HTML tags in labels (links among them), and a peer
chooses its own name.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from html import escape
from itertools import count
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs

__all__ = [
    "FLOOR_MS", "bout_score", "delay_histogram", "library", "link_matrix", "num", "peers_alive", "percentiles",
    "throughput",
]

Rows = list[dict[str, Any]]
Label = Callable[[Any], str]

# Where a delay of zero or less is drawn on a log axis (it has no place there): at this many
# milliseconds, as a hollow marker its hover text explains.
FLOOR_MS = 0.01
# Plotly's own settings for every plot: fits its box (phones), no logo link, no cloud export.
CONFIG = {"responsive": True, "displaylogo": False, "modeBarButtonsToRemove": ["sendDataToCloud", "select2d", "lasso2d"]}
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
_ids = count(1)


def library() -> str:
    """plotly.js, to inline once in the page's head: the report works offline, from a file."""
    return str(get_plotlyjs())


def _layout(title: str, xtitle: str, ytitle: str, *, height: int = 360, xlog: bool = False, ylog: bool = False,
            **extra: Any) -> dict[str, Any]:
    axis = {"showgrid": True, "gridcolor": "#e5e5e5", "zeroline": False, "automargin": True, "separatethousands": True,
            "exponentformat": "none"}
    return {
        "template": "plotly_white",
        "title": {"text": escape(title), "x": 0, "xanchor": "left", "y": 1, "yref": "container", "yanchor": "top",
                  "pad": {"t": 8}, "font": {"size": 14}},
        "height": height,
        "autosize": True,
        "margin": {"l": 10, "r": 10, "t": 64, "b": 10},
        # A log axis labelled at each power of ten only (1, 10, 100: no 2s and 5s between to crowd a phone).
        "xaxis": {**axis, "title": {"text": escape(xtitle)}, **({"type": "log", "dtick": 1} if xlog else {})},
        "yaxis": {**axis, "title": {"text": escape(ytitle)}, **({"type": "log", "dtick": 1} if ylog else {})},
        # Above the plot, under the title (below it, it would cover the x axis's title).
        "legend": {"orientation": "h", "x": 0, "y": 1, "yanchor": "bottom"},
        "hoverlabel": {"namelength": -1},
        **extra,
    }


def _div(fig: go.Figure, name: str) -> str:
    """The figure as a ``<div>`` drawn by a script beside it; ``name``: the div's ``data-plot``, for tests."""
    spec = pio.to_json(fig, validate=True)
    # Plotly's JSON escapes '<', '>' and '/' already; ensure it: the text sits inside a <script>.
    spec = spec.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    div = f"plot{next(_ids)}"
    return (f'<div class=plot id={div} data-plot="{escape(name)}"></div><script>(function () {{'
            f"var f = {spec}; Plotly.newPlot({div!r}, f.data, f.layout, {json.dumps(CONFIG)});"
            "})();</script>")


def _distinct(labels: list[str], keys: list[str]) -> list[str]:
    """``labels`` (escaped) for a category axis, which merges equal ones (and draws a matrix of
    them wrong): a label two keys share (two nodes named alike, ids alike in 8 digits) gets its key."""
    seen: dict[str, int] = {}
    for label in labels:
        seen[label] = seen.get(label, 0) + 1
    return [escape(label if seen[label] == 1 else f"{label} [{key}]") for label, key in zip(labels, keys, strict=True)]


def _ms_range(bucket: int) -> tuple[float, float]:
    """A histogram bucket's bounds in ms (docs/pipeline.md, table delay_histogram)."""
    return 10 ** (bucket / 4), 10 ** ((bucket + 1) / 4)


def delay_histogram(group: str, rows: Rows) -> str:
    """Receipts by delay bucket for one group: both axes log (the tail's few receipts stay visible).
    The bucket of zero or negative delays is not drawn; the caller says how many it holds."""
    shown = [r for r in rows if int(r["bucket"]) > -13 and int(r["receipts"]) > 0]
    if not shown:
        return ""
    xs, texts = [], []
    for r in shown:
        low, high = _ms_range(int(r["bucket"]))
        xs.append(math.sqrt(low * high))
        texts.append(f"{num(low)} to {num(high)} ms: {int(r['receipts']):,} receipts")
    fig = go.Figure(go.Scatter(x=xs, y=[int(r["receipts"]) for r in shown], mode="lines+markers", name="receipts",
                               line={"color": COLORS[0]}, text=texts, hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(_layout(f"Group {group}: receipts by delay", "delay from origin to receiver (ms, log scale)",
                              "receipts (log scale)", xlog=True, ylog=True))
    return _div(fig, "histogram")


def percentiles(rows: Rows, label: Label, title: str, what: str, name: str = "percentiles") -> str:
    """p50, p90, p99 and max of each row (delays in seconds) as markers on one line per row, on a
    log axis in ms.  A value of zero or less (clocks apart) is drawn hollow at :data:`FLOOR_MS`."""
    if not rows:
        return ""
    names = _distinct([label(r) for r in rows], [f"{r['key']} {r.get('group', '')}" for r in rows])
    fig = go.Figure()
    span_x: list[float | None] = []
    span_y: list[str | None] = []
    for r, shown in zip(rows, names, strict=True):
        ends = [max(float(r[p]) * 1000, FLOOR_MS) for p in ("p50", "max")]
        span_x += [*ends, None]
        span_y += [shown, shown, None]
    fig.add_trace(go.Scatter(x=span_x, y=span_y, mode="lines", line={"color": "#bbb", "width": 2}, hoverinfo="skip",
                             showlegend=False))
    for k, p in enumerate(("p50", "p90", "p99", "max")):
        ms = [float(r[p]) * 1000 for r in rows]
        fig.add_trace(go.Scatter(
            x=[max(v, FLOOR_MS) for v in ms], y=names, mode="markers", name=p,
            # Smaller for each higher percentile: equal values show as rings, none hidden behind another.
            marker={"size": 15 - 3 * k, "color": COLORS[k], "symbol": ["circle" if v > 0 else "circle-open" for v in ms]},
            text=[f"{n}: {p} {num(v)} ms" + ("" if v > 0 else " (≤ 0: clocks apart, see the note)") +
                  f" of {int(r['receipts']):,} receipts" for n, v, r in zip(names, ms, rows, strict=True)],
            hovertemplate="%{text}<extra></extra>"))
    fig.update_layout(_layout(title, "delay (ms, log scale)", what, height=180 + 28 * len(rows), xlog=True))
    fig.update_yaxes(type="category", autorange="reversed")
    return _div(fig, name)


def throughput(group: str, rows: Rows, window_seconds: float) -> str:
    """Events originated and receipts per window over the run, for one group."""
    if not rows:
        return ""
    start = min(float(r["window_start"]) for r in rows)
    fig = go.Figure()
    for k, what in enumerate(("originated", "receipts")):
        fig.add_trace(go.Scatter(x=[float(r["window_start"]) - start for r in rows], y=[int(r[what]) for r in rows],
                                 mode="lines+markers" if len(rows) <= 60 else "lines", name=what,
                                 line={"color": COLORS[k]}, hovertemplate="%{x:,.1f} s: %{y:,} " + what + "<extra></extra>"))
    fig.update_layout(_layout(f"Group {group}: events per {window_seconds:g} s", "seconds from the first window",
                              "events per window"))
    fig.update_yaxes(rangemode="tozero", tickformat=",~f")
    return _div(fig, "throughput")


def link_matrix(rows: Rows, label: Label) -> str:
    """Copies passed along each link (``by == link`` delay rows): senders down, receivers across."""
    pairs = [(str(r["key"]).split(">", 1), r) for r in rows]
    pairs = [(ends, r) for ends, r in pairs if len(ends) == 2]
    if not pairs:
        return ""
    nodes = sorted({n for ends, _ in pairs for n in ends}, key=label)
    names = _distinct([label(n) for n in nodes], nodes)
    at = {n: i for i, n in enumerate(nodes)}
    z: list[list[int | None]] = [[None] * len(nodes) for _ in nodes]
    text = [[""] * len(nodes) for _ in nodes]
    for (src, dst), r in pairs:
        z[at[src]][at[dst]] = (z[at[src]][at[dst]] or 0) + int(r["receipts"])
        text[at[src]][at[dst]] = (f"{names[at[src]]} → {names[at[dst]]}: {z[at[src]][at[dst]]:,} copies, "
                                  f"p99 {num(float(r['p99']) * 1000)} ms")
    fig = go.Figure(go.Heatmap(z=z, x=names, y=names, text=text, hovertemplate="%{text}<extra></extra>",
                               colorscale="Blues", colorbar={"title": {"text": "copies"}, "tickformat": ",d"}, xgap=1, ygap=1))
    fig.update_layout(_layout("Copies passed, by link", "to (receiver)", "from (sender)", height=200 + 24 * len(nodes)))
    fig.update_xaxes(type="category", showgrid=False, tickangle=-45)
    fig.update_yaxes(type="category", showgrid=False, autorange="reversed")
    return _div(fig, "links")


def peers_alive(series: Sequence[tuple[str, list[tuple[float, float]]]]) -> str:
    """Each node's count of live peers over time, from its snapshots."""
    if not series:
        return ""
    fig = go.Figure()
    for k, (name, points) in enumerate(series):
        pts = sorted(points)
        fig.add_trace(go.Scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=escape(name),
                                 line={"shape": "hv", "color": COLORS[k % len(COLORS)]},
                                 hovertemplate=escape(name) + " at %{x:,.0f} s: %{y:,} peers alive<extra></extra>"))
    fig.update_layout(_layout("Peers alive, by node", "seconds from the first snapshot", "peers alive"))
    fig.update_yaxes(rangemode="tozero", tickformat=",~f")
    return _div(fig, "peers")


def bout_score(group: str, jams: Rows, names: tuple[str, str]) -> str:
    """A bout's score after each jam, a line per team (the bout summary's jam rows, in order)."""
    if not jams:
        return ""
    labels = [f"P{j['period']} J{j['jam']}" for j in jams]
    fig = go.Figure()
    for k, (team, name) in enumerate(zip(("home", "away"), names, strict=True)):
        total, ys = 0, []
        for j in jams:
            total += int(j[team]["points"])
            ys.append(total)
        fig.add_trace(go.Scatter(x=labels, y=ys, mode="lines+markers" if len(jams) <= 60 else "lines",
                                 name=escape(name or team), line={"shape": "hv", "color": COLORS[k]},
                                 hovertemplate=escape(name or team) + " after %{x}: %{y:,}<extra></extra>"))
    fig.update_layout(_layout(f"Group {group}: the score after each jam", "period and jam", "points"))
    fig.update_xaxes(type="category", showgrid=False)
    fig.update_yaxes(rangemode="tozero", tickformat=",~f")
    return _div(fig, "bout-score")


def num(value: float) -> str:
    """A measurement with three significant digits, in plain notation (0.0123, 4.56, 1,234)."""
    if value == 0 or not math.isfinite(value):
        return f"{value:g}"
    places = max(0, min(9, 2 - math.floor(math.log10(abs(value)))))
    return f"{value:,.{places}f}"
