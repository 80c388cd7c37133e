#!/usr/bin/env python3
"""Crash detection: time from SIGKILL of one node to ``gone`` on every other.

Each repetition starts a fresh mesh of ``--nodes`` (default 4) ``huddle
node`` processes on 127.0.0.1 (node 0 first, the others seeded to it, no
beacons), waits until every node lists every other as ``alive``, waits a
random fraction of a heartbeat interval (so the kill lands at a random phase
of the heartbeats), SIGKILLs the last node and polls every survivor's
``GET /api/v1/peers`` concurrently (``--poll-interval``) until each lists
the victim as ``gone``.  The time of one repetition is the slowest survivor
(an upper bound: when its answer came back).  The time to ``suspect`` is
shown too.

Two timings:

* default: heartbeat 1 s, suspect after 2.5 s, gone after 5 s;
* fast:    ``--heartbeat-interval 0.25 --suspect-after 0.75 --gone-after 1.5``.

A peer is gone after ``gone_after`` seconds of silence counted from the last
message heard from it, which is up to one heartbeat before the kill, and the
node checks its timers at least every 0.1 s; so the expected time from the
kill lies between ``gone_after - heartbeat`` and ``gone_after + 0.1 s``.
The ratio printed is measured / configured gone_after.  The target line
checks the median against ``gone_after + one heartbeat interval`` (the
issue states no number; this bound is this benchmark's).
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import benchlib
from benchlib import NodeProc

TIMINGS: dict[str, dict[str, float]] = {
    "default": {"heartbeat_interval": 1.0, "suspect_after": 2.5, "gone_after": 5.0},
    "fast": {"heartbeat_interval": 0.25, "suspect_after": 0.75, "gone_after": 1.5},
}


def _flags(timing: dict[str, float]) -> list[str]:
    out: list[str] = []
    for key, value in timing.items():
        out += ["--" + key.replace("_", "-"), str(value)]
    return out


async def _poll_until(session: aiohttp.ClientSession, nodes: list[NodeProc], done: Any, interval: float,
                      timeout: float) -> list[float]:
    """Poll each node until ``done(peers)``; return when (monotonic) each first was."""
    deadline = time.monotonic() + timeout

    async def one(node: NodeProc) -> float:
        while True:
            async with session.get(node.api + "/api/v1/peers") as resp:
                peers = await resp.json()
            t = time.monotonic()
            if done(peers):
                return t
            if t > deadline:
                return math.nan
            await asyncio.sleep(interval)

    return list(await asyncio.gather(*(one(n) for n in nodes)))


async def _kill_and_watch(nodes: list[NodeProc], hb: float, interval: float, timeout: float) -> dict[str, Any]:
    victim, survivors = nodes[-1], nodes[:-1]
    others = {n.name for n in nodes}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as session:

        def full(me: str) -> Any:
            return lambda peers: {p["name"] for p in peers if p["state"] == "alive"} == others - {me}

        # Wait for the full mesh, node by node.
        for n in nodes:
            t = await _poll_until(session, [n], full(n.name), 0.02, 30.0)
            if math.isnan(t[0]):
                raise TimeoutError(f"{n.name} never saw the full mesh")
        await asyncio.sleep(hb + random.uniform(0.0, hb))  # random phase against the heartbeats

        state_seen: dict[str, dict[str, float]] = {n.name: {} for n in survivors}

        def watcher(me: str) -> Any:
            def check(peers: list[dict[str, Any]]) -> bool:
                now = time.monotonic()
                for p in peers:
                    if p["name"] == victim.name:
                        state_seen[me].setdefault(p["state"], now)
                        return bool(p["state"] == "gone")
                return False
            return check

        t_kill = time.monotonic()
        victim.kill(signal.SIGKILL)

        async def one(n: NodeProc) -> float:
            return (await _poll_until(session, [n], watcher(n.name), interval, timeout))[0]

        gone_at = await asyncio.gather(*(one(n) for n in survivors))
    suspect = [state_seen[n.name].get("suspect", math.nan) - t_kill for n in survivors]
    return {
        "gone": max(gone_at) - t_kill,
        "gone_first": min(gone_at) - t_kill,
        "suspect": max(suspect),
    }


def detect_once(timing_name: str, n: int, interval: float) -> dict[str, Any]:
    timing = TIMINGS[timing_name]
    flags = _flags(timing) if timing_name != "default" else []
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp_name:
        tmp = Path(tmp_name)
        nodes: list[NodeProc] = []
        try:
            port0 = benchlib.free_port()
            nodes.append(NodeProc("c0", tmp, "--no-beacon", "--port", str(port0), *flags))
            benchlib.read_api_lines(nodes)
            nodes += [NodeProc(f"c{i}", tmp, "--no-beacon", "--seed", f"127.0.0.1:{port0}", *flags)
                      for i in range(1, n)]
            benchlib.read_api_lines(nodes)
            timeout = timing["gone_after"] * 3 + 5
            return asyncio.run(_kill_and_watch(nodes, timing["heartbeat_interval"], interval, timeout))
        finally:
            benchlib.kill_all(nodes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=4, help="nodes per mesh (default 4)")
    parser.add_argument("--reps", type=int, default=3, help="kills with the default timing (default 3)")
    parser.add_argument("--fast-reps", type=int, default=5, help="kills with the fast timing (default 5)")
    parser.add_argument("--poll-interval", type=float, default=0.01, help="pause between polls of one node, s")
    parser.add_argument("--quick", action="store_true", help="2 default and 3 fast kills")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.fast_reps = 2, 3
    benchlib.header("Crash detection: SIGKILL of one node -> 'gone' on every other",
                    nodes=args.nodes, reps=f"{args.reps} default + {args.fast_reps} fast",
                    poll_interval=args.poll_interval)
    rows: list[list[object]] = []
    results: dict[str, tuple[float, float]] = {}
    for name, reps in (("default", args.reps), ("fast", args.fast_reps)):
        if reps <= 0:
            continue
        t = TIMINGS[name]
        runs = [detect_once(name, args.nodes, args.poll_interval) for _ in range(reps)]
        gone = [r["gone"] for r in runs]
        med = benchlib.median(gone)
        results[name] = (med, t["gone_after"] + t["heartbeat_interval"])
        rows.append([
            name, f"{t['heartbeat_interval']:g}/{t['suspect_after']:g}/{t['gone_after']:g}",
            benchlib.median([r["suspect"] for r in runs]), med, min(gone), max(gone),
            benchlib.median([r["gone_first"] for r in runs]),
            med / t["gone_after"],
            f"{t['gone_after'] - t['heartbeat_interval']:g}..{t['gone_after'] + 0.1:g}",
        ])
    benchlib.print_table(["timing", "hb/suspect/gone s", "suspect s (median)", "gone s (median)", "min s", "max s",
                          "first survivor s", "ratio gone/configured", "expected s"], rows)
    print("  gone: kill -> the slowest survivor reports 'gone' (upper bound: when its answer came back)")
    benchlib.footer()
    print()
    for name, (med, bound) in results.items():
        gone_after = TIMINGS[name]["gone_after"]
        benchlib.target(f"crash detected ({name} timing) within gone_after + 1 heartbeat ({bound:g} s)",
                        f"{med:.2f} s = {med / gone_after:.2f}x gone_after", med <= bound)
    return 0


if __name__ == "__main__":
    sys.exit(main())
