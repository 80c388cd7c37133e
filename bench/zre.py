#!/usr/bin/env python3
"""ZRE and Hydra against code nobody on this team wrote (docs/zre.md, docs/hydra.md).

(It is bench/zre.py, the name the issue gives it; it never imports the ``zre`` package from PyPI,
which a script in bench/ named zre would hide, and the tests load it by path, as bench_zre.)

SHOUT throughput, three processes on 127.0.0.1, beacons to 127.255.255.255 only (pyre's
interface lookup pinned to loopback, as the tests pin it):

* pyre -> pyre:   a zeromq-pyre 0.3.4 node SHOUTs N messages to the group as fast as it can
                  (unthrottled: pyre's own rate, the anchor); a pyre receiver counts them.
* huddle -> pyre: a huddle node (``--zre``, open: ZRE in clear, which pyre speaks) records N
                  events (``node.emit``), each SHOUTed to the group; the same receiver counts
                  them.  huddle must lose none (its DEALER queue holds 1000 messages; it waits
                  on nothing, so a loss would show).

The rate is N received / (last receipt - first send), on the machine's monotonic clock; a
message not received within the stall time is lost.  The two run in turn per repetition,
the ratio is the median of the per-repetition ratios.

Hydra post transfer: a post of ``--size-mb`` MiB on a huddle node started with ``--zre``,
fetched by a Hydra client as ``src/hydra_client.c`` fetches (one frame per message, CHUNKs of
10 MB one at a time), written to disk and hashed as it arrives; against huddle's own posts path
between two nodes (bench/posts_transfer.py's ``huddle_copy``: NEWS, FETCHes, BULK frames).
"""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import multiprocessing as mp
import socket
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib
import posts_transfer

GROUP = "bench"
CHUNK = 10 * 1000 * 1000  # CHUNK_SIZE in src/hydra_client.c


def _pin_pyre_to_loopback() -> None:
    from pyre import zbeacon

    def prepare(self: Any) -> None:
        self.address = ipaddress.IPv4Address("127.0.0.1")
        self.network_address = ipaddress.IPv4Address("127.0.0.0")
        self.broadcast_address = ipaddress.IPv4Address("127.255.255.255")
        self.interface_name = "lo"

    zbeacon.ZBeacon._prepare_socket = prepare  # type: ignore[method-assign]


def _pyre(name: str, port: int) -> Any:
    import pyre

    _pin_pyre_to_loopback()
    node = pyre.Pyre(name)
    node.set_port(str(port).encode())
    node.start()
    node.join(GROUP)
    return node


def receiver(port: int, n: int, stall: float, conn: Connection) -> None:
    """A pyre node counting the SHOUTs of the sender named in each command."""
    import zmq
    from pyre.pyre_event import PyreEvent

    node = _pyre("rx", port)
    sock = node.socket()
    conn.send("ready")
    while (sender := conn.recv()) != "stop":
        count, last, quiet, joined = 0, 0.0, time.monotonic() + 60.0, False  # its ENTER: a few beacons
        while count < n and time.monotonic() < quiet:
            if sock.poll(100, zmq.POLLIN):
                event = PyreEvent(node)
                if event.type == "SHOUT" and event.peer_name == sender and event.msg[0].startswith(b"bench"):
                    count, last = count + 1, time.monotonic()
                    quiet = last + stall
                elif event.type == "JOIN" and event.peer_name == sender and not joined:
                    joined = True
                    conn.send("joined")
        conn.send((count, last))
    node.stop()


def pyre_sender(port: int, n: int, conn: Connection) -> None:
    node = _pyre("ptx", port)
    conn.recv()  # go: the receiver has seen it join
    t0 = time.monotonic()
    for i in range(n):
        node.shout(GROUP, b"bench %d" % i)
    conn.send(t0)
    conn.recv()
    node.stop()


def huddle_sender(port: int, tmp: str, n: int, conn: Connection) -> None:
    import asyncio

    asyncio.run(_huddle_sender(port, tmp, n, conn))


async def _huddle_sender(port: int, tmp: str, n: int, conn: Connection) -> None:
    import asyncio

    from huddle import Node

    node = Node(benchlib.node_config("htx", Path(tmp) / "htx").with_overrides(zre=True, zre_port=port))
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    await benchlib.arecv(conn, timeout=120)  # go
    await node.until_recording(30.0)
    t0 = time.monotonic()
    for i in range(n):
        node.emit("bench", {"i": i})
        if i % 100 == 99:
            await asyncio.sleep(0)
    conn.send(t0)
    await benchlib.arecv(conn, timeout=600)
    node.stop()
    await task


def shout_run(n: int, stall: float, tmp: Path) -> dict[str, tuple[int, float]]:
    """{path: (received, rate /s)} for pyre -> pyre and huddle -> pyre."""
    port = benchlib.free_port(socket.SOCK_DGRAM)
    rx_end, rx_conn = mp.Pipe()
    rx = mp.Process(target=receiver, args=(port, n, stall, rx_conn))
    rx.start()
    out: dict[str, tuple[int, float]] = {}
    tmp.mkdir(parents=True, exist_ok=True)
    try:
        assert rx_end.poll(60) and rx_end.recv() == "ready"
        for path, name, target, args in (("pyre -> pyre", "ptx", pyre_sender, (port, n)),
                                         ("huddle -> pyre", "htx", huddle_sender, (port, str(tmp), n))):
            tx_end, tx_conn = mp.Pipe()
            tx = mp.Process(target=target, args=(*args, tx_conn))
            tx.start()
            try:
                rx_end.send(name)
                assert rx_end.poll(90) and rx_end.recv() == "joined", f"{name} never joined at the receiver"
                tx_end.send("go")
                assert tx_end.poll(300)
                t0 = tx_end.recv()
                assert rx_end.poll(600)
                count, last = rx_end.recv()
                out[path] = (count, count / (last - t0) if count and last > t0 else 0.0)
                tx_end.send("stop")
            finally:
                benchlib.reap(tx)
        rx_end.send("stop")
    finally:
        benchlib.reap(rx)
    return out


