#!/usr/bin/env python3
"""Round-trip latency through two nodes, against raw pyzmq ping-pong.

All variants use the same layout: two processes (alice, bob) on 127.0.0.1,
each with a ROUTER inbox and a DEALER (16-octet identity) connected to the
other's ROUTER, which is how huddle nodes talk.  alice sends
``[b"CHAT", body]`` (100-octet body) to bob, bob answers with the same body
as soon as it sees the message, alice takes the time when the answer is
handed to her.  Pings are strictly sequential.

* raw:          blocking ``send_multipart`` / ``recv_multipart`` on both sides.
* raw asyncio:  (diagnostic) the same sockets driven by an asyncio loop that
                watches the ROUTER's FD with ``add_reader`` and drains it, as
                huddle's transport does; shows what the event loop alone costs.
* huddle:       two ``Node`` instances (seeded, no beacons).  alice calls
                ``node.chat(text, to=bob)`` and takes the time in her listener
                when ``ChatReceived`` arrives; bob's listener answers with
                ``node.chat(event.text, to=event.peer)`` at once.

This machine's wake-up latency drifts a lot from second to second, so the
variants are not run one after the other: a "set" starts the process pairs of
all variants together, warms each up, then alternates bursts of pings between
them (``--bursts``, rotating the order) until each has done ``--pings``; the
pairs that are not pinging sleep in ``recv``/``epoll``.  The table shows p50
and p99 per set and the medians over ``--reps`` sets.  The target's figure is
the median over sets of (huddle p50 / raw p50) within the set; the ratio of
the medians is printed next to it.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

BODY = b"x" * 100
TEXT = BODY.decode()
WARMUP = 500




# --------------------------------------------------------------------------- raw


def _raw_sockets(conn: Connection) -> tuple[Any, Any, Any]:
    """Bind a ROUTER, tell the parent its address, connect a DEALER to the peer's."""
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    conn.send(("addr", f"127.0.0.1:{port}"))
    peer = conn.recv()
    dealer = ctx.socket(zmq.DEALER)
    dealer.setsockopt(zmq.IDENTITY, os.urandom(16))
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://{peer}")
    return ctx, router, dealer


def raw_bob(conn: Connection) -> None:
    ctx, router, dealer = _raw_sockets(conn)
    conn.send(("admitted",))
    recv, send = router.recv_multipart, dealer.send_multipart
    while True:
        frames = recv()
        if frames[1] == b"STOP":
            break
        send([b"CHAT", frames[2]])
    router.close()
    dealer.close()
    ctx.term()


def raw_alice(conn: Connection) -> None:
    ctx, router, dealer = _raw_sockets(conn)
    recv, send = router.recv_multipart, dealer.send_multipart
    frames = [b"CHAT", BODY]
    clock = time.perf_counter_ns
    while (cmd := conn.recv())[0] == "ping":  # ("ping", count) ... ("stop",)
        samples: list[int] = []
        for _ in range(cmd[1]):
            t0 = clock()
            send(frames)
            recv()
            samples.append(clock() - t0)
        conn.send(samples)
    send([b"STOP", b""])
    router.close()
    dealer.close()
    ctx.term()


# ------------------------------------------------------------------ raw asyncio


class _AsyncRouter:
    """A ROUTER watched by the event loop and drained until EAGAIN (edge-triggered FD)."""

    def __init__(self, router: Any, on_frames: Callable[[list[bytes]], None]) -> None:
        import zmq

        self.router = router
        self.on_frames = on_frames
        self.again = zmq.Again
        self.noblock = zmq.NOBLOCK
        self.pollin = zmq.POLLIN
        self.events = zmq.EVENTS
        loop = asyncio.get_running_loop()
        loop.add_reader(router.getsockopt(zmq.FD), self.readable)
        loop.call_soon(self.readable)

    def readable(self) -> None:
        router = self.router
        while True:
            try:
                frames = router.recv_multipart(self.noblock)
            except self.again:
                break
            self.on_frames(frames)
        if router.getsockopt(self.events) & self.pollin:
            asyncio.get_running_loop().call_soon(self.readable)


def raw_async_bob(conn: Connection) -> None:
    async def main() -> None:
        import zmq

        ctx, router, dealer = _raw_sockets(conn)
        stop = asyncio.Event()

        def on_frames(frames: list[bytes]) -> None:
            if frames[1] == b"STOP":
                stop.set()
            else:
                dealer.send_multipart([b"CHAT", frames[2]], zmq.NOBLOCK)

        _AsyncRouter(router, on_frames)
        conn.send(("admitted",))
        await stop.wait()
        router.close()
        dealer.close()
        ctx.term()

    asyncio.run(main())


