"""``report.html``: the pipeline's findings for a person, readable without Spark.

Pure: plain Python rows in (collected from the small tables), one HTML page
out, with its plots drawn as inline SVG (no plotting library, no script, no
file beside it).  Findings come first, then the plots, then the detail tables.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from html import escape
from typing import Any

__all__ = ["ReportData", "render"]

Rows = list[dict[str, Any]]


@dataclass
class ReportData:
    """What the report shows; an empty list: the job did not run or found nothing."""

    inputs: list[str]
    jobs: list[str]
    findings: list[str] = field(default_factory=list)
    converged: bool | None = None
    conflicts: Rows = field(default_factory=list)
    missing: Rows = field(default_factory=list)
    missing_by_node: Rows = field(default_factory=list)
    gaps: Rows = field(default_factory=list)
    delays: Rows = field(default_factory=list)
    histogram: Rows = field(default_factory=list)
    throughput: Rows = field(default_factory=list)
    window_seconds: float = 1.0
    replay: Rows = field(default_factory=list)
    documents: Rows = field(default_factory=list)
    health: Rows = field(default_factory=list)
    membership: Rows = field(default_factory=list)
    snapshots: Rows = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # node id -> the name it went by (table names)


_STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 62em; color: #222; padding: 0 1em; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; }
.verdict { font-size: 1.3em; padding: .5em .8em; border-radius: 4px; }
.ok { background: #e3f4e1; } .bad { background: #fbe3e0; } .unknown { background: #eee; }
table { border-collapse: collapse; margin: .5em 0; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 2px 8px; text-align: right; } th { background: #f4f4f4; }
td.t { text-align: left; font-family: ui-monospace, monospace; }
svg { background: #fcfcfc; border: 1px solid #eee; margin: .5em 0; }
.note { color: #666; font-size: 13px; }
"""

_COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")


def _short(text: Any) -> str:
    """Node and source UUIDs (32 hex) shown by their first 8 digits, as the CLI does."""
    s = "" if text is None else str(text)
    return s[:8] if len(s) == 32 else s


def _named(rows: Rows, names: dict[str, str], *columns: str) -> Rows:
    """``rows`` with each node id in ``columns`` shown with its name, ``bob (35c9e1d4)``, where
    ``names`` knows it (the others stay ids, shortened as ever)."""
    if not names:
        return rows
    return [r | {c: f"{names[r[c]]} ({r[c][:8]})" for c in columns if r.get(c) in names} for r in rows]


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.6g}"
    return _short(value)


def _table(rows: Rows, columns: list[str], note: str = "") -> str:
    if not rows:
        return "<p class=note>none</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(
            f"<td class={'t' if isinstance(r.get(c), str) else 'n'}>{escape(_fmt(r.get(c)))}</td>" for c in columns
        ) + "</tr>"
        for r in rows
    )
    more = f"<p class=note>{escape(note)}</p>" if note else ""
    return f"<table><tr>{head}</tr>{body}</table>{more}"


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.3g} ms"


# ------------------------------------------------------------------ plots


