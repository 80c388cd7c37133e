#!/usr/bin/env python3
"""Hydra posts: a large post from one node to another, against a plain TCP copy of the same file.

Two processes on 127.0.0.1 each time, and every receiver writes to disk.  Each run
does the three, one after the other; the ratios are medians of the per-run ratios.

* TCP copy:   a sender process reads the file in 1 MiB blocks and sends it on a plain
              TCP connection; a receiver process writes what arrives to a file.
              Timed from the connection to the last octet written.  The target's
              baseline.
* TCP copy + SHA1:  the same, and the receiver also hashes what arrives, in a thread
              of its own (256 KiB blocks: the fastest of the ways tried, see
              bench/HISTORY.md).  The least any transfer that checks the content's
              digest on arrival must do, as huddle must (issue 7).
* huddle:     nodes ``a`` and ``b`` meet with empty stores; the post is then added to
              ``a`` through its API.  Timed from ``a``'s ``post_new`` event (the post
              exists there; NEWS goes to ``b``) to ``b``'s (``b`` holds it, its digest
              checked): NEWS, HELLO, NEXT-OLDER, META, FETCHes answered by CONTENT in
              BULK frames, written and hashed as they arrive.  Both times come from
              the nodes' event streams, so nothing polls ``b`` while it works.

Peak RSS of ``b`` (VmHWM) and the CPU time both nodes spent on the transfer are shown.

On a VM that gives freed memory back to its host (virtio-balloon free page
reporting, as here), the first touch of a page that was free for a moment costs
several times as much, and a 200 MiB copy writes 200 MiB of new page cache: each
figure then depends on how long ago memory was freed.  The script says when that
is the case; ``--hold-freed-pages`` (root) keeps freed pages in the guest for the
run and, before each copy, touches and frees three times the file's size, so
that every copy meets memory that is already the guest's.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import mmap
import multiprocessing as mp
import os
import queue
import shutil
import socket
import statistics
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

BLOCK = 1024 * 1024
HASH_BLOCK = 256 * 1024
MIN_FREE_MS = Path("/sys/module/page_reporting/parameters/min_free_ms")


def make_file(path: Path, size: int) -> None:
    block = os.urandom(BLOCK)
    with path.open("wb") as f:
        left = size
        while left > 0:
            f.write(block[: min(left, BLOCK)])
            left -= BLOCK


# ------------------------------------------------------------------ TCP copies


def _receive(peer: socket.socket, out: str, verify: bool) -> str:
    """Write what ``peer`` sends to ``out``; with ``verify``, hash it too, in a thread."""
    with open(out, "wb") as f:
        if not verify:
            while data := peer.recv(BLOCK):
                f.write(data)
            return ""
        h = hashlib.sha1(usedforsecurity=False)
        blocks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()

        def hasher() -> None:
            while (block := blocks.get()) is not None:
                h.update(block)

        thread = threading.Thread(target=hasher)
        thread.start()
        while data := peer.recv(HASH_BLOCK):
            f.write(data)
            blocks.put(data)
        blocks.put(None)
        thread.join()
        return h.hexdigest()


def tcp_receiver(out: str, verify: bool, conn: Connection) -> None:
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen(1)
        conn.send(srv.getsockname()[1])
        peer, _ = srv.accept()
        started = time.monotonic()
        with peer:
            digest = _receive(peer, out, verify)
        conn.send((time.monotonic() - started, digest))


def tcp_sender(path: str, port: int) -> None:
    with socket.create_connection(("127.0.0.1", port)) as s, open(path, "rb") as f:
        while block := f.read(BLOCK):
            s.sendall(block)


def tcp_copy(src: Path, out: Path, verify: bool) -> tuple[float, str]:
    parent, child = mp.Pipe()
    recv = mp.Process(target=tcp_receiver, args=(str(out), verify, child))
    recv.start()
    port = parent.recv()
    send = mp.Process(target=tcp_sender, args=(str(src), port))
    send.start()
    took, digest = parent.recv()
    send.join()
    recv.join()
    out.unlink()
    return float(took), str(digest)


# ------------------------------------------------------------------ huddle


class EventStream:
    """A node's ``/api/v1/events`` WebSocket, read in a thread; events wait in a queue."""

    def __init__(self, api: str) -> None:
        self.events: queue.SimpleQueue[dict[str, Any]] = queue.SimpleQueue()
        self._ready = threading.Event()
        self._failed: list[BaseException] = []
        url = "ws" + api.removeprefix("http") + "/api/v1/events"
        threading.Thread(target=lambda: asyncio.run(self._run(url)), daemon=True).start()
        if not self._ready.wait(20):
            raise TimeoutError(f"no event stream from {api}: {self._failed}")

    async def _run(self, url: str) -> None:
        import aiohttp

        try:
            async with aiohttp.ClientSession() as session, session.ws_connect(url) as ws:
                self._ready.set()
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.TEXT:
                        self.events.put(json.loads(msg.data))
        except Exception as exc:  # reported by __init__ or seen as a timeout in wait()
            self._failed.append(exc)
            self._ready.set()

    def wait(self, kind: str, timeout: float = 300.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {kind} event within {timeout} s")
            with contextlib.suppress(queue.Empty):
                event = self.events.get(timeout=min(left, 1.0))
                if event.get("type") == kind:
                    return event


def _cpu_ns(pid: int) -> int:
    """CPU time of all of a process's threads, in ns (schedstat: finer than clock ticks)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
    return total


def vm_hwm_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def huddle_copy(src: Path, tmp: Path, chunk: int, extra: list[str]) -> tuple[float, float, float, float, str]:
    """(seconds, b's peak RSS MiB, CPU seconds of a and of b during the transfer, b's digest)."""
    beacon = ["--beacon-port", str(benchlib.free_port(socket.SOCK_DGRAM)), "--beacon-interval", "0.1",
              "--posts-chunk", str(chunk), *extra]
    a = benchlib.NodeProc("a", tmp, *beacon)
    b = benchlib.NodeProc("b", tmp, *beacon)
    try:
        benchlib.read_api_lines([a, b])
        for n in (a, b):
            deadline = time.monotonic() + 30
            while not any(p["state"] == "alive" for p in benchlib.http_get(n.api, "/api/v1/peers")):
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{n.name} never saw its peer alive")
                time.sleep(0.01)
        events_a, events_b = EventStream(a.api), EventStream(b.api)
        cpu_b = _cpu_ns(b.proc.pid)  # b is idle until the post exists on a
        q = urllib.parse.urlencode({"subject": "big", "mime": "application/octet-stream"})
        with src.open("rb") as f:
            req = urllib.request.Request(f"{a.api}/api/v1/posts?{q}", data=f, method="POST")
            req.add_header("Content-Length", str(src.stat().st_size))
            # urllib's default (a form type) is refused with 415 since issue 19: a form is what a
            # cross-site page can send; the post's own type is what the API takes.
            req.add_header("Content-Type", "application/octet-stream")
            with urllib.request.urlopen(req, timeout=300) as resp:
                cpu_a = _cpu_ns(a.proc.pid)  # a: from the upload's answer (its own work before is not the transfer's)
                pid = json.loads(resp.read())["id"]
        added = events_a.wait("post_new")
        fetched = events_b.wait("post_new")
        cpu_a, cpu_b = _cpu_ns(a.proc.pid) - cpu_a, _cpu_ns(b.proc.pid) - cpu_b
        assert added["id"] == fetched["id"] == pid, (added, fetched, pid)
        return fetched["time"] - added["time"], vm_hwm_mib(b.proc.pid), cpu_a / 1e9, cpu_b / 1e9, fetched["digest"]
    finally:
        benchlib.kill_all([a, b])


# ------------------------------------------------------------------ freed pages


def prime(octets: int) -> None:
    """Touch ``octets`` of new memory and free it: with freed pages held in the guest, the
    copy that follows (and its page cache) meets memory that is already the guest's."""
    with mmap.mmap(-1, octets) as m:
        block = b"\1" * BLOCK
        for off in range(0, octets - BLOCK + 1, BLOCK):
            m[off:off + BLOCK] = block


@contextlib.contextmanager
def freed_pages(hold_ms: int | None) -> Iterator[str]:
    """Say how freed memory is treated; with ``hold_ms``, keep it in the guest that long (restored after)."""
    try:
        before = int(MIN_FREE_MS.read_text())
    except (OSError, ValueError):
        yield "no free page reporting here: every copy meets the same memory"
        return
    if hold_ms is None:
        state = ("free page reporting gives freed memory back to the host after "
                 f"{before} ms: figures depend on when memory was last freed "
                 "(--hold-freed-pages keeps it for the run)")
        yield state
        return
    try:
        MIN_FREE_MS.write_text(str(hold_ms))
    except OSError as exc:
        raise SystemExit(f"--hold-freed-pages: cannot write {MIN_FREE_MS} ({exc.strerror}); run as root") from None
    try:
        yield f"freed memory held in the guest for {hold_ms} ms during the run (was {before} ms; restored after)"
    finally:
        MIN_FREE_MS.write_text(str(before))


# ------------------------------------------------------------------ main


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size-mb", type=int, default=200, help="the post's size in MiB (default 200)")
    ap.add_argument("--runs", type=int, default=5, help="runs of the three copies (default 5)")
    ap.add_argument("--chunk", type=int, default=1024 * 1024, help="octets per FETCH (default 1048576)")
    ap.add_argument("--node-args", default="", help="more 'huddle node' flags for both nodes, e.g. '--mtu 250000'")
    ap.add_argument("--hold-freed-pages", type=int, nargs="?", const=10_000, metavar="MS",
                    help="(root, VMs with free page reporting) keep freed memory in the guest for MS ms "
                         "(default 10000) while the benchmark runs, then restore the setting (a SIGKILL "
                         f"leaves it set: write the value printed at the start back to {MIN_FREE_MS})")
    ap.add_argument("--quick", action="store_true", help="2 runs of 100 MiB")
    args = ap.parse_args()
    if args.quick:
        args.runs, args.size_mb = 2, 100
    size = args.size_mb * 1024 * 1024
    with freed_pages(args.hold_freed_pages) as pages:
        benchlib.header("posts_transfer: a large post node -> node vs a plain TCP copy", size_mib=args.size_mb,
                        runs=args.runs, chunk=args.chunk, node_args=args.node_args or "-")
        print(f"   memory: {pages}", flush=True)
        rows, ratios, to_verifying, rss = [], [], [], []
        with tempfile.TemporaryDirectory(prefix="huddle-bench-posts-") as d:
            tmp = Path(d)
            src = tmp / "src.bin"
            make_file(src, size)
            with src.open("rb") as f:
                want = hashlib.file_digest(f, "sha1").hexdigest()
            hold = args.hold_freed_pages is not None
            for i in range(args.runs):
                if hold:
                    prime(3 * size)
                t_tcp, _ = tcp_copy(src, tmp / "copy.bin", verify=False)
                if hold:
                    prime(3 * size)
                t_ver, got = tcp_copy(src, tmp / "copy.bin", verify=True)
                assert got == want, "the TCP copy + SHA1 got another digest"
                run_dir = tmp / f"run{i}"
                run_dir.mkdir()
                if hold:
                    prime(3 * size)  # the nodes, the upload and the fetch take a few seconds together
                t_h, peak, cpu_a, cpu_b, got = huddle_copy(src, run_dir, args.chunk, args.node_args.split())
                assert got == want, "huddle's post has another digest"
                shutil.rmtree(run_dir)
                rate = [size / t / 2**20 for t in (t_tcp, t_ver, t_h)]
                ratios.append(rate[2] / rate[0])
                to_verifying.append(rate[2] / rate[1])
                rss.append(peak)
                rows.append((i + 1, rate[0], rate[1], rate[2], rate[2] / rate[0], rate[1] / rate[0],
                             rate[2] / rate[1], cpu_a, cpu_b, peak))
        benchlib.print_table(["run", "TCP MiB/s", "TCP+SHA1 MiB/s", "huddle MiB/s", "huddle/TCP",
                              "TCP+SHA1/TCP", "huddle/TCP+SHA1", "a CPU s", "b CPU s", "b peak RSS MiB"], rows)
        benchlib.footer()
    ratio = statistics.median(ratios)
    print(f"RESULT huddle / TCP copy + SHA1 (the least a checking receiver must do): "
          f"{statistics.median(to_verifying):.3f}x (median of {args.runs})")
    print(f"RESULT TCP copy + SHA1 / TCP copy: {statistics.median(r[5] for r in rows):.3f}x (median of {args.runs})")
    benchlib.target("post transfer >= 0.5x a TCP copy", f"{ratio:.3f}x (median of {args.runs})", ratio >= 0.5)
    benchlib.check("fetcher's peak RSS below the post's size", f"{max(rss):.0f} MiB for {args.size_mb} MiB",
                   max(rss) < args.size_mb)


if __name__ == "__main__":
    main()
