#!/usr/bin/env python3
"""CHAT throughput from one node to another, against raw pyzmq DEALER -> ROUTER.

Both measurements use two processes on 127.0.0.1 (sender, receiver) and the
same frames: a DEALER with a 16-octet identity sends ``[b"CHAT", body]`` with
a 100-octet body, the receiving ROUTER sees ``[identity, b"CHAT", body]``.

* raw:    the sender process pushes N messages through a blocking DEALER
          (SNDHWM 10 000, as huddle's); the receiver process counts them with
          a blocking ``recv_multipart`` on a ROUTER (RCVHWM 100 000, as huddle's).
* huddle: two ``Node`` instances (seeded to each other, no beacons); the
          sender awaits ``node.send_chat(text)`` N times (``asyncio.sleep(0)``
          every 1000), the receiver counts ``ChatReceived`` events in a listener.

The rate is taken at the receiver: N / (time the receiver got the last
message - time the sender started), on the machine-wide monotonic clock.
Raw and huddle runs alternate so both see the same machine noise; the
target's figure is the median over run pairs of huddle/raw (the ratio of the
medians is printed next to it).  CPU time per message of each process (all
its threads) is shown to tell which side limits the rate.

After that, loss checks: the huddle sender at full speed with ``send_chat``
(backpressure), at full speed with ``chat`` (no backpressure, only yielding
every 1000 messages), and paced at a few fixed rates; each must lose nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import resource
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

BODY = b"x" * 100
TEXT = BODY.decode()
SNDHWM = 10_000  # huddle's DEALER send high-water mark (zmq_transport.py)
RCVHWM = 100_000  # huddle's ROUTER receive high-water mark
STALL = 5.0  # seconds without progress after which the receiver gives up


def cpu_seconds() -> float:
    """CPU time of this process so far, all threads (ZeroMQ's I/O thread too)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


# --------------------------------------------------------------------------- raw


def raw_receiver(n: int, conn: Connection) -> None:
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVHWM, RCVHWM)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    conn.send(("port", port))
    benchlib.await_raw_sender(router, STALL)
    cpu0 = cpu_seconds()
    count = 0
    t_last = 0.0
    recv = router.recv_multipart
    try:
        while count < n:
            recv()
            count += 1
    except zmq.Again:
        pass
    t_last = time.monotonic()
    conn.send(("done", count, t_last, cpu_seconds() - cpu0))
    router.close()
    ctx.term()


def raw_sender(n: int, port: int, conn: Connection) -> None:
    import zmq

    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, os.urandom(16))
    dealer.setsockopt(zmq.SNDHWM, SNDHWM)
    dealer.setsockopt(zmq.LINGER, -1)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    dealer.send_multipart([b"HELO", b""])
    dealer.recv_multipart()
    send = dealer.send_multipart
    frames = [b"CHAT", BODY]
    cpu0 = cpu_seconds()
    t0 = time.monotonic()
    for _ in range(n):
        send(frames)
    t_end = time.monotonic()
    conn.send(("sent", t0, t_end, n, 0))
    conn.recv()  # "stop"
    conn.send(("cpu", cpu_seconds() - cpu0))
    dealer.close()
    ctx.term()


# ------------------------------------------------------------------------ huddle






def node_receiver(n: int, tmp: str, conn: Connection) -> None:
    asyncio.run(_node_receiver(n, tmp, conn))


async def _node_receiver(n: int, tmp: str, conn: Connection) -> None:
    from huddle import Node
    from huddle.protocol import ChatReceived

    node = Node(benchlib.node_config("bob", Path(tmp) / "bob"))
    count = 0
    t_last = 0.0
    done = asyncio.Event()

    def on_event(event: object) -> None:
        nonlocal count, t_last
        if isinstance(event, ChatReceived):
            count += 1
            if count >= n:
                t_last = time.monotonic()
                done.set()

    node.add_listener(on_event)
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    conn.send(("endpoint", node.mesh.endpoint))
    while not any(p.state == "alive" for p in node.peers()):
        await asyncio.sleep(0.005)
    conn.send(("admitted",))
    cpu0 = cpu_seconds()
    # The first message may take a while (process start).
    stalled_at = await benchlib.wait_done_or_stalled(done, lambda: count, 30.0, STALL)
    if stalled_at is not None:
        t_last = stalled_at
    conn.send(("done", count, t_last, cpu_seconds() - cpu0))
    node.stop()
    await task