def _bars(labels: list[str], series: list[tuple[str, list[float]]], title: str, unit: str = "") -> str:
    """Vertical bars, one group per label, one bar per series."""
    if not labels:
        return ""
    width, height, left, bottom = 720, 260, 60, 50
    top = max((v for _, vals in series for v in vals), default=0) or 1
    slot = (width - left - 10) / len(labels)
    bar = max(1.0, slot * 0.8 / len(series))
    out = [f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{left}" y="16" font-size="13">{escape(title)}</text>']
    plot_h = height - bottom - 25
    for k, (name, vals) in enumerate(series):
        color = _COLORS[k % len(_COLORS)]
        for i, v in enumerate(vals):
            h = plot_h * v / top
            x = left + i * slot + k * bar
            out.append(f'<rect x="{x:.1f}" y="{height - bottom - h:.1f}" width="{bar:.1f}" height="{h:.1f}" '
                       f'fill="{color}"><title>{escape(labels[i])} {escape(name)}: {v:.4g}{unit}</title></rect>')
        if len(series) > 1:
            out.append(f'<text x="{width - 150}" y="{30 + 14 * k}" font-size="12" fill="{color}">{escape(name)}</text>')
    step = max(1, len(labels) // 12)
    for i in range(0, len(labels), step):
        x = left + i * slot + slot / 2
        out.append(f'<text x="{x:.1f}" y="{height - bottom + 14}" font-size="11" text-anchor="middle">'
                   f"{escape(labels[i])}</text>")
    out.append(f'<text x="5" y="{height - bottom}" font-size="11">0</text>')
    out.append(f'<text x="5" y="{height - bottom - plot_h + 4:.0f}" font-size="11">{top:.4g}{escape(unit)}</text>')
    out.append("</svg>")
    return "".join(out)


def _lines(series: list[tuple[str, list[tuple[float, float]]]], title: str, xlabel: str) -> str:
    """Lines over a shared x axis."""
    points = [p for _, pts in series for p in pts]
    if not points:
        return ""
    width, height, left, bottom = 720, 260, 60, 40
    x0, x1 = min(p[0] for p in points), max(p[0] for p in points)
    y1 = max(p[1] for p in points) or 1
    span = (x1 - x0) or 1
    plot_w, plot_h = width - left - 20, height - bottom - 30

    def at(p: tuple[float, float]) -> str:
        return f"{left + plot_w * (p[0] - x0) / span:.1f},{height - bottom - plot_h * p[1] / y1:.1f}"

    out = [f'<svg width="{width}" height="{height}" role="img" aria-label="{escape(title)}">',
           f'<text x="{left}" y="16" font-size="13">{escape(title)}</text>']
    for k, (name, pts) in enumerate(series[: len(_COLORS)]):
        color = _COLORS[k % len(_COLORS)]
        path = " ".join(at(p) for p in sorted(pts))
        out.append(f'<polyline fill="none" stroke="{color}" stroke-width="1.5" points="{path}"/>')
        if len(pts) <= 60:  # few points: show each (one window alone draws no line)
            for p in pts:
                x, y = at(p).split(",")
                out.append(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{color}"><title>{escape(name)} at {p[0]:.4g}: '
                           f"{p[1]:.4g}</title></circle>")
        out.append(f'<text x="{width - 170}" y="{30 + 14 * k}" font-size="12" fill="{color}">{escape(name)}</text>')
    out.append(f'<text x="5" y="{height - bottom}" font-size="11">0</text>')
    out.append(f'<text x="5" y="{height - bottom - plot_h + 4:.0f}" font-size="11">{y1:.4g}</text>')
    out.append(f'<text x="{left}" y="{height - 12}" font-size="11">{escape(xlabel)}: 0 … {span:.4g}</text>')
    out.append("</svg>")
    return "".join(out)


def _mesh(links: Rows) -> str:
    """The nodes on a circle, a line per link a copy crossed, thicker for more copies."""
    if not links:
        return ""
    pairs = [(str(r["key"]).split(">", 1), int(r["receipts"])) for r in links]
    names = sorted({n for (ends, _) in pairs for n in ends})
    size, radius = 440, 150
    where = {n: (size / 2 + radius * math.cos(2 * math.pi * i / len(names)),
                 size / 2 + radius * math.sin(2 * math.pi * i / len(names))) for i, n in enumerate(names)}
    most = max(c for _, c in pairs) or 1
    out = [f'<svg width="{size}" height="{size}" role="img" aria-label="the mesh">']
    for ends, count in pairs:
        if len(ends) != 2:
            continue
        (xa, ya), (xb, yb) = where[ends[0]], where[ends[1]]
        out.append(f'<line x1="{xa:.1f}" y1="{ya:.1f}" x2="{xb:.1f}" y2="{yb:.1f}" stroke="#1f77b4" '
                   f'stroke-opacity=".5" stroke-width="{0.5 + 5 * count / most:.1f}">'
                   f"<title>{escape(_short(ends[0]))} → {escape(_short(ends[1]))}: {count} copies</title></line>")
    for n, (x, y) in where.items():
        out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="#d62728"/>'
                   f'<text x="{x + 8:.1f}" y="{y - 8:.1f}" font-size="12">{escape(_short(n))}</text>')
    out.append("</svg>")
    return "".join(out)


def _bucket_label(bucket: int) -> str:
    if bucket <= -13:
        return "≤0"
    ms = 10 ** (bucket / 4)
    return f"{ms:.2g}"


# ------------------------------------------------------------------ page


def render(d: ReportData) -> str:
    """The whole page."""
    verdict = {True: ("ok", "Converged"), False: ("bad", "NOT converged"), None: ("unknown", "Convergence not checked")}
    cls, word = verdict[d.converged]
    names = d.names
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8><title>huddle audit report</title>",
        f"<style>{_STYLE}</style></head><body><h1>huddle audit report</h1>",
        f'<p class="verdict {cls}">{word}</p>',
        "<h2>Findings</h2><ul>" + "".join(f"<li>{escape(line)}</li>" for line in d.findings) + "</ul>",
        f"<p class=note>inputs: {escape(', '.join(d.inputs))}; jobs: {escape(', '.join(d.jobs))}. "
        "Node and source ids are shown by their first 8 hex digits, beside the name each node went by "
        "where its peers' statistics rows give it (table names); the Parquet tables beside this page "
        "have every row.</p>",
    ]
    if "convergence" in d.jobs:
        parts.append("<h2>What each node lacks</h2>")
        parts.append(_table(_named(d.missing_by_node, names, "node"), ["group", "node", "events", "ranges"]))
        if d.missing:
            parts.append(_table(_named(d.missing, names, "node", "source"),
                                ["group", "node", "source", "first_seq", "last_seq", "events"],
                                "largest ranges first (table missing)"))
        parts.append("<h3>Gaps no node can fill</h3>")
        parts.append(_table(_named(d.gaps, names, "source"), ["group", "source", "first_seq", "last_seq", "events"]))
    if "consolidate" in d.jobs:
        parts.append("<h2>Integrity</h2>")
        parts.append(_table(_named(d.conflicts, names, "source", "node"),
                            ["group", "source", "seq", "node", "timestamp", "kind", "body"],
                            "every copy of each event whose copies differ (table conflicts)"))
    if "replay" in d.jobs:
        parts.append("<h2>Documents (replay)</h2><p class=note>Each node's document is made from its exported "
                     "<code>doc</code> events by huddle's own document engine and compared with the document of "
                     "all nodes' events together (<code>same</code>: false means the node lacks or holds other "
                     "<code>doc</code> events). <code>shown</code> compares the digest of the document the node "
                     "itself showed, from its last <code>document</code> statistics row at <code>shown_ts</code>, "
                     "with the document made from the events it held then: <code>same</code>; <code>differs</code> "
                     "(a divergence: the node showed another document than its events make); "
                     "<code>uncomparable</code> (the export no longer holds those events); <code>none</code> "
                     "(no such row).</p>")
        parts.append(_table(_named(d.replay, names, "node"), ["group", "node", "doc_events", "group_doc_events", "same",
                                                              "shown_ts", "shown_doc_events", "shown"]))
        for doc in d.documents:
            parts.append(f"<details><summary>group {escape(str(doc['group']))}: the final document "
                         f"({doc['doc_events']} doc events, {doc['dropped']} dropped)</summary>"
                         f"<pre>{escape(str(doc['xml']))}</pre></details>")
    if "propagation" in d.jobs:
        parts.append("<h2>Propagation</h2>")
        for group in sorted({str(r["group"]) for r in d.histogram}):
            rows = [r for r in d.histogram if r["group"] == group]
            parts.append(_bars([_bucket_label(int(r["bucket"])) for r in rows],
                               [("receipts", [float(r["receipts"]) for r in rows])],
                               f"group {group}: receipts by delay from origin to receiver (ms, log scale; bucket lower bounds)"))
        receivers = [r for r in d.delays if r["by"] == "receiver"]
        if receivers:
            parts.append(_bars([_fmt(r["key"]) for r in _named(receivers, names, "key")],
                               [(p, [float(r[p]) * 1000 for r in receivers]) for p in ("p50", "p90", "p99")],
                               "delay by receiver (ms): p50, p90, p99", " ms"))
        for group in sorted({str(r["group"]) for r in d.throughput}):
            rows = [r for r in d.throughput if r["group"] == group]
            start = min(float(r["window_start"]) for r in rows)
            parts.append(_lines([(what, [(float(r["window_start"]) - start, float(r[what])) for r in rows])
                                 for what in ("originated", "receipts")],
                                f"group {group}: events per {d.window_seconds:g} s window", "seconds from the first"))
        links = [r for r in d.delays if r["by"] == "link"]
        if links:
            parts.append("<h3>The mesh: who passed copies to whom</h3>" + _mesh(links))
        for by in ("source", "receiver", "hops", "link"):
            rows = [r | {"p50 ms": r["p50"] * 1000, "p90 ms": r["p90"] * 1000, "p99 ms": r["p99"] * 1000,
                         "max ms": r["max"] * 1000} for r in _named(d.delays, names, "key") if r["by"] == by]
            if rows:
                parts.append(f"<h3>Delay by {by}</h3>")
                parts.append(_table(rows, ["group", "key", "receipts", "p50 ms", "p90 ms", "p99 ms", "max ms"]))
    if "system" in d.jobs:
        parts.append("<h2>System picture</h2>")
        if not d.health:
            parts.append("<p class=note>the inputs hold no statistics rows</p>")
        parts.append(_table(_named(d.health, names, "node"), ["group", "node", "joins", "leaves", "timeouts", "suspects",
                                                              "refusals", "exclusions", "snapshots"]))
        by_node: dict[str, list[tuple[float, float]]] = {}
        if d.snapshots:
            start = min(float(r["ts"]) for r in d.snapshots)
            for r in _named(d.snapshots, names, "node"):
                by_node.setdefault(_short(r["node"]), []).append((float(r["ts"]) - start, float(r["peers_alive"] or 0)))
            parts.append(_lines(sorted(by_node.items()), "peers alive, by node (from the snapshots)",
                                "seconds from the first snapshot"))
        if d.membership:
            parts.append("<h3>Membership events</h3>")
            parts.append(_table(_named(d.membership, names, "node"), ["ts", "group", "node", "event", "peer", "name", "reason"],
                                "the first 500 by time (table membership)"))
    parts.append("</body></html>\n")
    return "\n".join(parts)
