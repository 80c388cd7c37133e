#!/usr/bin/env python3
"""A late joiner catching up a long history: 1 000 000 events by default.

Setup (not timed): a provider data directory is filled with N events of one
source, the provider's own UUID (its ``node-id`` file, the id its ``node.key``
gives, as in any data directory made today), written straight through
``SqliteStore.stage`` / ``commit`` in batches of 10 000.  It is then as if the
provider had emitted them itself, but unsigned: at its first start the
provider chains and signs them (a head every 500 records, as a log from before
signed heads is migrated; counted in its start time, not in the rate), and
serves them signed; the joiner verifies every batch.  The same directory
serves every repetition.

Per repetition, three ways to copy the same N records, in turn:

* huddle:     a provider ``Node`` process is started on that directory.  Then
              a fresh joiner ``Node`` process (empty directory, seeded to the
              provider, no beacons) starts and catches up through GSIP asks
              and windowed XMSG streaming.  The clock starts just before the
              joiner's ``node.run()`` and stops when its ``LogAppended``
              listener has counted N records (they are committed before they
              are announced).  Afterwards the joiner's ``log_summary()`` must
              show N events and no gaps.  Peak RSS is read from ``VmHWM`` in
              ``/proc/<pid>/status`` of the joiner and of the provider
              process, by the parent, before they stop.
* raw stream: the same shape without huddle: a sender process reads the
              provider's file with the query the node uses (``store.read``,
              2000 rows at a time), encodes the rows as huddle's XMSG frames
              (500 records each) and pushes them through a blocking DEALER;
              a receiver process (ROUTER) parses each XMSG and inserts its
              records into a fresh file with huddle's schema (WAL,
              synchronous=NORMAL, one transaction per message).  ZeroMQ's
              high-water marks are the only flow control.
* sqlite copy: one process reads the provider's file in batches of 2000 with
              the same query and inserts them into a fresh file with huddle's
              schema (one transaction per 500 rows).  No network, no JSON.

Figures are medians over ``--reps`` repetitions; ratios are medians of the
per-repetition ratios.  Targets (from the issues): >= 100 000 events/s,
verified (issue 22), and a joiner peak RSS below 300 MB.  After each run the
joiner reports, from its own log file, how many of the provider's records it
holds with a verified chain hash and under how many signed heads; the CHECK
line says whether every record came that way.

``--secure``: both nodes also hold a group secret (CurveZMQ with ZAP on the
mesh), and the raw stream runs with CURVE (a server keypair on the ROUTER, a
client keypair on the DEALER, no ZAP handler).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import multiprocessing as mp
import os
import resource
import shutil
import sqlite3
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

KIND = "bench.tick"
GROUP = "bench"
PER_MSG = 500  # huddle's ReplicationTiming.batch_records: records per XMSG
READ_ROWS = 2000  # huddle reads batch_records * 4 rows at a time when streaming
SNDHWM = 10_000  # huddle's DEALER send high-water mark
RCVHWM = 100_000  # huddle's ROUTER receive high-water mark
STALL = 15.0  # seconds without progress after which the joiner gives up
TARGET_RATE = 100_000.0  # events/s
TARGET_RSS_MB = 300.0  # joiner peak RSS
RAW_KEYS = ("rate", "recv_rss", "send_rss", "recv_cpu_us", "send_cpu_us")


def body_of(i: int) -> dict[str, Any]:
    """The JSON body of event ``i``: about 70 octets of canonical JSON."""
    return {"jam": i // 1000, "skater": f"{i % 97:02d}", "code": "X", "i": i, "note": "penalty box"}


def canonical_body(i: int) -> str:
    """``canonical_json(body_of(i))``, formatted directly (the setup writes a million of them)."""
    return f'{{"code":"X","i":{i},"jam":{i // 1000},"note":"penalty box","skater":"{i % 97:02d}"}}'


def cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _open_db(path: Path) -> sqlite3.Connection:
    from huddle.log import store

    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(store._SCHEMA)  # the node's own schema text
    return db


_READ_SQL = "SELECT seq, ts, kind, body, hops FROM events WHERE grp=? AND source=? AND seq>? ORDER BY seq LIMIT ?"
_INSERT_SQL = ("INSERT OR IGNORE INTO events (grp, source, seq, ts, kind, body, hops, received_at, received_from) "
               "VALUES (?,?,?,?,?,?,?,?,?)")  # no digest: the baselines copy rows, huddle also digests them


# ------------------------------------------------------------------------- setup


def prepare(data_dir: Path, n: int) -> tuple[bytes, float]:
    """Fill ``data_dir`` as a node that emitted N events; returns its UUID and the seconds taken."""
    from huddle.ids import NodeId
    from huddle.log import SqliteStore
    from huddle.log.datadir import DataDir
    from huddle.protocol.logstore import canonical_json
    from huddle.security import load_or_create_identity, node_id_for
    from huddle.wire import LogRecord

    for q in (1, 97, 1000, n):
        assert canonical_body(q) == canonical_json(body_of(q))
    t0 = time.monotonic()
    data_dir.mkdir(parents=True, exist_ok=True)
    uuid: NodeId = DataDir(data_dir).node_id(new=node_id_for(load_or_create_identity(data_dir).public_key))
    store = SqliteStore(data_dir / "log.sqlite", GROUP)
    stamp = time.time()
    step = 10_000
    for first in range(1, n + 1, step):
        records = [LogRecord(uuid, q, stamp + q * 1e-5, KIND, canonical_body(q), 0)
                   for q in range(first, min(n, first + step - 1) + 1)]
        store.stage(records, None, stamp)
        store.commit()
    store.close()
    return bytes(uuid), time.monotonic() - t0


# ------------------------------------------------------------------------ huddle


def node_provider(data_dir: str, group_key: str | None, conn: Connection) -> None:
    asyncio.run(_node_provider(Path(data_dir), group_key, conn))


async def _node_provider(data_dir: Path, group_key: str | None, conn: Connection) -> None:
    from huddle import Node

    t0 = time.monotonic()
    node = Node(benchlib.node_config("provider", data_dir, group=GROUP, group_key=group_key))
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    # rechained: the setup's unsigned records it chained and signed at this start (the first run's)
    conn.send(("endpoint", node.mesh.endpoint.removeprefix("tcp://"), time.monotonic() - t0, node.replicator.held(),
               node.replicator.signer is not None, node.replicator.stats.rechained))
    cpu0 = cpu_seconds()
    await benchlib.arecv(conn, timeout=600)  # "stop"
    conn.send(("cpu", cpu_seconds() - cpu0))
    node.stop()
    await task


def node_joiner(data_dir: str, n: int, seed: str, source: bytes, group_key: str | None, conn: Connection) -> None:
    asyncio.run(_node_joiner(Path(data_dir), n, seed, source, group_key, conn))


async def _node_joiner(data_dir: Path, n: int, seed: str, source: bytes, group_key: str | None,
                       conn: Connection) -> None:
    from huddle import Node
    from huddle.protocol import PeerJoined
    from huddle.protocol.events import LogAppended

    node = Node(benchlib.node_config("joiner", data_dir, (seed,), group=GROUP, group_key=group_key))
    count = 0
    t_admitted = math.nan
    t_last = math.nan
    done = asyncio.Event()
    progress: list[tuple[float, int]] = []  # (time, count) about every 100 000 records

    def on_event(event: object) -> None:
        nonlocal count, t_admitted, t_last
        if isinstance(event, LogAppended):
            before = count
            count += event.count()
            if count // 100_000 != before // 100_000:
                progress.append((time.monotonic(), count))
            if count >= n:
                t_last = time.monotonic()
                done.set()
        elif isinstance(event, PeerJoined) and math.isnan(t_admitted):
            t_admitted = time.monotonic()

    node.add_listener(on_event)
    await benchlib.arecv(conn)  # "go"
    cpu0 = cpu_seconds()
    t0 = time.monotonic()
    task = asyncio.create_task(node.run())
    await benchlib.wait_done_or_stalled(done, lambda: count, 60.0, STALL)
    cpu = cpu_seconds() - cpu0
    summary = node.log_summary()
    # How the provider's records came: each with a verified chain hash, under signed heads.
    signed = benchlib.signed_log(data_dir, source) | {"forgeries": summary["stats"]["forgeries"]}
    conn.send(("done", count, t0, t_admitted, t_last, cpu, summary["events"], bool(summary["gaps"]),
               summary["version_vector"], progress, signed, benchlib.security_of(node)))
    await benchlib.arecv(conn, timeout=120)  # "stop": the parent reads our VmHWM first
    node.stop()
    await task


def run_huddle(provider_dir: Path, tmp: Path, n: int, source: bytes, group_key: str | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    p_parent, p_child = ctx.Pipe()
    provider = ctx.Process(target=node_provider, args=(str(provider_dir), group_key, p_child))
    provider.start()
    j_dir = tmp / "joiner"
    shutil.rmtree(j_dir, ignore_errors=True)
    joiner = None
    try:
        if not p_parent.poll(120):
            raise TimeoutError("the provider did not start")
        _, seed, provider_start, provider_held, provider_signs, rechained = p_parent.recv()
        j_parent, j_child = ctx.Pipe()
        joiner = ctx.Process(target=node_joiner, args=(str(j_dir), n, seed, source, group_key, j_child))
        joiner.start()
        j_parent.send("go")  # read once the joiner has imported huddle: the clock starts after that
        if not j_parent.poll(600):
            raise TimeoutError("the joiner did not finish")
        done = j_parent.recv()
        joiner_rss = benchlib.peak_rss_mb(joiner.pid or 0)
        provider_rss = benchlib.peak_rss_mb(provider.pid or 0)
        j_parent.send("stop")
        p_parent.send("stop")
        _, provider_cpu = p_parent.recv() if p_parent.poll(60) else (None, math.nan)
    finally:
        benchlib.reap(joiner, provider)
    _, count, t0, t_admitted, t_last, cpu, held, gaps, vv, progress, signed, security = done
    complete = count >= n and held == n and not gaps
    elapsed = t_last - t0
    return {
        "complete": complete,
        "count": count,
        "held": held,
        "gaps": gaps,
        "vv": vv,
        "rate": n / elapsed if complete else math.nan,
        "elapsed": elapsed,
        "admitted_after": t_admitted - t0,
        "joiner_rss": joiner_rss,
        "provider_rss": provider_rss,
        "joiner_cpu_us": cpu / n * 1e6,
        "provider_cpu_us": provider_cpu / n * 1e6,
        "provider_start": provider_start,
        "provider_held": provider_held,
        "progress": [(t - t0, c) for t, c in progress],
        "provider_signs": provider_signs,
        "rechained": rechained,
        "signed": signed,
        "security": security,
    }


# --------------------------------------------------------------------------- raw


def raw_receiver(db_path: str, n: int, curve: dict[str, bytes] | None, conn: Connection) -> None:
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    benchlib.curve_server(router, curve)
    router.setsockopt(zmq.RCVHWM, RCVHWM)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    db = _open_db(Path(db_path))
    conn.send(("port", port))
    router.setsockopt(zmq.RCVTIMEO, int(STALL * 1000))
    count = 0
    t0 = math.nan
    cpu0 = cpu_seconds()
    with contextlib.suppress(zmq.Again):
        while count < n:
            sender, _, body = router.recv_multipart()
            if math.isnan(t0):
                t0 = time.monotonic()
            rows = json.loads(body)["records"]
            now = time.time()
            db.execute("BEGIN")
            db.executemany(_INSERT_SQL, [(GROUP, bytes.fromhex(s), q, ts, k, b, h + 1, now, sender)
                                         for s, q, ts, k, b, h in rows])
            db.execute("COMMIT")
            count += len(rows)
    t_last = time.monotonic()
    conn.send(("done", count, t_last, cpu_seconds() - cpu0, benchlib.mechanism(router)))
    conn.recv()  # "stop": the parent reads our VmHWM first
    db.close()
    router.close()
    ctx.term()


def raw_sender(db_path: str, source: bytes, port: int, curve: dict[str, bytes] | None, conn: Connection) -> None:
    import zmq

    from huddle.ids import NodeId
    from huddle.wire import LogRecord, Xmsg, encode_parts

    src = NodeId(source)
    db = sqlite3.connect(db_path, isolation_level=None)
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    benchlib.curve_client(dealer, curve)
    dealer.setsockopt(zmq.IDENTITY, os.urandom(16))
    dealer.setsockopt(zmq.SNDHWM, SNDHWM)
    dealer.setsockopt(zmq.LINGER, -1)
    dealer.connect(f"tcp://127.0.0.1:{port}")
    conn.send(("ready",))
    conn.recv()  # "go"
    cpu0 = cpu_seconds()
    t0 = time.monotonic()
    after = 0
    send = dealer.send_multipart
    while True:
        rows = db.execute(_READ_SQL, (GROUP, source, after, READ_ROWS)).fetchall()
        if not rows:
            break
        records = [LogRecord(src, q, ts, kind, body, hops) for q, ts, kind, body, hops in rows]
        for i in range(0, len(records), PER_MSG):
            send(encode_parts(Xmsg(src, tuple(records[i:i + PER_MSG]))))
        after = rows[-1][0]
    conn.send(("sent", t0, cpu_seconds() - cpu0))
    conn.recv()  # "stop"
    dealer.close()
    ctx.term()
    db.close()


def run_raw(provider_dir: Path, source: bytes, tmp: Path, n: int, curve: dict[str, bytes] | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    target_db = tmp / "raw.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(str(target_db) + suffix).unlink(missing_ok=True)
    r_parent, r_child = ctx.Pipe()
    receiver = ctx.Process(target=raw_receiver, args=(str(target_db), n, curve, r_child))
    receiver.start()
    s_parent, s_child = ctx.Pipe()
    sender = None
    try:
        _, port = r_parent.recv()
        sender = ctx.Process(target=raw_sender, args=(str(provider_dir / "log.sqlite"), source, port, curve, s_child))
        sender.start()
        s_parent.recv()  # ready
        s_parent.send("go")
        _, t0, send_cpu = s_parent.recv()
        if not r_parent.poll(600):
            raise TimeoutError("the raw receiver did not finish")
        _, count, t_last, recv_cpu, security = r_parent.recv()
        recv_rss = benchlib.peak_rss_mb(receiver.pid or 0)
        send_rss = benchlib.peak_rss_mb(sender.pid or 0)
        r_parent.send("stop")
        s_parent.send("stop")
    finally:
        benchlib.reap(sender, receiver)
    return {
        "complete": count >= n,
        "rate": n / (t_last - t0) if count >= n else math.nan,
        "recv_rss": recv_rss,
        "send_rss": send_rss,
        "recv_cpu_us": recv_cpu / n * 1e6,
        "send_cpu_us": send_cpu / n * 1e6,
        "security": security,
    }


# ------------------------------------------------------------------------ sqlite


def sqlite_copy(provider_dir: Path, source: bytes, tmp: Path, n: int) -> dict[str, Any]:
    target_db = tmp / "copy.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(str(target_db) + suffix).unlink(missing_ok=True)
    src = sqlite3.connect(provider_dir / "log.sqlite", isolation_level=None)
    dst = _open_db(target_db)
    frm = os.urandom(16)
    count = 0
    after = 0
    t0 = time.monotonic()
    while True:
        rows = src.execute(_READ_SQL, (GROUP, source, after, READ_ROWS)).fetchall()
        if not rows:
            break
        now = time.time()
        for i in range(0, len(rows), PER_MSG):
            dst.execute("BEGIN")
            dst.executemany(_INSERT_SQL, [(GROUP, source, q, ts, kind, body, hops + 1, now, frm)
                                          for q, ts, kind, body, hops in rows[i:i + PER_MSG]])
            dst.execute("COMMIT")
        count += len(rows)
        after = rows[-1][0]
    elapsed = time.monotonic() - t0
    src.close()
    dst.close()
    return {"complete": count >= n, "rate": count / elapsed}


# ------------------------------------------------------------------------ driver


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000, help="history length (default 1000000)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    parser.add_argument("--no-raw", action="store_true", help="skip the raw pyzmq stream baseline")
    parser.add_argument("--quick", action="store_true", help="2 repetitions of 200000 events, no raw stream")
    parser.add_argument("--keep", metavar="DIR", help="prepare the provider in DIR and keep it (reused if present)")
    parser.add_argument("--secure", action="store_true",
                        help="nodes with a group secret (CurveZMQ + ZAP), the raw stream with CURVE")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.events, args.no_raw = 2, 200_000, True
    n = args.events
    secure = ", CurveZMQ" if args.secure else ""
    benchlib.header(f"Late joiner catch-up (verified{secure}): a fresh node fetches the whole history from one provider",
                    events=n, reps=args.reps, secure=args.secure)
    ok = True
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp_name:
        tmp = Path(tmp_name)
        curve = benchlib.curve_keys() if args.secure else None
        group_key = benchlib.group_key_file(tmp) if args.secure else None
        provider_dir = Path(args.keep) if args.keep else tmp / "provider"
        if args.keep and (provider_dir / "log.sqlite").exists():
            from huddle.log.datadir import DataDir

            source = bytes(DataDir(provider_dir).node_id())
            print(f"   reusing the provider directory {provider_dir}")
        else:
            source, took = prepare(provider_dir, n)
            size = sum(f.stat().st_size for f in provider_dir.iterdir() if f.is_file()) / 1e6
            print(f"   setup: {n:,} events written through SqliteStore in {took:.1f} s ({size:.0f} MB on disk)")
        sys.stdout.flush()

        runs: dict[str, list[dict[str, Any]]] = {"huddle": [], "raw": [], "sqlite": []}
        rows: list[list[object]] = []
        for rep in range(1, args.reps + 1):
            s = sqlite_copy(provider_dir, source, tmp, n)
            runs["sqlite"].append(s)
            r = run_raw(provider_dir, source, tmp, n, curve) if not args.no_raw else dict.fromkeys(RAW_KEYS, math.nan)
            runs["raw"].append(r)
            h = run_huddle(provider_dir, tmp, n, source, group_key)
            runs["huddle"].append(h)
            if not h["complete"]:
                print(f"  run {rep}: the joiner held {h['held']:,} of {n:,} events (gaps: {h['gaps']})")
                ok = False
            if h["provider_held"] != n:
                print(f"  run {rep}: the provider holds {h['provider_held']:,} events, not {n:,} (--keep with other --events?)")
                ok = False
            rows.append([f"run {rep}", s["rate"], r["rate"], h["rate"], h["elapsed"], h["rate"] / s["rate"],
                         h["rate"] / r["rate"], h["joiner_rss"], h["provider_rss"], r["recv_rss"],
                         h["joiner_cpu_us"], h["provider_cpu_us"]])
            marks = ", ".join(f"{c // 1000}k@{t:.1f}s" for t, c in h["progress"][:: max(1, len(h["progress"]) // 5)])
            print(f"  run {rep}: admitted after {h['admitted_after'] * 1000:.0f} ms; provider started in "
                  f"{h['provider_start']:.2f} s holding {h['provider_held']:,}; progress {marks}", flush=True)
            sig = h["signed"]
            print(f"  run {rep}: signed: the provider signs: {'yes' if h['provider_signs'] else 'no'} (it chained and "
                  f"signed {h['rechained']:,} setup records at this start); the joiner holds {sig['chained']:,} of "
                  f"{sig['events']:,} records with a verified chain hash, under {sig['heads']:,} signed heads; forged "
                  f"batches {sig['forgeries']}; security: joiner {h['security']['mode']}"
                  f"{'' if args.no_raw else ', raw stream ' + r['security']}", flush=True)

        def med(variant: str, key: str) -> float:
            return benchlib.median([x[key] for x in runs[variant]])

        ratio_sql = benchlib.median([h["rate"] / s["rate"] for h, s in zip(runs["huddle"], runs["sqlite"], strict=True)])
        ratio_raw = benchlib.median([h["rate"] / r["rate"] for h, r in zip(runs["huddle"], runs["raw"], strict=True)])
        rate = med("huddle", "rate")
        joiner_rss = max(x["joiner_rss"] for x in runs["huddle"])
        provider_rss = max(x["provider_rss"] for x in runs["huddle"])
        rows.append(["median", med("sqlite", "rate"), med("raw", "rate"), rate, med("huddle", "elapsed"), ratio_sql,
                     ratio_raw, med("huddle", "joiner_rss"), med("huddle", "provider_rss"), med("raw", "recv_rss"),
                     med("huddle", "joiner_cpu_us"), med("huddle", "provider_cpu_us")])
        print()
        benchlib.print_table(["", "sqlite copy ev/s", "raw stream ev/s", "huddle ev/s", "huddle s", "huddle/sqlite",
                              "huddle/raw", "joiner RSS MB", "provider RSS MB", "raw recv RSS MB",
                              "joiner CPU us/ev", "provider CPU us/ev"], rows)
        if not args.no_raw:
            print(f"  raw stream CPU us/event: sender {med('raw', 'send_cpu_us'):.1f}, receiver {med('raw', 'recv_cpu_us'):.1f}; "
                  f"peak RSS: sender {med('raw', 'send_rss'):.0f} MB, receiver {med('raw', 'recv_rss'):.0f} MB "
                  "(no flow control but ZeroMQ's high-water marks)")
        print("  (RSS: peak, VmHWM; ratios: median of the per-repetition ratios; CPU: user+system, all threads)")
    benchlib.footer()
    print()
    complete = all(x["complete"] for x in runs["huddle"])
    ok &= benchlib.check(f"the joiner holds all {n:,} events, no gaps", "yes" if complete else "no", complete)
    verified = all(x["provider_signs"] and x["signed"]["chained"] == x["signed"]["events"] == n
                   and x["signed"]["heads"] > 0 and x["signed"]["forgeries"] == 0 for x in runs["huddle"])
    ok &= benchlib.check(f"the joiner verified all {n:,} events (chain hashes, signed heads, no forgery)",
                         "yes" if verified else "no", verified)
    if args.secure:
        modes = sorted({x["security"]["mode"] for x in runs["huddle"]})
        raw_modes = sorted({x["security"] for x in runs["raw"]} if not args.no_raw else {"CURVE"})
        ok &= benchlib.check("the runs were secured", f"joiner {', '.join(modes)}"
                             f"{'' if args.no_raw else ', raw stream ' + ', '.join(raw_modes)}",
                             modes == ["group"] and raw_modes == ["CURVE"])
    vs_raw = "" if args.no_raw else f", {ratio_raw:.2f}x the raw stream{' with CURVE' if args.secure else ''}"
    benchlib.target(f"catch-up of {n:,} events (verified{secure}) >= {TARGET_RATE:,.0f} events/s",
                    f"{rate:,.0f} events/s ({ratio_sql:.2f}x the SQLite copy{vs_raw})", rate >= TARGET_RATE)
    benchlib.target(f"joiner peak RSS < {TARGET_RSS_MB:.0f} MB", f"{joiner_rss:.0f} MB (largest of {args.reps}; "
                    f"provider {provider_rss:.0f} MB)", joiner_rss < TARGET_RSS_MB)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