def node_sender(n: int, mode: str, rate: float, tmp: str, endpoint: str, conn: Connection) -> None:
    asyncio.run(_node_sender(n, mode, rate, tmp, endpoint, conn))


async def _node_sender(n: int, mode: str, rate: float, tmp: str, endpoint: str, conn: Connection) -> None:
    from huddle import Node

    seed = endpoint.removeprefix("tcp://")
    node = Node(benchlib.node_config("alice", Path(tmp) / "alice", (seed,)))
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    while not any(p.state == "alive" for p in node.peers()):
        await asyncio.sleep(0.005)
    await benchlib.arecv(conn)  # "go": the receiver has admitted us too
    cpu0 = cpu_seconds()
    sent = 0
    t0 = time.monotonic()
    if mode == "send_chat":
        send_chat = node.send_chat
        for i in range(n):
            sent += await send_chat(TEXT)
            if i % 1000 == 999:
                await asyncio.sleep(0)
    elif mode == "chat":
        chat = node.chat
        for i in range(n):
            sent += chat(TEXT)
            if i % 1000 == 999:
                await asyncio.sleep(0)
    elif mode == "paced":
        send_chat = node.send_chat
        step = 100
        next_at = t0
        for i in range(n):
            sent += await send_chat(TEXT)
            if i % step == step - 1:
                next_at += step / rate
                await asyncio.sleep(max(0.0, next_at - time.monotonic()))
    else:
        raise ValueError(mode)
    t_end = time.monotonic()
    dropped = int(node.info()["stats"].get("send_dropped", -1))
    conn.send(("sent", t0, t_end, sent, dropped))
    await benchlib.arecv(conn, timeout=120.0)  # "stop": keep flushing our queues until then
    conn.send(("cpu", cpu_seconds() - cpu0))
    node.stop()
    await task


# ------------------------------------------------------------------------ driver


