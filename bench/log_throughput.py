#!/usr/bin/env python3
"""Replicated-log throughput: events originated on one node and persisted by
2 and by 8 peers, against raw pyzmq and against an SQLite insert loop.

Every node and every raw endpoint is its own process on 127.0.0.1.

* huddle:  an origin ``Node`` and K peer ``Node``s (no beacons; the peers are
           seeded to the origin and meet each other through it).  Once the
           mesh is complete, the origin calls ``node.emit_many(batch)`` with
           ``--batch`` events per call from an asyncio task, with
           ``asyncio.sleep(0)`` between calls, until it has emitted N events.
           Each peer counts the records of ``LogAppended`` events in a
           listener.  ``LogAppended`` is announced after the store's commit,
           so a counted record is persisted.
* raw:     one sender process with K DEALERs, one per receiver process (a
           ROUTER each).  It sends the same frames huddle sends: the XMSG
           messages of the same N records, 500 records per message (huddle's
           ``batch_records``), encoded before the clock starts.  Each
           receiver counts messages with a blocking ``recv_multipart``; it
           neither parses nor stores them.
* raw+store (diagnostic): like raw, but each receiver also parses the XMSG
           JSON and inserts its records into its own SQLite file (huddle's
           schema, WAL, synchronous=NORMAL, one transaction per message).
           That is the least work a receiver must do; it shows how much of
           huddle's cost is its own.
* sqlite:  one process inserts the same N rows into a fresh file with
           huddle's schema (WAL, synchronous=NORMAL), ``executemany`` and one
           commit per batch of ``--batch`` rows.

The rate is N / (time the slowest peer held the last event - time the origin
started), on the machine-wide monotonic clock.  For each peer count the
variants run in turn within one repetition (sqlite loop, raw, raw+store,
huddle), so they see the same machine; the figures are medians over
``--reps`` repetitions, and ratios are medians of the per-repetition ratios.
CPU time per event of the origin and of one peer (the median peer; user +
system, all threads) tells which side limits the rate.

With 8 peers, 9 processes share this machine's CPUs: that figure measures the
total CPU cost of replication more than any one node's speed.  The script
prints that budget (origin + K peers, CPU per event) and the rate it allows.

The log is signed (issue 22): every node's id is the one its key gives, so the
origin chains its records and signs a head per batch, and each peer checks the
chain and the signature before it keeps a batch.  After each run every peer
reports, from its own log file, how many of the origin's records it holds with
a verified chain hash and how many signed heads; the CHECK line says whether
all of them came that way (and no batch was refused as forged).

``--secure``: the nodes also hold a group secret (CurveZMQ with ZAP on the
mesh), and the raw and raw+store baselines run with CURVE (a server keypair on
each ROUTER, a client keypair on the DEALERs, no ZAP handler).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import multiprocessing as mp
import os
import resource
import sqlite3
import sys
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import benchlib

KIND = "bench.tick"
PER_MSG = 500  # huddle's ReplicationTiming.batch_records: records per XMSG
SNDHWM = 10_000  # huddle's DEALER send high-water mark (zmq_transport.py)
RCVHWM = 100_000  # huddle's ROUTER receive high-water mark
STALL = 10.0  # seconds without progress after which a receiver gives up
TARGET_RATE = 50_000.0  # events/s replicated to 2 peers


_INSERT_SQL = ("INSERT OR IGNORE INTO events (grp, source, seq, ts, kind, body, hops, received_at, received_from) "
               "VALUES (?,?,?,?,?,?,?,?,?)")  # columns named: the node's schema has more (digest, chain)


def body_of(i: int) -> dict[str, Any]:
    """The JSON body of event ``i``: about 70 octets of canonical JSON."""
    return {"jam": i // 1000, "skater": f"{i % 97:02d}", "code": "X", "i": i, "note": "penalty box"}


def cpu_seconds() -> float:
    """CPU time of this process so far, all threads (ZeroMQ's I/O thread too)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def _schema() -> str:
    from huddle.log import store

    return store._SCHEMA  # the node's own schema text, so the baselines match it


def _open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=NORMAL")
    db.executescript(_schema())
    return db


def _rows(n: int, source: bytes) -> list[tuple[Any, ...]]:
    """The rows huddle stores for events 1..n of ``source``, as a peer stores them."""
    from huddle.protocol.logstore import canonical_json

    now = time.time()
    return [("bench", source, i, now, KIND, canonical_json(body_of(i)), 1, now, source) for i in range(1, n + 1)]


def xmsg_frames(n: int) -> list[list[bytes]]:
    """The XMSG messages (type, body) huddle's origin sends for events 1..n."""
    from huddle.ids import NodeId
    from huddle.protocol.logstore import canonical_json
    from huddle.wire import LogRecord, Xmsg, encode_parts

    source = NodeId(os.urandom(16))
    now = time.time()
    records = [LogRecord(source, i, now, KIND, canonical_json(body_of(i)), 0) for i in range(1, n + 1)]
    return [encode_parts(Xmsg(source, tuple(records[i:i + PER_MSG]))) for i in range(0, n, PER_MSG)]


# --------------------------------------------------------------------------- raw


def raw_receiver(n_msgs: int, store: bool, tmp: str, idx: int, curve: dict[str, bytes] | None,
                 conn: Connection) -> None:
    import zmq

    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    benchlib.curve_server(router, curve)
    router.setsockopt(zmq.RCVHWM, RCVHWM)
    router.setsockopt(zmq.LINGER, 0)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    db = _open_db(Path(tmp) / f"raw{idx}.sqlite") if store else None
    conn.send(("port", port))
    benchlib.await_raw_sender(router, STALL)
    cpu0 = cpu_seconds()
    count = 0
    events = 0
    recv = router.recv_multipart
    sql = _INSERT_SQL
    try:
        while count < n_msgs:
            frames = recv()
            count += 1
            if db is not None:
                sender = frames[0]
                rows = json.loads(frames[2])["records"]
                now = time.time()
                db.execute("BEGIN")
                db.executemany(sql, [("bench", bytes.fromhex(s), q, ts, k, b, h + 1, now, sender)
                                     for s, q, ts, k, b, h in rows])
                db.execute("COMMIT")
                events += len(rows)
    except zmq.Again:
        pass
    t_last = time.monotonic()
    conn.send(("done", count, t_last, cpu_seconds() - cpu0, events, benchlib.mechanism(router)))
    if db is not None:
        db.close()
    router.close()
    ctx.term()


def raw_sender(n: int, ports: list[int], curve: dict[str, bytes] | None, conn: Connection) -> None:
    import zmq

    messages = xmsg_frames(n)
    ctx = zmq.Context()
    dealers = []
    for port in ports:
        dealer = ctx.socket(zmq.DEALER)
        benchlib.curve_client(dealer, curve)
        dealer.setsockopt(zmq.IDENTITY, os.urandom(16))
        dealer.setsockopt(zmq.SNDHWM, SNDHWM)
        dealer.setsockopt(zmq.LINGER, -1)
        dealer.connect(f"tcp://127.0.0.1:{port}")
        dealer.send_multipart([b"HELO", b""])
        dealers.append(dealer)
    for dealer in dealers:
        dealer.recv_multipart()
    conn.send(("ready",))
    conn.recv()  # "go"
    cpu0 = cpu_seconds()
    t0 = time.monotonic()
    for frames in messages:
        for dealer in dealers:
            dealer.send_multipart(frames)
    t_end = time.monotonic()
    conn.send(("sent", t0, t_end))
    conn.recv()  # "stop"
    conn.send(("cpu", cpu_seconds() - cpu0, benchlib.peak_rss_mb()))
    for dealer in dealers:
        dealer.close()
    ctx.term()


# ------------------------------------------------------------------------ huddle


async def _full_mesh(node: Any, k: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while sum(p.state == "alive" for p in node.peers()) < k:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{node.config.name}: mesh not complete after {timeout} s")
        await asyncio.sleep(0.005)


def node_peer(idx: int, n: int, k: int, tmp: str, seed: str, origin: bytes, group_key: str | None,
              conn: Connection) -> None:
    asyncio.run(_node_peer(idx, n, k, tmp, seed, origin, group_key, conn))


async def _node_peer(idx: int, n: int, k: int, tmp: str, seed: str, origin: bytes, group_key: str | None,
                     conn: Connection) -> None:
    from huddle import Node
    from huddle.protocol.events import LogAppended

    data_dir = Path(tmp) / f"peer{idx}"
    node = Node(benchlib.node_config(f"peer{idx}", data_dir, (seed,), group_key=group_key))
    count = 0
    t_last = 0.0
    done = asyncio.Event()

    def on_event(event: object) -> None:
        nonlocal count, t_last
        if isinstance(event, LogAppended):
            count += event.count()
            if count >= n:
                t_last = time.monotonic()
                done.set()

    node.add_listener(on_event)
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    await _full_mesh(node, k)  # the origin and the K-1 other peers
    conn.send(("ready",))
    cpu0 = cpu_seconds()
    stalled_at = await benchlib.wait_done_or_stalled(done, lambda: count, 60.0, STALL)
    if stalled_at is not None:
        t_last = stalled_at
    summary = node.log_summary()
    # How the origin's records came: each with a verified chain hash, under signed heads.
    signed = benchlib.signed_log(data_dir, origin) | {"forgeries": summary["stats"]["forgeries"]}
    conn.send(("done", count, t_last, cpu_seconds() - cpu0, summary["events"], signed, benchlib.security_of(node)))
    await benchlib.arecv(conn, timeout=300)  # "stop"
    conn.send(("rss", benchlib.peak_rss_mb()))
    node.stop()
    await task


def node_origin(n: int, k: int, batch: int, tmp: str, group_key: str | None, conn: Connection) -> None:
    asyncio.run(_node_origin(n, k, batch, tmp, group_key, conn))


async def _node_origin(n: int, k: int, batch: int, tmp: str, group_key: str | None, conn: Connection) -> None:
    from huddle import Node

    node = Node(benchlib.node_config("origin", Path(tmp) / "origin", group_key=group_key))
    task = asyncio.create_task(node.run())
    await node.wait_ready()
    # Its id, and whether it signs (a key that gives its id: every data directory made today).
    conn.send(("endpoint", node.mesh.endpoint.removeprefix("tcp://"), bytes(node.uuid),
               node.replicator.signer is not None))
    await _full_mesh(node, k)
    # The events are built before the clock starts; emit_many still encodes each body.
    batches = [[(KIND, body_of(i)) for i in range(j + 1, min(n, j + batch) + 1)] for j in range(0, n, batch)]
    await node.until_recording(30.0)  # its start-up window (docs/protocol.md 12.1)
    conn.send(("ready",))
    await benchlib.arecv(conn)  # "go"
    cpu0 = cpu_seconds()
    t0 = time.monotonic()
    emit_many = node.emit_many
    for events in batches:
        emit_many(events)
        await asyncio.sleep(0)
    t_end = time.monotonic()
    conn.send(("sent", t0, t_end))
    await benchlib.arecv(conn, timeout=300)  # "stop": keep serving until every peer is done
    conn.send(("cpu", cpu_seconds() - cpu0, benchlib.peak_rss_mb()))
    node.stop()
    await task


# ------------------------------------------------------------------------ driver


def _wait(conn: Connection, timeout: float, what: str) -> Any:
    if not conn.poll(timeout):
        raise TimeoutError(what)
    return conn.recv()


def _join(procs: list[Any]) -> None:
    benchlib.reap(*procs)


def run_raw(n: int, k: int, store: bool, curve: dict[str, bytes] | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    n_msgs = math.ceil(n / PER_MSG)
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        pipes, procs, ports = [], [], []
        for idx in range(k):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=raw_receiver, args=(n_msgs, store, tmp, idx, curve, child))
            p.start()
            pipes.append(parent)
            procs.append(p)
        for parent in pipes:
            ports.append(_wait(parent, 60, "raw receiver did not start")[1])
        s_parent, s_child = ctx.Pipe()
        sender = ctx.Process(target=raw_sender, args=(n, ports, curve, s_child))
        sender.start()
        _wait(s_parent, 60, "raw sender did not connect")
        s_parent.send("go")
        _, t0, t_end = _wait(s_parent, 300, "raw sender did not finish")
        dones = [_wait(parent, 300, "raw receiver did not finish") for parent in pipes]
        s_parent.send("stop")
        _, send_cpu, _ = _wait(s_parent, 60, "raw sender did not stop")
        _join([sender, *procs])
    t_last = max(d[2] for d in dones)
    received = min(d[1] for d in dones)
    return {
        "complete": received == n_msgs,
        "rate": n / (t_last - t0) if received == n_msgs else math.nan,
        "send_rate": n / (t_end - t0),
        "origin_cpu_us": send_cpu / n * 1e6,
        "peer_cpu_us": benchlib.median([d[3] for d in dones]) / n * 1e6,
        "security": sorted({d[5] for d in dones}),
    }


def run_huddle(n: int, k: int, batch: int, group_key: str | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        o_parent, o_child = ctx.Pipe()
        origin = ctx.Process(target=node_origin, args=(n, k, batch, tmp, group_key, o_child))
        origin.start()
        _, seed, origin_id, signs = _wait(o_parent, 60, "origin did not start")
        pipes, procs = [], []
        for idx in range(k):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=node_peer, args=(idx, n, k, tmp, seed, origin_id, group_key, child))
            p.start()
            pipes.append(parent)
            procs.append(p)
        for parent in pipes:
            _wait(parent, 120, "a peer did not join the mesh")
        _wait(o_parent, 120, "the origin did not see every peer")
        o_parent.send("go")
        _, t0, t_end = _wait(o_parent, 300, "the origin did not finish")
        dones = [_wait(parent, 300, "a peer did not finish") for parent in pipes]
        for parent in pipes:
            parent.send("stop")
        rss = [_wait(parent, 60, "a peer did not stop")[1] for parent in pipes]
        o_parent.send("stop")
        _, origin_cpu, origin_rss = _wait(o_parent, 60, "the origin did not stop")
        _join([origin, *procs])
    held = min(d[4] for d in dones)
    complete = all(d[1] >= n and d[4] == n for d in dones)
    t_last = max(d[2] for d in dones)
    return {
        "complete": complete,
        "held": held,
        "rate": n / (t_last - t0) if complete else math.nan,
        "send_rate": n / (t_end - t0),
        "origin_cpu_us": origin_cpu / n * 1e6,
        "peer_cpu_us": benchlib.median([d[3] for d in dones]) / n * 1e6,
        "origin_rss": origin_rss,
        "peer_rss": max(rss),
        "signs": signs,
        "signed": [d[5] for d in dones],  # per peer: events, chained, heads, forgeries
        "security": [d[6] for d in dones],
    }


def run_sqlite(n: int, batch: int) -> dict[str, Any]:
    rows = _rows(n, os.urandom(16))
    with tempfile.TemporaryDirectory(prefix="huddle-bench-") as tmp:
        db = _open_db(Path(tmp) / "loop.sqlite")
        sql = _INSERT_SQL
        cpu0 = cpu_seconds()
        t0 = time.monotonic()
        for i in range(0, n, batch):
            db.execute("BEGIN")
            db.executemany(sql, rows[i:i + batch])
            db.execute("COMMIT")
        elapsed = time.monotonic() - t0
        cpu = cpu_seconds() - cpu0
        db.close()
    return {"rate": n / elapsed, "cpu_us": cpu / n * 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=100_000, help="events per run (default 100000)")
    parser.add_argument("--batch", type=int, default=500, help="events per emit_many call (default 500)")
    parser.add_argument("--peers", default="2,8", help="peer counts, comma-separated (default 2,8)")
    parser.add_argument("--reps", type=int, default=3, help="repetitions per peer count (default 3)")
    parser.add_argument("--no-store-diagnostic", action="store_true", help="skip the raw+store variant")
    parser.add_argument("--quick", action="store_true", help="2 repetitions of 50000 events, no raw+store")
    parser.add_argument("--secure", action="store_true",
                        help="nodes with a group secret (CurveZMQ + ZAP), raw baselines with CURVE")
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.events, args.no_store_diagnostic = 2, 50_000, True
    with tempfile.TemporaryDirectory(prefix="huddle-bench-key-") as keys:
        if args.secure:
            return measure(args, benchlib.curve_keys(), benchlib.group_key_file(Path(keys)))
        return measure(args, None, None)


def measure(args: argparse.Namespace, curve: dict[str, bytes] | None, group_key: str | None) -> int:
    n = args.events
    peer_counts = [int(x) for x in args.peers.split(",") if x.strip()]
    secure = ", CurveZMQ" if args.secure else ""
    benchlib.header(f"Replicated log throughput (signed{secure}): one origin -> K peers, vs raw pyzmq"
                    f"{' with CURVE' if args.secure else ''} and an SQLite loop",
                    events=n, batch=args.batch, peers=args.peers, reps=args.reps, secure=args.secure)

    ok = True
    results: dict[int, dict[str, Any]] = {}
    store = not args.no_store_diagnostic
    for k in peer_counts:
        runs: dict[str, list[dict[str, Any]]] = {"sqlite": [], "raw": [], "raw+store": [], "huddle": []}
        rows: list[list[object]] = []
        for rep in range(1, args.reps + 1):
            s = run_sqlite(n, args.batch)
            r = run_raw(n, k, store=False, curve=curve)
            rs = run_raw(n, k, store=True, curve=curve) if store else dict.fromkeys(("rate", "peer_cpu_us"), math.nan)
            h = run_huddle(n, k, args.batch, group_key)
            for v, x in (("sqlite", s), ("raw", r), ("raw+store", rs), ("huddle", h)):
                runs[v].append(x)
            rows.append([f"run {rep}", s["rate"], r["rate"], rs["rate"], h["rate"], h["rate"] / r["rate"],
                         h["rate"] / rs["rate"], h["rate"] / s["rate"], h["origin_cpu_us"], h["peer_cpu_us"],
                         rs["peer_cpu_us"]])
            if not h["complete"]:
                print(f"  run {rep}: huddle peers held only {h['held']} of {n} events")
                ok = False

        def med(variant: str, key: str, runs: dict[str, list[dict[str, Any]]] = runs) -> float:
            return benchlib.median([x[key] for x in runs[variant]])

        def ratio(base: str, runs: dict[str, list[dict[str, Any]]] = runs) -> float:
            return benchlib.median([h["rate"] / b["rate"] for h, b in zip(runs["huddle"], runs[base], strict=True)])

        rows.append(["median", med("sqlite", "rate"), med("raw", "rate"), med("raw+store", "rate"), med("huddle", "rate"),
                     ratio("raw"), ratio("raw+store"), ratio("sqlite"), med("huddle", "origin_cpu_us"),
                     med("huddle", "peer_cpu_us"), med("raw+store", "peer_cpu_us")])
        print(f"\n  {k} peers ({k + 1} processes per run), events/s at the slowest peer")
        benchlib.print_table(["", "sqlite loop", "raw", "raw+store", "huddle", "huddle/raw", "huddle/raw+store",
                              "huddle/sqlite", "huddle origin CPU us/ev", "huddle peer CPU us/ev",
                              "raw+store recv CPU us/ev"], rows)
        total = med("huddle", "origin_cpu_us") + k * med("huddle", "peer_cpu_us")
        cpus = os.cpu_count() or 1
        print(f"  huddle CPU per replicated event, origin + {k} peers: {total:.0f} us; on {cpus} CPUs that alone "
              f"caps the rate at {cpus / total * 1e6:,.0f} events/s")
        print(f"  sqlite loop {med('sqlite', 'cpu_us'):.1f} us/event; raw receiver {med('raw', 'peer_cpu_us'):.2f} us/event; "
              f"peak RSS origin {med('huddle', 'origin_rss'):.0f} MB, peer {med('huddle', 'peer_rss'):.0f} MB; "
              f"origin emit_many rate {med('huddle', 'send_rate'):,.0f} events/s")
        signed = [p for x in runs["huddle"] for p in x["signed"]]
        verified = all(x["signs"] for x in runs["huddle"]) and all(
            p["chained"] == p["events"] == n and p["heads"] > 0 and p["forgeries"] == 0 for p in signed)
        print(f"  signed: the origin signs in {sum(x['signs'] for x in runs['huddle'])} of {len(runs['huddle'])} runs; "
              f"each peer holds {min(p['chained'] for p in signed):,}-{max(p['chained'] for p in signed):,} of the "
              f"origin's records with a verified chain hash, under {min(p['heads'] for p in signed)}-"
              f"{max(p['heads'] for p in signed)} signed heads; forged batches {sum(p['forgeries'] for p in signed)}")
        modes = sorted({f"{x['mode']}" for h in runs["huddle"] for x in h["security"]})
        raw_modes = sorted({m for v in ("raw", "raw+store") for x in runs[v] for m in x.get("security", [])})
        print(f"  security: huddle nodes {', '.join(modes)} (ZAP admitted "
              f"{min(x['admitted'] for h in runs['huddle'] for x in h['security'])}+ handshakes per peer); "
              f"raw sockets {', '.join(raw_modes)}")
        results[k] = {"rate": med("huddle", "rate"), "raw": ratio("raw"), "sqlite": ratio("sqlite"),
                      "store": ratio("raw+store"), "complete": all(x["complete"] for x in runs["huddle"]),
                      "verified": verified, "modes": modes, "raw_modes": raw_modes}
    print("  (ratios: median of the per-repetition ratios; CPU: user+system of the whole process, all threads)")
    benchlib.footer()
    print()
    for k, res in results.items():
        ok &= benchlib.check(f"every event held by all {k} peers", "yes" if res["complete"] else "no", res["complete"])
        ok &= benchlib.check(f"every event signed by the origin and verified by all {k} peers",
                             "yes" if res["verified"] else "no", res["verified"])
        if args.secure:
            secured = res["modes"] == ["group"] and res["raw_modes"] == ["CURVE"]
            ok &= benchlib.check(f"the {k}-peer runs were secured", f"huddle nodes {', '.join(res['modes'])}, raw "
                                 f"sockets {', '.join(res['raw_modes'])}", secured)
    for k, res in results.items():
        raw_name = "raw pyzmq with CURVE" if args.secure else "raw pyzmq"
        vs_store = "" if math.isnan(res["store"]) else f", {res['store']:.2f}x raw+store"
        measured = (f"{res['rate']:,.0f} events/s ({res['raw']:.3f}x {raw_name}{vs_store}, "
                    f"{res['sqlite']:.2f}x the SQLite loop)")
        if k == 2:
            benchlib.target(f"log replication to 2 peers (signed{secure}) >= {TARGET_RATE:,.0f} events/s", measured,
                            res["rate"] >= TARGET_RATE)
        else:
            print(f"RESULT log replication to {k} peers (signed{secure}; no target): {measured}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
