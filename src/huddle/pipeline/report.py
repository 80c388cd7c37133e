"""``report.html``: the pipeline's findings for a person, on a laptop or a phone, offline.

Pure: plain Python rows in (collected from the small tables), one HTML page
out.  Findings come first, then the plots (Plotly, :mod:`.plots`, its
JavaScript inlined once: the page needs no network and no file beside it),
then the detail tables (sortable by a click on a column's head, numbers with
thousands separators, times in UTC).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from html import escape
from typing import Any

from . import plots
from .plots import num

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
    bout: Rows = field(default_factory=list)  # each node's bout and its group's (node "*")
    bout_jams: Rows = field(default_factory=list)  # the groups' bouts, jam by jam (the summary's jam rows)
    bout_penalties: Rows = field(default_factory=list)
    bout_writers: Rows = field(default_factory=list)
    bout_corrections: Rows = field(default_factory=list)
    health: Rows = field(default_factory=list)
    membership: Rows = field(default_factory=list)
    snapshots: Rows = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # node id -> the name it went by (table names)
    clocks: Rows = field(default_factory=list)  # clock_synced rows: group, node, peer, ts, offset (s), rtt_ms


_STYLE = """
* { box-sizing: border-box; }
body { font: 15px/1.45 system-ui, sans-serif; margin: 1em auto; max-width: 66em; color: #222; padding: 0 .8em;
       overflow-wrap: anywhere; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; margin-top: 2em; border-bottom: 1px solid #ccc; } h3 { font-size: 1.05em; }
.verdict { font-size: 1.3em; padding: .5em .8em; border-radius: 4px; }
.ok { background: #e3f4e1; } .bad { background: #fbe3e0; } .unknown { background: #eee; }
.scroll { overflow-x: auto; max-width: 100%; margin: .5em 0; }
table { border-collapse: collapse; font-size: 13px; }
td, th { border: 1px solid #ddd; padding: 3px 8px; text-align: right; white-space: nowrap; }
th { background: #f4f4f4; cursor: pointer; user-select: none; position: sticky; top: 0; }
th[aria-sort=ascending]::after { content: " ▲"; } th[aria-sort=descending]::after { content: " ▼"; }
td.t { text-align: left; font-family: ui-monospace, monospace; }
td.neg { color: #b35900; }
.plot { width: 100%; min-height: 200px; border: 1px solid #eee; margin: .5em 0; }
.note { color: #555; font-size: 13px; }
pre { overflow-x: auto; max-width: 100%; }
"""

# Tables sort by a click on a column's head: numbers as numbers (thousands separators
# ignored), "—" (no value) below every number, text as text; a second click reverses.
_SORT = """
document.querySelectorAll("table.sortable th").forEach(function (th) {
  th.addEventListener("click", function () {
    var table = th.closest("table"), body = table.tBodies[0], col = th.cellIndex;
    var up = th.getAttribute("aria-sort") !== "ascending";
    table.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
    th.setAttribute("aria-sort", up ? "ascending" : "descending");
    function key(tr) {
      var t = tr.cells[col].textContent.trim(), n = Number(t.replace(/,/g, ""));
      return t === "\u2014" ? -Infinity : (t === "" || isNaN(n)) ? t : n;
    }
    var rows = Array.prototype.slice.call(body.rows).sort(function (a, b) {
      var x = key(a), y = key(b);
      var c = typeof x === typeof y ? (x < y ? -1 : x > y ? 1 : 0) : (typeof x === "number" ? -1 : 1);
      return up ? c : -c;
    });
    rows.forEach(function (tr) { body.appendChild(tr); });
  });
});
"""

# Columns that hold mesh times (seconds since the Unix epoch): shown as UTC date and time.
# Rows of a percentile plot (the ones with the highest p99): more would not read on a phone.
_PLOTTED = 40

_TIMES = frozenset({"ts", "timestamp", "shown_ts", "first_ts", "last_ts", "window_start"})


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


def _link(key: str, names: dict[str, str]) -> str:
    """A link's key, ``from>to`` ids, for a person: ``bob (35c9e1d4) > 0f2f08cc``."""
    return " > ".join(_fmt(_named([{"n": n}], names, "n")[0]["n"]) for n in str(key).split(">", 1))


def _fmt(value: Any, column: str = "") -> str:
    """A cell for a person: integers with thousands separators, measurements with three
    significant digits in plain notation, mesh times as UTC, ids by their first 8 digits."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if column in _TIMES:
            return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]
        return num(value)
    return _short(value)


def _table(rows: Rows, columns: list[str], note: str = "") -> str:
    """A sortable table in a box that scrolls sideways on a narrow screen (the page does not)."""
    if not rows:
        return "<p class=note>none</p>"
    head = "".join(f"<th>{escape(c)}</th>" for c in columns)

    def cell(r: dict[str, Any], c: str) -> str:
        v = r.get(c)
        cls = "t" if isinstance(v, str) else "neg" if isinstance(v, int | float) and not isinstance(v, bool) and v < 0 \
            and c.endswith(" ms") else "n"
        return f"<td class={cls}>{escape(_fmt(v, c))}</td>"

    body = "".join("<tr>" + "".join(cell(r, c) for c in columns) + "</tr>" for r in rows)
    more = f"<p class=note>{escape(note)}</p>" if note else ""
    return f"<div class=scroll><table class=sortable><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>{more}"


def _clock_note(clocks: Rows, histogram: Rows) -> str:
    """What the delays rest on: the mesh clock, how well the nodes' clocks were set, and the
    receipts whose delay came out zero or negative."""
    early = sum(int(r["receipts"]) for r in histogram if int(r["bucket"]) <= -13)
    total = sum(int(r["receipts"]) for r in histogram)
    if clocks:
        worst = max((float(r["rtt_ms"]) / 2 for r in clocks if r.get("rtt_ms") is not None), default=0.0)
        text = (f"Delays are corrected by the group's measured clock offsets: each time is a mesh time, a node's clock "
                f"plus the offset it measured against the group when it joined (docs/protocol.md, section 7; "
                f"{len(clocks):,} clock_synced rows, table Clocks below), so no node's clock error enters whole. "
                f"What remains is each measurement's error, at most half its probe's round trip: "
                f"±{num(worst)} ms here at worst.")
    else:
        text = ("The inputs hold no clock_synced rows, so the delays are as the nodes recorded them, in mesh times "
                "(docs/protocol.md, section 7): a node's clock error stays in its delays.")
    if early:
        text += (f" {early:,} of {total:,} receipts ({100 * early / max(total, 1):.2g} %) have a delay of zero or less: "
                 "the receiver's clock was behind the source's by more than the delay. They are counted apart, not "
                 f"drawn in the histogram; a percentile of zero or less is drawn hollow at {plots.FLOOR_MS:g} ms.")
    return f"<p class=note>{escape(text)}</p>"


def _bout(d: ReportData) -> str:
    """The bout section: each node's bout against its group's, the score jam by jam, penalties,
    who recorded what, the corrections."""
    names = d.names
    if not d.bout:
        return "<h2>The bout</h2><p class=note>the inputs hold no <code>doc</code> events: no bout</p>"
    parts = ["<h2>The bout</h2><p class=note>The roller-derby bout each node's <code>doc</code> events make "
             "(node <code>*</code>: its group's, from every node's events), added up as "
             "<code>GET /api/v1/bout/summary</code> does. <code>same</code>: false means this node's bout differs "
             "from its group's (its devices disagree with the others': it lacks or holds other events). "
             "A correction is a set that changed a recorded value, or a remove; <code>own</code>: the corrector "
             "wrote the value it replaced.</p>"]
    parts.append(_table(_named(d.bout, names, "node"), ["group", "node", "doc_events", "home", "away", "jams",
                                                        "penalties", "corrections", "status", "signed", "same"]))
    for group in sorted({str(r["group"]) for r in d.bout_jams}):
        jams = [r for r in d.bout_jams if str(r["group"]) == group]
        teams = next((r for r in d.bout if str(r["group"]) == group and r["node"] == "*"), {})
        parts.append(plots.bout_score(group, jams, (str(teams.get("home_name", "home")),
                                                    str(teams.get("away_name", "away")))))
    parts.append("<h3>Penalties per skater</h3>")
    parts.append(_table(d.bout_penalties, ["group", "team", "number", "penalties", "codes"], "most first (table bout_penalties)"))
    parts.append("<h3>Who recorded what</h3>")
    parts.append(_table(_named(d.bout_writers, names, "source"), ["group", "source", "role", "what", "ops"],
                        "operations per source (the node a device wrote through), role and kind (table bout_writers)"))
    parts.append("<h3>Corrections</h3>")
    parts.append(_table(_named(d.bout_corrections, names, "source", "wrote_source"),
                        ["group", "timestamp", "source", "role", "op", "tag", "attribute", "before", "after",
                         "wrote_source", "wrote_role", "own"], "in the bout's order (table bout_corrections)"))
    return "\n".join(parts)


# ------------------------------------------------------------------ page


def render(d: ReportData) -> str:
    """The whole page."""
    verdict = {True: ("ok", "Converged"), False: ("bad", "NOT converged"), None: ("unknown", "Convergence not checked")}
    cls, word = verdict[d.converged]
    names = d.names
    parts = [
        "<!doctype html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1"><title>huddle audit report</title>',
        f"<style>{_STYLE}</style>",
        # plotly.js, once, before the plots' scripts; only when there is a plot (4.8 MB).
        "<script>{library}</script>",
        "</head><body><h1>huddle audit report</h1>",
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
    if "bout" in d.jobs:
        parts.append(_bout(d))
    if "propagation" in d.jobs:
        parts.append("<h2>Propagation</h2>")
        parts.append(_clock_note(d.clocks, d.histogram))
        for group in sorted({str(r["group"]) for r in d.histogram}):
            parts.append(plots.delay_histogram(group, [r for r in d.histogram if r["group"] == group]))
        for by, what in (("receiver", "receiver"), ("hops", "hops")):
            rows = [r for r in d.delays if r["by"] == by]
            # Receivers worst first; hop counts in order.
            rows.sort(key=(lambda r: int(r["key"])) if by == "hops" else (lambda r: -float(r["p99"])))
            if rows:
                def label(r: dict[str, Any], by: str = by) -> str:
                    key = _fmt(_named([r], names, "key")[0]["key"]) if by != "hops" else f"{r['key']} hop(s)"
                    return f"{key} · {r['group']}" if len({x["group"] for x in d.delays}) > 1 else key
                parts.append(plots.percentiles(rows[:_PLOTTED], label, f"Delay by {by}: p50, p90, p99, max", what,
                                               f"delay-{by}"))
                if len(rows) > _PLOTTED:
                    parts.append(f"<p class=note>the {_PLOTTED} with the highest p99 of {len(rows):,}; "
                                 f"the table below has them all</p>")
        for group in sorted({str(r["group"]) for r in d.throughput}):
            parts.append(plots.throughput(group, [r for r in d.throughput if r["group"] == group], d.window_seconds))
        links = [r for r in d.delays if r["by"] == "link"]
        if links:
            parts.append("<h3>The mesh: who passed copies to whom</h3>")
            parts.append(plots.link_matrix(links, lambda n: _link(n, names)))
        for by in ("source", "receiver", "hops", "link"):
            rows = [r | {"key": _link(r["key"], names) if by == "link" else r["key"], "p50 ms": r["p50"] * 1000,
                         "p90 ms": r["p90"] * 1000, "p99 ms": r["p99"] * 1000, "max ms": r["max"] * 1000}
                    for r in _named(d.delays, names, "key") if r["by"] == by]
            if rows:
                parts.append(f"<h3>Delay by {by}</h3>")
                parts.append(_table(rows, ["group", "key", "receipts", "p50 ms", "p90 ms", "p99 ms", "max ms"]))
        if d.clocks:
            parts.append("<h3>Clocks</h3>")
            parts.append(_table([r | {"offset ms": float(r["offset"]) * 1000} for r in _named(d.clocks, names, "node", "peer")],
                                ["group", "node", "peer", "ts", "offset ms", "rtt_ms"],
                                "each node's clock_synced rows: the offset it took from the peer, and the probe's round trip"))
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
            parts.append(plots.peers_alive(sorted(by_node.items())))
        if d.membership:
            parts.append("<h3>Membership events</h3>")
            parts.append(_table(_named(d.membership, names, "node"), ["ts", "group", "node", "event", "peer", "name", "reason"],
                                "the first 500 by time (table membership)"))
    parts.append(f"<script>{_SORT}</script>")
    parts.append("</body></html>\n")
    page = "\n".join(parts)
    # The library goes in only where a plot needs it: a report without plots stays small.
    return page.replace("<script>{library}</script>", f"<script>{plots.library()}</script>" if "class=plot " in page else "", 1)
