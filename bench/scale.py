#!/usr/bin/env python3
"""Scale: N real ``huddle node`` processes on one machine, held for minutes.

For each N of ``--sizes`` (default 16, 32, 48, 64):

1. Start N nodes on 127.0.0.1, in one of two ways (``--mode``):

   * seeds:   node 0 (``--port P --no-beacon``) first; then the other N-1 at
              once with ``--seed 127.0.0.1:P --no-beacon`` (as mesh_formation.py);
   * beacons: all N at once with ``--beacon-port B`` (a random free UDP port;
              beacons go to 127.255.255.255 on lo) and ``--beacon-interval``.

   Each node's stdout is watched; the moment its ``api ...`` line is read the
   harness subscribes to its WebSocket event stream (``/api/v1/events``) and then
   asks ``GET /api/v1/peers`` once, for the peers it admitted before the
   subscription.

2. Time to full mesh: from the last node's ``api`` line (wall clock, read by
   the harness) to the moment every node lists the N-1 others alive.  A node's
   moment is the ``time`` of the ``peer_joined`` event that completed its view:
   the node's own mesh clock (wall-clock seconds; on one machine the nodes'
   clocks and the harness's agree to well under a millisecond).  A peer
   admitted before the subscription is taken at the time of that first
   ``GET /api/v1/peers`` answer (an upper bound; how many are printed).

3. An idle window (``--hold``/2 s), then a loaded window (``--hold``/2 s) in
   which the harness sends ``--rate`` events per second in all through
   ``POST /api/v1/events``, round robin over the nodes.  Over each window, per
   node: CPU % (utime + stime from /proc/PID/stat, all threads), RSS at its end
   (/proc/PID/status VmRSS), and octets sent per second by kind of traffic from
   the node's ``stats.traffic`` counters (``GET /api/v1/node``):

   * heartbeat:   BEAT, TIME (liveness and round-trip probes)
   * membership:  HELO, PEER, MEMB, BOUT, GBYE, RAWS (sessions, member lists,
                  the system picture's reports)
   * replication: XMSG, GSIP (log records and digests)
   * other:       CHAT, DMSG, DACK, BULK, anything else

   plus the peers' round trips (``GET /api/v1/peers`` ``rtt_ms``) at the end of
   the window, and how busy the machine's CPUs were (/proc/stat).

4. Delivery: after the stream, every node's ``GET /api/v1/log/summary`` must
   show every event posted (each source's highest sequence without a gap)
   within ``--settle`` seconds.

Throughout (formation and hold), every ``peer_state`` ``suspect`` and every
``peer_left`` seen on any node's stream is a false suspicion / false "gone":
no node is stopped before the end.  N *holds* when the mesh formed, there was
no false suspicion or "gone", every event reached every node, and no node
died.  The harness prints the largest N that holds; at the first N that does
not, it prints the evidence of what limits it and stops (``--keep-going`` to
go on).

The harness itself shares the machine's CPUs with the nodes (it reads N event
streams, each carrying every event of the log): its own CPU % is printed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import os
import resource
import signal
import socket
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import benchlib
from benchlib import NodeProc

from huddle.procs import exit_description

HEARTBEAT = ("BEAT", "TIME")
MEMBERSHIP = ("HELO", "PEER", "MEMB", "BOUT", "GBYE", "RAWS")
REPLICATION = ("XMSG", "GSIP")
KINDS = {"heartbeat": HEARTBEAT, "membership": MEMBERSHIP, "replication": REPLICATION}
CLK_TCK = os.sysconf("SC_CLK_TCK")
MAX_IN_FLIGHT = 256  # event POSTs outstanding at once; more and the stream falls behind (counted)


# ------------------------------------------------------------------ /proc


def cpu_ticks(pid: int) -> int:
    """utime + stime of process ``pid`` (all its threads), in clock ticks; -1 if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            rest = fh.read().rsplit(")", 1)[1].split()
        return int(rest[11]) + int(rest[12])
    except (OSError, IndexError, ValueError):
        return -1


