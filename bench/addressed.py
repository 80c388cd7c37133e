#!/usr/bin/env python3
"""Addressed messages: throughput and round trip, against raw pyzmq DEALER -> ROUTER.

Two processes on 127.0.0.1 each time.

* throughput, raw:    ``chat_throughput``'s raw pair (a blocking DEALER pushes
                      N 100-octet messages, a ROUTER counts them).
* throughput, huddle: two ``Node`` instances; the sender awaits
                      ``node.send_to_wait(peer, payload)`` N times (100 octets;
                      it waits when the 16 MiB send buffer is full), the
                      receiver counts ``MessageReceived`` events.  Every message
                      is acknowledged (DACK) and kept until then.
* round trip:         the receiver answers every message with one of its own;
                      the sender sends the next when the answer arrives.  Raw:
                      the same ping-pong on DEALER/ROUTER.

Rates are taken at the receiver; raw and huddle runs alternate; the ratio
is the median of the per-pair ratios.  Throughput under loss:
``addressed_loss.py`` (namespaces and nft; this machine has no netem).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib
from chat_throughput import raw_receiver, raw_sender

PAYLOAD = b"x" * 100


async def _node(name: str, tmp: str, seed: str | None) -> Any:
    from huddle import Node

    node = Node(benchlib.node_config(name, Path(tmp) / name, (seed,) if seed else ()))
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    return node, task


def huddle_receiver(n: int, echo: bool, tmp: str, conn: Connection) -> None:
    asyncio.run(_huddle_receiver(n, echo, tmp, conn))


async def _huddle_receiver(n: int, echo: bool, tmp: str, conn: Connection) -> None:
    from huddle.protocol.events import MessageReceived

    node, task = await _node("bob", tmp, None)
    count = 0
    done = asyncio.Event()
    t_last = 0.0

    def on_event(event: object) -> None:
        nonlocal count, t_last
        if isinstance(event, MessageReceived):
            count += 1
            if echo:
                node.send_to(event.peer, PAYLOAD)
            if count >= n:
                t_last = time.monotonic()
                done.set()

    node.add_listener(on_event)
    conn.send(("endpoint", node.mesh.endpoint))
    await asyncio.wait_for(done.wait(), 300)
    conn.send(("done", count, t_last))
    await benchlib.arecv(conn, timeout=60.0)  # "stop": answers may still be unacknowledged
    node.stop()
    await task


def huddle_sender(n: int, echo: bool, tmp: str, endpoint: str, conn: Connection) -> None:
    asyncio.run(_huddle_sender(n, echo, tmp, endpoint, conn))


async def _huddle_sender(n: int, echo: bool, tmp: str, endpoint: str, conn: Connection) -> None:
    from huddle.protocol.events import MessageReceived

    node, task = await _node("alice", tmp, endpoint.removeprefix("tcp://"))
    while not node.mesh.alive_peers():
        await asyncio.sleep(0.005)
    peer = node.mesh.alive_peers()[0]
    answered = asyncio.Event()
    node.add_listener(lambda e: answered.set() if isinstance(e, MessageReceived) else None)
    rtts: list[float] = []
    t0 = time.monotonic()
    for i in range(n):
        if echo:
            answered.clear()
            t = time.monotonic()
            node.send_to(peer, PAYLOAD)
            await asyncio.wait_for(answered.wait(), 10)
            rtts.append(time.monotonic() - t)
        else:
            await node.send_to_wait(peer, PAYLOAD, 60)
            if i % 1000 == 999:
                await asyncio.sleep(0)
    conn.send(("sent", t0, rtts))
    await benchlib.arecv(conn, timeout=120.0)  # "stop": keep retransmitting until the receiver is done
    node.stop()
    await task


def raw_ping(n: int, conn: Connection) -> None:
    """Raw round trips: one process, a DEALER and a ROUTER in a second thread's place: an echo process."""
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    conn.send(("port", port))
    for _ in range(n + 1):
        ident, *frames = router.recv_multipart()
        router.send_multipart([ident, *frames])
    router.close(0)
    ctx.term()


