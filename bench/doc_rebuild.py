#!/usr/bin/env python3
"""The bout document: operations applied per second, and rebuilding it from 1 000 000 events.

Workload (made once, not timed): N ``doc`` events from 4 sources, shaped like
officiating: per jam, a start, 10 lineups, 6 points, 3 penalties, a lead, a
duration and a note; jams run through both periods (200 each) and come
round again, so the document grows.  The events are shuffled (a node
restarting reads its store in no useful order).

Per repetition, in turn:

* baseline: ``json.loads`` of every body, then sorting the keys: the least
  any rebuild from stored events must do (with the same garbage-collector
  settings as huddle's load);
* huddle:   a fresh ``DocEngine`` takes every record (``load``, as a node
  starting on its store: duplicates refused, bodies kept) and the document
  is read, which sorts them and parses, checks again (as for a peer's
  event) and applies every body.
  Load and apply are timed apart; the rebuild's CPU time (this process's)
  is shown too, as a hint when other work shares the machine.

Before each repetition (not timed) the previous one's garbage is collected.

Also: operations applied per second when they arrive in order (the live
case: each ``add`` applies at once).

Target (issue 4): rebuild from 1 000 000 events < 10 s on this machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import time

import benchlib

from huddle.doc import DocEngine, to_xml
from huddle.gcutil import paused_collections
from huddle.ids import NodeId
from huddle.protocol.logstore import canonical_json
from huddle.wire import LogRecord


def workload(n: int, seed: int = 1) -> list[LogRecord]:
    rng = random.Random(seed)
    sources = [NodeId(bytes([i] * 16)) for i in range(1, 5)]
    seqs = dict.fromkeys(sources, 0)
    out: list[LogRecord] = []
    t = 1_700_000_000.0
    jam_no = 0
    while len(out) < n:
        jam_no += 1
        p, j = 1 + (jam_no // 200) % 2, 1 + jam_no % 200
        to = {"period": p, "jam": j}
        ops: list[dict[str, object]] = [{"op": "set", "to": to, "attribute": "start", "value": str(int(t))}]
        for team in ("home", "away"):
            for pos in range(5):
                ops.append({"op": "add", "to": to, "children": [{"tag": "lineup", "attrs": {
                    "team": team, "position": "jammer" if pos == 0 else "blocker", "number": str(rng.randrange(100))}}]})
        for _ in range(6):
            ops.append({"op": "add", "to": to, "children": [{"tag": "points", "attrs": {
                "team": rng.choice(("home", "away")), "points": str(rng.randrange(5))}}]})
        for _ in range(3):
            ops.append({"op": "add", "to": to, "children": [{"tag": "penalty", "attrs": {
                "team": rng.choice(("home", "away")), "number": str(rng.randrange(100)), "code": "X"}}]})
        ops.append({"op": "set", "to": to, "attribute": "lead", "value": "home"})
        ops.append({"op": "set", "to": to, "attribute": "duration", "value": str(rng.randrange(20, 120))})
        ops.append({"op": "add", "to": to, "children": [{"tag": "note", "text": "ok"}]})
        for op in ops:
            src = rng.choice(sources)
            seqs[src] += 1
            t += 0.5
            out.append(LogRecord(src, seqs[src], t, "doc", canonical_json(op), 0))
    out = out[:n]
    rng.shuffle(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=1_000_000, help="default: 1000000")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--quick", action="store_true", help="one repetition")
    args = ap.parse_args()
    if args.quick:
        args.reps = 1
    benchlib.header("doc_rebuild", events=args.events, reps=args.reps)
    records = workload(args.events)
    rows = []
    ratios, totals = [], []
    xml = ""
    doc = None
    for _ in range(args.reps):
        # Not timed: the previous repetition's garbage (a document is full of reference cycles),
        # which would otherwise be collected in whichever timed region the collector chose.
        del doc
        gc.collect()
        t0 = time.perf_counter()
        with paused_collections():  # the same collector settings as DocEngine.load and the rebuild
            keys = []
            for r in records:
                json.loads(r.body)
                keys.append((r.timestamp, bytes(r.source), r.seq))
            keys.sort()
        base = time.perf_counter() - t0
        del keys

        t0, c0 = time.perf_counter(), time.process_time()
        engine = DocEngine()
        engine.load(records)  # as a node starting on its store does
        t1 = time.perf_counter()
        doc = engine.document
        t2, c2 = time.perf_counter(), time.process_time()
        total = t2 - t0
        xml = to_xml(doc.root)
        rows.append([f"{base:.2f}", f"{t1 - t0:.2f}", f"{t2 - t1:.2f}", f"{total:.2f}", f"{c2 - c0:.2f}",
                     f"{total / base:.1f}x"])
        ratios.append(total / base)
        totals.append(total)

    n_elements, n_dropped = len(doc.index), len(doc.dropped)
    del engine, doc
    gc.collect()
    in_order = sorted(records, key=lambda r: (r.timestamp, bytes(r.source), r.seq))
    n_live = min(len(in_order), 200_000)
    t0 = time.perf_counter()
    live = DocEngine()
    for r in in_order[:n_live]:
        live.add(r)
    live_rate = n_live / (time.perf_counter() - t0)

    benchlib.print_table(["baseline s", "huddle add s", "apply s", "rebuild s", "its CPU s", "ratio"], rows)
    print(f"document: {len(xml)} octets of XML, {n_elements} elements, {n_dropped} dropped")
    print(f"in order (live): {live_rate:,.0f} operations/s applied as they arrive ({n_live} events)")
    med = benchlib.median(totals)
    benchlib.check("no operation dropped", str(n_dropped), not n_dropped)
    benchlib.target(f"rebuild from {args.events} events < 10 s",
                    f"{med:.2f} s (median of {args.reps}; {benchlib.median(ratios):.1f}x the json.loads+sort baseline)",
                    med < 10.0)
    benchlib.footer()


if __name__ == "__main__":
    main()