def rss_mib(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return math.nan


def machine_ticks() -> list[int]:
    with open("/proc/stat") as fh:
        return [int(x) for x in fh.readline().split()[1:]]


def busy_share(before: list[int], after: list[int]) -> float:
    """Share (0..1) of the machine's CPU time that was busy between two /proc/stat readings."""
    delta = [b - a for a, b in zip(before, after, strict=False)]
    total = sum(delta[:8])
    return (total - delta[3] - delta[4]) / total if total > 0 else math.nan


def classify(by_type: dict[str, int]) -> dict[str, int]:
    """Octets by message type -> octets by kind of traffic."""
    out = {k: sum(by_type.get(t, 0) for t in types) for k, types in KINDS.items()}
    out["other"] = sum(by_type.values()) - sum(out.values())
    return out


# ------------------------------------------------------------------ one node as watched


@dataclass
class Watched:
    """What the harness knows of one node: its process, API, and its view of the others."""

    proc: NodeProc
    uuid: str = ""
    alive: dict[str, float] = field(default_factory=dict)  # peer -> when admitted (node's clock)
    by_poll: int = 0  # peers already admitted when the stream was subscribed
    complete_at: float = math.nan  # when its view first held all N-1 others
    complete_seen: float = math.nan  # ... and when the harness learnt it (its wall clock)
    suspicions: list[tuple[float, str, str]] = field(default_factory=list)  # (time, peer name, what)
    refused: int = 0
    subscribed: asyncio.Event = field(default_factory=asyncio.Event)
    stream_error: str = ""


@dataclass
class Window:
    """Figures of one window (idle or loaded), per node."""

    seconds: float = 0.0
    cpu_pct: list[float] = field(default_factory=list)
    rss_mib: list[float] = field(default_factory=list)
    octets: dict[str, list[float]] = field(default_factory=dict)  # kind -> per node, sent octets/s
    by_type: dict[str, float] = field(default_factory=dict)  # type -> octets/s, all nodes
    rtt_ms: list[float] = field(default_factory=list)  # every node's every peer
    machine_busy: float = math.nan
    harness_cpu_pct: float = math.nan
    posted: int = 0
    post_failed: int = 0
    behind: int = 0  # events not sent because too many were outstanding


@dataclass
class SizeResult:
    n: int
    mode: str
    formed: float = math.nan  # s from the last api line to the full mesh (nodes' clocks)
    formed_seen: float = math.nan  # ... as the harness learnt it
    start_spread: float = math.nan  # s from launch to the last api line
    by_poll: int = 0
    suspicions: list[tuple[float, str, str, str]] = field(default_factory=list)  # (t, at node, peer, what)
    refused: int = 0
    windows: dict[str, Window] = field(default_factory=dict)
    events: int = 0
    delivered: bool = False
    settle: float = math.nan  # s from the end of the stream to every event everywhere
    missing: dict[str, int] = field(default_factory=dict)  # node -> events it lacks at the deadline
    log_counts: list[int] = field(default_factory=list)
    died: list[str] = field(default_factory=list)
    incomplete: dict[str, int] = field(default_factory=dict)  # node -> alive count, if no full mesh
    notes: list[str] = field(default_factory=list)

    @property
    def holds(self) -> bool:
        return (not math.isnan(self.formed) and not self.suspicions and self.delivered and not self.died)


# ------------------------------------------------------------------ the harness


class Harness:
    def __init__(self, n: int, mode: str, tmp: Path, beacon_interval: float, node_args: list[str]) -> None:
        self.n, self.mode, self.tmp = n, mode, tmp
        self.beacon_interval = beacon_interval
        self.node_args = node_args
        self.nodes: list[Watched] = []
        self.result = SizeResult(n, mode)
        self.session: aiohttp.ClientSession | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.last_api_wall = math.nan
        self.changed = asyncio.Event()  # a node's view changed
        self.expected: dict[str, int] = {}  # node UUID -> highest seq of the events posted to it

    # ---- starting

    def _launch(self, name: str, *extra: str) -> Watched:
        w = Watched(NodeProc(name, self.tmp, *extra, *self.node_args, group="scale"))
        self.nodes.append(w)
        return w

    async def start(self, timeout: float) -> None:
        loop = asyncio.get_running_loop()
        api_seen: asyncio.Queue[Watched] = asyncio.Queue()
        launched = time.monotonic()

        def watch_stdout(w: Watched) -> None:
            assert w.proc.proc.stdout is not None
            fd = w.proc.proc.stdout.fileno()
            os.set_blocking(fd, False)

            def readable() -> None:
                try:
                    data = os.read(fd, 4096)
                except BlockingIOError:
                    return
                if not data:
                    loop.remove_reader(fd)
                    api_seen.put_nowait(w)  # it exited: noticed below
                    return
                had = bool(w.proc.api)
                w.proc.feed(data, time.monotonic())
                if w.proc.api and not had:
                    loop.remove_reader(fd)
                    api_seen.put_nowait(w)

            loop.add_reader(fd, readable)

        if self.mode == "seeds":
            port0 = benchlib.free_port()
            first = self._launch("n00", "--no-beacon", "--port", str(port0))
            watch_stdout(first)
            await self._serving(api_seen, 1, timeout)
            launched = time.monotonic()
            for i in range(1, self.n):
                watch_stdout(self._launch(f"n{i:02d}", "--no-beacon", "--seed", f"127.0.0.1:{port0}"))
            await self._serving(api_seen, self.n - 1, timeout)
        else:
            bport = benchlib.free_port(socket.SOCK_DGRAM)
            for i in range(self.n):
                watch_stdout(self._launch(f"n{i:02d}", "--beacon-port", str(bport),
                                          "--beacon-interval", str(self.beacon_interval)))
            await self._serving(api_seen, self.n, timeout)
        self.result.start_spread = max(w.proc.api_at for w in self.nodes) - launched

    async def _serving(self, api_seen: asyncio.Queue[Watched], count: int, timeout: float) -> None:
        """Wait for ``count`` api lines; subscribe to each node's stream as its line comes."""
        deadline = time.monotonic() + timeout
        for _ in range(count):
            left = deadline - time.monotonic()
            try:
                w = await asyncio.wait_for(api_seen.get(), max(0.1, left))
            except TimeoutError:
                slow = [w.proc.name for w in self.nodes if not w.proc.api]
                raise TimeoutError(f"no api line within {timeout:.0f} s from: {', '.join(slow)}") from None
            if not w.proc.api:
                w.proc.proc.wait()
                raise RuntimeError(death_note(w.proc) + f"\n{w.proc.log_tail()}")
            self.last_api_wall = time.time()
            self.tasks.append(asyncio.create_task(self._follow(w)))
            await w.subscribed.wait()

    # ---- each node's event stream

    async def _follow(self, w: Watched) -> None:
        session = self.session
        assert session is not None
        api = w.proc.api
        try:
            async with session.ws_connect(api + "/api/v1/events", heartbeat=None, max_msg_size=0) as ws:
                async with session.get(api + "/api/v1/node") as resp:
                    w.uuid = (await resp.json())["uuid"]
                async with session.get(api + "/api/v1/peers") as resp:
                    peers = await resp.json()
                t = time.time()
                for p in peers:
                    if p["state"] in ("alive", "suspect") and p["uuid"] not in w.alive:
                        w.alive[p["uuid"]] = t
                        w.by_poll += 1
                self._check_complete(w, t)
                w.subscribed.set()
                async for msg in ws:
                    if msg.type != aiohttp.WSMsgType.TEXT:
                        break
                    data: str = msg.data
                    if data.startswith('{"type": "event"'):  # a log record: the bulk of the stream
                        continue
                    self._on_event(w, msg.json())
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            w.stream_error = repr(exc)
        finally:
            w.subscribed.set()

    def _on_event(self, w: Watched, ev: dict[str, Any]) -> None:
        kind = ev.get("type")
        if kind == "peer_joined":
            w.alive.setdefault(ev["peer"], float(ev["time"]))
            self._check_complete(w, float(ev["time"]))
        elif kind == "peer_state" and ev.get("state") == "suspect":
            w.suspicions.append((float(ev["time"]), ev.get("name", "?"), "suspect"))
        elif kind == "peer_left":
            w.alive.pop(ev["peer"], None)
            w.suspicions.append((float(ev["time"]), ev.get("name", "?"), f"gone ({ev.get('reason')})"))
        elif kind == "peer_refused":
            w.refused += 1

    def _check_complete(self, w: Watched, t: float) -> None:
        if math.isnan(w.complete_at) and len(w.alive) >= self.n - 1:
            w.complete_at = max(w.alive.values())
            w.complete_seen = time.time()
            self.changed.set()

    async def wait_mesh(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(math.isnan(w.complete_at) for w in self.nodes):
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.changed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.changed.wait(), min(left, 1.0))
        r = self.result
        r.by_poll = sum(w.by_poll for w in self.nodes)
        r.incomplete = {w.proc.name: len(w.alive) for w in self.nodes if math.isnan(w.complete_at)}
        if not r.incomplete:
            r.formed = max(w.complete_at for w in self.nodes) - self.last_api_wall
            r.formed_seen = max(w.complete_seen for w in self.nodes) - self.last_api_wall

    # ---- windows

    async def _stats(self) -> list[dict[str, Any]]:
        session = self.session
        assert session is not None

        async def one(w: Watched) -> dict[str, Any]:
            try:
                async with session.get(w.proc.api + "/api/v1/node") as resp:
                    out: dict[str, Any] = (await resp.json())["stats"]["traffic"]["sent"]
                return out
            except (aiohttp.ClientError, OSError, TimeoutError, KeyError):
                return {}

        return list(await asyncio.gather(*(one(w) for w in self.nodes)))

    async def _rtts(self) -> list[float]:
        session = self.session
        assert session is not None

        async def one(w: Watched) -> list[float]:
            try:
                async with session.get(w.proc.api + "/api/v1/peers") as resp:
                    return [float(p["rtt_ms"]) for p in await resp.json() if p["rtt_ms"] is not None]
            except (aiohttp.ClientError, OSError, TimeoutError):
                return []

        return [x for xs in await asyncio.gather(*(one(w) for w in self.nodes)) for x in xs]

    async def window(self, name: str, seconds: float, rate: float) -> Window:
        win = Window()
        traffic0 = await self._stats()
        cpu0 = [cpu_ticks(w.proc.proc.pid) for w in self.nodes]
        mach0 = machine_ticks()
        self_cpu0 = sum(os.times()[:2])
        t0 = time.monotonic()
        if rate > 0:
            await self._stream(win, seconds, rate)
        else:
            await asyncio.sleep(seconds)  # the idle window: the nodes run on their own
        win.seconds = elapsed = time.monotonic() - t0
        cpu1 = [cpu_ticks(w.proc.proc.pid) for w in self.nodes]
        win.machine_busy = busy_share(mach0, machine_ticks())
        win.harness_cpu_pct = 100.0 * (sum(os.times()[:2]) - self_cpu0) / elapsed
        traffic1 = await self._stats()
        win.cpu_pct = [100.0 * (b - a) / CLK_TCK / elapsed for a, b in zip(cpu0, cpu1, strict=True) if a >= 0 <= b]
        win.rss_mib = [rss_mib(w.proc.proc.pid) for w in self.nodes]
        per_kind: dict[str, list[float]] = {k: [] for k in (*KINDS, "other")}
        totals: dict[str, float] = {}
        for before, after in zip(traffic0, traffic1, strict=True):
            if not before or not after:
                continue
            delta = {t: after.get(t, 0) - before.get(t, 0) for t in after}
            for t, v in delta.items():
                totals[t] = totals.get(t, 0.0) + v / elapsed
            for k, v in classify(delta).items():
                per_kind[k].append(v / elapsed)
        win.octets, win.by_type = per_kind, totals
        win.rtt_ms = await self._rtts()
        self.result.windows[name] = win
        return win

    async def _stream(self, win: Window, seconds: float, rate: float) -> None:
        """``rate`` events/s in all, round robin over the nodes, for ``seconds``."""
        session = self.session
        assert session is not None
        in_flight: set[asyncio.Task[None]] = set()

        async def post(w: Watched, k: int) -> None:
            try:
                async with session.post(w.proc.api + "/api/v1/events",
                                        json={"kind": "scale", "body": {"k": k, "pad": "x" * 64}}) as resp:
                    if resp.status != 201:
                        win.post_failed += 1
                        return
                    seq = int((await resp.json())["seq"])
                win.posted += 1
                self.expected[w.uuid] = max(self.expected.get(w.uuid, 0), seq)
            except (aiohttp.ClientError, OSError, TimeoutError):
                win.post_failed += 1

        t0 = time.monotonic()
        total = int(seconds * rate)
        for k in range(total):
            delay = t0 + k / rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            if len(in_flight) >= MAX_IN_FLIGHT:
                win.behind += 1
                continue
            task = asyncio.create_task(post(self.nodes[k % self.n], k))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)
        rest = t0 + seconds - time.monotonic()
        if rest > 0:
            await asyncio.sleep(rest)
        if in_flight:
            await asyncio.wait(in_flight, timeout=30.0)

    # ---- delivery

    async def delivery(self, settle: float) -> None:
        r = self.result
        expected = self.expected
        r.events = sum(expected.values())
        session = self.session
        assert session is not None
        t0 = time.monotonic()

        async def lacks(w: Watched) -> tuple[int, int]:
            try:
                async with session.get(w.proc.api + "/api/v1/log/summary") as resp:
                    summary = await resp.json()
            except (aiohttp.ClientError, OSError, TimeoutError):
                return r.events, -1
            vv = summary["version_vector"]
            return sum(max(0, seq - int(vv.get(src, 0))) for src, seq in expected.items()), int(summary["events"])

        while True:
            answers = await asyncio.gather(*(lacks(w) for w in self.nodes))
            missing = {w.proc.name: m for w, (m, _) in zip(self.nodes, answers, strict=True) if m}
            if not missing or time.monotonic() - t0 > settle:
                break
            await asyncio.sleep(0.25)
        r.missing = missing
        r.log_counts = [c for _, c in answers]
        r.delivered = not missing and r.events > 0
        r.settle = time.monotonic() - t0 if not missing else math.nan

    def finish(self) -> None:
        r = self.result
        r.died = [w.proc.name for w in self.nodes if w.proc.proc.poll() is not None]
        r.notes += [death_note(w.proc) for w in self.nodes if w.proc.name in r.died]
        for w in self.nodes:
            r.refused += w.refused
            r.suspicions += [(t, w.proc.name, peer, what) for t, peer, what in w.suspicions]
            if w.stream_error:
                r.notes.append(f"{w.proc.name}: event stream ended: {w.stream_error}")
        r.suspicions.sort()


