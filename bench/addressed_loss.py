#!/usr/bin/env python3
"""Addressed messages through a lossy network, against raw pyzmq through the same network.

Two hosts in network namespaces on a bridge (bench/netns.py; needs root and iproute2; nft for
the loss).  The bridge drops ``--loss`` % of all frames at random (nft numgen),
both ways, TCP segments and acknowledgements alike.  Each run sends N
100-octet messages from h1 to h2:

* raw:    a blocking pyzmq DEALER in h1 pushes N messages to a ROUTER in h2,
          which counts them.  TCP repairs every loss; ZeroMQ adds nothing.
* huddle: a ``Node`` in each host; h1 awaits ``send_to_wait`` N times, h2
          counts ``MessageReceived`` events.  Every message is acknowledged
          (DACK) and kept until then; lost DACKs cause retransmissions.

Rates are taken at the receiver (first send to last receipt, both on the same
machine's clock); raw and huddle runs alternate; the ratio is the median of
the per-pair ratios.  Runs without loss are made too, so the cost of loss on
each is visible.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import benchlib
from netns import Namespaces

PAYLOAD = b"x" * 100
HERE = Path(__file__).resolve()


# ------------------------------------------------------------------ roles (run inside a namespace)


def role_raw_recv(port: int, n: int) -> None:
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.RCVHWM, 0)
    router.bind(f"tcp://0.0.0.0:{port}")
    print("ready", flush=True)
    count = 0
    while count < n:
        router.recv_multipart()
        count += 1
    print("done", count, time.time(), flush=True)
    router.close(0)
    ctx.term()


def role_raw_send(address: str, n: int) -> None:
    import zmq

    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.connect(address)
    print("t0", time.time(), flush=True)
    for _ in range(n):
        dealer.send_multipart([b"DMSG", PAYLOAD])  # blocks at the high-water mark: paced by TCP
    sys.stdin.readline()  # "stop": keep the socket until the receiver has everything
    dealer.close(0)
    ctx.term()


def _config(name: str, tmp: str, seeds: tuple[str, ...] = ()) -> Any:
    from huddle import NodeConfig

    return NodeConfig().with_overrides(name=name, group="bench", data_dir=Path(tmp) / name, api="127.0.0.1:0",
                                       seed=seeds, beacon=False, interface="eth0", log_level="warning",
                                       open=True)  # measured as an open group, as before (a lab)


async def _role_huddle_recv(n: int, tmp: str) -> None:
    from huddle import Node
    from huddle.protocol.events import MessageReceived

    node = Node(_config("h2", tmp))
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    count = 0
    done = asyncio.Event()

    def on_event(event: object) -> None:
        nonlocal count
        if isinstance(event, MessageReceived):
            count += 1
            if count >= n:
                print("done", count, time.time(), flush=True)
                done.set()

    node.add_listener(on_event)
    print("endpoint", node.mesh.endpoint, flush=True)
    await asyncio.wait_for(done.wait(), 900)
    await asyncio.to_thread(sys.stdin.readline)  # "stop"
    node.stop()
    await task


async def _role_huddle_send(endpoint: str, n: int, tmp: str) -> None:
    from huddle import Node

    node = Node(_config("h1", tmp, (endpoint.removeprefix("tcp://"),)))
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    deadline = time.monotonic() + 30
    while not node.mesh.alive_peers():
        if time.monotonic() > deadline:
            raise TimeoutError("h1 did not meet h2")
        await asyncio.sleep(0.01)
    peer = node.mesh.alive_peers()[0]
    print("t0", time.time(), flush=True)
    for i in range(n):
        await node.send_to_wait(peer, PAYLOAD, 300)
        if i % 1000 == 999:
            await asyncio.sleep(0)
    await asyncio.to_thread(sys.stdin.readline)  # "stop": keep retransmitting until the receiver is done
    node.stop()
    await task


# ------------------------------------------------------------------ the network


def _run(net: Namespaces, host: int, *args: str) -> subprocess.Popen[str]:
    """This script in one of its roles (``args``), inside host ``host``."""
    return subprocess.Popen(net.python(host, str(HERE), *args), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)


def _line(proc: subprocess.Popen[str], word: str, timeout: float) -> list[str]:
    """The next stdout line of ``proc`` starting with ``word`` (its other words)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {word!r} process ended early (exit {proc.wait()})")
        parts = line.split()
        if parts and parts[0] == word:
            return parts[1:]
    raise TimeoutError(f"no {word!r} line within {timeout} s")


