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

``--secure`` (issue 22): every variant speaks CurveZMQ.  The huddle nodes hold
a group secret (a group file, as ``huddle node --group-key FILE``: CURVE with
ZAP); the raw variants put a server keypair on each ROUTER and a client
keypair on each DEALER (``zmq.curve_keypair()``), with no ZAP handler (asked
once per connection, before the pings).  The target is then huddle secure
against raw CURVE.  ``--with-open`` adds the open raw and huddle pairs to the
same sets, so that what security costs is measured at the same moments.
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
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

BODY = b"x" * 100
TEXT = BODY.decode()
WARMUP = 500


# --------------------------------------------------------------------------- raw


def _raw_sockets(conn: Connection, curve: dict[str, bytes] | None) -> tuple[Any, Any, Any]:
    """Bind a ROUTER, tell the parent its address, connect a DEALER to the peer's
    (with CurveZMQ when ``curve`` holds the keys)."""
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    benchlib.curve_server(router, curve)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    conn.send(("addr", f"127.0.0.1:{port}"))
    peer = conn.recv()
    dealer = ctx.socket(zmq.DEALER)
    benchlib.curve_client(dealer, curve)
    dealer.setsockopt(zmq.IDENTITY, os.urandom(16))
    dealer.setsockopt(zmq.LINGER, 0)
    dealer.connect(f"tcp://{peer}")
    return ctx, router, dealer


def raw_bob(curve: dict[str, bytes] | None, conn: Connection) -> None:
    ctx, router, dealer = _raw_sockets(conn, curve)
    conn.send(("admitted", benchlib.mechanism(router)))
    recv, send = router.recv_multipart, dealer.send_multipart
    while True:
        frames = recv()
        if frames[1] == b"STOP":
            break
        send([b"CHAT", frames[2]])
    router.close()
    dealer.close()
    ctx.term()


def raw_alice(curve: dict[str, bytes] | None, conn: Connection) -> None:
    ctx, router, dealer = _raw_sockets(conn, curve)
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


def raw_async_bob(curve: dict[str, bytes] | None, conn: Connection) -> None:
    async def main() -> None:
        import zmq

        ctx, router, dealer = _raw_sockets(conn, curve)
        stop = asyncio.Event()

        def on_frames(frames: list[bytes]) -> None:
            if frames[1] == b"STOP":
                stop.set()
            else:
                dealer.send_multipart([b"CHAT", frames[2]], zmq.NOBLOCK)

        _AsyncRouter(router, on_frames)
        conn.send(("admitted", benchlib.mechanism(router)))
        await stop.wait()
        router.close()
        dealer.close()
        ctx.term()

    asyncio.run(main())


def raw_async_alice(curve: dict[str, bytes] | None, conn: Connection) -> None:
    async def main() -> None:
        import zmq

        ctx, router, dealer = _raw_sockets(conn, curve)
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


def node_bob(tmp: str, group_key: str | None, conn: Connection) -> None:
    async def main() -> None:
        from huddle import Node
        from huddle.protocol import ChatReceived

        node = Node(benchlib.node_config("bob", Path(tmp) / "bob", group_key=group_key))

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
        security = benchlib.security_of(node)
        conn.send(("admitted", f"{security['mode']}, {security['admitted']} admitted by ZAP"))
        await benchlib.arecv(conn, timeout=600)  # ("stop",)
        node.stop()
        await task

    asyncio.run(main())


def node_alice(tmp: str, group_key: str | None, conn: Connection) -> None:
    async def main() -> None:
        from huddle import Node
        from huddle.protocol import ChatReceived

        peer_addr = await benchlib.arecv(conn)  # bob's address: the parent sends it first
        node = Node(benchlib.node_config("alice", Path(tmp) / "alice", (peer_addr,), group_key=group_key))
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
SECURE_NAMES = {"raw": "raw CURVE", "raw asyncio": "raw CURVE asyncio", "huddle": "huddle secure"}


@dataclass(frozen=True)
class Variant:
    """One variant's name in the tables, its processes (a key of VARIANTS), and what secures
    it: CURVE keys (raw kinds) or a group file (huddle); None: plain, open."""

    name: str
    kind: str
    curve: dict[str, bytes] | None = None
    group_key: str | None = None


