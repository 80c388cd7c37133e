#!/usr/bin/env python3
"""A soak with chaos (issue 20): N nodes, each in its own network namespace on
one bridge, under a steady stream of events and document operations, while a
seeded scheduler SIGKILLs and restarts nodes (one, and all at once), freezes
them (SIGSTOP / SIGCONT), partitions the group in two (nft on the bridge),
drops one node's link and changes one node's address.

At the end, after a quiet settle period with a deadline, it checks:

* every node holds every event an API acknowledged (201), and the same set of
  events as every other node, with no gap;
* no (source, seq) pair was ever seen with two contents (sequence reuse):
  not in what the APIs acknowledged, not across the nodes' logs;
* the documents are byte-identical (``GET /api/v1/doc?eids=1`` on each node);
* the mesh is full (every node sees every other alive);
* RSS and descriptors per node did not grow: each node is sampled every few
  seconds; the first sample after its last (re)start at which it saw the full
  mesh and had run ``--warmup`` seconds is compared with its last sample
  (``RSS <= first + 16 MiB + 8 KiB`` per document operation acknowledged in
  between: every node keeps each one, about 2 KiB, in its document;
  ``descriptors <= + 6``).

It prints its seed at the start and at the end; ``--seed N`` replays the same
schedule of chaos (the same actions, victims and durations in the same order;
what the network does in between is not replayed).  Every chaos action is
printed with its time since the start.

Needs root, ``ip`` and ``nft``.  Nothing leaves the namespaces it creates
(bench/netns.py: bridge ``<tag>br``, hosts ``<tag>h1..N``, addresses 10.97.X.0/24 inside them);
the harness reaches each node's API (127.0.0.1 inside the node's namespace)
from a thread that entered that namespace (setns).  tests/test_soak.py runs the
same core for about 100 s.

    python bench/soak.py                 # 8 nodes, 30 minutes of chaos
    python bench/soak.py --quick         # 2 minutes
    python bench/soak.py --seed 1234     # replay a run's schedule
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import benchlib
from netns import Namespaces, enter_netns, missing_tools

__all__ = ["KINDS", "Action", "LogProblems", "Soak", "SoakNode", "log_problems", "make_plan", "run_soak"]

KINDS = ("kill_one", "kill_all", "freeze", "partition", "link", "readdress")
# Fast failure detection (as the namespace tests use): chaos shows within 1.5 s.
TIMING = ["--heartbeat-interval", "0.25", "--suspect-after", "0.75", "--gone-after", "1.5"]
# RSS may grow by RSS_SLACK_MIB, and DOC_OP_KIB per document operation acknowledged meanwhile
# (each node holds each in its document: measured 1.9-2.1 KiB, tests/test_doc_memory_processes.py);
# plain events cost a node no memory (the log is on disk).
RSS_SLACK_MIB, DOC_OP_KIB, FD_SLACK = 16.0, 8.0, 6


def say_now(line: str) -> None:
    print(line, flush=True)


# --------------------------------------------------------------------- nodes


@dataclass
class Sample:
    t: float
    life: int
    rss_mib: float
    fds: int
    full_mesh: bool


class SoakNode:
    """One ``huddle node`` in its namespace; its API is called from threads
    inside that namespace."""

    def __init__(self, index: int, net: Namespaces, tmp: Path, beacon_port: int) -> None:
        self.index = index
        self.name = f"n{index + 1}"
        self.host = net.hosts[index]
        self.data_dir = tmp / self.name
        self.log_path = tmp / f"{self.name}.log"
        self.beacon_port = beacon_port
        self.proc: subprocess.Popen[bytes] | None = None
        self.api = ""
        self.frozen = False
        self.life = 0  # how many times it was started
        self.started_at = math.nan
        self._buf = b""
        self._pool = ThreadPoolExecutor(max_workers=2, initializer=enter_netns, initargs=(self.host,),
                                        thread_name_prefix=f"ns-{self.name}")

    # -- process
    def start(self) -> None:
        # --open: the soak measures the mesh as it always did, an open group (a lab's namespaces)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                ["ip", "netns", "exec", self.host, sys.executable, "-m", "huddle", "node", "--name", self.name,
                 "--group", "soak", "--data-dir", str(self.data_dir), "--interface", "eth0",
                 "--api", "127.0.0.1:0", "--beacon-port", str(self.beacon_port), "--beacon-interval", "0.25",
                 "--open", *TIMING], stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        self.api, self._buf, self.frozen = "", b"", False
        self.life += 1
        self.started_at = time.monotonic()

    def feed(self, data: bytes, now: float) -> None:  # for benchlib.read_api_lines
        self._buf += data
        if b"\n" in self._buf and not self.api:
            line = self._buf.split(b"\n", 1)[0].decode(errors="replace").strip()
            if line.startswith("api "):
                self.api = line[4:]

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def up(self) -> bool:
        """Running, serving and not frozen: its API answers."""
        return self.running() and bool(self.api) and not self.frozen

    def signal(self, sig: int) -> None:
        if self.running():
            assert self.proc is not None
            self.proc.send_signal(sig)

    def kill(self) -> None:
        if self.frozen:
            self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(20)
            if self.proc.stdout is not None:
                self.proc.stdout.close()
        self.api, self.frozen = "", False

    def close(self) -> None:
        self.kill()
        self._pool.shutdown(wait=False, cancel_futures=True)

    # -- API
    def call(self, path: str, body: Any = None, timeout: float = 5.0) -> tuple[int, bytes]:
        """A request to the node's API (POST if ``body``), made inside its namespace."""
        api = self.api
        if not api:
            raise ConnectionError(f"{self.name} is not serving")

        def go() -> tuple[int, bytes]:
            data = None if body is None else json.dumps(body).encode()
            req = urllib.request.Request(api + path, data=data, method="GET" if data is None else "POST")
            req.add_header("Content-Type", "application/json")
            try:
                with urllib.request.urlopen(req, timeout=timeout) as resp:
                    return resp.status, resp.read()
            except urllib.error.HTTPError as exc:
                return exc.code, exc.read()

        return self._pool.submit(go).result(timeout + 1)

    def get(self, path: str, timeout: float = 10.0) -> Any:
        status, data = self.call(path, timeout=timeout)
        if status != 200:
            raise ConnectionError(f"{self.name} GET {path}: {status} {data[:200]!r}")
        return json.loads(data)

    def alive_peers(self) -> set[str]:
        return {p["name"] for p in self.get("/api/v1/peers") if p["state"] == "alive"}

    def footprint(self) -> tuple[float, int]:
        assert self.proc is not None
        pid = self.proc.pid
        rss = math.nan
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) / 1024
        return rss, len(os.listdir(f"/proc/{pid}/fd"))


