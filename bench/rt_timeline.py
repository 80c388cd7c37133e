#!/usr/bin/env python3
"""Where one round trip of round_trip.py goes: a timeline across the two processes.

The same layout as round_trip.py's huddle variant (two ``Node`` processes, alice
pings bob with ``node.chat``, bob's listener answers at once), with the
transport and the driver wrapped in each process so that every stage of a ping
is stamped: ``time.perf_counter_ns`` (CLOCK_MONOTONIC, one clock for both
processes) and ``time.thread_time_ns`` (the main thread's CPU).  Each ping's
stamps in bob are matched to alice's by time, and the table gives the median
of each segment: wall time, and the CPU the main thread spent in it where the
segment lies within one process.

    alice  t0 ... chat() handed to ZeroMQ (send) ........................ ROUTER readable -> listener
    bob                         ROUTER readable -> on_frames -> listener -> send

A segment between the processes ("alice send -> bob readable") is ZeroMQ's I/O
threads, the loopback and the wake-up of the receiver's event loop.  The wrappers
cost ~1-2 us a stamp, so the segments are a little overstated; the total is
printed next to the ping's wall time without them (round_trip.py's p50).

    PYTHONPATH=TREE/src python bench/rt_timeline.py [--secure] [--pings N]
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

TEXT = "x" * 100
WARMUP = 500
Stamp = tuple[str, int, int]  # (where, perf_counter_ns, thread_time_ns)


def _wrap(stamps: list[Stamp]) -> None:
    """Stamp the ROUTER's wake-ups, the driver's hand-over and each CHAT's send."""
    from huddle import driver
    from huddle.transport import zmq_transport

    clock, cpu = time.perf_counter_ns, time.thread_time_ns
    transport, mesh_driver = zmq_transport.ZmqTransport, driver.MeshDriver
    readable, send, on_frames = transport._readable, transport.send, mesh_driver.on_frames

    def _readable(self: Any) -> None:
        stamps.append(("read", clock(), cpu()))
        readable(self)

    def _send(self: Any, conn: int, frames: list[bytes]) -> bool:
        if frames[0] == b"CHAT":
            stamps.append(("send", clock(), cpu()))
        return send(self, conn, frames)

    def _on_frames(self: Any, batch: list[list[bytes]], sources: list[str]) -> None:
        stamps.append(("on_frames", clock(), cpu()))
        on_frames(self, batch, sources)

    transport._readable = _readable  # type: ignore[method-assign]
    transport.send = _send  # type: ignore[method-assign]
    mesh_driver.on_frames = _on_frames  # type: ignore[method-assign]


def node(role: str, tmp: str, group_key: str | None, conn: Connection, pings: int) -> None:
    async def main() -> None:
        from huddle import Node
        from huddle.protocol import ChatReceived

        stamps: list[Stamp] = []
        _wrap(stamps)  # before the node starts: the event loop holds the bound _readable
        clock = time.perf_counter_ns
        seeds = (conn.recv(),) if role == "alice" else ()
        nd = Node(benchlib.node_config(role, Path(tmp) / role, seeds, group_key=group_key))
        waiter: list[asyncio.Future[None]] = []

        def on_event(event: object) -> None:
            if isinstance(event, ChatReceived):
                stamps.append(("listener", clock(), time.thread_time_ns()))
                if role == "bob":
                    nd.chat(event.text, to=event.peer)
                elif waiter and not waiter[0].done():
                    waiter[0].set_result(None)

        nd.add_listener(on_event)
        task = asyncio.create_task(nd.run())
        await nd.wait_ready()
        conn.send(nd.mesh.endpoint.removeprefix("tcp://"))
        while not (alive := [p for p in nd.peers() if p.state == "alive"]):
            await asyncio.sleep(0.005)
        if role == "alice":
            loop = asyncio.get_running_loop()
            for i in range(WARMUP + pings):
                if i == WARMUP:
                    stamps.clear()
                waiter[:] = [loop.create_future()]
                stamps.append(("t0", clock(), time.thread_time_ns()))
                nd.chat(TEXT, to=alive[0].uuid)
                async with asyncio.timeout(10):
                    await waiter[0]
                if i % 50 == 49:  # bursts, as round_trip.py's: both sides idle in between
                    await asyncio.sleep(0.002)
            conn.send(stamps)
        else:
            await benchlib.arecv(conn, timeout=600)
            conn.send(stamps)
        nd.stop()
        await task

    asyncio.run(main())