class Pair:
    """One variant's alice and bob processes, started and connected."""

    def __init__(self, variant: Variant, tmp: str) -> None:
        self.variant = variant.name
        alice_fn, bob_fn = VARIANTS[variant.kind]
        ctx = mp.get_context("spawn")
        self.a, a_child = ctx.Pipe()
        self.b, b_child = ctx.Pipe()
        self.huddle = huddle = variant.kind == "huddle"
        secured = (tmp, variant.group_key) if huddle else (variant.curve,)
        self.bob = ctx.Process(target=bob_fn, args=(*secured, b_child))
        self.bob.start()
        _, bob_addr = self._word(self.b, "bob did not start")
        self.alice = ctx.Process(target=alice_fn, args=(*secured, a_child))
        self.alice.start()
        if huddle:  # alice seeds her node with bob's address before she has one
            self.a.send(bob_addr)
            _, alice_addr = self._word(self.a, "alice did not start")
        else:
            _, alice_addr = self._word(self.a, "alice did not start")
            self.a.send(bob_addr)
        self.b.send(alice_addr)
        if not self.b.poll(60):
            raise TimeoutError(f"{self.variant}: bob never saw alice")
        _, self.security = self.b.recv()  # admitted: bob's socket mechanism, or his node's security mode

    def _word(self, conn: Connection, what: str) -> Any:
        if not conn.poll(60):
            raise TimeoutError(f"{self.variant}: {what}")
        return conn.recv()

    def ping(self, count: int) -> list[int]:
        self.a.send(("ping", count))
        if not self.a.poll(120):
            raise TimeoutError(f"{self.variant}: no answer to {count} pings")
        samples: list[int] = self.a.recv()
        return samples

    def close(self) -> None:
        self.a.send(("stop",))
        if self.huddle:
            self.b.send(("stop",))
        benchlib.reap(self.alice, self.bob)


