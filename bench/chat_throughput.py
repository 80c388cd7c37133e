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

``--secure`` (issue 22): the huddle nodes hold a group secret (a group file,
as ``huddle node --group-key FILE``), so their mesh speaks CurveZMQ with ZAP;
the raw baseline runs with CURVE too, on the same frames: a server keypair on
the ROUTER, a client keypair on the DEALER (``zmq.curve_keypair()``), no ZAP
handler (it is asked once per connection, before the clock starts).  The
target is then huddle secure against raw CURVE.  ``--with-open`` also runs
the open pair (raw, huddle) in every repetition, right after the secure one,
for what security costs each side measured in the same run.
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
from dataclasses import dataclass
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


def raw_receiver(n: int, curve: dict[str, bytes] | None, conn: Connection) -> None:
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    benchlib.curve_server(router, curve)
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
    conn.send(("done", count, t_last, cpu_seconds() - cpu0, benchlib.mechanism(router)))
    router.close()
    ctx.term()


def raw_sender(n: int, port: int, curve: dict[str, bytes] | None, conn: Connection) -> None:
    import zmq

    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    benchlib.curve_client(dealer, curve)
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


def node_receiver(n: int, tmp: str, group_key: str | None, conn: Connection) -> None:
    asyncio.run(_node_receiver(n, tmp, group_key, conn))


async def _node_receiver(n: int, tmp: str, group_key: str | None, conn: Connection) -> None:
    from huddle import Node
    from huddle.protocol import ChatReceived

    node = Node(benchlib.node_config("bob", Path(tmp) / "bob", group_key=group_key))
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
    security = benchlib.security_of(node)
    conn.send(("done", count, t_last, cpu_seconds() - cpu0, f"{security['mode']}, {security['admitted']} admitted by ZAP"))
    node.stop()
    await task


def node_sender(n: int, mode: str, rate: float, tmp: str, endpoint: str, group_key: str | None,
                conn: Connection) -> None:
    asyncio.run(_node_sender(n, mode, rate, tmp, endpoint, group_key, conn))


async def _node_sender(n: int, mode: str, rate: float, tmp: str, endpoint: str, group_key: str | None,
                       conn: Connection) -> None:
    from huddle import Node

    seed = endpoint.removeprefix("tcp://")
    node = Node(benchlib.node_config("alice", Path(tmp) / "alice", (seed,), group_key=group_key))
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


@dataclass(frozen=True)
class Variant:
    """What one pair of runs measures: raw pyzmq (with ``curve`` keys, or plain) or huddle
    nodes (holding the group file ``group_key``, or open)."""

    label: str
    kind: str  # raw or huddle
    curve: dict[str, bytes] | None = None
    group_key: str | None = None


RAW, HUDDLE = Variant("raw", "raw"), Variant("huddle", "huddle")


def run_pair(v: Variant, n: int, mode: str = "send_chat", rate: float = 0.0) -> dict[str, Any]:
    """One measurement: start receiver and sender processes, return the figures."""
    ctx = mp.get_context("spawn")
    r_parent, r_child = ctx.Pipe()
    s_parent, s_child = ctx.Pipe()
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        if v.kind == "raw":
            receiver = ctx.Process(target=raw_receiver, args=(n, v.curve, r_child))
            receiver.start()
            _, port = r_parent.recv()
            sender = ctx.Process(target=raw_sender, args=(n, port, v.curve, s_child))
            sender.start()
        else:
            receiver = ctx.Process(target=node_receiver, args=(n, tmp, v.group_key, r_child))
            receiver.start()
            _, endpoint = r_parent.recv()
            sender = ctx.Process(target=node_sender, args=(n, mode, rate, tmp, endpoint, v.group_key, s_child))
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
        "security": done[4],
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
    parser.add_argument("--secure", action="store_true",
                        help="huddle with a group secret (CurveZMQ + ZAP) against raw pyzmq with CURVE")
    parser.add_argument("--with-open", action="store_true",
                        help="with --secure: also the open pair (raw, huddle) in every repetition")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.messages = 3, 50_000
    if args.with_open and not args.secure:
        parser.error("--with-open goes with --secure")
    with tempfile.TemporaryDirectory(prefix="huddle-bench-key-") as keys:
        if not args.secure:
            return measure(args, RAW, HUDDLE)
        return measure(args, Variant("raw CURVE", "raw", curve=benchlib.curve_keys()),
                       Variant("huddle secure", "huddle", group_key=benchlib.group_key_file(Path(keys))))