def raw_async_alice(conn: Connection) -> None:
    async def main() -> None:
        import zmq

        ctx, router, dealer = _raw_sockets(conn)
        loop = asyncio.get_running_loop()
        waiter: list[asyncio.Future[int]] = []
        clock = time.perf_counter_ns

        def on_frames(frames: list[bytes]) -> None:
            t = clock()
            if waiter and not waiter[0].done():
                waiter[0].set_result(t)

        _AsyncRouter(router, on_frames)
        frames = [b"CHAT", BODY]
        while (cmd := await benchlib.arecv(conn, timeout=600))[0] == "ping":
            samples: list[int] = []
            for _ in range(cmd[1]):
                fut: asyncio.Future[int] = loop.create_future()
                waiter[:] = [fut]
                t0 = clock()
                dealer.send_multipart(frames, zmq.NOBLOCK)
                async with asyncio.timeout(10):
                    t1 = await fut
                samples.append(t1 - t0)
            conn.send(samples)
        dealer.send_multipart([b"STOP", b""])
        await asyncio.sleep(0.05)
        router.close()
        dealer.close()
        ctx.term()

    asyncio.run(main())


# ------------------------------------------------------------------------ huddle




def node_bob(tmp: str, conn: Connection) -> None:
    async def main() -> None:
        from huddle import Node
        from huddle.protocol import ChatReceived

        node = Node(benchlib.node_config("bob", Path(tmp) / "bob"))

        def on_event(event: object) -> None:
            if isinstance(event, ChatReceived):
                node.chat(event.text, to=event.peer)

        node.add_listener(on_event)
        task = asyncio.create_task(node.run())
        await node.wait_ready()
        conn.send(("addr", node.mesh.endpoint.removeprefix("tcp://")))
        await benchlib.arecv(conn)  # alice's address: not needed, she dials us
        while not any(p.state == "alive" for p in node.peers()):
            await asyncio.sleep(0.005)
        conn.send(("admitted",))
        await benchlib.arecv(conn, timeout=600)  # ("stop",)
        node.stop()
        await task

    asyncio.run(main())


def node_alice(tmp: str, conn: Connection) -> None:
    async def main() -> None:
        from huddle import Node
        from huddle.protocol import ChatReceived

        peer_addr = await benchlib.arecv(conn)  # bob's address: the parent sends it first
        node = Node(benchlib.node_config("alice", Path(tmp) / "alice", (peer_addr,)))
        loop = asyncio.get_running_loop()
        waiter: list[asyncio.Future[int]] = []
        clock = time.perf_counter_ns

        def on_event(event: object) -> None:
            if isinstance(event, ChatReceived):
                t = clock()
                if waiter and not waiter[0].done():
                    waiter[0].set_result(t)

        node.add_listener(on_event)
        task = asyncio.create_task(node.run())
        await node.wait_ready()
        conn.send(("addr", node.mesh.endpoint.removeprefix("tcp://")))
        while not (alive := [p for p in node.peers() if p.state == "alive"]):
            await asyncio.sleep(0.005)
        bob = alive[0].uuid
        chat = node.chat
        while (cmd := await benchlib.arecv(conn, timeout=600))[0] == "ping":
            samples: list[int] = []
            for _ in range(cmd[1]):
                fut: asyncio.Future[int] = loop.create_future()
                waiter[:] = [fut]
                t0 = clock()
                chat(TEXT, to=bob)
                async with asyncio.timeout(10):
                    t1 = await fut
                samples.append(t1 - t0)
            conn.send(samples)
        node.stop()
        await task

    asyncio.run(main())


# ------------------------------------------------------------------------ driver

VARIANTS: dict[str, tuple[Callable[..., None], Callable[..., None]]] = {
    "raw": (raw_alice, raw_bob),
    "raw asyncio": (raw_async_alice, raw_async_bob),
    "huddle": (node_alice, node_bob),
}


