#!/usr/bin/env python3
"""What the window of a seeds formation is made of: from the last node's ``api`` line to
the full mesh (``mesh_formation.py --modes seeds``'s clock), per message type, the
messages the nodes received and sent and the main thread's CPU their handling took;
the driver's sending, the transport's reading, the timers; the last node's own share;
the picture's reports made in the window.  A diagnostic (issue 20's 64 nodes), not a
benchmark: it prints no TARGET and its nodes run slower than ``mesh_formation.py``'s.

Each node runs with bench/diag/ first on its ``PYTHONPATH``: Python then imports
bench/diag/sitecustomize.py at start-up, which wraps a few methods of the node to count
and time (``time.thread_time``: with dozens of processes on two CPUs a wall-clock
profile charges a function the time it waited for a CPU).  The nodes are signalled at
the last ``api`` line and at the full mesh, and each writes its two snapshots.

    .venv/bin/python bench/formation_window.py --nodes 64 [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchlib
import mesh_formation
from benchlib import NodeProc

DIAG = Path(__file__).resolve().parent / "diag"


def _delta(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    return {k: v - a.get(k, 0) for k, v in b.items() if isinstance(v, int | float) and v - a.get(k, 0)}


def _collect(folder: Path, nodes: list[NodeProc], timeout: float) -> list[dict[str, Any]]:
    deadline = time.monotonic() + timeout
    out: list[dict[str, Any]] = []
    for nd in nodes:
        path = folder / f"{nd.proc.pid}.json"
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        if not path.exists():
            raise SystemExit(f"{nd.name} wrote no snapshot (see {nd.log_path})")
        out.append(json.loads(path.read_text()))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mesh_formation.window_options(parser, "write every node's two snapshots here")
    args = parser.parse_args(argv)
    benchlib.header("What the window of a seeds formation is made of", nodes=args.nodes)
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp_name:
        tmp = Path(tmp_name)
        snaps = tmp / "snapshots"
        snaps.mkdir()
        os.environ["HUDDLE_DIAG_DIR"] = str(snaps)  # inherited by the nodes, with the path below
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(DIAG), os.environ.get("PYTHONPATH")) if p)
        nodes: list[NodeProc] = []
        try:
            launched = mesh_formation.start_seeds(tmp, args.nodes, nodes)
            benchlib.read_api_lines(nodes, args.start_timeout)
            for nd in nodes:
                os.kill(nd.proc.pid, signal.SIGUSR1)
            last_api = max(nd.api_at for nd in nodes)
            results = asyncio.run(mesh_formation._watch(nodes, 0.005, args.timeout, "events"))
            for nd in nodes:
                os.kill(nd.proc.pid, signal.SIGUSR2)
            found = _collect(snaps, nodes, 20.0)
        finally:
            benchlib.kill_all(nodes)
    joined = max(r["joined"] for r in results) - last_api
    last = max(range(len(nodes)), key=lambda i: nodes[i].api_at)
    received: collections.Counter[str] = collections.Counter()
    sent: collections.Counter[str] = collections.Counter()
    spent: collections.Counter[str] = collections.Counter()
    mesh: collections.Counter[str] = collections.Counter()
    picture: collections.Counter[str] = collections.Counter()
    cpu = main_cpu = 0.0
    batches = 0
    reports: list[list[Any]] = []
    for snap in found:
        a, b = snap["a"], snap["b"]
        received.update(_delta(a["received"], b["received"]))
        sent.update(_delta(a["sent"], b["sent"]))
        spent.update(_delta(a["spent"], b["spent"]))
        mesh.update(_delta(a["mesh"], b["mesh"]))
        picture.update(_delta(a["picture"], b["picture"]))
        cpu += b["process_cpu"] - a["process_cpu"]
        main_cpu += b["main_cpu"] - a["main_cpu"]
        batches += b["batches"] - a["batches"]
        reports += b["reports"]
    print(f"start spread {last_api - launched:.1f} s; joins {joined * 1000:.0f} ms (with the counters' cost)")
    print(f"nodes' CPU in the window {cpu:.2f} s, of it their main threads {main_cpu:.2f} s; "
          f"{sum(received.values())} messages received in {batches} batches, {sum(sent.values())} sent")
    mine = found[last]
    print(f"the last node ({nodes[last].name}): CPU {1000 * (mine['b']['process_cpu'] - mine['a']['process_cpu']):.0f} ms, "
          f"main thread {1000 * (mine['b']['main_cpu'] - mine['a']['main_cpu']):.0f} ms")
    rows = [[kind, received[kind], sent.get(kind, 0), f"{spent.get('receive ' + kind, 0.0) * 1000:.0f}",
             f"{spent.get('receive ' + kind, 0.0) / received[kind] * 1e6:.0f}" if received[kind] else "-"]
            for kind in sorted(received, key=lambda k: -received[k])]
    benchlib.print_table(["type", "received", "sent", "receive CPU ms", "us a message"], rows)
    print("main-thread CPU ms:", {k: round(v * 1000) for k, v in sorted(spent.items(), key=lambda x: -x[1])
                                  if not k.startswith("receive ")})
    print(f"reports made in the window: {len(reports)} (to {sum(r[0] for r in reports)} peers, "
          f"{sum(r[1] for r in reports)} of them holding our last; {sum(1 for r in reports if r[2])} due by refresh)")
    print("mesh counters:", dict(mesh), "picture counters:", dict(picture))
    if args.json:
        Path(args.json).write_text(json.dumps({"nodes": [nd.name for nd in nodes], "snapshots": found,
                                               "joins": joined}))
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