def measure(args: argparse.Namespace, raw_v: Variant, node_v: Variant) -> int:
    """The run pairs (raw_v, node_v), and with ``--with-open`` the open pair after each; the loss checks."""
    n = args.messages
    if args.secure:
        benchlib.header("CHAT throughput with security: nodes with a group secret (CurveZMQ) vs raw DEALER -> ROUTER "
                        "with CURVE (2 processes each)", messages=n, body="100 B", reps=args.reps,
                        with_open=args.with_open)
    else:
        benchlib.header("CHAT throughput, node -> node vs raw DEALER -> ROUTER (2 processes each)",
                        messages=n, body="100 B", reps=args.reps)
    pairs = [(raw_v, node_v)] + ([(RAW, HUDDLE)] if args.with_open else [])
    runs: dict[str, list[dict[str, Any]]] = {v.label: [] for pair in pairs for v in pair}
    rows: list[list[object]] = []
    losses: list[int] = []
    for rep in range(1, args.reps + 1):
        for a, b in pairs:
            runs[a.label].append(run_pair(a, n))
            runs[b.label].append(run_pair(b, n))
            losses.append(runs[b.label][-1]["lost"])
        raw, node = runs[raw_v.label][-1], runs[node_v.label][-1]
        rows.append([f"run {rep}", raw["recv_rate"], node["recv_rate"], node["recv_rate"] / raw["recv_rate"],
                     raw["send_cpu_us"], raw["recv_cpu_us"], node["send_cpu_us"], node["recv_cpu_us"], node["lost"]])

    def med(label: str, key: str) -> float:
        return benchlib.median([r[key] for r in runs[label]])

    def ratio(top: str, base: str) -> float:
        """The median of the per-repetition ratios of ``top``'s rate to ``base``'s."""
        return benchlib.median([t["recv_rate"] / b["recv_rate"] for t, b in zip(runs[top], runs[base], strict=True)])

    raw_med, node_med = med(raw_v.label, "recv_rate"), med(node_v.label, "recv_rate")
    # Each raw run is followed at once by a huddle run: the per-pair ratio is the fair
    # comparison on a machine whose speed drifts; the ratio of the medians is shown too.
    target_ratio = ratio(node_v.label, raw_v.label)
    rows.append(["median", raw_med, node_med, target_ratio, med(raw_v.label, "send_cpu_us"),
                 med(raw_v.label, "recv_cpu_us"), med(node_v.label, "send_cpu_us"), med(node_v.label, "recv_cpu_us"),
                 max(losses)])
    r_, h_ = raw_v.label, node_v.label
    benchlib.print_table(["", f"{r_} msg/s", f"{h_} msg/s", "ratio", f"{r_} send CPU us/msg", f"{r_} recv CPU us/msg",
                          f"{h_} send CPU us/msg", f"{h_} recv CPU us/msg", f"{h_} lost"], rows)
    print("  ratio: per run pair; the median row's ratio is the median of those (the target's figure)")
    print("  (CPU us/msg: user+system time of the whole process, ZeroMQ I/O thread included, per message)")
    if args.with_open:
        print("\n  the open pair, run right after the secure pair in each repetition")
        open_rows: list[list[object]] = []
        for rep in range(args.reps):
            o_raw, o_node = runs["raw"][rep], runs["huddle"][rep]
            s_raw, s_node = runs[r_][rep], runs[h_][rep]
            open_rows.append([f"run {rep + 1}", o_raw["recv_rate"], o_node["recv_rate"],
                              o_node["recv_rate"] / o_raw["recv_rate"], s_node["recv_rate"] / o_node["recv_rate"],
                              s_raw["recv_rate"] / o_raw["recv_rate"], o_node["send_cpu_us"], o_node["recv_cpu_us"]])
        open_rows.append(["median", med("raw", "recv_rate"), med("huddle", "recv_rate"), ratio("huddle", "raw"),
                          ratio(h_, "huddle"), ratio(r_, "raw"), med("huddle", "send_cpu_us"),
                          med("huddle", "recv_cpu_us")])
        benchlib.print_table(["", "raw msg/s", "huddle msg/s", "huddle/raw", f"{h_}/huddle", f"{r_}/raw",
                              "huddle send CPU us/msg", "huddle recv CPU us/msg"], open_rows)

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
            res = run_pair(node_v, count, mode, r)
            losses.append(res["lost"])
            loss_rows.append([label, res["sent"], res["received"], res["lost"], res["dropped"],
                              res["send_rate"], res["recv_rate"]])
        benchlib.print_table(["sender", "sent", "received", "lost", "dropped", "sent msg/s", "received msg/s"],
                             loss_rows)
    benchlib.footer()
    print()
    ok = True
    lost_total = sum(losses)
    ok &= benchlib.check("chat messages lost across all huddle runs", f"lost: {lost_total}", lost_total == 0)
    measured = (f"{target_ratio:.2f}x (median of per-pair ratios; medians {node_med:,.0f} vs {raw_med:,.0f} msg/s = "
                f"{node_med / raw_med:.2f}x)")
    if not args.secure:
        benchlib.target("chat throughput >= 0.5x raw", measured, target_ratio >= 0.5)
        return 0 if ok else 1
    huddle_sec = sorted({r["security"] for r in runs[h_]})
    raw_sec = sorted({r["security"] for r in runs[r_]})
    secured = all(x.startswith("group,") for x in huddle_sec) and raw_sec == ["CURVE"]
    ok &= benchlib.check("the secure runs were secured", f"huddle nodes: {'; '.join(huddle_sec)}; raw sockets: "
                         f"{', '.join(raw_sec)}", secured)
    benchlib.target("chat throughput with security >= 0.5x raw CURVE", measured, target_ratio >= 0.5)
    if args.with_open:
        print(f"RESULT chat throughput, security's cost: huddle secure / huddle open {ratio(h_, 'huddle'):.2f}x, "
              f"raw CURVE / raw {ratio(r_, 'raw'):.2f}x (medians of per-repetition ratios); open pair huddle / raw "
              f"{ratio('huddle', 'raw'):.2f}x", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