def hydra_fetch(endpoint: str, out: Path) -> tuple[float, str]:
    """(seconds, SHA1) of the newest post fetched as src/hydra_client.c fetches it."""
    import zmq

    from huddle.hydra.wire import HydraMsg, MsgId, decode, encode

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.RCVTIMEO, 60_000)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)

    def ask(msg: HydraMsg) -> HydraMsg:
        sock.send(encode(msg))
        return decode(sock.recv())

    try:
        assert ask(HydraMsg(MsgId.HELLO, identity="B" * 32, nickname="bench")).id is MsgId.HELLO_OK
        t0 = time.monotonic()
        assert ask(HydraMsg(MsgId.NEXT_OLDER, ident="HEAD")).id is MsgId.NEXT_OK
        meta = ask(HydraMsg(MsgId.META))
        sha1, offset = hashlib.sha1(), 0
        with out.open("wb") as f:
            while offset < meta.content_size:
                chunk = ask(HydraMsg(MsgId.CHUNK, offset=offset, octets=CHUNK))
                data = bytes(chunk.content)
                f.write(data)
                sha1.update(data)
                offset += len(data)
        return time.monotonic() - t0, sha1.hexdigest()
    finally:
        sock.close(linger=0)
        ctx.term()


def hydra_copy(src: Path, tmp: Path) -> tuple[float, str]:
    tmp.mkdir(parents=True, exist_ok=True)
    a = benchlib.NodeProc("ha", tmp, "--zre", "--zre-port", str(benchlib.free_port(socket.SOCK_DGRAM)), "--no-beacon")
    try:
        benchlib.read_api_lines([a])
        endpoint = benchlib.http_get(a.api, "/api/v1/node")["features"]["hydra"]["endpoint"]
        q = urllib.parse.urlencode({"subject": "big", "mime": "application/octet-stream"})
        with src.open("rb") as f:
            req = urllib.request.Request(f"{a.api}/api/v1/posts?{q}", data=f, method="POST")
            req.add_header("Content-Length", str(src.stat().st_size))
            req.add_header("Content-Type", "application/octet-stream")
            with urllib.request.urlopen(req, timeout=300) as resp:
                resp.read()
        return hydra_fetch(endpoint, tmp / "hydra.out")
    finally:
        benchlib.kill_all([a])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shouts", type=int, default=20000, help="SHOUTs per path and repetition")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--stall", type=float, default=5.0, help="seconds without a SHOUT: the rest are lost")
    parser.add_argument("--size-mb", type=int, default=100, help="the post's size for the Hydra transfer")
    parser.add_argument("--quick", action="store_true", help="2000 SHOUTs, one repetition, a 20 MiB post")
    args = parser.parse_args()
    if args.quick:
        args.shouts, args.reps, args.size_mb = 2000, 1, 20
    benchlib.header("ZRE SHOUTs (huddle -> pyre vs pyre -> pyre) and a Hydra post transfer",
                    shouts=args.shouts, reps=args.reps, size_mb=args.size_mb)
    mp.set_start_method("spawn")
    rows, ratios, huddle_lost = [], [], 0
    with tempfile.TemporaryDirectory(prefix="huddle-bench-zre-") as d:
        tmp = Path(d)
        for rep in range(args.reps):
            got = shout_run(args.shouts, args.stall, tmp / f"r{rep}")
            (pn, prate), (hn, hrate) = got["pyre -> pyre"], got["huddle -> pyre"]
            huddle_lost += args.shouts - hn
            ratios.append(hrate / prate if prate else 0.0)
            rows.append([rep + 1, f"{prate:,.0f}", args.shouts - pn, f"{hrate:,.0f}", args.shouts - hn,
                         f"{ratios[-1]:.2f}x"])
        benchlib.print_table(["rep", "pyre -> pyre /s", "lost", "huddle -> pyre /s", "lost", "ratio"], rows)
        ratio = statistics.median(ratios)
        benchlib.check("huddle -> pyre loses no SHOUT", f"{huddle_lost} lost of {args.shouts * args.reps}",
                       huddle_lost == 0)
        print(f"RESULT ZRE SHOUT throughput huddle -> pyre: {ratio:.2f}x pyre -> pyre (median)")
        src = tmp / "post.bin"
        posts_transfer.make_file(src, args.size_mb * 1024 * 1024)
        expected = hashlib.sha1(src.read_bytes()).hexdigest()
        h_secs, h_digest = hydra_copy(src, tmp / "hydra")
        (tmp / "mesh").mkdir()
        m_secs, *_, m_digest = posts_transfer.huddle_copy(src, tmp / "mesh", 1024 * 1024, [])
        benchlib.check("both transfers deliver the content", "SHA1 as sent", h_digest == expected ==
                       m_digest.lower())
        mib = args.size_mb
        benchlib.print_table(["path", "seconds", "MiB/s"], [
            ["Hydra's wire (hydra_client.c's 10 MB CHUNKs, one at a time)", f"{h_secs:.2f}", f"{mib / h_secs:.0f}"],
            ["huddle's posts path (NEWS, FETCH window, BULK)", f"{m_secs:.2f}", f"{mib / m_secs:.0f}"]])
        print(f"RESULT Hydra post transfer: {m_secs / h_secs:.2f}x huddle's own posts path's rate ({mib} MiB)")
    benchlib.footer()


if __name__ == "__main__":
    main()
