#!/usr/bin/env python3
"""huddle's own CPU per CHAT hop (a diagnostic for round_trip.py's target).

Two ``Node`` instances in one process and one event loop, as in round_trip.py
(seeded, no beacons; ``--secure``: a group secret, CurveZMQ with ZAP).  Each
node's listener answers every ``ChatReceived`` with ``node.chat(event.text,
to=event.peer)``: one CHAT goes back and forth ``--hops`` times.  A hop is one
node's whole work for one message: the ROUTER's read (``Peer-Address``
included), the decode, the event, the listener, the reply's encode and its
hand-over to ZeroMQ.

The figure is the main thread's CPU time per hop (``time.thread_time_ns``:
ZeroMQ's I/O threads and preemption are not counted), for ``--reps`` runs;
the table gives the best and the median, and the wall time per hop.  Run it
against two trees to compare them:

    PYTHONPATH=TREE/src python bench/chat_hop.py [--secure]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import benchlib

TEXT = "x" * 100


async def _run(tmp: Path, group_key: str | None, hops: int, reps: int) -> list[tuple[float, float]]:
    from huddle import Node
    from huddle.protocol import ChatReceived

    bob = Node(benchlib.node_config("bob", tmp / "bob", group_key=group_key))
    tasks = [asyncio.create_task(bob.run())]
    await bob.wait_ready()
    alice = Node(benchlib.node_config("alice", tmp / "alice", (bob.mesh.endpoint.removeprefix("tcp://"),),
                                      group_key=group_key))
    tasks.append(asyncio.create_task(alice.run()))
    await alice.wait_ready()
    async with asyncio.timeout(30):
        while not (any(p.state == "alive" for p in alice.peers()) and any(p.state == "alive" for p in bob.peers())):
            await asyncio.sleep(0.005)
    left = [0]
    done: list[asyncio.Future[None]] = []

    def answer(node: Node) -> None:
        def on_event(event: object) -> None:
            if isinstance(event, ChatReceived):
                if left[0] > 0:
                    left[0] -= 1
                    node.chat(event.text, to=event.peer)
                elif done and not done[0].done():
                    done[0].set_result(None)
        node.add_listener(on_event)

    answer(alice)
    answer(bob)
    bob_id = next(p.uuid for p in alice.peers() if p.state == "alive")
    loop = asyncio.get_running_loop()
    results = []
    for rep in range(reps + 1):  # the first run warms up
        done[:] = [loop.create_future()]
        left[0] = hops
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        alice.chat(TEXT, to=bob_id)
        async with asyncio.timeout(60):
            await done[0]
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        if rep:
            results.append(((c1 - c0) / (hops + 1) / 1000, (w1 - w0) / (hops + 1) / 1000))
    for node in (alice, bob):
        node.stop()
    await asyncio.gather(*tasks)
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hops", type=int, default=20_000, help="hops per run (default 20000)")
    parser.add_argument("--reps", type=int, default=5, help="runs (default 5), after one to warm up")
    parser.add_argument("--secure", action="store_true", help="a group secret: CurveZMQ with ZAP")
    args = parser.parse_args(argv)
    benchlib.header("huddle CPU per CHAT hop (one process, two nodes)", hops=args.hops, reps=args.reps,
                    secure=args.secure)
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        key = benchlib.group_key_file(Path(tmp)) if args.secure else None
        results = asyncio.run(_run(Path(tmp), key, args.hops, args.reps))
    cpu = sorted(c for c, _ in results)
    wall = sorted(w for _, w in results)
    benchlib.print_table(["per hop, us", "best", "median"],
                         [["main thread CPU", f"{cpu[0]:.1f}", f"{statistics.median(cpu):.1f}"],
                          ["wall", f"{wall[0]:.1f}", f"{statistics.median(wall):.1f}"]])
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
