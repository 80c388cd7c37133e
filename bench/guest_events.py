#!/usr/bin/env python3
"""Guest events: from a guest on node A to a guest on node B, over TCP and over
WebSocket, against the node-to-node event rate in the same run.

Two ``Node`` processes on 127.0.0.1 with guests enabled (A seeded to B).

* node -> node:  A's process calls ``node.emit(kind, body)`` N times, one
                 event per call (what a guest's event costs A), with
                 ``asyncio.sleep(0)`` every 100; B counts the records of
                 ``LogAppended``.  No guests involved.
* guest TCP:     a sender process writes N pre-encoded ``event`` messages on
                 a TCP connection to A's guest port (registered, no
                 heartbeat); a receiver process registered at B, hearing the
                 topic, counts the messages B sends to its own port.
* guest WS:      the same over the nodes' guest WebSocket ports (aiohttp
                 client), one Noam message per WebSocket message.

Each path carries N events from one end to the other: the guest paths add
the guest parsing at A, the delivery to the guest at B and both sockets.  The
rate is N / (last receipt - first send) on the machine-wide monotonic clock;
the three run in turn per repetition and the ratios are medians.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import socket
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

TOPIC = "bench"


def _event(i: int) -> bytes:
    body = json.dumps(["event", "sender", TOPIC, {"i": i, "pad": "x" * 40}], separators=(",", ":")).encode()
    return b"%06d" % len(body) + body


def _register(name: str, port: int, hears: list[str]) -> bytes:
    body = json.dumps(["register", name, port, hears, [TOPIC], "bench", "1", {}], separators=(",", ":")).encode()
    return b"%06d" % len(body) + body


# ------------------------------------------------------------------ the nodes


def node_proc(name: str, tmp: str, seed: str | None, n: int, conn: Connection) -> None:
    asyncio.run(_node(name, tmp, seed, n, conn))


async def _node(name: str, tmp: str, seed: str | None, n: int, conn: Connection) -> None:
    from huddle import Node
    from huddle.features import default_features
    from huddle.guests_feature import GuestsFeature
    from huddle.protocol.events import LogAppended

    base = benchlib.node_config(name, Path(tmp) / name, (seed,) if seed else ())
    features = default_features()
    node = Node(base.with_overrides(guests=True, guest_port=0, guest_ws_port=0,
                                    guest_marco_port=benchlib.free_port(socket.SOCK_DGRAM)), features=features)
    count = 0
    done = asyncio.Event()
    t_last = 0.0

    def on_event(event: object) -> None:
        nonlocal count, t_last
        if isinstance(event, LogAppended):
            count += sum(1 for run, _ in event.runs for r in run if r.kind == "node-bench")
            if count >= n and not done.is_set():
                t_last = time.monotonic()
                done.set()

    node.add_listener(on_event)
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    guests = next(f for f in features if isinstance(f, GuestsFeature)).server
    assert guests is not None
    conn.send(("ready", node.mesh.endpoint.removeprefix("tcp://"), guests.tcp_port, guests.ws_port))
    while True:
        cmd = await benchlib.arecv(conn, timeout=900)
        if cmd == "stop":
            break
        if cmd == "peers":
            while not node.mesh.alive_peers():
                await asyncio.sleep(0.01)
            conn.send(("peers",))
        elif isinstance(cmd, tuple) and cmd[0] == "has":  # wait until this guest is in the room
            while cmd[1] not in guests.room.guests:
                await asyncio.sleep(0.005)
            conn.send(("has",))
        elif cmd == "emit":  # the node -> node baseline, from A
            await node.until_recording(30.0)  # its start-up window (docs/protocol.md 12.1)
            t0 = time.monotonic()
            for i in range(n):
                node.emit("node-bench", {"i": i, "pad": "x" * 40})
                if i % 100 == 99:
                    await asyncio.sleep(0)
            conn.send(("sent", t0))
        elif cmd == "count":  # at B
            stalled = await benchlib.wait_done_or_stalled(done, lambda: count, 300.0, 10.0)  # noqa: B023 - reads it live
            conn.send(("done", count, stalled if stalled is not None else t_last))
            count, t_last = 0, 0.0
            done.clear()
    node.stop()
    await task


# ------------------------------------------------------------------ the guests


def tcp_receiver(port: int, n: int, conn: Connection) -> None:
    server = socket.create_server(("127.0.0.1", 0))
    own = server.getsockname()[1]
    reg = socket.create_connection(("127.0.0.1", port))
    reg.sendall(_register("receiver", own, [TOPIC]))
    back, _ = server.accept()
    conn.send(("registered",))
    buf = bytearray()
    count = 0
    while count < n:
        data = back.recv(1 << 20)
        if not data:
            break
        buf += data
        while len(buf) >= 6 and len(buf) >= 6 + int(buf[:6]):
            del buf[:6 + int(buf[:6])]
            count += 1
    conn.send(("done", count, time.monotonic()))
    conn.recv()
    for s in (back, reg, server):
        s.close()


def tcp_sender(port: int, n: int, conn: Connection) -> None:
    payload = b"".join(_event(i) for i in range(n))
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(_register("sender", 0, []))
    conn.send(("ready",))
    conn.recv()  # "go"
    t0 = time.monotonic()
    s.sendall(payload)
    conn.send(("sent", t0))
    conn.recv()
    s.close()


def ws_receiver(port: int, n: int, conn: Connection) -> None:
    asyncio.run(_ws_receiver(port, n, conn))


async def _ws_receiver(port: int, n: int, conn: Connection) -> None:
    import aiohttp

    async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{port}/") as ws:
        await ws.send_str(_register("receiver", 0, [TOPIC]).decode())
        conn.send(("registered",))
        count = 0
        async for msg in ws:
            if msg.type == aiohttp.WSMsgType.TEXT and '"event"' in msg.data:
                count += 1
                if count >= n:
                    break
        conn.send(("done", count, time.monotonic()))
        await benchlib.arecv(conn, timeout=300)


def ws_sender(port: int, n: int, conn: Connection) -> None:
    asyncio.run(_ws_sender(port, n, conn))


async def _ws_sender(port: int, n: int, conn: Connection) -> None:
    import aiohttp

    texts = [_event(i).decode() for i in range(n)]
    async with aiohttp.ClientSession() as http, http.ws_connect(f"ws://127.0.0.1:{port}/") as ws:
        await ws.send_str(_register("sender", 0, []).decode())
        conn.send(("ready",))
        await benchlib.arecv(conn, timeout=300)  # "go"
        t0 = time.monotonic()
        for i, text in enumerate(texts):
            await ws.send_str(text)
            if i % 100 == 99:
                await asyncio.sleep(0)
        conn.send(("sent", t0))
        await benchlib.arecv(conn, timeout=300)


# ------------------------------------------------------------------ driver


def _get(conn: Connection, timeout: float = 300) -> Any:
    if not conn.poll(timeout):
        raise TimeoutError("a benchmark process did not answer")
    return conn.recv()


def one_rep(n: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    rates: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        b_pipe, b_child = ctx.Pipe()
        b = ctx.Process(target=node_proc, args=("b", tmp, None, n, b_child))
        b.start()
        _, b_endpoint, b_tcp, b_ws = _get(b_pipe, 60)
        a_pipe, a_child = ctx.Pipe()
        a = ctx.Process(target=node_proc, args=("a", tmp, b_endpoint, n, a_child))
        a.start()
        _, _, a_tcp, a_ws = _get(a_pipe, 60)
        for pipe in (a_pipe, b_pipe):
            pipe.send("peers")
            _get(pipe, 60)
        try:
            # node -> node
            b_pipe.send("count")
            a_pipe.send("emit")
            _, t0 = _get(a_pipe)
            _, count, t_last = _get(b_pipe)
            rates["node"] = count / (t_last - t0) if count == n else float("nan")
            # guests, TCP then WebSocket
            for label, recv_fn, send_fn, a_port, b_port in (("tcp", tcp_receiver, tcp_sender, a_tcp, b_tcp),
                                                            ("ws", ws_receiver, ws_sender, a_ws, b_ws)):
                r_pipe, r_child = ctx.Pipe()
                receiver = ctx.Process(target=recv_fn, args=(b_port, n, r_child))
                receiver.start()
                _get(r_pipe, 60)
                s_pipe, s_child = ctx.Pipe()
                sender = ctx.Process(target=send_fn, args=(a_port, n, s_child))
                sender.start()
                _get(s_pipe, 60)
                for pipe, name in ((b_pipe, "receiver"), (a_pipe, "sender")):
                    pipe.send(("has", name))
                    _get(pipe, 60)
                s_pipe.send("go")
                _, t0 = _get(s_pipe)
                _, count, t_last = _get(r_pipe)
                rates[label] = count / (t_last - t0) if count == n else float("nan")
                s_pipe.send("stop")
                r_pipe.send("stop")
                benchlib.reap(sender, receiver)
        finally:
            for pipe in (a_pipe, b_pipe):
                pipe.send("stop")
            benchlib.reap(a, b)
    return rates


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000, help="events per run (default 20000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--quick", action="store_true", help="1 repetition of 5000 events")
    args = ap.parse_args(argv)
    if args.quick:
        args.reps, args.events = 1, 5000
    benchlib.header("Guest events: guest on A -> guest on B, over TCP and WebSocket, against node -> node",
                    events=args.events, reps=args.reps)
    rows: list[list[object]] = []
    tcp_ratios, ws_ratios = [], []
    for rep in range(args.reps):
        r = one_rep(args.events)
        tcp_ratios.append(r["tcp"] / r["node"])
        ws_ratios.append(r["ws"] / r["node"])
        rows.append([rep + 1, r["node"], r["tcp"], r["ws"], f"{tcp_ratios[-1]:.2f}x", f"{ws_ratios[-1]:.2f}x"])
    benchlib.print_table(["run", "node->node ev/s", "guest TCP ev/s", "guest WS ev/s", "TCP ratio", "WS ratio"], rows)
    print(f"RESULT guest events over TCP: {benchlib.median(tcp_ratios):.2f}x the node-to-node rate "
          f"(median of {args.reps})")
    print(f"RESULT guest events over WebSocket: {benchlib.median(ws_ratios):.2f}x the node-to-node rate "
          f"(median of {args.reps})")
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