def raw_node(role: str, curve: dict[str, bytes] | None, conn: Connection, pings: int) -> None:
    """round_trip.py's raw asyncio variant, stamped at the same places (no mesh, no listener:
    "on_frames" and "listener" are both the moment the frames are handed over)."""
    import os

    import zmq

    async def main() -> None:
        stamps: list[Stamp] = []
        clock, cpu = time.perf_counter_ns, time.thread_time_ns
        ctx = zmq.Context()
        router = ctx.socket(zmq.ROUTER)
        benchlib.curve_server(router, curve)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        peer = conn.recv() if role == "alice" else None
        conn.send(f"127.0.0.1:{port}")
        if peer is None:
            peer = await benchlib.arecv(conn)
        dealer = ctx.socket(zmq.DEALER)
        benchlib.curve_client(dealer, curve)
        dealer.setsockopt(zmq.IDENTITY, os.urandom(16))
        dealer.connect(f"tcp://{peer}")
        waiter: list[asyncio.Future[None]] = []

        def on_frames(frames: list[bytes]) -> None:
            t = (clock(), cpu())
            stamps.append(("on_frames", *t))
            stamps.append(("listener", *t))
            if role == "bob":
                stamps.append(("send", clock(), cpu()))
                dealer.send_multipart([b"CHAT", frames[2]], zmq.NOBLOCK)
            elif waiter and not waiter[0].done():
                waiter[0].set_result(None)

        def readable() -> None:
            if router.closed:  # a wake-up that came due as the socket closed at exit: nothing to read
                return
            stamps.append(("read", clock(), cpu()))
            while True:
                try:
                    frames = router.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    break
                on_frames(frames)
            if router.getsockopt(zmq.EVENTS) & zmq.POLLIN:
                loop.call_soon(readable)

        loop = asyncio.get_running_loop()
        fd = router.getsockopt(zmq.FD)
        loop.add_reader(fd, readable)
        loop.call_soon(readable)
        if role == "alice":
            body = [b"CHAT", TEXT.encode()]
            for i in range(WARMUP + pings):
                if i == WARMUP:
                    stamps.clear()
                waiter[:] = [loop.create_future()]
                stamps.append(("t0", clock(), cpu()))
                stamps.append(("send", clock(), cpu()))
                dealer.send_multipart(body, zmq.NOBLOCK)
                async with asyncio.timeout(10):
                    await waiter[0]
                if i % 50 == 49:
                    await asyncio.sleep(0.002)
            conn.send(stamps)
        else:
            await benchlib.arecv(conn, timeout=600)
            conn.send(stamps)
        # The loop watches the ROUTER's descriptor until told not to, and ZeroMQ signals it while
        # the socket closes: no read may follow the close (as ZmqTransport.close does).
        loop.remove_reader(fd)
        router.close(linger=0)
        dealer.close(linger=0)
        ctx.term()

    asyncio.run(main())


SEGMENTS = [  # (from, to, the same process: CPU measurable)
    ("a:t0", "a:send", "alice: node.chat() to the send", True),
    ("a:send", "b:read", "alice send -> bob's ROUTER readable (ZeroMQ, loopback, wake-up)", False),
    ("b:read", "b:on_frames", "bob: the read (3 frames, Peer-Address)", True),
    ("b:on_frames", "b:listener", "bob: mesh.receive, the event, the listener called", True),
    ("b:listener", "b:send", "bob: node.chat() to the send", True),
    ("b:send", "a:read", "bob send -> alice's ROUTER readable (ZeroMQ, loopback, wake-up)", False),
    ("a:read", "a:on_frames", "alice: the read", True),
    ("a:on_frames", "a:listener", "alice: mesh.receive, the event, the listener called", True),
]


