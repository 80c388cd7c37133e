#!/usr/bin/env python3
"""A full simulated bout applied live through the API, rebuilt from the log, and the time from an
entry on one device to the summary on another node.

Three ``huddle node`` processes on 127.0.0.1 in one secured group (a, b, c).  The simulated bout
(``huddle.boutsim``, docs/demo.md: two periods of jams until the period clock runs out, about 35
jams) is played by its five officials' devices on a and b, as fast as the nodes answer (each
device's write waits for the previous write's answer: one official after another, none at once);
c writes nothing.

* live: operations applied per second through ``POST /api/v1/doc/ops`` (the rules checked,
  the events recorded and sent), and each write's answer time (p50, p99); every node's
  summary must then agree and no write be refused;
* entry to summary: a trip entered on a (``POST /api/v1/doc/ops?role=scorekeeper-home``), and
  the time until c's ``GET /api/v1/bout/summary`` (polled every 2 ms) shows the new score.
  The baseline, in the same run and over the same HTTP path, is the mesh's round trip of an
  addressed message: ``GET /api/v1/apps?node=c`` on a (a list order carried to c and its
  answer carried back, as bench/control.py measures it);
* rebuild: c's ``doc`` events read back from its log (after it stops) and the document made
  again by a fresh ``DocEngine`` (load, then read: sort, parse, check, apply), against the
  document rebuild's baseline of bench/doc_rebuild.py (``json.loads`` of every body and a sort
  of the keys, the least any rebuild must do); the rebuilt document's digest must be the one c
  showed.

No target of its own: the figures are ``RESULT`` lines, and ``CHECK`` lines for what must hold.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import signal
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import benchlib

from huddle.boutsim import plan_bout
from huddle.boutsim.play import assign, mesh_time, play
from huddle.doc import DocEngine, digest
from huddle.gcutil import paused_collections
from huddle.log.store import SqliteStore
from huddle.wire import LogRecord


def _post(api: str, path: str, body: Any) -> tuple[int, Any]:
    req = urllib.request.Request(api + path, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=15) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"null")


def _score(api: str) -> int:
    return int(benchlib.http_get(api, "/api/v1/bout/summary")["teams"]["home"]["score"])


async def _live(apis: list[str], seed: int, jams: int | None) -> tuple[int, int, float, list[float], int]:
    """The bout played as fast as the nodes answer: writes, operations, seconds, answer times, refusals."""
    devices = assign(apis)
    async with aiohttp.ClientSession() as session:
        t0 = await mesh_time(session, devices["jam-timer"])
    plan = plan_bout(seed, jams=jams, t0=t0)
    played = await play(plan, devices, speed=1e12)
    return played.writes, played.ops, played.seconds, sorted(played.answers), len(played.refused)


def _doc_records(data_dir: Path) -> list[LogRecord]:
    store = SqliteStore(data_dir / "log.sqlite", group="")
    try:
        return [r.record for batch in store.scan() for r in batch if r.record.kind == "doc"]
    finally:
        store.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=1, help="the bout's seed (default 1)")
    parser.add_argument("--jams", type=int, default=None, help="jams a period (default: a full bout)")
    parser.add_argument("--entries", type=int, default=20, help="entries timed to the other node's summary (default 20)")
    parser.add_argument("--reps", type=int, default=5, help="rebuild repetitions (default 5)")
    parser.add_argument("--quick", action="store_true", help="8 entries, 3 rebuilds")
    args = parser.parse_args()
    if args.quick:
        args.entries, args.reps = 8, 3
    benchlib.header("bout: a simulated bout live through the API, rebuilt from the log; entry -> summary elsewhere",
                    seed=args.seed, jams=args.jams or "full", entries=args.entries, reps=args.reps)
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        key = benchlib.group_key_file(tmp)
        a = benchlib.NodeProc("a", tmp, "--group-key", key, "--no-beacon")
        nodes = [a]
        try:
            benchlib.read_api_lines(nodes)
            seed = benchlib.http_get(a.api, "/api/v1/node")["endpoint"].removeprefix("tcp://")
            b = benchlib.NodeProc("b", tmp, "--group-key", key, "--no-beacon", "--seed", seed)
            c = benchlib.NodeProc("c", tmp, "--group-key", key, "--no-beacon", "--seed", seed)
            nodes += [b, c]
            benchlib.read_api_lines(nodes)
            deadline = time.monotonic() + 60
            while any(sum(p["state"] == "alive" for p in benchlib.http_get(n.api, "/api/v1/peers")) < 2 for n in nodes):
                if time.monotonic() > deadline:
                    raise TimeoutError("the three nodes did not mesh within 60 s")
                time.sleep(0.05)
            writes, ops, seconds, answers, refused = asyncio.run(_live([a.api, b.api, c.api], args.seed, args.jams))
            summaries = [benchlib.http_get(n.api, "/api/v1/bout/summary") for n in nodes]
            deadline = time.monotonic() + 30
            while any(s != summaries[0] for s in summaries) and time.monotonic() < deadline:
                time.sleep(0.05)
                summaries = [benchlib.http_get(n.api, "/api/v1/bout/summary") for n in nodes]
            final = summaries[0]
            last = final["jams"][-1]
            to = {"period": last["period"], "jam": last["jam"]}
            for _ in range(3):  # warm: the channels a <-> c
                benchlib.http_get(a.api, "/api/v1/apps?node=c", 15)
            entries: list[float] = []
            trips: list[float] = []
            for _ in range(args.entries):
                t0 = time.perf_counter()
                benchlib.http_get(a.api, "/api/v1/apps?node=c", 15)
                trips.append(time.perf_counter() - t0)
                want = _score(c.api) + 1
                t0 = time.perf_counter()
                status, out = _post(a.api, "/api/v1/doc/ops?role=scorekeeper-home", {
                    "op": "add", "to": to, "children": [{"tag": "points", "attrs": {"team": "home", "points": "1"}}]})
                assert status == 201, out
                while _score(c.api) < want:
                    if time.perf_counter() - t0 > 20:
                        raise TimeoutError("c's summary did not show the entry within 20 s")
                    time.sleep(0.002)
                entries.append(time.perf_counter() - t0)
            shown = benchlib.http_get(c.api, "/api/v1/node")["features"]["doc"]["digest"]
            c.kill(signal.SIGTERM)
            c.proc.wait(30)
        finally:
            benchlib.kill_all(nodes)
        records = _doc_records(tmp / "c")
    rows, bases, rebuilds = [], [], []
    rebuilt = ""
    for _ in range(args.reps):
        gc.collect()
        t0 = time.perf_counter()
        with paused_collections():  # as bench/doc_rebuild.py's baseline
            keys = []
            for r in records:
                json.loads(r.body)
                keys.append((r.timestamp, bytes(r.source), r.seq))
            keys.sort()
        base = time.perf_counter() - t0
        t0 = time.perf_counter()
        engine = DocEngine()
        engine.load(records)
        doc = engine.document
        took = time.perf_counter() - t0
        rebuilt = digest(doc.root)
        bases.append(base)
        rebuilds.append(took)
        rows.append([f"{base * 1000:.2f}", f"{took * 1000:.2f}", f"{took / base:.1f}x"])
    p50, p99 = benchlib.percentile(answers, 50), benchlib.percentile(answers, 99)
    teams = final["teams"]
    print(f"bout: {len(final['jams'])} jams, {teams['home']['name']} {teams['home']['score']} - "
          f"{teams['away']['score']} {teams['away']['name']}; {writes} writes, {ops} operations in {seconds:.2f} s")
    benchlib.print_table(["measure", "median ms", "p99 / max ms"], [
        ["a write's answer (POST /api/v1/doc/ops)", f"{p50 * 1000:.2f}", f"{p99 * 1000:.2f}"],
        ["entry on a -> summary on c", f"{benchlib.median(entries) * 1000:.1f}", f"{max(entries) * 1000:.1f}"],
        ["addressed round trip a -> c -> a (apps?node=c)", f"{benchlib.median(trips) * 1000:.1f}",
         f"{max(trips) * 1000:.1f}"],
    ])
    benchlib.print_table(["baseline ms (json.loads + sort)", "rebuild ms", "ratio"], rows)
    print(f"RESULT bout live: {ops / seconds:,.0f} operations/s through the API ({ops} operations, {writes} writes, "
          f"answer p50 {p50 * 1000:.2f} ms)")
    print(f"RESULT bout entry -> summary on another node / addressed round trip: "
          f"{benchlib.median(entries) / benchlib.median(trips):.2f}x ({benchlib.median(entries) * 1000:.1f} ms / "
          f"{benchlib.median(trips) * 1000:.1f} ms, medians of {args.entries})")
    print(f"RESULT bout rebuild from the log: {benchlib.median(rebuilds) * 1000:.1f} ms for {len(records)} events, "
          f"{benchlib.median(rebuilds) / benchlib.median(bases):.1f}x the json.loads+sort baseline (median of {args.reps})")
    benchlib.check("no write refused", str(refused), refused == 0)
    benchlib.check("every node's summary the same", "same" if all(s == final for s in summaries) else "differ",
                   all(s == final for s in summaries))
    benchlib.check("the rebuilt document is the one c showed", rebuilt[:16], rebuilt == shown)
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