def _finish(*procs: subprocess.Popen[str]) -> None:
    for p in procs:
        if p.stdin is not None:
            try:
                p.stdin.write("stop\n")
                p.stdin.flush()
            except BrokenPipeError:
                pass
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def raw_rate(net: Namespaces, n: int) -> float:
    port = benchlib.free_port()
    recv = _run(net, 2, "raw-recv", str(port), str(n))
    _line(recv, "ready", 30)
    send = _run(net, 1, "raw-send", f"tcp://{net.ips[1]}:{port}", str(n))
    try:
        t0 = float(_line(send, "t0", 30)[0])
        _, t_last = _line(recv, "done", 900)
        return n / (float(t_last) - t0)
    finally:
        _finish(send, recv)


def huddle_rate(net: Namespaces, n: int) -> float:
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        recv = _run(net, 2, "huddle-recv", str(n), tmp)
        send = None
        try:
            (endpoint,) = _line(recv, "endpoint", 60)
            send = _run(net, 1, "huddle-send", endpoint, str(n), tmp)
            t0 = float(_line(send, "t0", 60)[0])
            _, t_last = _line(recv, "done", 900)
            return n / (float(t_last) - t0)
        finally:
            _finish(*(p for p in (send, recv) if p is not None))


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in and args_in[0] in ("raw-recv", "raw-send", "huddle-recv", "huddle-send"):
        role, rest = args_in[0], args_in[1:]
        if role == "raw-recv":
            role_raw_recv(int(rest[0]), int(rest[1]))
        elif role == "raw-send":
            role_raw_send(rest[0], int(rest[1]))
        elif role == "huddle-recv":
            asyncio.run(_role_huddle_recv(int(rest[0]), rest[1]))
        else:
            asyncio.run(_role_huddle_send(rest[0], int(rest[1]), rest[2]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=20_000, help="messages per run (default 20000)")
    ap.add_argument("--loss", type=int, default=10, help="percent of frames the bridge drops (default 10)")
    ap.add_argument("--reps", type=int, default=3, help="run pairs per setting (default 3)")
    ap.add_argument("--quick", action="store_true", help="1 pair, 5000 messages")
    args = ap.parse_args(args_in)
    if args.quick:
        args.reps, args.messages = 1, 5000
    benchlib.header("Addressed messages through a lossy bridge, against raw pyzmq through the same bridge",
                    messages=args.messages, loss=f"{args.loss} %", reps=args.reps)
    net = Namespaces(2, prefix="hb", net=98)
    try:
        net.up()
    except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as exc:
        net.down()
        print(f"SKIPPED: network namespaces cannot be made here (needs root, iproute2 and nft): {exc}")
        return 0
    rows: list[list[object]] = []
    medians: dict[int, float] = {}
    try:
        for loss in (0, args.loss):
            net.lose(loss)
            ratios = []
            for rep in range(args.reps):
                raw = raw_rate(net, args.messages)
                hud = huddle_rate(net, args.messages)
                ratios.append(hud / raw)
                rows.append([f"{loss} %", rep + 1, f"{raw:,.0f}", f"{hud:,.0f}", f"{hud / raw:.2f}x"])
            medians[loss] = benchlib.median(ratios)
    finally:
        net.down()
    benchlib.print_table(["loss", "run", "raw msg/s", "huddle msg/s", "ratio"], rows)
    for loss, ratio in medians.items():
        print(f"RESULT addressed messages at {loss} % loss: {ratio:.2f}x raw pyzmq (median of {args.reps})")
    benchlib.footer()
    return 0


if __name__ == "__main__":
    sys.exit(main())