def run_set(variants: list[Variant], pings: int, bursts: int) -> tuple[dict[str, list[float]], dict[str, str]]:
    """Start every variant's pair, warm each up, then alternate bursts of pings
    between them.  Returns each variant's round trips in microseconds, sorted,
    and what secured each (bob's report)."""
    names = [v.name for v in variants]
    samples: dict[str, list[int]] = {v: [] for v in names}
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        pairs: dict[str, Pair] = {}
        try:
            for i, v in enumerate(variants):  # each its own data directories (two huddle variants with --with-open)
                (Path(tmp) / str(i)).mkdir()
                pairs[v.name] = Pair(v, str(Path(tmp) / str(i)))
            for v in names:
                pairs[v].ping(WARMUP)
            per = max(1, pings // bursts)
            for b in range(bursts):
                k = b % len(names)
                for v in names[k:] + names[:k]:
                    samples[v] += pairs[v].ping(per)
        finally:
            for pair in pairs.values():
                pair.close()
    return {v: sorted(x / 1000.0 for x in samples[v]) for v in names}, {v: p.security for v, p in pairs.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pings", type=int, default=5000, help="timed round trips per variant and set (default 5000)")
    parser.add_argument("--reps", type=int, default=5, help="sets of processes (default 5)")
    parser.add_argument("--bursts", type=int, default=50, help="bursts per set, alternating the variants (default 50)")
    parser.add_argument("--no-asyncio", action="store_true", help="skip the diagnostic raw-asyncio variant")
    parser.add_argument("--quick", action="store_true", help="3 sets of 2000 pings per variant")
    parser.add_argument("--secure", action="store_true",
                        help="every variant over CurveZMQ: huddle with a group secret against raw pyzmq with CURVE")
    parser.add_argument("--with-open", action="store_true",
                        help="with --secure: also the open raw and huddle pairs, in the same sets")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.pings = 3, 2000
    if args.with_open and not args.secure:
        parser.error("--with-open goes with --secure")
    kinds = ["raw", "huddle"] if args.no_asyncio else ["raw", "raw asyncio", "huddle"]
    if not args.secure:
        return measure(args, [Variant(k, k) for k in kinds])
    with tempfile.TemporaryDirectory(prefix="huddle-bench-key-") as keys:
        curve, group_key = benchlib.curve_keys(), benchlib.group_key_file(Path(keys))
        variants = [Variant(SECURE_NAMES[k], k, curve, group_key) for k in kinds]
        return measure(args, variants + ([Variant("raw", "raw"), Variant("huddle", "huddle")] if args.with_open else []))


def measure(args: argparse.Namespace, variants: list[Variant]) -> int:
    """The sets; the target compares the first huddle variant with the first (raw) one."""
    names = [v.name for v in variants]
    raw, huddle = names[0], next(v.name for v in variants if v.kind == "huddle")
    if args.secure:
        benchlib.header("Round-trip latency with security alice -> bob -> alice (2 processes, DEALER -> ROUTER each "
                        "way, CurveZMQ)", pings=args.pings, warmup=WARMUP, body="100 B", sets=args.reps,
                        bursts=args.bursts, with_open=args.with_open)
    else:
        benchlib.header("Round-trip latency alice -> bob -> alice (2 processes, DEALER -> ROUTER each way)",
                        pings=args.pings, warmup=WARMUP, body="100 B", sets=args.reps, bursts=args.bursts)
    p50s: dict[str, list[float]] = {v: [] for v in names}
    p99s: dict[str, list[float]] = {v: [] for v in names}
    secured: dict[str, set[str]] = {v: set() for v in names}
    rows: list[list[object]] = []
    for rep in range(1, args.reps + 1):
        row: list[object] = [f"set {rep}"]
        per_variant, security = run_set(variants, args.pings, args.bursts)
        for v in names:
            p50, p99 = benchlib.percentile(per_variant[v], 50), benchlib.percentile(per_variant[v], 99)
            p50s[v].append(p50)
            p99s[v].append(p99)
            secured[v].add(security[v])
            row += [p50, p99]
        rows.append(row)
    med50 = {v: benchlib.median(p50s[v]) for v in names}
    med99 = {v: benchlib.median(p99s[v]) for v in names}
    rows.append(["median", *[x for v in names for x in (med50[v], med99[v])]])
    benchlib.print_table([""] + [f"{v} {q} us" for v in names for q in ("p50", "p99")], rows)

    def per_set(top: str, base: str, of: dict[str, list[float]] = p50s) -> float:
        """Within a set the variants were interleaved, so the fair comparison is per set."""
        return benchlib.median([a / b for a, b in zip(of[top], of[base], strict=True)])

    # The ratio of the medians over sets is shown too.
    ratio50 = {v: per_set(v, raw) for v in names}
    ratio99 = {v: per_set(v, raw, p99s) for v in names}
    print(f"\n  ratios to {raw}:")
    benchlib.print_table(["variant", "p50 ratio (median of per-set ratios)", "p99 ratio (same)",
                          "p50 ratio of medians", "p99 ratio of medians"],
                         [[v, ratio50[v], ratio99[v], med50[v] / med50[raw], med99[v] / med99[raw]]
                          for v in names])
    if args.with_open:
        print("\n  what security costs, in the same sets (p50, median of per-set ratios):")
        benchlib.print_table(["", "p50 ratio", "p99 ratio"],
                             [[f"{huddle} / huddle", per_set(huddle, "huddle"), per_set(huddle, "huddle", p99s)],
                              [f"{raw} / raw", per_set(raw, "raw"), per_set(raw, "raw", p99s)],
                              ["huddle / raw (open)", per_set("huddle", "raw"), per_set("huddle", "raw", p99s)]])
    benchlib.footer()
    print()
    ratio = ratio50[huddle]
    measured = (f"{ratio:.2f}x (median p50 {med50[huddle]:.0f} vs {med50[raw]:.0f} us; "
                f"p99 {ratio99[huddle]:.2f}x, {med99[huddle]:.0f} vs {med99[raw]:.0f} us)")
    if not args.secure:
        benchlib.target("round trip p50 <= 1.6x raw", measured, ratio <= 1.6)
        return 0
    targets = [v for v in variants if v.curve is not None]
    huddle_sec = sorted({s for v in targets if v.kind == "huddle" for s in secured[v.name]})
    raw_sec = sorted({s for v in targets if v.kind != "huddle" for s in secured[v.name]})
    ok = benchlib.check("the secure variants were secured", f"huddle nodes: {'; '.join(huddle_sec)}; raw sockets: "
                        f"{', '.join(raw_sec)}", all(s.startswith("group,") for s in huddle_sec) and raw_sec == ["CURVE"])
    benchlib.target("round trip p50 with security <= 1.6x raw CURVE", measured, ratio <= 1.6)
    if args.with_open:
        print(f"RESULT round trip, security's cost: p50 huddle secure / huddle open {per_set(huddle, 'huddle'):.2f}x, "
              f"raw CURVE / raw {per_set(raw, 'raw'):.2f}x (medians of per-set ratios); open huddle / raw "
              f"{per_set('huddle', 'raw'):.2f}x", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