async def run_size(n: int, *, mode: str = "seeds", hold: float = 180.0, rate: float = 20.0,
                   beacon_interval: float = 1.0, settle: float = 60.0, node_args: list[str] | None = None,
                   log: Any = None) -> SizeResult:
    """Start ``n`` nodes, measure formation, an idle and a loaded window, delivery; kill them."""

    def say(text: str) -> None:
        if log is not None:
            log(text)

    with tempfile.TemporaryDirectory(prefix="huddle-scale-") as tmp_name:
        h = Harness(n, mode, Path(tmp_name), beacon_interval, node_args or [])
        conn = aiohttp.TCPConnector(limit=0)
        try:
            async with aiohttp.ClientSession(connector=conn, timeout=aiohttp.ClientTimeout(total=30)) as session:
                h.session = session
                await h.start(timeout=60.0 + 2.0 * n)
                say(f"  {n} nodes serving ({h.result.start_spread:.1f} s after launch); waiting for the full mesh")
                await h.wait_mesh(timeout=60.0 + n)
                if h.result.incomplete:
                    say(f"  ! no full mesh: alive counts {h.result.incomplete}")
                else:
                    say(f"  full mesh {h.result.formed:.2f} s after the last node served; idle {hold / 2:.0f} s")
                await h.window("idle", hold / 2, 0.0)
                say(f"  loaded {hold / 2:.0f} s at {rate:g} events/s")
                await h.window("load", hold / 2, rate)
                await h.delivery(settle)
                h.finish()
                for task in h.tasks:
                    task.cancel()
                await asyncio.gather(*h.tasks, return_exceptions=True)
        finally:
            for task in h.tasks:
                task.cancel()
            benchlib.kill_all([w.proc for w in h.nodes])
            for w in h.nodes:
                if w.proc.proc.returncode not in (None, -signal.SIGKILL) and w.proc.name not in h.result.died:
                    h.result.died.append(w.proc.name)
                    h.result.notes.append(death_note(w.proc))
        return h.result