def timelines(alice: list[Stamp], bob: list[Stamp]) -> list[dict[str, Stamp]]:
    """One dict per ping: each stage's first stamp ("a:..." alice's, "b:..." bob's)."""
    pings: list[dict[str, Stamp]] = []
    for s in alice:
        if s[0] == "t0":
            pings.append({})
        if pings:
            pings[-1].setdefault("a:" + s[0], s)
    hops: list[dict[str, Stamp]] = []  # bob's, one per wake-up
    for s in bob:
        if s[0] == "read":
            hops.append({})
        if hops:
            hops[-1].setdefault("b:" + s[0], s)
    hops = [h for h in hops if "b:send" in h]
    starts = [h["b:read"][1] for h in hops]
    for p in pings:
        if "a:send" in p and "a:read" in p:
            k = bisect.bisect_left(starts, p["a:send"][1])
            if k < len(hops) and starts[k] < p["a:read"][1]:
                p.update(hops[k])
    keys = {x for seg in SEGMENTS for x in seg[:2]}
    return [p for p in pings if keys <= p.keys()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pings", type=int, default=3000, help="timed pings (default 3000)")
    parser.add_argument("--secure", action="store_true", help="a group secret: CurveZMQ with ZAP")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw asyncio pair (CURVE with --secure)")
    args = parser.parse_args(argv)
    benchlib.header("One round trip's timeline (round_trip.py's huddle variant, stamped)", pings=args.pings,
                    warmup=WARMUP, secure=args.secure)
    huddle = _huddle_pair(args.pings, args.secure)
    raw = None if args.no_raw else _raw_pair(args.pings, benchlib.curve_keys() if args.secure else None)
    rows: list[list[object]] = []
    for x, y, what, same in SEGMENTS:
        row: list[object] = [what]
        for full in [huddle] + ([] if raw is None else [raw]):
            row.append(statistics.median((p[y][1] - p[x][1]) / 1000 for p in full))
            row.append(statistics.median((p[y][2] - p[x][2]) / 1000 for p in full) if same else "-")
        rows.append(row)
    total: list[object] = ["round trip (t0 -> alice's listener)"]
    for k, full in enumerate([huddle] + ([] if raw is None else [raw])):
        total.append(statistics.median((p["a:listener"][1] - p["a:t0"][1]) / 1000 for p in full))
        total.append(sum(r[2 + 2 * k] for r in rows if isinstance(r[2 + 2 * k], float)))  # type: ignore[misc]
    rows.append(total)
    head = ["segment (median of pings)", "huddle wall us", "huddle CPU us"]
    benchlib.print_table(head + ([] if raw is None else ["raw asyncio wall us", "raw asyncio CPU us"]), rows)
    print(f"  pings matched across the two processes: huddle {len(huddle)}"
          + ("" if raw is None else f", raw asyncio {len(raw)}") + f" of {args.pings}")
    benchlib.footer()
    return 0


def _raw_pair(pings: int, curve: dict[str, bytes] | None) -> list[dict[str, Stamp]]:
    ctx = mp.get_context("spawn")
    a, a_child = ctx.Pipe()
    b, b_child = ctx.Pipe()
    bob = ctx.Process(target=raw_node, args=("bob", curve, b_child, pings))
    bob.start()
    alice = ctx.Process(target=raw_node, args=("alice", curve, a_child, pings))
    alice.start()
    a.send(b.recv())
    b.send(a.recv())
    return _collect(a, b, alice, bob)


def _collect(a: Connection, b: Connection, alice: Any, bob: Any) -> list[dict[str, Stamp]]:
    """Wait for alice's pings, stop bob, match their stamps."""
    if not a.poll(600):
        raise TimeoutError("alice did not finish")
    a_stamps = a.recv()
    b.send(("stop",))
    b_stamps = b.recv()
    benchlib.reap(alice, bob)
    return timelines(a_stamps, b_stamps)


def _huddle_pair(pings: int, secure: bool) -> list[dict[str, Stamp]]:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        key = benchlib.group_key_file(Path(tmp)) if secure else None
        a, a_child = ctx.Pipe()
        b, b_child = ctx.Pipe()
        bob = ctx.Process(target=node, args=("bob", tmp, key, b_child, pings))
        bob.start()
        a.send(b.recv())  # bob's address, for alice's seed
        alice = ctx.Process(target=node, args=("alice", tmp, key, a_child, pings))
        alice.start()
        a.recv()
        return _collect(a, b, alice, bob)


if __name__ == "__main__":
    sys.exit(main())
