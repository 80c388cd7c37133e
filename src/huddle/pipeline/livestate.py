"""What ``huddle pipeline live`` knows between micro-batches, and the update it reports.

Spark's micro-batches (:mod:`.live`) hand over small facts about the rows
they read, each made by a batch transform that is safe on any slice of the
rows (its results over two slices combine into its result over both):

- :func:`.transforms.held_ranges`: runs of sequence numbers per node and
  source.  Merged here into each node's disjoint ranges;
- :func:`.transforms.delay_counts`: receipts per source, receiver, hops,
  sending peer and fine delay bucket.  Added here;
- the newest ``timestamp`` and ``received_at`` per node and source.

What the batch jobs then do with a window over *all* the ranges or counts
(:func:`.transforms.missing`, :func:`.transforms.gaps`,
:func:`.transforms.delays_of`) cannot run on a stream: their streaming form
is here, over the merged state, and ``tests/test_pipeline_live.py`` checks
that both give the same tables on a finished input.

The state is bounded by what the mesh is, not by how many events it holds:
a run of consecutive numbers is one range however long (a node's ranges per
source are one, plus one per gap it has); delay counts have one row per key
and fine bucket (:data:`.transforms.FINE_STEPS` buckets per factor of ten,
so a few thousand per link whatever the receipts); the recent lag keeps
the counts of the micro-batches of the last ``recent`` seconds only, older
ones dropped as a watermark drops old windows.  No event is kept.
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = ["LiveState", "Range", "gaps_of", "merge_ranges", "missing_of", "percentiles"]

Range = tuple[int, int]  # first_seq, last_seq: both included
_QUANTILES = {"p50": 50, "p90": 90, "p99": 99}  # as transforms.delays_of


def merge_ranges(ranges: Iterable[Range]) -> list[Range]:
    """Sorted, disjoint, non-adjacent ranges covering exactly ``ranges``."""
    merged: list[Range] = []
    for first, last in sorted(ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1] = (merged[-1][0], max(merged[-1][1], last))
        else:
            merged.append((first, last))
    return merged


def _holes(ranges: list[Range], top: int) -> list[Range]:
    """The numbers 1..top outside the merged ``ranges``."""
    out, nxt = [], 1
    for first, last in ranges:
        if first > nxt:
            out.append((nxt, min(first - 1, top)))
        nxt = max(nxt, last + 1)
        if nxt > top:
            break
    if nxt <= top:
        out.append((nxt, top))
    return [(a, b) for a, b in out if a <= b]


def _intersect(holes: list[Range], held: list[Range]) -> list[Range]:
    out = []
    for a, b in holes:
        for c, d in held:
            if c > b:
                break
            if d >= a:
                out.append((max(a, c), min(b, d)))
    return out


def missing_of(held: Mapping[tuple[str, str, str], list[Range]]) -> list[dict[str, Any]]:
    """:func:`.transforms.missing` over merged ranges keyed (node, group, source):
    per node and source, the ranges it lacks that some node of its group holds."""
    union: dict[tuple[str, str], list[Range]] = {}
    nodes: dict[str, set[str]] = {}
    for (node, group, source), ranges in held.items():
        union.setdefault((group, source), []).extend(ranges)
        nodes.setdefault(group, set()).add(node)
    out = []
    for (group, source), ranges in sorted(union.items()):
        everyone = merge_ranges(ranges)
        top = everyone[-1][1]
        for node in sorted(nodes[group]):
            for first, last in _intersect(_holes(held.get((node, group, source), []), top), everyone):
                out.append({"node": node, "group": group, "source": source, "first_seq": first, "last_seq": last,
                            "events": last - first + 1})
    return out


def gaps_of(held: Mapping[tuple[str, str, str], list[Range]]) -> list[dict[str, Any]]:
    """:func:`.transforms.gaps` over merged ranges: per source, the numbers
    below the highest one held that no node holds."""
    union: dict[tuple[str, str], list[Range]] = {}
    for (_, group, source), ranges in held.items():
        union.setdefault((group, source), []).extend(ranges)
    out = []
    for (group, source), ranges in sorted(union.items()):
        everyone = merge_ranges(ranges)
        for first, last in _holes(everyone, everyone[-1][1]):
            out.append({"group": group, "source": source, "first_seq": first, "last_seq": last,
                        "events": last - first + 1})
    return out


# A delay count's key: group, source, node, hops, received_from, fine bucket; its value: receipts, low, high.
CountKey = tuple[str, str, str, int, str | None, int]
Count = tuple[int, float, float]
_K = TypeVar("_K")


def _add(into: dict[_K, Count], key: _K, value: Count) -> None:
    old = into.get(key)
    into[key] = value if old is None else (old[0] + value[0], min(old[1], value[1]), max(old[2], value[2]))


def percentiles(counts: Mapping[CountKey, Count], by: str) -> list[dict[str, Any]]:
    """:func:`.transforms.delays_of`'s rows for one ``by`` (``source``,
    ``receiver``, ``hops`` or ``link``), from delay counts: group, by, key,
    receipts, p50, p90, p99, max.  The same rule: the percentile q of n
    receipts is the delay of rank ceil(q n), its bucket's greatest delay when
    that rank is the bucket's last, else the bucket's least."""
    per: dict[tuple[str, str], dict[int, Count]] = {}
    for (group, source, node, hops, frm, fine), value in counts.items():
        key = {"source": source, "receiver": node, "hops": str(hops), "link": f"{frm or '?'}>{node}"}[by]
        _add(per.setdefault((group, key), {}), fine, value)
    out = []
    for (group, key), buckets in sorted(per.items()):
        ordered = sorted(buckets.items())
        total = sum(v[0] for _, v in ordered)
        row: dict[str, Any] = {"group": group, "by": by, "key": key, "receipts": total}
        for name, pct in _QUANTILES.items():
            rank, upto = max(1, (total * pct + 99) // 100), 0
            for _, (n, low, high) in ordered:
                upto += n
                if rank <= upto:
                    row[name] = high if rank == upto else low
                    break
        row["max"] = max(v[2] for _, v in ordered)
        out.append(row)
    return out


@dataclass
class LiveState:
    """The merged facts of every micro-batch so far (see the module's doc).

    ``recent``: seconds of micro-batches whose delay counts make the recent lag."""

    recent: float = 60.0
    held: dict[tuple[str, str, str], list[Range]] = field(default_factory=dict)  # (node, group, source)
    counts: dict[CountKey, Count] = field(default_factory=dict)
    newest: dict[tuple[str, str, str], tuple[float, float]] = field(default_factory=dict)  # timestamp, received_at
    window: deque[tuple[float, dict[CountKey, Count]]] = field(default_factory=deque)
    names: dict[str, str] = field(default_factory=dict)  # node -> the name its peers know it by (one per node)
    updates: int = 0
    rows: int = 0

    def merge(self, held: Iterable[Mapping[str, Any]], counts: Iterable[Mapping[str, Any]],
              newest: Iterable[Mapping[str, Any]], rows: int, now: float | None = None) -> None:
        """Add one micro-batch's facts: rows of :func:`.transforms.held_ranges`,
        of :func:`.transforms.delay_counts` and of newest (node, group, source,
        timestamp, received_at); ``rows``: how many rows it read."""
        now = time.time() if now is None else now
        touched: dict[tuple[str, str, str], list[Range]] = {}
        for r in held:
            touched.setdefault((r["node"], r["group"], r["source"]), []).append((r["first_seq"], r["last_seq"]))
        for key, ranges in touched.items():
            self.held[key] = merge_ranges(self.held.get(key, []) + ranges)
        fresh: dict[CountKey, Count] = {}
        for r in counts:
            ckey: CountKey = (r["group"], r["source"], r["node"], int(r["hops"]), r["received_from"], int(r["fine"]))
            value = (int(r["receipts"]), float(r["low"]), float(r["high"]))
            _add(self.counts, ckey, value)
            _add(fresh, ckey, value)
        for r in newest:
            key3 = (r["node"], r["group"], r["source"])
            old = self.newest.get(key3, (-math.inf, -math.inf))
            self.newest[key3] = (max(old[0], r["timestamp"]), max(old[1], r["received_at"]))
        self.window.append((now, fresh))
        while self.window and self.window[0][0] < now - self.recent:  # older than the recent lag: dropped
            self.window.popleft()
        self.updates += 1
        self.rows += rows

    def report(self, batch_rows: int = 0, now: float | None = None) -> dict[str, Any]:
        """The update: one JSON-able document (docs/pipeline.md, Live audit)."""
        now = time.time() if now is None else now
        missing, gaps = missing_of(self.held), gaps_of(self.held)
        recent: dict[CountKey, Count] = {}
        for _, fresh in self.window:
            for key, value in fresh.items():
                _add(recent, key, value)
        top: dict[tuple[str, str], float] = {}
        for (_, group, source), (newest, _) in self.newest.items():
            top[group, source] = max(top.get((group, source), -math.inf), newest)
        held: list[dict[str, Any]] = []
        behind: dict[tuple[str, str, str], int] = {}
        for m in missing:
            mkey = (m["node"], m["group"], m["source"])
            behind[mkey] = behind.get(mkey, 0) + m["events"]
        for (node, group, source), ranges in sorted(self.held.items()):
            times = self.newest.get((node, group, source))  # None: no newest times were given
            ts, at = (None, None) if times is None else times
            held.append({"node": node, "group": group, "source": source, "events": sum(b - a + 1 for a, b in ranges),
                         "top": ranges[-1][1], "ranges": len(ranges), "lacking": behind.get((node, group, source), 0),
                         "newest_timestamp": ts, "newest_received_at": at,
                         "behind_seconds": None if ts is None else max(0.0, top[group, source] - ts)})
        nodes: dict[str, dict[str, Any]] = {}
        for h in held:
            n = nodes.setdefault(str(h["node"]), {"node": h["node"], "events": 0, "lacking": 0, "newest_received_at": 0.0})
            n["events"] += h["events"]
            n["lacking"] += h["lacking"]
            n["newest_received_at"] = max(n["newest_received_at"], h["newest_received_at"] or 0.0)
        return {
            "update": self.updates, "at": now, "rows": batch_rows, "rows_total": self.rows,
            "converged": not missing, "nodes": sorted(nodes.values(), key=lambda n: n["node"]),
            "sources": len({(g, s) for _, g, s in self.held}), "held": held, "missing": missing, "gaps": gaps,
            "lag": {by: percentiles(self.counts, by) for by in ("source", "link")},
            "recent_lag": {by: percentiles(recent, by) for by in ("source", "link")}, "recent_seconds": self.recent,
            "names": dict(sorted(self.names.items())),
        }


def line(doc: Mapping[str, Any]) -> str:
    """An update as one line for a person (nodes by name where known: ``bob (35c9e1d4)``)."""
    names = doc.get("names", {})

    def _short(node: str) -> str:
        return f"{names[node]} ({node[:8]})" if node in names else node[:8]

    stamp = time.strftime("%H:%M:%S", time.gmtime(doc["at"]))
    events = sum(n["events"] for n in doc["nodes"])
    head = (f"{stamp} update {doc['update']} (+{doc['rows']} rows): {len(doc['nodes'])} nodes, "
            f"{doc['sources']} sources, {events} events held")
    if doc["converged"]:
        verdict = "converged"
    else:
        lacks = [f"{_short(m['node'])} lacks {m['first_seq']}-{m['last_seq']} of {_short(m['source'])}"
                 for m in doc["missing"][:3]]
        more = len(doc["missing"]) - len(lacks)
        verdict = "NOT converged: " + ", ".join(lacks) + (f" and {more} more ranges" if more > 0 else "")
    worst = max(doc["recent_lag"]["link"], key=lambda r: r["p99"], default=None)
    lag = (f"; worst link p99 {worst['p99']:.3f} s ({_short(worst['key'].split('>')[0])}>"
           f"{_short(worst['key'].split('>')[1])}, last {doc['recent_seconds']:g} s)" if worst else "")
    gaps = f"; {sum(g['events'] for g in doc['gaps'])} events no node holds" if doc["gaps"] else ""
    return f"{head}; {verdict}{gaps}{lag}"
