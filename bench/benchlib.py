"""Shared helpers of the benchmark scripts: statistics, tables, target lines,
free loopback ports, and ``huddle node`` child processes.

Everything here stays on 127.0.0.1.  The scripts import this module as
``benchlib`` (``python bench/x.py`` puts ``bench/`` on ``sys.path``).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import importlib.util
import json
import math
import os
import platform
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "NodeProc",
    "check",
    "compile_huddle",
    "curve_client",
    "curve_keys",
    "curve_server",
    "footer",
    "free_port",
    "group_key_file",
    "header",
    "http_get",
    "kill_all",
    "mechanism",
    "median",
    "percentile",
    "print_table",
    "read_api_lines",
    "security_of",
    "signed_log",
    "target",
]


# ------------------------------------------------------------------ statistics


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else math.nan


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0..100) of already sorted values, nearest-rank."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100.0 * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


# -------------------------------------------------------------------- printing

_cpu_at_start: list[int] = []


def _cpu_counters() -> list[int]:
    """The machine-wide ``cpu`` line of /proc/stat (user nice system idle iowait irq softirq steal ...)."""
    try:
        with open("/proc/stat") as fh:
            return [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return []


def _git(repo: Path, *args: str) -> str:
    try:
        return subprocess.run(["git", "-C", str(repo), *args], check=False, capture_output=True,
                              text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def code_under_test() -> str:
    """Which huddle is measured: the repository's commit (and whether src/ has
    uncommitted changes), or the directory it was imported from."""
    import huddle

    pkg = Path(huddle.__file__).resolve().parent
    repo = Path(__file__).resolve().parent.parent
    if pkg == repo / "src" / "huddle":
        head = _git(repo, "rev-parse", "--short", "HEAD") or "unknown"
        return f"huddle {huddle.__version__} at commit {head}" + (
            " + uncommitted changes in src/" if _git(repo, "status", "--porcelain", "--", "src") else "")
    return f"huddle {huddle.__version__} from {pkg}"


def header(title: str, **settings: Any) -> None:
    """Print the benchmark's title, the machine and the settings of this run."""
    import zmq

    now = _dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    print(f"== {title}")
    print(
        f"   {now}; {os.cpu_count()} CPUs; Python {platform.python_version()}; "
        f"pyzmq {zmq.__version__} (libzmq {zmq.zmq_version()}); load avg {os.getloadavg()[0]:.2f}"
    )
    print(f"   code: {code_under_test()}")
    if settings:
        print("   " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    _cpu_at_start[:] = _cpu_counters()
    sys.stdout.flush()


def footer() -> None:
    """Print how much CPU time the hypervisor took away (steal) while this benchmark ran."""
    now = _cpu_counters()
    if len(now) >= 8 and len(_cpu_at_start) >= 8:
        delta = [b - a for a, b in zip(_cpu_at_start, now, strict=False)]
        total = sum(delta[:8])
        busy = total - delta[3] - delta[4]
        if total > 0:
            print(f"   machine during this benchmark: CPUs {100.0 * busy / total:.0f}% busy, "
                  f"steal {100.0 * delta[7] / total:.1f}% of CPU time")
    sys.stdout.flush()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    cells = [[str(h) for h in headers]] + [[_fmt(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for n, r in enumerate(cells):
        print("  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))))
        if n == 0:
            print("  " + "  ".join("-" * w for w in widths))
    sys.stdout.flush()


def _fmt(value: object) -> str:
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        if abs(value) >= 1000:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:.1f}"
        return f"{value:.3f}"
    return str(value)


def target(description: str, measured: str, ok: bool) -> bool:
    """Print the final ``TARGET ...  PASS|MISS`` line of one target."""
    print(f"TARGET {description}: {measured}  {'PASS' if ok else 'MISS'}", flush=True)
    return ok


def check(description: str, measured: str, ok: bool) -> bool:
    """Like :func:`target` for a correctness check (``OK``/``FAIL``)."""
    print(f"CHECK {description}: {measured}  {'OK' if ok else 'FAIL'}", flush=True)
    return ok


# ----------------------------------------------------------------------- ports


def free_port(kind: int = socket.SOCK_STREAM) -> int:
    """A port on 127.0.0.1 that is free right now (TCP, or UDP for beacons): below the kernel's
    ephemeral range, where no outgoing connection takes it first (huddle.procs.free_port says
    more).  An older tree measured against this one may not have it: then the kernel's choice."""
    import huddle.procs as procs

    pick = getattr(procs, "free_port", None)
    if pick is not None:
        return int(pick(kind))
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ------------------------------------------------------------------ node procs


_compiled: list[Path] = []


def compile_huddle() -> None:
    """Compile the measured huddle package's bytecode into its ``__pycache__`` once per run
    (``compileall``: only files whose source changed are compiled again).

    Where no bytecode is written as modules are imported (PYTHONDONTWRITEBYTECODE, as in
    this project's sessions), every ``huddle node`` compiled all of huddle's source before
    its api line: 0.2-0.25 s of CPU per node, which a node installed by pip (bytecode
    compiled at install) does not pay, and 64 nodes starting at once on 2 CPUs paid 64
    times.  The children still write nothing; they read what this wrote."""
    if _compiled:
        return
    spec = importlib.util.find_spec("huddle")
    assert spec is not None and spec.submodule_search_locations, "huddle is not importable"
    package = Path(next(iter(spec.submodule_search_locations)))
    done = subprocess.run([sys.executable, "-m", "compileall", "-q", str(package)], check=False,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    _compiled.append(package)
    print(f"   node bytecode: {package} {'compiled once' if done else 'NOT compiled (read-only?)'}", flush=True)


class NodeProc:
    """A ``python -m huddle node`` child on 127.0.0.1 (from bytecode: :func:`compile_huddle`);
    stderr goes to a log file."""

    def __init__(self, name: str, tmp: Path, *extra: str, group: str = "bench") -> None:
        self.name = name
        self.log_path = tmp / f"{name}.log"
        compile_huddle()
        cmd = [
            sys.executable, "-m", "huddle", "node", "--name", name, "--group", group,
            "--data-dir", str(tmp / name), "--interface", "lo", "--api", "127.0.0.1:0",
            "--log-level", "warning", *extra,
        ]
        if not any(flag in extra for flag in ("--group-key", "--join")):
            cmd.append("--open")  # no group file given: measured as an open group, as before
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL)
        self.api = ""
        self.api_at = math.nan  # time.monotonic() when its "api ..." line was read
        self._buf = b""

    def feed(self, data: bytes, now: float) -> None:
        self._buf += data
        while b"\n" in self._buf:
            line, self._buf = self._buf.split(b"\n", 1)
            text = line.decode(errors="replace").strip()
            if text.startswith("api ") and not self.api:
                self.api = text[4:]
                self.api_at = now

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)

    def log_tail(self, n: int = 1500) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


def read_api_lines(nodes: Sequence[NodeProc], timeout: float = 60.0) -> None:
    """Read every node's stdout until each has printed its ``api`` line; each
    line is time-stamped (``api_at``) the moment it is read."""
    sel = selectors.DefaultSelector()
    pending: dict[int, NodeProc] = {}
    for n in nodes:
        if n.api:
            continue
        assert n.proc.stdout is not None
        fd = n.proc.stdout.fileno()
        os.set_blocking(fd, False)
        sel.register(fd, selectors.EVENT_READ)
        pending[fd] = n
    deadline = time.monotonic() + timeout
    try:
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                names = ", ".join(n.name for n in pending.values())
                raise TimeoutError(f"no api line within {timeout} s from: {names}")
            for key, _ in sel.select(min(left, 0.5)):
                fd = int(key.fd)
                node = pending[fd]
                try:
                    data = os.read(fd, 4096)
                except BlockingIOError:
                    continue
                now = time.monotonic()
                if not data:
                    sel.unregister(fd)
                    del pending[fd]
                    raise RuntimeError(f"node {node.name} exited ({node.proc.wait()}): {node.log_tail()}")
                node.feed(data, now)
                if node.api:
                    sel.unregister(fd)
                    del pending[fd]
    finally:
        sel.close()


def kill_all(nodes: Sequence[NodeProc]) -> None:
    for n in nodes:
        n.kill(signal.SIGKILL)
    for n in nodes:
        with contextlib.suppress(subprocess.TimeoutExpired):
            n.proc.wait(10)
        if n.proc.stdout is not None:
            n.proc.stdout.close()


def http_get(api: str, path: str, timeout: float = 5.0) -> Any:
    with urllib.request.urlopen(api + path, timeout=timeout) as resp:
        return json.loads(resp.read())


async def arecv(conn: Any, timeout: float = 60.0) -> Any:
    """Receive from a multiprocessing pipe without blocking the event loop.

    The loop watches the pipe's descriptor: a process waiting for its next word
    does not wake up meanwhile (polling every 2 ms, as it once did, made 500 wake-ups
    a second in a huddle node under measurement that raw pyzmq's processes did not have)."""
    import asyncio

    if conn.poll():
        return conn.recv()
    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()

    def readable() -> None:
        if not ready.done():
            ready.set_result(None)

    fd = conn.fileno()
    loop.add_reader(fd, readable)
    try:
        async with asyncio.timeout(timeout):
            await ready
    except TimeoutError:
        raise TimeoutError("no word from the parent process") from None
    finally:
        loop.remove_reader(fd)
    return conn.recv()


def node_config(name: str, data_dir: Any, seeds: tuple[str, ...] = (), group: str = "bench",
                group_key: str | None = None) -> Any:
    """A benchmark node: loopback only, no beacons, free API port, quiet logs.  ``group_key``:
    the path of a group file (:func:`group_key_file`), as ``huddle node --group-key FILE``
    takes it: the node's mesh is then secured (CurveZMQ and ZAP); None: an open group."""
    from huddle import NodeConfig
    from huddle.security import load_group_file

    secret = None if group_key is None else load_group_file(Path(group_key))
    return NodeConfig().with_overrides(
        name=name, group=group, data_dir=Path(data_dir), api="127.0.0.1:0",
        seed=seeds, beacon=False, interface="lo", log_level="warning", group_secret=secret, open=secret is None,
    )


# -------------------------------------------------------------------- security


def group_key_file(directory: Path, group: str = "bench") -> str:
    """A new secret of ``group`` in ``directory/GROUP.key`` (mode 0600), as ``huddle group new
    GROUP --out FILE`` writes it; its path, for :func:`node_config`'s ``group_key``."""
    from huddle.security import GroupSecret

    path = Path(directory) / f"{group}.key"
    GroupSecret.new(group).save(path)
    return str(path)


def security_of(node: Any) -> dict[str, Any]:
    """What secures a running node's mesh: ``mode`` (open, group, allow-list) and the
    handshakes its ZAP handler admitted (0 in open mode: there is none)."""
    info = node.info()
    stats = info["stats"].get("security") or {}
    return {"mode": info["security"]["mode"], "admitted": int(stats.get("admitted_handshakes", 0))}


def curve_keys() -> dict[str, bytes]:
    """A raw baseline's CurveZMQ keys (``zmq.curve_keypair()``): the server's keypair for the
    ROUTER, the client's for the DEALER.  No ZAP handler is bound for raw sockets, so libzmq
    admits any client that knows the server's public key (one handshake per connection,
    before the clock starts: it does not touch the per-message cost)."""
    import zmq

    if not zmq.has("curve"):
        raise RuntimeError("this libzmq has no CURVE support")
    server_public, server_secret = zmq.curve_keypair()
    client_public, client_secret = zmq.curve_keypair()
    return {"server_public": server_public, "server_secret": server_secret,
            "client_public": client_public, "client_secret": client_secret}


def curve_server(sock: Any, keys: dict[str, bytes] | None) -> None:
    """Make a ROUTER (before it binds) a CURVE server with ``keys``; None: leave it plain."""
    if keys is not None:
        import zmq

        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys["server_secret"])


def curve_client(sock: Any, keys: dict[str, bytes] | None) -> None:
    """Make a DEALER (before it connects) a CURVE client of ``keys``' server; None: leave it plain."""
    if keys is not None:
        import zmq

        sock.setsockopt(zmq.CURVE_SERVERKEY, keys["server_public"])
        sock.setsockopt(zmq.CURVE_PUBLICKEY, keys["client_public"])
        sock.setsockopt(zmq.CURVE_SECRETKEY, keys["client_secret"])


def mechanism(sock: Any) -> str:
    """The security mechanism of a raw socket: ``CURVE`` or ``NULL`` (none)."""
    import zmq

    return {int(zmq.CURVE): "CURVE", int(zmq.NULL): "NULL"}.get(int(sock.getsockopt(zmq.MECHANISM)), "other")


def signed_log(data_dir: Any, source: bytes) -> dict[str, int]:
    """What a node's log (``data_dir/log.sqlite``) holds of ``source``: ``events``, how many of
    them carry the chain hash of a verified signed batch (``chained``; a receiver keeps one only
    after checking the batch's chain and head signature), and the signed ``heads`` kept.
    Read on a read-only connection of its own, while the node runs."""
    import sqlite3

    db = sqlite3.connect(f"file:{Path(data_dir) / 'log.sqlite'}?mode=ro", uri=True)
    try:
        events, chained = db.execute("SELECT count(*), count(chain) FROM events WHERE source=?", (source,)).fetchone()
        (heads,) = db.execute("SELECT count(*) FROM heads WHERE source=?", (source,)).fetchone()
    finally:
        db.close()
    return {"events": int(events), "chained": int(chained), "heads": int(heads)}


def reap(*procs: Any) -> None:
    """Join child processes; kill any still running after 30 s."""
    for p in procs:
        if p is None:
            continue
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join()


def peak_rss_mb(pid: int | str = "self") -> float:
    """Peak resident set (VmHWM) of process ``pid`` (default: this one), in MB."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return math.nan


def await_raw_sender(router: Any, stall: float) -> None:
    """Raw baselines: wait for the sender's hello, tell it to go, then time out
    receives after ``stall`` seconds of silence."""
    import zmq

    ident, _, _ = router.recv_multipart()  # the sender's hello: it is connected
    router.send_multipart([ident, b"GO", b""])
    router.setsockopt(zmq.RCVTIMEO, int(stall * 1000))


async def wait_done_or_stalled(done: Any, count: Any, first: float, stall: float) -> float | None:
    """Wait for the event ``done``; give up when ``count()`` has not moved for
    ``stall`` seconds (``first`` for the first wait, which includes start-up).
    Returns None when done, else the estimated time of the last progress."""
    import asyncio

    seen, patience = -1, first
    while not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), patience)
        except TimeoutError:
            if count() == seen:
                return time.monotonic() - patience
            seen, patience = count(), stall
    return None