def run_pair(kind: str, n: int, mode: str = "send_chat", rate: float = 0.0) -> dict[str, Any]:
    """One measurement: start receiver and sender processes, return the figures."""
    ctx = mp.get_context("spawn")
    r_parent, r_child = ctx.Pipe()
    s_parent, s_child = ctx.Pipe()
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        if kind == "raw":
            receiver = ctx.Process(target=raw_receiver, args=(n, r_child))
            receiver.start()
            _, port = r_parent.recv()
            sender = ctx.Process(target=raw_sender, args=(n, port, s_child))
            sender.start()
        else:
            receiver = ctx.Process(target=node_receiver, args=(n, tmp, r_child))
            receiver.start()
            _, endpoint = r_parent.recv()
            sender = ctx.Process(target=node_sender, args=(n, mode, rate, tmp, endpoint, s_child))
            sender.start()
            if not r_parent.poll(60):
                raise TimeoutError("the receiving node never admitted the sender")
            r_parent.recv()  # admitted
            s_parent.send("go")
        if not s_parent.poll(300):
            raise TimeoutError("the sender did not finish")
        _, t0, t_end, sent, dropped = s_parent.recv()
        if not r_parent.poll(300):
            raise TimeoutError("the receiver did not finish")
        done = r_parent.recv()
        s_parent.send("stop")
        if not s_parent.poll(60):
            raise TimeoutError("the sender did not stop")
        _, send_cpu = s_parent.recv()
        benchlib.reap(sender, receiver)
    count, t_last, recv_cpu = done[1], done[2], done[3]
    return {
        "sent": sent,
        "received": count,
        "lost": sent - count,
        "dropped": dropped,
        "recv_rate": count / (t_last - t0) if t_last > t0 else float("nan"),
        "send_rate": sent / (t_end - t0) if t_end > t0 else float("nan"),
        "send_cpu_us": send_cpu / max(1, sent) * 1e6,
        "recv_cpu_us": recv_cpu / max(1, count) * 1e6,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=100_000, help="messages per run (default 100000)")
    parser.add_argument("--reps", type=int, default=5, help="raw/huddle run pairs (default 5)")
    parser.add_argument("--rates", default="10000,30000", help="paced sending rates for the loss checks, msg/s")
    parser.add_argument("--no-loss-runs", action="store_true", help="skip the extra loss-check runs")
    parser.add_argument("--quick", action="store_true", help="3 run pairs of 50000 messages")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.messages = 3, 50_000
    n = args.messages
    benchlib.header("CHAT throughput, node -> node vs raw DEALER -> ROUTER (2 processes each)",
                    messages=n, body="100 B", reps=args.reps)

    rows: list[list[object]] = []
    raw_runs: list[dict[str, Any]] = []
    node_runs: list[dict[str, Any]] = []
    losses: list[int] = []
    for rep in range(1, args.reps + 1):
        raw = run_pair("raw", n)
        node = run_pair("huddle", n)
        raw_runs.append(raw)
        node_runs.append(node)
        losses.append(node["lost"])
        rows.append([f"run {rep}", raw["recv_rate"], node["recv_rate"], node["recv_rate"] / raw["recv_rate"],
                     raw["send_cpu_us"], raw["recv_cpu_us"], node["send_cpu_us"], node["recv_cpu_us"], node["lost"]])

    def med(runs: list[dict[str, Any]], key: str) -> float:
        return benchlib.median([r[key] for r in runs])

    raw_med, node_med = med(raw_runs, "recv_rate"), med(node_runs, "recv_rate")
    # Each raw run is followed at once by a huddle run: the per-pair ratio is the fair
    # comparison on a machine whose speed drifts; the ratio of the medians is shown too.
    ratio = benchlib.median([b["recv_rate"] / a["recv_rate"] for a, b in zip(raw_runs, node_runs, strict=True)])
    rows.append(["median", raw_med, node_med, ratio, med(raw_runs, "send_cpu_us"), med(raw_runs, "recv_cpu_us"),
                 med(node_runs, "send_cpu_us"), med(node_runs, "recv_cpu_us"), max(losses)])
    benchlib.print_table(["", "raw msg/s", "huddle msg/s", "ratio", "raw send CPU us/msg", "raw recv CPU us/msg",
                          "huddle send CPU us/msg", "huddle recv CPU us/msg", "huddle lost"], rows)
    print("  ratio: per run pair; the median row's ratio is the median of those (the target's figure)")
    print("  (CPU us/msg: user+system time of the whole process, ZeroMQ I/O thread included, per message)")

    ok = True
    if not args.no_loss_runs:
        print("\n  loss checks (huddle sender -> receiver, every message must arrive)")
        checks: list[tuple[str, str, float]] = [
            ("send_chat, full speed", "send_chat", 0.0),
            ("chat(), full speed, no backpressure", "chat", 0.0),
        ]
        for r in (float(x) for x in args.rates.split(",") if x.strip()):
            checks.append((f"send_chat paced at {r:,.0f}/s", "paced", r))
        loss_rows: list[list[object]] = []
        for label, mode, r in checks:
            count = n if mode != "paced" else max(1000, int(r * 2.0))  # ~2 s per paced run
            res = run_pair("huddle", count, mode, r)
            losses.append(res["lost"])
            loss_rows.append([label, res["sent"], res["received"], res["lost"], res["dropped"],
                              res["send_rate"], res["recv_rate"]])
        benchlib.print_table(["sender", "sent", "received", "lost", "dropped", "sent msg/s", "received msg/s"],
                             loss_rows)
    benchlib.footer()
    print()
    lost_total = sum(losses)
    ok &= benchlib.check("chat messages lost across all huddle runs", f"lost: {lost_total}", lost_total == 0)
    benchlib.target("chat throughput >= 0.5x raw",
                    f"{ratio:.2f}x (median of per-pair ratios; medians {node_med:,.0f} vs {raw_med:,.0f} msg/s = "
                    f"{node_med / raw_med:.2f}x)", ratio >= 0.5)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
