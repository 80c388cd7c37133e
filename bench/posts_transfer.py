#!/usr/bin/env python3
"""Hydra posts: a large post from one node to another, against a plain TCP copy of the same file.

Two processes on 127.0.0.1 each time, and both sides write to disk.

* TCP copy:  a sender process reads the file in 1 MiB blocks and sends it on a
             plain TCP connection; a receiver process writes what arrives to a
             file.  Timed from the connection to the last octet written.
* huddle:    node ``a`` holds the post (added through the API, not timed);
             node ``b`` starts with an empty store and meets ``a`` (beacons);
             timed from ``b`` seeing ``a`` alive to ``b`` holding the post, its
             digest checked (``b`` syncs when they meet: HELLO, NEXT-OLDER,
             META, FETCHes answered by CONTENT in BULK frames, then the SHA1
             of the file).

The ratio is huddle's rate over the TCP copy's, the median of the per-run
ratios (runs alternate).  Peak RSS of ``b`` (VmHWM) is reported beside it.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import tempfile
import time
import urllib.parse
import urllib.request
from multiprocessing.connection import Connection
from pathlib import Path

import benchlib

BLOCK = 1024 * 1024


def make_file(path: Path, size: int) -> None:
    block = os.urandom(BLOCK)
    with path.open("wb") as f:
        left = size
        while left > 0:
            f.write(block[: min(left, BLOCK)])
            left -= BLOCK


def tcp_receiver(out: str, conn: Connection) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        conn.send(srv.getsockname()[1])
        peer, _ = srv.accept()
        started = time.monotonic()
        with peer, open(out, "wb") as f:
            while data := peer.recv(BLOCK):
                f.write(data)
        conn.send(time.monotonic() - started)


def tcp_sender(path: str, port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s, open(path, "rb") as f:
        while block := f.read(BLOCK):
            s.sendall(block)


def tcp_copy(src: Path, out: Path) -> float:
    parent, child = mp.Pipe()
    recv = mp.Process(target=tcp_receiver, args=(str(out), child))
    recv.start()
    port = parent.recv()
    send = mp.Process(target=tcp_sender, args=(str(src), port))
    send.start()
    took = float(parent.recv())
    send.join()
    recv.join()
    out.unlink()
    return took


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def huddle_copy(src: Path, tmp: Path, chunk: int, extra: list[str]) -> tuple[float, float]:
    beacon = ["--beacon-port", str(benchlib.free_port(socket.SOCK_DGRAM)), "--beacon-interval", "0.1",
              "--posts-chunk", str(chunk), *extra]
    a = benchlib.NodeProc("a", tmp, *beacon)
    nodes = [a]
    try:
        benchlib.read_api_lines([a])
        q = urllib.parse.urlencode({"subject": "big", "mime": "application/octet-stream"})
        with src.open("rb") as f:
            req = urllib.request.Request(f"{a.api}/api/v1/posts?{q}", data=f, method="POST")
            req.add_header("Content-Length", str(src.stat().st_size))
            with urllib.request.urlopen(req, timeout=300) as resp:
                pid = json.loads(resp.read())["id"]
        b = benchlib.NodeProc("b", tmp, *beacon)
        nodes.append(b)
        benchlib.read_api_lines([b])
        while not any(p["state"] == "alive" for p in benchlib.http_get(b.api, "/api/v1/peers")):
            time.sleep(0.005)
        started = time.monotonic()
        while not any(p["id"] == pid for p in benchlib.http_get(b.api, "/api/v1/posts?limit=1")):
            time.sleep(0.01)
        took = time.monotonic() - started
        return took, vm_hwm_mib(b.proc.pid)
    finally:
        benchlib.kill_all(nodes)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=200, help="the post's size in MiB (default 200)")
    ap.add_argument("--runs", type=int, default=5, help="pairs of runs (default 5)")
    ap.add_argument("--chunk", type=int, default=1024 * 1024, help="octets per FETCH (default 1048576)")
    ap.add_argument("--node-args", default="", help="more 'huddle node' flags for both nodes, e.g. '--mtu 250000'")
    ap.add_argument("--quick", action="store_true", help="2 runs of 100 MiB")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.size_mb = 2, 100
    size = args.size_mb * 1024 * 1024
    benchlib.header("posts_transfer: a large post node -> node vs a plain TCP copy", size_mib=args.size_mb,
                    runs=args.runs, chunk=args.chunk, node_args=args.node_args or "-")
    rows, ratios, rss = [], [], []
    with tempfile.TemporaryDirectory(prefix="huddle-bench-posts-") as d:
        tmp = Path(d)
        src = tmp / "src.bin"
        make_file(src, size)
        for i in range(args.runs):
            t_tcp = tcp_copy(src, tmp / "copy.bin")
            run_dir = tmp / f"run{i}"
            run_dir.mkdir()
            t_h, peak = huddle_copy(src, run_dir, args.chunk, args.node_args.split())
            shutil.rmtree(run_dir)
            mbps_tcp, mbps_h = size / t_tcp / 2**20, size / t_h / 2**20
            ratios.append(mbps_h / mbps_tcp)
            rss.append(peak)
            rows.append((i + 1, mbps_tcp, mbps_h, mbps_h / mbps_tcp, peak))
    benchlib.print_table(["run", "TCP copy MiB/s", "huddle MiB/s", "ratio", "b peak RSS MiB"], rows)
    ratio = statistics.median(ratios)
    benchlib.footer()
    benchlib.target("post transfer >= 0.5x a TCP copy", f"{ratio:.3f}x (median of {args.runs})", ratio >= 0.5)
    benchlib.check("fetcher's peak RSS below the post's size", f"{max(rss):.0f} MiB for {args.size_mb} MiB",
                   max(rss) < args.size_mb)


if __name__ == "__main__":
    main()
