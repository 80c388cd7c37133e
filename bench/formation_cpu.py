#!/usr/bin/env python3
"""One seeds formation of N nodes as ``mesh_formation.py --modes seeds`` runs it (same
start, same joins clock through its ``_watch``), with a longer start-up timeout for a
busy machine, and what the formation cost: the nodes' CPU (``utime + stime`` from
``/proc/PID/stat``, summed) and how busy the machine was from the last ``api`` line to
the full mesh; the admissions made in that window; the last node's own joins.

    PYTHONPATH=src python bench/formation_cpu.py --nodes 64 [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

import aiohttp
import benchlib
import mesh_formation
from benchlib import NodeProc


def _cpu(nodes: list[NodeProc]) -> float:
    total = 0
    for nd in nodes:
        fields = Path(f"/proc/{nd.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def _machine() -> tuple[int, int]:
    ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(ticks), ticks[3] + ticks[4]  # all, idle + iowait


async def _peers(nodes: list[NodeProc]) -> list[list[dict[str, object]]]:
    async with aiohttp.ClientSession() as session:
        async def one(nd: NodeProc) -> list[dict[str, object]]:
            async with session.get(nd.api + "/api/v1/peers") as resp:
                return list(await resp.json())
        return list(await asyncio.gather(*(one(nd) for nd in nodes)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    mesh_formation.window_options(parser, "write every node's peers here")
    parser.add_argument("--poll-interval", type=float, default=0.005, help="as mesh_formation.py's (default 0.005)")
    parser.add_argument("--wait", choices=("events", "poll"), default="events", help="as mesh_formation.py's")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp_name:
        tmp = Path(tmp_name)
        nodes: list[NodeProc] = []
        try:
            launched = mesh_formation.start_seeds(tmp, args.nodes, nodes)
            benchlib.read_api_lines(nodes, args.start_timeout)
            last_api = max(nd.api_at for nd in nodes)
            cpu0, mach0 = _cpu(nodes), _machine()
            results = asyncio.run(mesh_formation._watch(nodes, args.poll_interval, args.timeout, args.wait))
            cpu1, mach1 = _cpu(nodes), _machine()
            peers = asyncio.run(_peers(nodes))
        finally:
            benchlib.kill_all(nodes)
    base = mesh_formation.CLOCK_BASE
    last = max(range(len(nodes)), key=lambda i: nodes[i].api_at)
    late = [(float(p["joined_local"]) - base - last_api, nd.name, str(p["name"]))  # type: ignore[arg-type]
            for nd, ps in zip(nodes, peers, strict=True) for p in ps]
    late = sorted(x for x in late if x[0] > 0)
    own = sorted(float(p["joined_local"]) - base - last_api for p in peers[last])  # type: ignore[arg-type]
    busy = 1 - (mach1[1] - mach0[1]) / max(1, mach1[0] - mach0[0])
    print(f"start spread {last_api - launched:.1f} s; joins {(max(r['joined'] for r in results) - last_api) * 1000:.0f} ms, "
          f"polled {(max(r['done'] for r in results) - last_api) * 1000:.0f} ms; "
          f"{sum(r['polls'] for r in results)} polls (--wait {args.wait})")
    print(f"nodes' CPU in the window {cpu1 - cpu0:.2f} s; machine busy {busy * 100:.1f} %; "
          f"admissions in the window {len(late)} "
          f"({sum(1 for x in late if nodes[last].name not in x[1:])} not involving the last node)")
    print("last node's joins, ms after its api line (deciles):",
          [round(own[i * (len(own) - 1) // 10] * 1000) for i in range(11)])
    if args.json:
        Path(args.json).write_text(json.dumps({"nodes": [nd.name for nd in nodes], "peers": peers}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