def death_note(proc: NodeProc) -> str:
    """How a node died, with the line of its log that says why (the logs go with the
    run's temporary directory): ``n7: aborted (SIGABRT) -- see its log; Assertion ...``."""
    lines = [ln.strip() for ln in proc.log_tail(4000).splitlines() if ln.strip()]
    why = next((ln for ln in reversed(lines) if "Assertion failed" in ln), lines[-1] if lines else "(empty log)")
    return f"{proc.name}: {exit_description(proc.proc.returncode or 0)}; its log ends: {why}"


# ------------------------------------------------------------------ reporting


def _med_max(values: list[float]) -> tuple[float, float]:
    return benchlib.median(values), (max(values) if values else math.nan)


def limit_evidence(r: SizeResult) -> list[str]:
    """What stopped N from holding, with the figures that show it."""
    out: list[str] = []
    load = r.windows.get("load") or r.windows.get("idle")
    if r.died:
        out.append(f"nodes died: {', '.join(r.died)}")
    if r.incomplete:
        out.append(f"no full mesh: alive counts {r.incomplete}")
    if r.suspicions:
        first = r.suspicions[:5]
        out.append(f"{len(r.suspicions)} false suspicions/gone, first: "
                   + "; ".join(f"{node} saw {peer} {what}" for _, node, peer, what in first))
    if not r.delivered:
        out.append(f"events not delivered within the settle time: missing {r.missing}")
    if load is not None:
        busy = load.machine_busy
        node_sum = sum(load.cpu_pct)
        rtt = sorted(load.rtt_ms)
        out.append(f"machine CPUs {100 * busy:.0f}% busy; nodes' CPU sum {node_sum:.0f}% of "
                   f"{100 * (os.cpu_count() or 1)}%; harness {load.harness_cpu_pct:.0f}%; "
                   f"peer RTT p50 {benchlib.percentile(rtt, 50):.1f} ms, p99 {benchlib.percentile(rtt, 99):.1f} ms, "
                   f"max {rtt[-1] if rtt else math.nan:.1f} ms")
        if busy >= 0.95:
            out.append("verdict: CPU saturation (the CPUs were busy all the time; heartbeats wait behind work)")
        elif r.suspicions:
            out.append("verdict: heartbeats late (suspicions without saturated CPUs: look at the RTTs)")
    return out