def raw_rtts(n: int) -> list[float]:
    import zmq

    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    echo = ctx.Process(target=raw_ping, args=(n, child))
    echo.start()
    _, port = parent.recv()
    zctx = zmq.Context()
    dealer = zctx.socket(zmq.DEALER)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    dealer.send_multipart([b"DMSG", PAYLOAD])
    dealer.recv_multipart()  # connected
    rtts = []
    for _ in range(n):
        t = time.monotonic()
        dealer.send_multipart([b"DMSG", PAYLOAD])
        dealer.recv_multipart()
        rtts.append(time.monotonic() - t)
    dealer.close(0)
    zctx.term()
    benchlib.reap(echo)
    return rtts


def huddle_run(n: int, echo: bool) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    r_parent, r_child = ctx.Pipe()
    s_parent, s_child = ctx.Pipe()
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        receiver = ctx.Process(target=huddle_receiver, args=(n, echo, tmp, r_child))
        receiver.start()
        _, endpoint = r_parent.recv()
        sender = ctx.Process(target=huddle_sender, args=(n, echo, tmp, endpoint, s_child))
        sender.start()
        _, t0, rtts = s_parent.recv()
        _, count, t_last = r_parent.recv()
        r_parent.send("stop")
        s_parent.send("stop")
        benchlib.reap(sender, receiver)
    return {"rate": count / (t_last - t0), "rtts": rtts}


def raw_rate(n: int) -> float:
    ctx = mp.get_context("spawn")
    r_parent, r_child = ctx.Pipe()
    s_parent, s_child = ctx.Pipe()
    receiver = ctx.Process(target=raw_receiver, args=(n, None, r_child))  # None: no CURVE
    receiver.start()
    _, port = r_parent.recv()
    sender = ctx.Process(target=raw_sender, args=(n, port, None, s_child))
    sender.start()
    _, t0, _t_end, _sent, _ = s_parent.recv()
    _, count, t_last, _cpu, _mechanism = r_parent.recv()
    s_parent.send("stop")
    s_parent.recv()
    benchlib.reap(sender, receiver)
    return float(count / (t_last - t0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=100_000, help="messages per throughput run (default 100000)")
    ap.add_argument("--pings", type=int, default=2000, help="round trips per run (default 2000)")
    ap.add_argument("--reps", type=int, default=3, help="run pairs (default 3)")
    ap.add_argument("--quick", action="store_true", help="1 pair, fewer messages")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.messages, args.pings = 1, 30_000, 500
    benchlib.header("Addressed messages: throughput and round trip against raw pyzmq", messages=args.messages,
                    pings=args.pings, reps=args.reps)
    rows, ratios = [], []
    p50s, p99s, raw50s, raw99s = [], [], [], []
    for _ in range(args.reps):
        raw = raw_rate(args.messages)
        hud = huddle_run(args.messages, echo=False)["rate"]
        ratios.append(hud / raw)
        rtt = sorted(huddle_run(args.pings, echo=True)["rtts"])
        rraw = sorted(raw_rtts(args.pings))
        p50s.append(statistics.median(rtt) * 1e6)
        p99s.append(benchlib.percentile(rtt, 99) * 1e6)
        raw50s.append(statistics.median(rraw) * 1e6)
        raw99s.append(benchlib.percentile(rraw, 99) * 1e6)
        rows.append([f"{raw:,.0f}", f"{hud:,.0f}", f"{hud / raw:.2f}x", f"{raw50s[-1]:.0f} / {raw99s[-1]:.0f}",
                     f"{p50s[-1]:.0f} / {p99s[-1]:.0f}"])
    benchlib.print_table(["raw msg/s", "huddle msg/s", "ratio", "raw RTT p50/p99 us", "huddle RTT p50/p99 us"], rows)
    benchlib.footer()
    print(f"RESULT addressed throughput {benchlib.median(ratios):.2f}x raw pyzmq "
          f"(median of {args.reps}); round trip p50 {benchlib.median(p50s):.0f} us vs raw "
          f"{benchlib.median(raw50s):.0f} us, p99 {benchlib.median(p99s):.0f} us vs raw {benchlib.median(raw99s):.0f} us")
    return 0


if __name__ == "__main__":
    sys.exit(main())