class Pair:
    """One variant's alice and bob processes, started and connected."""

    def __init__(self, variant: str, tmp: str) -> None:
        self.variant = variant
        alice_fn, bob_fn = VARIANTS[variant]
        ctx = mp.get_context("spawn")
        self.a, a_child = ctx.Pipe()
        self.b, b_child = ctx.Pipe()
        huddle = variant == "huddle"
        self.bob = ctx.Process(target=bob_fn, args=(tmp, b_child) if huddle else (b_child,))
        self.bob.start()
        _, bob_addr = self.b.recv()
        self.alice = ctx.Process(target=alice_fn, args=(tmp, a_child) if huddle else (a_child,))
        self.alice.start()
        if huddle:  # alice seeds her node with bob's address before she has one
            self.a.send(bob_addr)
            _, alice_addr = self.a.recv()
        else:
            _, alice_addr = self.a.recv()
            self.a.send(bob_addr)
        self.b.send(alice_addr)
        if not self.b.poll(60):
            raise TimeoutError(f"{variant}: bob never saw alice")
        self.b.recv()  # admitted

    def ping(self, count: int) -> list[int]:
        self.a.send(("ping", count))
        if not self.a.poll(120):
            raise TimeoutError(f"{self.variant}: no answer to {count} pings")
        samples: list[int] = self.a.recv()
        return samples

    def close(self) -> None:
        self.a.send(("stop",))
        if self.variant == "huddle":
            self.b.send(("stop",))
        benchlib.reap(self.alice, self.bob)


def run_set(variants: list[str], pings: int, bursts: int) -> dict[str, list[float]]:
    """Start every variant's pair, warm each up, then alternate bursts of pings
    between them.  Returns each variant's round trips in microseconds, sorted."""
    samples: dict[str, list[int]] = {v: [] for v in variants}
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        pairs: dict[str, Pair] = {}
        try:
            for v in variants:
                pairs[v] = Pair(v, tmp)
            for v in variants:
                pairs[v].ping(WARMUP)
            per = max(1, pings // bursts)
            for b in range(bursts):
                k = b % len(variants)
                for v in variants[k:] + variants[:k]:
                    samples[v] += pairs[v].ping(per)
        finally:
            for pair in pairs.values():
                pair.close()
    return {v: sorted(x / 1000.0 for x in samples[v]) for v in variants}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pings", type=int, default=5000, help="timed round trips per variant and set (default 5000)")
    parser.add_argument("--reps", type=int, default=5, help="sets of processes (default 5)")
    parser.add_argument("--bursts", type=int, default=50, help="bursts per set, alternating the variants (default 50)")
    parser.add_argument("--no-asyncio", action="store_true", help="skip the diagnostic raw-asyncio variant")
    parser.add_argument("--quick", action="store_true", help="3 sets of 2000 pings per variant")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.pings = 3, 2000
    variants = ["raw", "huddle"] if args.no_asyncio else ["raw", "raw asyncio", "huddle"]
    benchlib.header("Round-trip latency alice -> bob -> alice (2 processes, DEALER -> ROUTER each way)",
                    pings=args.pings, warmup=WARMUP, body="100 B", sets=args.reps, bursts=args.bursts)
    p50s: dict[str, list[float]] = {v: [] for v in variants}
    p99s: dict[str, list[float]] = {v: [] for v in variants}
    rows: list[list[object]] = []
    for rep in range(1, args.reps + 1):
        row: list[object] = [f"set {rep}"]
        per_variant = run_set(variants, args.pings, args.bursts)
        for v in variants:
            p50, p99 = benchlib.percentile(per_variant[v], 50), benchlib.percentile(per_variant[v], 99)
            p50s[v].append(p50)
            p99s[v].append(p99)
            row += [p50, p99]
        rows.append(row)
    med50 = {v: benchlib.median(p50s[v]) for v in variants}
    med99 = {v: benchlib.median(p99s[v]) for v in variants}
    rows.append(["median", *[x for v in variants for x in (med50[v], med99[v])]])
    benchlib.print_table([""] + [f"{v} {q} us" for v in variants for q in ("p50", "p99")], rows)
    # Within a set the variants were interleaved, so the fair comparison is per set;
    # the ratio of the medians over sets is shown too.
    ratio50 = {v: benchlib.median([a / b for a, b in zip(p50s[v], p50s["raw"], strict=True)]) for v in variants}
    ratio99 = {v: benchlib.median([a / b for a, b in zip(p99s[v], p99s["raw"], strict=True)]) for v in variants}
    print("\n  ratios to raw:")
    benchlib.print_table(["variant", "p50 ratio (median of per-set ratios)", "p99 ratio (same)",
                          "p50 ratio of medians", "p99 ratio of medians"],
                         [[v, ratio50[v], ratio99[v], med50[v] / med50["raw"], med99[v] / med99["raw"]]
                          for v in variants])
    benchlib.footer()
    print()
    ratio = ratio50["huddle"]
    benchlib.target("round trip p50 <= 1.6x raw",
                    f"{ratio:.2f}x (median p50 {med50['huddle']:.0f} vs {med50['raw']:.0f} us; "
                    f"p99 {ratio99['huddle']:.2f}x, {med99['huddle']:.0f} vs {med99['raw']:.0f} us)", ratio <= 1.6)
    return 0


if __name__ == "__main__":
    sys.exit(main())