def report(results: list[SizeResult]) -> None:
    rows: list[list[object]] = []
    for r in results:
        rows.append([r.n, r.mode, r.start_spread, r.formed, r.formed_seen, r.by_poll, len(r.suspicions),
                     f"{r.events - sum(r.missing.values()) if r.missing else r.events}/{r.events}",
                     r.settle, "yes" if r.holds else "NO"])
    benchlib.print_table(["nodes", "mode", "start spread s", "full mesh s", "seen s", "joins by poll",
                          "false suspicions", "events delivered", "settle s", "holds"], rows)
    print("  full mesh: last node serving -> every node's view complete (the nodes' own peer_joined times);")
    print("  seen: when the harness had read it; joins by poll: admissions before the harness subscribed,")
    print("  taken at the poll's time (upper bounds); settle: stream end -> every event on every node")
    print()
    rows = []
    for r in results:
        for name in ("idle", "load"):
            w = r.windows.get(name)
            if w is None:
                continue
            cpu, rss = _med_max(w.cpu_pct), _med_max(w.rss_mib)
            rtt = sorted(w.rtt_ms)
            rows.append([r.n, name, *cpu, *rss, benchlib.percentile(rtt, 50), benchlib.percentile(rtt, 99),
                         100 * w.machine_busy, w.harness_cpu_pct])
    benchlib.print_table(["nodes", "window", "CPU % med", "CPU % max", "RSS MiB med", "RSS MiB max",
                          "RTT ms p50", "RTT ms p99", "machine busy %", "harness CPU %"], rows)
    print("  CPU: utime+stime of each node process over the window (100% = one core); RSS at its end")
    print()
    rows = []
    for r in results:
        for name in ("idle", "load"):
            w = r.windows.get(name)
            if w is None:
                continue
            row: list[object] = [r.n, name]
            for k in (*KINDS, "other"):
                row += list(_med_max(w.octets.get(k, [])))
            rows.append(row)
    benchlib.print_table(["nodes", "window", "heartbeat med", "max", "membership med", "max", "replication med",
                          "max", "other med", "max"], rows)
    print("  octets sent per node per second by kind (stats.traffic): heartbeat = BEAT, TIME; membership =")
    print("  HELO, PEER, MEMB, BOUT, GBYE, RAWS; replication = XMSG, GSIP; other = the rest")
    for r in results:
        w = r.windows.get("idle")
        if w is not None and w.by_type:
            top = sorted(((v / r.n, t) for t, v in w.by_type.items() if v > 0), reverse=True)
            print(f"  N={r.n} idle, octets/s per node by type: " + ", ".join(f"{t} {v:,.0f}" for v, t in top))
        for note in r.notes:
            print(f"  ! N={r.n}: {note}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default="16,32,48,64", help="numbers of nodes (default 16,32,48,64)")
    parser.add_argument("--hold", type=float, default=240.0,
                        help="seconds each mesh is held after it formed: half idle, half loaded (default 240)")
    parser.add_argument("--rate", type=float, default=20.0,
                        help="events per second in all during the loaded half, round robin over the nodes (default 20)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--seeds", dest="mode", action="store_const", const="seeds",
                      help="node 0 serves first, the others are seeded to it (the default)")
    mode.add_argument("--beacons", dest="mode", action="store_const", const="beacons",
                      help="all start at once and find each other by beacons on 127.255.255.255")
    parser.add_argument("--beacon-interval", type=float, default=1.0, help="--beacon-interval of the nodes (default 1.0)")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds after the stream for every event to reach every node (default 60)")
    parser.add_argument("--keep-going", action="store_true", help="go on to larger N after one that does not hold")
    parser.add_argument("--node-arg", action="append", default=[], metavar="ARG",
                        help="extra argument for every node, e.g. --node-arg=--heartbeat-interval=0.5 (repeatable)")
    parser.add_argument("--quick", action="store_true", help="sizes 8,16 held 20 s each")
    parser.set_defaults(mode="seeds")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.hold = "8,16", 20.0
    sizes = [int(x) for x in args.sizes.split(",")]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)  # pipes and sockets: a few per node
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 65536), hard))
    benchlib.header("Scale: N node processes on one machine, held idle and under a steady event stream",
                    sizes=args.sizes, mode=args.mode, hold=args.hold, rate=args.rate, settle=args.settle,
                    node_args=" ".join(args.node_arg) or "-", descriptor_limit=f"{soft}->{min(hard, 65536)}")
    results: list[SizeResult] = []
    for n in sizes:
        print(f"- N={n} ({args.mode})", flush=True)
        try:
            r = asyncio.run(run_size(n, mode=args.mode, hold=args.hold, rate=args.rate,
                                     beacon_interval=args.beacon_interval, settle=args.settle,
                                     node_args=args.node_arg, log=lambda s: print(s, flush=True)))
        except (TimeoutError, RuntimeError) as exc:
            r = SizeResult(n, args.mode)
            r.died.append(f"(start failed: {exc})"[:300])
        results.append(r)
        if not r.holds:
            print(f"  N={n} does not hold:")
            for line in limit_evidence(r):
                print(f"    {line}")
            if not args.keep_going:
                break
    print()
    report(results)
    benchlib.footer()
    print()
    held = [r.n for r in results if r.holds]
    for r in results:
        benchlib.check(f"scale N={r.n} ({r.mode}): every event on every node",
                       f"{r.events - sum(r.missing.values())}/{r.events}", r.delivered)
        benchlib.target(f"scale N={r.n} ({r.mode}): false suspicions / gone = 0", str(len(r.suspicions)),
                        not r.suspicions)
        if not math.isnan(r.formed):
            print(f"RESULT scale N={r.n} ({r.mode}) full mesh {r.formed:.2f} s after the last node served")
        load = r.windows.get("load")
        if load is not None and load.cpu_pct:
            print(f"RESULT scale N={r.n} ({r.mode}) node CPU under load median {benchlib.median(load.cpu_pct):.1f}%, "
                  f"RSS median {benchlib.median(load.rss_mib):.0f} MiB")
    print(f"RESULT scale: largest N that holds: {max(held) if held else 'none'} (of {args.sizes}, {args.mode})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