# ---------------------------------------------------------------- the plan


@dataclass(frozen=True)
class Action:
    kind: str
    victim: int = -1  # 0-based; -1 for none
    side: tuple[int, ...] = ()  # partition: the nodes cut from the rest
    hold: float = 0.0  # seconds the fault lasts (down, frozen, cut)
    pause: float = 0.0  # seconds of quiet after the action, before the next

    def describe(self, names: list[str]) -> str:
        who = names[self.victim] if self.victim >= 0 else ""
        if self.kind == "kill_one":
            return f"SIGKILL {who}, restart it after {self.hold:.1f} s"
        if self.kind == "kill_all":
            return f"SIGKILL every node, restart all after {self.hold:.1f} s"
        if self.kind == "freeze":
            return f"SIGSTOP {who} for {self.hold:.1f} s"
        if self.kind == "partition":
            side = ",".join(names[i] for i in self.side)
            return f"partition {{{side}}} from the rest for {self.hold:.1f} s"
        if self.kind == "link":
            return f"link of {who} down for {self.hold:.1f} s"
        return f"change the address of {who}"


def make_plan(seed: int, nodes: int, seconds: float, scale: float = 1.0, calm: float = 0.2) -> list[Action]:
    """The chaos schedule of ``seed``: rounds in which each kind comes once, in
    a shuffled order, until the planned time fills ``seconds``; at least one
    whole round.  The last ``calm`` part of the time kills no process (the
    network chaos goes on), so every node's last life is long enough to see
    whether its RSS or descriptors grow.  Only the seed decides the schedule,
    never what happens while it runs."""
    rng = random.Random(seed)
    plan: list[Action] = []
    planned = 0.0
    while True:
        kinds = list(KINDS)
        rng.shuffle(kinds)
        for kind in kinds:
            if plan and planned >= seconds and len(plan) >= len(KINDS):
                return plan
            if kind.startswith("kill") and len(plan) >= len(KINDS) and planned >= seconds * (1.0 - calm):
                continue
            victim = rng.randrange(nodes)
            pause = rng.uniform(1.0, 6.0) * scale
            side: tuple[int, ...] = ()
            if kind == "kill_one":
                hold = rng.uniform(0.5, 8.0) * scale
            elif kind == "kill_all":
                hold = rng.uniform(0.5, 4.0) * scale
            elif kind == "freeze":
                hold = rng.uniform(1.0, 10.0) * scale
            elif kind == "partition":
                side = tuple(sorted(rng.sample(range(nodes), rng.randint(1, nodes // 2))))
                hold = rng.uniform(3.0, 15.0) * scale
            elif kind == "link":
                hold = rng.uniform(1.0, 10.0) * scale
            else:
                hold = 0.0
            if kind in ("freeze", "partition", "link"):
                hold = max(hold, 2.0)  # longer than gone-after (1.5 s): the group notices
            if kind in ("kill_all", "partition"):
                victim = -1
            plan.append(Action(kind, victim, side, hold, pause))
            planned += hold + pause + (3.0 if kind.startswith("kill") else 0.0)  # a restart takes a while


# ------------------------------------------------------------------- the soak


Key = tuple[str, int]  # (source uuid, seq)
Held = tuple[str, Any, float]  # (kind, body, timestamp) as a node's log holds it
Acked = tuple[str, Any, str]  # (kind, body or None for a document operation, the node that acknowledged it)


def _digest(held: Held) -> str:
    raw = json.dumps(list(held), sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(raw).hexdigest()[:16]


@dataclass
class LogProblems:
    missing: list[str]  # acknowledged events a node lacks
    conflicts: list[str]  # (source, seq) pairs held with two contents (sequence reuse)
    wrong: list[str]  # held otherwise than acknowledged
    same_sets: bool  # every node holds the same (source, seq) pairs
    pairs: int  # (source, seq) pairs held anywhere


def log_problems(acked: dict[Key, Acked], logs: dict[str, dict[Key, Held]]) -> LogProblems:
    """Compare the nodes' logs with each other and with what the APIs acknowledged."""
    missing: list[str] = []
    wrong: list[str] = []
    for name, held in logs.items():
        lost = [k for k in acked if k not in held]
        if lost:
            missing.append(f"{name} lacks {len(lost)} (e.g. {lost[:3]})")
        for key, (kind, body, _) in acked.items():
            got = held.get(key)
            if got is not None and (got[0] != kind or (body is not None and got[1] != body)):
                wrong.append(f"{name} holds {key} as {got[:2]!r}, acknowledged as {(kind, body)!r}")
    digests: dict[Key, set[str]] = {}
    for held in logs.values():
        for key, record in held.items():
            digests.setdefault(key, set()).add(_digest(record))
    conflicts = [f"{k}: {len(d)} contents" for k, d in digests.items() if len(d) > 1]
    same = len({frozenset(h) for h in logs.values()}) <= 1
    return LogProblems(missing, conflicts, wrong, same, len(digests))


@dataclass
class Report:
    seed: int
    checks: list[tuple[str, str, bool]] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    kinds_done: set[str] = field(default_factory=set)
    done: int = 0  # chaos actions run
    acked: int = 0
    refused: int = 0
    unanswered: int = 0
    settle_s: float = math.nan

    @property
    def ok(self) -> bool:
        return bool(self.checks) and all(ok for _, _, ok in self.checks)

    def failures(self) -> list[str]:
        return [f"{what}: {measured}" for what, measured, ok in self.checks if not ok]


class Soak:
    """The harness: nodes, the stream, the chaos, the samples, the end checks."""

    def __init__(self, seed: int, nodes: int, tmp: Path, *, rate: float = 10.0, sample_every: float = 3.0,
                 warmup: float = 10.0, say: Callable[[str], None] = say_now) -> None:
        self.seed = seed
        self.net = Namespaces(nodes, prefix="hs", net=97)
        self.tmp = tmp
        self.rate = rate
        self.sample_every = sample_every
        self.warmup = warmup
        self.say = say
        self.nodes: list[SoakNode] = []
        self.t0 = time.monotonic()
        self.report = Report(seed)
        self.acked: dict[Key, Acked] = {}
        self.doc_acked_at: list[float] = []  # when each document operation was acknowledged (since t0)
        self.reused: list[str] = []
        self.trouble: list[str] = []  # nodes that exited on their own or did not start
        self.samples: dict[str, list[Sample]] = {}
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the nodes' process state, between chaos and stream / sampler
        self._threads: list[threading.Thread] = []
        self.stream_rng = random.Random(seed ^ 0x5EED)
        self.planned = 0

    # -- logging
    def log(self, text: str) -> None:
        line = f"  [{time.monotonic() - self.t0:7.1f} s] {text}"
        self.report.actions.append(line)
        self.say(line)

    # -- set-up and tear-down
    def up(self) -> None:
        self.net.up()
        self.nodes = [SoakNode(i, self.net, self.tmp, 5670) for i in range(len(self.net.hosts))]
        for n in self.nodes:
            self.samples[n.name] = []
        self.start_nodes(self.nodes)
        self.t0 = time.monotonic()

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        for n in self.nodes:
            n.close()
        self.net.down()

    def start_nodes(self, nodes: list[SoakNode]) -> None:
        for n in nodes:
            n.start()
        try:
            benchlib.read_api_lines(nodes, timeout=90.0)  # type: ignore[arg-type]  # duck-typed NodeProc
        except (TimeoutError, RuntimeError) as exc:
            self.trouble.append(str(exc)[:300])
            self.log(f"START FAILED: {exc}")

    def wait_full_mesh(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.full_mesh():
                return True
            time.sleep(0.3)
        return False

    def full_mesh(self) -> bool:
        names = {n.name for n in self.nodes}
        try:
            return all(n.up() and n.alive_peers() == names - {n.name} for n in self.nodes)
        except (OSError, ConnectionError, TimeoutError, ValueError):
            return False

    # -- the stream
    def _one_write(self, k: int) -> None:
        rng = self.stream_rng
        node = self.nodes[rng.randrange(len(self.nodes))]
        doc = rng.random() < 0.3
        period, jam = rng.randint(1, 2), 1  # jam 1 of a period: the API refuses a jam past the last + 1
        if doc:
            op = rng.choice([
                {"op": "set", "to": {"period": period, "jam": jam}, "attribute": "duration", "value": str(k)},
                {"op": "add", "to": {"period": period, "jam": jam}, "children": [
                    {"tag": "points", "attrs": {"team": rng.choice(["home", "away"]), "number": str(k % 99),
                                                "points": str(k % 5)}}]},
                {"op": "set", "to": {"path": "venue"}, "text": f"hall {k}"},
            ])
            path, body = "/api/v1/doc/ops", [op]
        else:
            path, body = "/api/v1/events", {"kind": "tick", "body": {"k": k, "by": node.name}}
        with self._lock:
            if not node.up():
                return  # a node whose API is down skips its turn
        try:
            status, data = node.call(path, body, timeout=3.0)
        except (OSError, ConnectionError, TimeoutError):
            self.report.unanswered += 1
            return
        if status != 201:
            self.report.refused += 1
            return
        answer = json.loads(data)
        for item in answer["ops"] if doc else [answer]:
            key = (item["source"], int(item["seq"]))
            value = ("doc", None, node.name) if doc else ("tick", {"k": k, "by": node.name}, node.name)
            old = self.acked.get(key)
            if old is not None and old[:2] != value[:2]:
                self.reused.append(f"{key} acknowledged by {old[2]} as {old[:2]} and by {node.name} as {value[:2]}")
            self.acked[key] = value
            self.report.acked += 1
            if doc:
                self.doc_acked_at.append(time.monotonic() - self.t0)

    def _stream(self) -> None:
        k = 0
        next_at = time.monotonic()
        while not self._stop.is_set():
            self._one_write(k)
            k += 1
            next_at += 1.0 / self.rate
            delay = next_at - time.monotonic()
            if delay > 0:
                self._stop.wait(delay)
            else:
                next_at = time.monotonic()  # behind (a slow answer): do not burst to catch up

    # -- the sampler
    def sample_all(self) -> None:
        names = {n.name for n in self.nodes}
        for n in self.nodes:
            with self._lock:
                if not n.up():
                    continue
                try:
                    rss, fds = n.footprint()
                except OSError:
                    continue
                life = n.life
            try:
                full = n.alive_peers() == names - {n.name}
            except (OSError, ConnectionError, TimeoutError, ValueError):
                full = False
            self.samples[n.name].append(Sample(time.monotonic() - self.t0, life, rss, fds, full))

    def _sampler(self) -> None:
        while not self._stop.wait(self.sample_every):
            self.sample_all()

    def start_background(self) -> None:
        for target, name in ((self._stream, "stream"), (self._sampler, "sampler")):
            t = threading.Thread(target=target, name=name, daemon=True)
            t.start()
            self._threads.append(t)

    def stop_stream(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(30)
        self._threads.clear()

    # -- chaos
    def _sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))  # a fault's planned length, not a wait for a condition

    def run_action(self, a: Action) -> None:
        names = [n.name for n in self.nodes]
        self.log(a.describe(names))
        self.report.kinds_done.add(a.kind)
        self.report.done += 1
        try:
            if a.kind == "kill_one":
                victim = self.nodes[a.victim]
                with self._lock:
                    victim.kill()
                self._sleep(a.hold)
                self.start_nodes([victim])
                self.log(f"  {victim.name} restarted (serving: {bool(victim.api)})")
            elif a.kind == "kill_all":
                with self._lock:
                    for n in self.nodes:
                        n.signal(signal.SIGKILL)
                    for n in self.nodes:
                        n.kill()
                self._sleep(a.hold)
                self.start_nodes(self.nodes)
                self.log(f"  all restarted (serving: {sum(bool(n.api) for n in self.nodes)}/{len(self.nodes)})")
            elif a.kind == "freeze":
                victim = self.nodes[a.victim]
                with self._lock:
                    victim.frozen = True
                    victim.signal(signal.SIGSTOP)
                self._sleep(a.hold)
                self.log(f"  {self._seen(a.victim + 1, a.victim)}")
                with self._lock:
                    victim.signal(signal.SIGCONT)
                    victim.frozen = False
                self.log(f"  {victim.name} thawed")
            elif a.kind == "partition":
                self.net.partition([i + 1 for i in a.side])  # its hosts count from 1
                self._sleep(a.hold)
                self.log(f"  {self._seen(a.side[0], next(i for i in range(len(names)) if i not in a.side))}")
                self.net.heal()
                self.log("  partition healed")
            elif a.kind == "link":
                self.net.link(a.victim + 1, up=False)
                self._sleep(a.hold)
                self.log(f"  {self._seen(a.victim + 1, a.victim)}")
                self.net.link(a.victim + 1, up=True)
                self.log(f"  link of {names[a.victim]} up")
            elif a.kind == "readdress":
                old, new = self.net.readdress(a.victim + 1)
                self.log(f"  {names[a.victim]}: {old} -> {new}")
        finally:
            self.heal_all()
        self._sleep(a.pause)

    def _seen(self, witness: int, target: int) -> str:
        """How node ``witness`` sees node ``target`` now (a line for the log: did the fault show?)."""
        w, t = self.nodes[witness % len(self.nodes)], self.nodes[target]
        try:
            peers = w.get("/api/v1/peers", timeout=3.0)
        except (OSError, ConnectionError, TimeoutError, ValueError):
            return f"{w.name} does not answer"
        return f"{w.name} sees {t.name} {next((p['state'] for p in peers if p['name'] == t.name), 'not in its list of peers')}"

    def heal_all(self) -> None:
        """Whatever happens, no fault outlives its action; a node that exited on
        its own (between actions every node runs) is noted and started again."""
        for n in self.nodes:
            if n.proc is not None and n.proc.poll() is not None:
                if n.api:  # else it did not start, noted then
                    self.trouble.append(f"{n.name} exited by itself with status {n.proc.returncode}")
                    self.log(f"{n.name} EXITED by itself ({n.proc.returncode}): {n.log_tail(300)!r}")
                n.kill()
                self.log(f"starting {n.name} again")
                self.start_nodes([n])
        with contextlib.suppress(subprocess.CalledProcessError):
            self.net.heal()
        for i, n in enumerate(self.nodes):
            with contextlib.suppress(subprocess.CalledProcessError):
                self.net.link(i + 1, up=True)
            if n.frozen:
                n.signal(signal.SIGCONT)
                n.frozen = False

    # -- the end
    def settle(self, timeout: float) -> bool:
        """Wait (deadline ``timeout``) for every node to serve, the full mesh, and
        every node to hold every acknowledged event with no gap."""
        self.heal_all()
        want: dict[str, int] = {}
        for source, seq in self.acked:
            want[source] = max(want.get(source, 0), seq)
        start = time.monotonic()
        deadline = start + timeout
        while time.monotonic() < deadline:
            try:
                if self.full_mesh() and all(self._holds(n, want) for n in self.nodes):
                    self.report.settle_s = time.monotonic() - start
                    return True
            except (OSError, ConnectionError, TimeoutError, ValueError):
                pass
            time.sleep(0.5)
        return False

    @staticmethod
    def _holds(n: SoakNode, want: dict[str, int]) -> bool:
        s = n.get("/api/v1/log/summary")
        vv = s["version_vector"]
        return not s["gaps"] and all(vv.get(src, 0) >= seq for src, seq in want.items())

    @staticmethod
    def read_log(n: SoakNode) -> dict[Key, Held]:
        """Every record the node holds: (source, seq) -> (kind, body, timestamp)."""
        out: dict[Key, Held] = {}
        for source in n.get("/api/v1/log/summary")["version_vector"]:
            after = 0
            while True:
                page = n.get(f"/api/v1/log?source={source}&after={after}&limit=10000", timeout=30)["events"]
                for e in page:
                    out[(e["source"], int(e["seq"]))] = (e["kind"], e["body"], e["timestamp"])
                if len(page) < 10000:
                    break
                after = int(page[-1]["seq"])
        return out

    def check(self, what: str, measured: str, ok: bool) -> None:
        self.report.checks.append((what, measured, ok))
        self.say(f"CHECK {what}: {measured}  {'PASS' if ok else 'FAIL'}")

    def end_checks(self, settled: bool) -> None:
        nodes = self.nodes
        serving = [n for n in nodes if n.up()]
        self.check("every node serving at the end, none exited by itself or failed to start",
                   f"{len(serving)}/{len(nodes)} serving" + "".join(f"; {x}" for x in self.trouble[:4]),
                   len(serving) == len(nodes) and not self.trouble)
        where: dict[str, tuple[str, str]] = {}
        for n in serving:
            with contextlib.suppress(OSError, ConnectionError, TimeoutError, ValueError):
                where[n.name] = (str(n.get("/api/v1/node")["endpoint"]), self.net.ips[n.index])
        moved = [f"{name} at {ep}, its address is {addr}" for name, (ep, addr) in where.items()
                 if not ep.startswith(f"tcp://{addr}:")]
        self.check("every node advertises its current address", "; ".join(moved) if moved else
                   f"{len(where)}/{len(nodes)} ({sum(m > 0 for m in self.net.moves)} moved)",
                   not moved and len(where) == len(nodes))
        full = self.full_mesh()
        self.check("full mesh", "every node sees every other alive" if full else
                   "; ".join(f"{n.name} sees {sorted(self._alive_or_none(n))}" for n in nodes), full)
        # The logs.
        logs: dict[str, dict[Key, Held]] = {}
        for n in serving:
            try:
                logs[n.name] = self.read_log(n)
            except (OSError, ConnectionError, TimeoutError, ValueError) as exc:
                self.say(f"  could not read {n.name}'s log: {exc}")
        p = log_problems(self.acked, logs)
        self.check("every node holds every acknowledged event",
                   f"{len(self.acked)} acknowledged events on {len(logs)}/{len(nodes)} nodes"
                   + "".join(f"; {x}" for x in p.missing[:4]),
                   settled and not p.missing and len(logs) == len(nodes))
        self.check("no sequence reused (one content per (source, seq), acknowledged and held)",
                   f"{p.pairs} (source, seq) pairs; {len(p.conflicts)} with two contents in the logs, "
                   f"{len(self.reused)} acknowledged twice, {len(p.wrong)} differing from what was acknowledged"
                   + "".join(f"; {x}" for x in (p.conflicts + self.reused + p.wrong)[:4]),
                   not p.conflicts and not self.reused and not p.wrong)
        self.check("every node holds the same events", "equal" if p.same_sets else
                   ", ".join(f"{name}: {len(h)}" for name, h in logs.items()), p.same_sets and bool(logs))
        # The documents.
        docs: dict[str, bytes] = {}
        for n in serving:
            with contextlib.suppress(OSError, ConnectionError, TimeoutError):
                status, data = n.call("/api/v1/doc?eids=1", timeout=30)
                if status == 200:
                    docs[n.name] = data
        same = len(docs) == len(nodes) and len(set(docs.values())) == 1
        sizes = sorted({len(d) for d in docs.values()})
        self.check("documents byte-identical", f"{len(docs)}/{len(nodes)} read, {len(set(docs.values()))} distinct, "
                   f"{sizes} octets", same)
        self.check_footprints()

    def _alive_or_none(self, n: SoakNode) -> set[str]:
        try:
            return n.alive_peers()
        except (OSError, ConnectionError, TimeoutError, ValueError):
            return {"(no answer)"}

    def check_footprints(self) -> None:
        self.sample_all()
        grew: list[str] = []
        rows: list[str] = []
        for n in self.nodes:
            samples = [s for s in self.samples[n.name] if s.life == n.life]
            if not samples:
                grew.append(f"{n.name}: no samples of its last run")
                continue
            born = n.started_at - self.t0
            base = next((s for s in samples if s.full_mesh and s.t - born >= self.warmup), None) \
                or next((s for s in samples if s.full_mesh), samples[0])
            last = samples[-1]
            doc_ops = sum(1 for t in self.doc_acked_at if base.t < t <= last.t)
            allowed = base.rss_mib + RSS_SLACK_MIB + doc_ops * DOC_OP_KIB / 1024
            rows.append(f"{n.name}: RSS {base.rss_mib:.0f}->{last.rss_mib:.0f} MiB (<= {allowed:.0f}), "
                        f"fds {base.fds}->{last.fds} over {last.t - base.t:.0f} s, {doc_ops} document operations")
            if last.rss_mib > allowed or last.fds > base.fds + FD_SLACK:
                grew.append(rows[-1])
        for r in rows:
            self.say(f"  {r}")
        self.check(f"RSS and descriptors did not grow (since each node's last start; RSS <= first "
                   f"+ {RSS_SLACK_MIB:g} MiB + {DOC_OP_KIB:g} KiB per document operation, fds <= +{FD_SLACK})",
                   "; ".join(grew) if grew else f"{len(rows)} nodes within bounds", not grew)


def run_soak(seed: int, nodes: int, seconds: float, tmp: Path, *, scale: float = 1.0, quiet_tail: float = 20.0,
             settle: float = 120.0, rate: float = 10.0, sample_every: float = 3.0,
             say: Callable[[str], None] = say_now) -> Report:
    """Run the whole soak; chaos for ``seconds``, then ``quiet_tail`` seconds of
    stream only, then the settle period and the end checks."""
    plan = make_plan(seed, nodes, seconds, scale)
    soak = Soak(seed, nodes, tmp, rate=rate, sample_every=sample_every, say=say)
    say(f"seed {seed}: {nodes} nodes, {len(plan)} chaos actions planned over ~{seconds:.0f} s")
    try:
        soak.up()
        soak.log(f"{nodes} nodes started in namespaces {soak.net.hosts[0]}..{soak.net.hosts[-1]} "
                 f"({soak.net.subnet}.0/24)")
        if not soak.wait_full_mesh(60):
            soak.log("the first mesh did not form within 60 s (carrying on)")
        soak.start_background()
        for action in plan:
            soak.run_action(action)
        soak.log(f"chaos over; {quiet_tail:.0f} s of stream only")
        time.sleep(quiet_tail)  # the quiet tail's planned length
        soak.stop_stream()
        soak.log(f"stream stopped: {soak.report.acked} acknowledged, {soak.report.refused} refused, "
                 f"{soak.report.unanswered} unanswered; settling (deadline {settle:.0f} s)")
        settled = soak.settle(settle)
        soak.log(f"settled in {soak.report.settle_s:.1f} s" if settled else "did NOT settle within the deadline")
        soak.end_checks(settled)
    finally:
        soak.close()
    say(f"seed {seed}")
    return soak.report


@contextlib.contextmanager
def _signals_end_cleanly() -> Iterator[None]:
    """SIGTERM ends the soak like Ctrl-C does, so the namespaces are removed."""
    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt
    old = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="minutes of chaos (default 30)")
    parser.add_argument("--nodes", type=int, default=8, help="nodes, each in its namespace (default 8)")
    parser.add_argument("--seed", type=int, default=None, help="replay this seed's schedule (default: a new one)")
    parser.add_argument("--rate", type=float, default=10.0, help="events + document operations per second (default 10)")
    parser.add_argument("--settle", type=float, default=180.0, help="deadline of the settle period, s (default 180)")
    parser.add_argument("--quick", action="store_true", help="2 minutes of chaos")
    parser.add_argument("--keep", action="store_true", help="keep the nodes' data directories and logs")
    args = parser.parse_args(argv)
    why = missing_tools()
    if why:
        print(f"soak.py: {why}", file=sys.stderr)
        return 2
    if args.quick:
        args.minutes = 2.0
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    seconds = args.minutes * 60
    benchlib.header("Soak with chaos: kills, freezes, partitions, link drops, address changes",
                    seed=seed, nodes=args.nodes, minutes=args.minutes, rate=args.rate)
    tmp = Path(tempfile.mkdtemp(prefix="huddle-soak-"))
    started = time.monotonic()
    try:
        with _signals_end_cleanly():
            report = run_soak(seed, args.nodes, seconds, tmp, quiet_tail=max(20.0, seconds * 0.05),
                              settle=args.settle, rate=args.rate, sample_every=max(3.0, min(10.0, seconds / 100)))
    except KeyboardInterrupt:
        print(f"interrupted; seed {seed}; logs in {tmp}")
        return 130
    benchlib.footer()
    if report.failures() or args.keep:
        print(f"   nodes' data and logs kept in {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    minutes = (time.monotonic() - started) / 60
    print(f"RESULT soak seed {seed}: {'PASS' if report.ok else 'FAIL'} after {minutes:.1f} min, {args.nodes} nodes, "
          f"{report.done} chaos actions of {len(report.kinds_done)} kinds, {report.acked} events acknowledged, "
          f"settled in {report.settle_s:.1f} s"
          + ("" if report.ok else f"; replay: python bench/soak.py --seed {seed} --minutes {args.minutes:g}"
             f" --nodes {args.nodes}"))
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
