#!/usr/bin/env python3
"""The audit pipeline on Spark against the same queries in DuckDB, on the same Parquet files.

Workload (made once, not timed): ``huddle simulate --nodes 3 --loss 0.01
--seed 1 --export`` of N events (3 N exported rows, one Parquet file per
node).  ``--data DIR`` keeps the inputs in ``DIR/simN`` and reuses them on
the next run (made only when missing); without it they go to a temporary
directory removed at the end.

Warm-up (not timed, both engines alike): at each size, each engine first
runs its whole set of queries ``--discard`` times (default 1) on the same
input, and those runs are printed but not counted, so the figures are those
of a warm process: Spark has loaded its classes, generated and compiled the
code of every query (kept in its code cache) and its JIT has compiled the
hot loops, and the inputs are in the page cache for both.  The discarded
first run shows what a cold, one-off run costs.  The Spark session is started
before the clock too (its start is printed apart); DuckDB's connection is
made inside its timed run.

Per repetition, in turn, each writing its result tables as Parquet:

* baseline: DuckDB (in-process, all cores) runs the same queries in SQL:
  consolidate (one row per event, first receipt, copies, conflict flag
  by a 64-bit hash of the content, as huddle does), held ranges (64-bit
  masks per block of 64 numbers, as huddle does: faster in DuckDB too than
  gaps and islands over every row), missing ranges, gaps, delays by source /
  receiver / hops / link (p50, p90, p99, exact quantiles) and throughput per
  second;
* huddle: ``huddle.pipeline.jobs.run`` with the jobs consolidate,
  convergence and propagation on ``local[*]`` (the defaults of ``huddle
  pipeline run``): the same tables, plus the conflicts, the delay histogram
  and report.html.

Each row printed carries the 1-minute load average when the repetition
started (other work on the machine slows both engines).

Target (issue 9): at 10 M events, where the issue measured a naive PySpark
version at 9.4x DuckDB's time, huddle's time <= 3x DuckDB's; and time
growing at most linearly from 1 M to 10 M events.  The ratio at other sizes
is printed too (RATIO lines).  ``bench`` extra: duckdb.

End to end, as a user runs them (docs/pipeline.md, "A warm Spark"): each
timed from a process's start to its exit, findings printed and tables
written, on the jobs the DuckDB queries cover (consolidate, convergence,
propagation):

* ``--served N``: ``huddle pipeline run --remote`` against one ``huddle
  pipeline serve`` (started once, before the clock, on 127.0.0.1), against
  DuckDB's one-off run (a fresh ``python`` that connects, runs the queries
  and exits).  ``--discard`` runs of each first, not counted (the server's
  first run compiles the jobs' code: the cost a server pays once).  Targets
  (issue 37): <= 3 s at 100 000 events (ratio printed), <= 2.5x DuckDB at
  1 M, <= 2x at 10 M.
* ``--cold N``: ``huddle pipeline run`` with no server (Spark started by the
  run, ``local[*]``), every run counted.  Target: <= 12 s at 1 M events.

Given either, the in-process comparison above is not run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import benchlib

TARGET_EVENTS = 10_000_000  # where issue 9 sets the 3x target (and measured the naive version's 9.4x)

QUERIES = """
CREATE OR REPLACE TEMP VIEW events AS SELECT * FROM read_parquet('{src}/*/events.parquet');
COPY (
  SELECT "group", source, seq,
         arg_min({{'timestamp': timestamp, 'kind': kind, 'body': body}}, {{'h': hops, 'n': node}}) AS c,
         min(CASE WHEN node <> source THEN received_at END) AS first_received_at,
         count(*) AS copies,
         min(hash(timestamp, kind, body)) <> max(hash(timestamp, kind, body)) AS conflict
  FROM events GROUP BY ALL
) TO '{out}/consolidated.parquet' (FORMAT parquet, COMPRESSION zstd);
CREATE OR REPLACE TEMP TABLE held AS
  SELECT node, "group", source, min(first_seq) AS first_seq, max(last_seq) AS last_seq FROM (
    SELECT *, sum(starts) OVER (PARTITION BY node, "group", source ORDER BY first_seq, last_seq
                                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run FROM (
      SELECT *, CASE WHEN reach IS NULL OR first_seq > reach + 1 THEN 1 ELSE 0 END AS starts FROM (
        SELECT *, max(last_seq) OVER (PARTITION BY node, "group", source ORDER BY first_seq, last_seq
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM (
          SELECT node, "group", source, block * 64 + s AS first_seq, block * 64 + e AS last_seq FROM (
            SELECT node, "group", source, block,
                   unnest(CASE WHEN bits = {full} THEN [0]
                          ELSE list_filter(range(64), lambda i: ((bits & ~(bits << 1)) >> i) & 1 = 1) END) AS s,
                   unnest(CASE WHEN bits = {full} THEN [63]
                          ELSE list_filter(range(64), lambda i: ((bits & ~(bits >> 1)) >> i) & 1 = 1) END) AS e
            FROM (SELECT node, "group", source, seq >> 6 AS block, bit_or(1::UBIGINT << (seq & 63)::INTEGER) AS bits
                  FROM events GROUP BY ALL))))))
  GROUP BY node, "group", source, run;
CREATE OR REPLACE TEMP TABLE uni AS
  SELECT "group", source, min(first_seq) AS first_seq, max(last_seq) AS last_seq FROM (
    SELECT *, sum(starts) OVER (PARTITION BY "group", source ORDER BY first_seq, last_seq
                                ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS run FROM (
      SELECT *, CASE WHEN reach IS NULL OR first_seq > reach + 1 THEN 1 ELSE 0 END AS starts FROM (
        SELECT "group", source, first_seq, last_seq,
               max(last_seq) OVER (PARTITION BY "group", source ORDER BY first_seq, last_seq
                                   ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS reach FROM held)))
  GROUP BY "group", source, run;
COPY (
  WITH top AS (SELECT "group", source, max(last_seq) AS top FROM uni GROUP BY ALL),
  nodes AS (SELECT DISTINCT "group", node FROM held),
  padded AS (SELECT node, "group", source, first_seq, last_seq FROM held
             UNION ALL SELECT node, "group", source, top + 1, top + 1 FROM nodes JOIN top USING ("group")),
  holes AS (SELECT node, "group", source,
                   coalesce(lag(last_seq) OVER (PARTITION BY node, "group", source ORDER BY first_seq) + 1, 1) AS hf,
                   first_seq - 1 AS hl FROM padded)
  SELECT node, h."group", h.source, greatest(hf, u.first_seq) AS first_seq, least(hl, u.last_seq) AS last_seq,
         least(hl, u.last_seq) - greatest(hf, u.first_seq) + 1 AS events
  FROM holes h JOIN uni u ON h."group" = u."group" AND h.source = u.source AND hf <= u.last_seq AND u.first_seq <= hl
  WHERE hf <= hl
) TO '{out}/missing.parquet' (FORMAT parquet);
COPY (
  SELECT * FROM (SELECT "group", source,
                        coalesce(lag(last_seq) OVER (PARTITION BY "group", source ORDER BY first_seq) + 1, 1) AS first_seq,
                        first_seq - 1 AS last_seq FROM uni) WHERE first_seq <= last_seq
) TO '{out}/gaps.parquet' (FORMAT parquet);
CREATE OR REPLACE TEMP VIEW receipts AS
  SELECT "group", source, node, hops, received_from, received_at, received_at - timestamp AS delay
  FROM events WHERE node <> source;
COPY (
  SELECT "group", d.by, d.key, count(*) AS receipts,
         quantile_disc(delay, [0.5, 0.9, 0.99]) AS p, max(delay) AS max
  FROM (SELECT "group", delay, unnest([{{'by': 'source', 'key': source}}, {{'by': 'receiver', 'key': node}},
                                       {{'by': 'hops', 'key': hops::VARCHAR}},
                                       {{'by': 'link', 'key': coalesce(received_from, '?') || '>' || node}}]) AS d
        FROM receipts)
  GROUP BY ALL
) TO '{out}/delays.parquet' (FORMAT parquet);
COPY (
  SELECT coalesce(a."group", b."group") AS "group", coalesce(a.w, b.w) AS window_start,
         coalesce(originated, 0) AS originated, coalesce(receipts, 0) AS receipts
  FROM (SELECT "group", floor(c.timestamp) AS w, count(*) AS originated
        FROM read_parquet('{out}/consolidated.parquet') GROUP BY ALL) a
  FULL OUTER JOIN (SELECT "group", floor(received_at) AS w, count(*) AS receipts FROM receipts GROUP BY ALL) b
  ON a."group" = b."group" AND a.w = b.w
) TO '{out}/throughput.parquet' (FORMAT parquet);
"""


def run_duckdb(src: Path, out: Path) -> tuple[float, int]:
    import duckdb

    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    con = duckdb.connect()
    con.execute(QUERIES.format(src=src, out=out, full=2**64 - 1))
    missing = con.execute(f"SELECT coalesce(sum(events), 0) FROM read_parquet('{out}/missing.parquet')").fetchone()
    con.close()
    return time.perf_counter() - t0, int(missing[0]) if missing else -1


WARM_TARGET_S = 3.0  # issue 37: a bout-sized input (100 000 events) against a warm server
WARM_RATIOS = {1_000_000: 2.5, 10_000_000: 2.0}  # issue 37: warm, against DuckDB's one-off
COLD_TARGET_S = {1_000_000: 12.0}  # issue 37: cold one-off (no server)
E2E_JOBS = "consolidate,convergence,propagation"  # what the DuckDB queries cover


def _tree_cpus(root: int) -> dict[int, float]:
    """CPU seconds (user + system) used so far by ``root`` and each process below it (Linux /proc)."""
    parent: dict[int, int] = {}
    spent: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        parent[int(entry.name)] = int(fields[1])
        spent[int(entry.name)] = (int(fields[11]) + int(fields[12])) / tick
    tree, todo = set(), [root]
    while todo:
        pid = todo.pop()
        tree.add(pid)
        todo += [c for c, p in parent.items() if p == pid and c not in tree]
    return {pid: spent[pid] for pid in tree if pid in spent}


# CPU seconds of the last _timed run: its process tree's, plus the server's when one served it.
# Wall time on a machine others load measures the load; CPU time measures the work.
LAST_CPU = [0.0]
SAMPLE_S = 0.1  # how often the process tree's CPU is read while it runs (a JVM PySpark starts is never reaped)


def _timed(argv: list[str], what: str, server: int | None = None) -> float:
    """Seconds from the start of a process running ``argv`` to its exit (exit status 0 or 3);
    its CPU seconds (and the ``server`` process tree's during it) in LAST_CPU: each process's
    last reading, sampled every SAMPLE_S (the last tenth of a second of each may be missed)."""
    served = sum(_tree_cpus(server).values()) if server else 0.0
    seen: dict[int, float] = {}
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+") as err:  # a file, not a pipe: nothing blocks while it is sampled
        proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL)
        while proc.poll() is None:
            seen.update(_tree_cpus(proc.pid))
            time.sleep(SAMPLE_S)
        took = time.perf_counter() - t0
        err.seek(0)
        stderr = err.read()
    LAST_CPU[0] = sum(seen.values()) + (sum(_tree_cpus(server).values()) - served if server else 0.0)
    if proc.returncode not in (0, 3):
        sys.exit(f"{what} failed ({proc.returncode}): {stderr[-2000:]}")
    return took


def duckdb_once(src: Path, out: Path) -> float:
    """DuckDB's one-off run, end to end: a fresh interpreter that imports it, runs the queries, exits."""
    return _timed([sys.executable, str(Path(__file__).resolve()), "--duckdb-once", str(src), str(out)], "DuckDB")


def huddle_once(src: Path, out: Path, server: Served | None) -> float:
    """``huddle pipeline run`` end to end (``server`` None: it starts Spark itself)."""
    argv = [sys.executable, "-m", "huddle", "pipeline", "run", "--quiet", "--input", str(src), "--output", str(out),
            "--jobs", E2E_JOBS]
    if server is None:
        return _timed(argv, "huddle pipeline run")
    return _timed([*argv, "--remote", server.remote], "huddle pipeline run", server.proc.pid)


class Served:
    """``huddle pipeline serve`` on a free port of 127.0.0.1, until closed."""

    def __init__(self) -> None:
        self.port = benchlib.free_port()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen([sys.executable, "-m", "huddle", "pipeline", "serve", "--port", str(self.port)],
                                     stdout=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()  # the server says so once it accepts connections
        if line != f"serving sc://127.0.0.1:{self.port}":
            self.close()
            sys.exit(f"huddle pipeline serve did not start: {line!r}")
        self.remote = f"sc://127.0.0.1:{self.port}"
        print(f"huddle pipeline serve up in {time.perf_counter() - t0:.1f} s at {self.remote} (not counted)")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def end_to_end(args: argparse.Namespace, work: Path, data: Path) -> None:
    """The --served and --cold cases (see the module's doc)."""
    rows: list[list[object]] = []
    served: dict[int, tuple[float, float]] = {}
    cold: dict[int, tuple[float, float]] = {}
    cpu: dict[tuple[str, int], tuple[float, float]] = {}
    if args.served:
        server = Served()
        try:
            for n in args.served:
                src = simulated(data, n)
                for rep in range(args.discard):
                    b, h = duckdb_once(src, work / "duck"), huddle_once(src, work / "served", server)
                    print(f"  served {n} events, discarded run {rep + 1}: DuckDB {b:.2f} s, huddle {h:.2f} s "
                          "(not counted)", flush=True)
                base_t, huddle_t, base_c, huddle_c = [], [], [], []
                for rep in range(args.reps):
                    load = os.getloadavg()[0]
                    base_t.append(duckdb_once(src, work / "duck"))
                    base_c.append(LAST_CPU[0])
                    huddle_t.append(huddle_once(src, work / "served", server))
                    huddle_c.append(LAST_CPU[0])
                    rows.append(["served", n, f"{load:.2f}", f"{base_t[-1]:.2f}", f"{huddle_t[-1]:.2f}",
                                 f"{huddle_t[-1] / base_t[-1]:.1f}x", f"{base_c[-1]:.2f}", f"{huddle_c[-1]:.2f}",
                                 f"{huddle_c[-1] / base_c[-1]:.1f}x"])
                    print(f"  served {n} events, run {rep + 1}: DuckDB {base_t[-1]:.2f} s ({base_c[-1]:.2f} s CPU), "
                          f"huddle {huddle_t[-1]:.2f} s ({huddle_c[-1]:.2f} s CPU) (load avg {load:.2f})", flush=True)
                cpu[("served", n)] = (benchlib.median(base_c), benchlib.median(huddle_c))
                served[n] = (benchlib.median(base_t), benchlib.median(huddle_t))
        finally:
            server.close()
    for n in args.cold or []:
        src = simulated(data, n)
        base_t, huddle_t, base_c, huddle_c = [], [], [], []
        for rep in range(args.reps):
            load = os.getloadavg()[0]
            base_t.append(duckdb_once(src, work / "duck"))
            base_c.append(LAST_CPU[0])
            huddle_t.append(huddle_once(src, work / "cold", None))
            huddle_c.append(LAST_CPU[0])
            rows.append(["cold", n, f"{load:.2f}", f"{base_t[-1]:.2f}", f"{huddle_t[-1]:.2f}",
                         f"{huddle_t[-1] / base_t[-1]:.1f}x", f"{base_c[-1]:.2f}", f"{huddle_c[-1]:.2f}",
                         f"{huddle_c[-1] / base_c[-1]:.1f}x"])
            print(f"  cold {n} events, run {rep + 1}: DuckDB {base_t[-1]:.2f} s ({base_c[-1]:.2f} s CPU), "
                  f"huddle {huddle_t[-1]:.2f} s ({huddle_c[-1]:.2f} s CPU) (load avg {load:.2f})", flush=True)
        cpu[("cold", n)] = (benchlib.median(base_c), benchlib.median(huddle_c))
        cold[n] = (benchlib.median(base_t), benchlib.median(huddle_t))
    benchlib.print_table(["case", "events", "load avg", "duckdb s", "huddle s", "ratio", "duckdb cpu s",
                          "huddle cpu s", "cpu ratio"], rows)
    for (case, n), (b, h) in cpu.items():  # what the work costs, whatever else runs on the machine
        print(f"RATIO  {case} {n} events, CPU seconds (huddle's client and server, DuckDB's process): "
              f"{h:.2f} s vs {b:.2f} s = {h / b:.1f}x (medians of {args.reps})")
    for n, (b, h) in served.items():
        measured = f"{h:.2f} s vs DuckDB's one-off {b:.2f} s = {h / b:.1f}x (medians of {args.reps})"
        if n == 100_000:
            benchlib.target(f"{n} events against a warm server: huddle pipeline run <= {WARM_TARGET_S:.0f} s",
                            measured, h <= WARM_TARGET_S)
        elif n in WARM_RATIOS:
            benchlib.target(f"{n} events against a warm server: <= {WARM_RATIOS[n]}x DuckDB's one-off run",
                            measured, h <= WARM_RATIOS[n] * b)
        else:
            print(f"RATIO  {n} events against a warm server: {measured}")
    for n, (b, h) in cold.items():
        measured = f"{h:.2f} s (DuckDB's one-off {b:.2f} s, {h / b:.1f}x; medians of {args.reps})"
        if n in COLD_TARGET_S:
            benchlib.target(f"{n} events, cold one-off (no server): <= {COLD_TARGET_S[n]:.0f} s", measured,
                            h <= COLD_TARGET_S[n])
        else:
            print(f"RATIO  {n} events, cold one-off: {measured}")


def simulated(data: Path, n: int) -> Path:
    """The simulator's export of ``n`` events under ``data``, made unless a finished one is there."""
    src = data / f"sim{n}"
    done = src / ".complete"
    if not done.exists():
        shutil.rmtree(src, ignore_errors=True)
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "huddle", "simulate", "--nodes", "3", "--events", str(n),
                        "--loss", "0.01", "--seed", "1", "--export", str(src)], check=True, capture_output=True)
        done.write_text(f"huddle simulate --nodes 3 --events {n} --loss 0.01 --seed 1\n")
        print(f"simulated {n} events in {time.perf_counter() - t0:.1f} s (not counted) -> {src}")
    else:
        print(f"reusing {src}")
    return src


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, action="append", help="events to simulate (repeatable; default 1000000)")
    ap.add_argument("--reps", type=int, default=3, help="repetitions (default 3)")
    ap.add_argument("--quick", action="store_true", help="one repetition of 200000 events")
    ap.add_argument("--data", type=Path, help="keep the simulated inputs here and reuse them (default: a temporary "
                    "directory, removed at the end)")
    ap.add_argument("--discard", type=int, default=1,
                    help="runs of each engine at each size done first and not counted (default 1; 0: none)")
    ap.add_argument("--served", type=int, action="append", metavar="N",
                    help="events for the end-to-end run against a warm huddle pipeline serve (repeatable)")
    ap.add_argument("--cold", type=int, action="append", metavar="N",
                    help="events for the end-to-end cold one-off huddle pipeline run (repeatable)")
    ap.add_argument("--duckdb-once", nargs=2, type=Path, metavar=("SRC", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.duckdb_once:  # the baseline's one-off run, in a process of its own (duckdb_once times it)
        run_duckdb(*args.duckdb_once)
        return
    sizes = [] if args.served or args.cold else args.events or ([200_000] if args.quick else [1_000_000])
    reps = 1 if args.quick else args.reps
    try:
        import duckdb
    except ImportError:
        sys.exit("bench/pipeline.py needs duckdb: pip install -e '.[bench]'")
    if not sizes:
        benchlib.header("pipeline end to end", served=args.served, cold=args.cold, reps=reps,
                        duckdb=duckdb.__version__, discard=args.discard)
        work = Path(tempfile.mkdtemp(prefix="huddle-bench-pipeline-"))
        try:
            end_to_end(args, work, args.data or work)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        benchlib.footer()
        return
    from huddle.pipeline import jobs
    from huddle.pipeline.session import start_session

    benchlib.header("pipeline", sizes=sizes, reps=reps, duckdb=duckdb.__version__, discard=args.discard)
    work = Path(tempfile.mkdtemp(prefix="huddle-bench-pipeline-"))
    data = args.data or work
    data.mkdir(parents=True, exist_ok=True)
    inputs = {n: simulated(data, n) for n in sizes}
    t0 = time.perf_counter()
    spark = start_session("local[*]")
    print(f"spark session started in {time.perf_counter() - t0:.1f} s (not counted below)")
    tables = ["consolidate", "convergence", "propagation"]
    rows: list[list[object]] = []
    medians: dict[int, tuple[float, float]] = {}
    try:
        for n in sizes:
            src = inputs[n]
            base_t, huddle_t = [], []
            for rep in range(args.discard):
                b, _ = run_duckdb(src, work / f"duck{n}-discard{rep}")
                t1 = time.perf_counter()
                jobs.run(spark, [str(src)], str(work / f"spark{n}-discard{rep}"), jobs=tables)
                h = time.perf_counter() - t1
                print(f"  {n} events, discarded run {rep + 1}: DuckDB {b:.2f} s, huddle {h:.2f} s, {h / b:.2f}x "
                      "(not counted)", flush=True)
                shutil.rmtree(work / f"duck{n}-discard{rep}", ignore_errors=True)
                shutil.rmtree(work / f"spark{n}-discard{rep}", ignore_errors=True)
            for rep in range(reps):
                load = os.getloadavg()[0]
                b, lacking = run_duckdb(src, work / f"duck{n}-{rep}")
                t1 = time.perf_counter()
                summary = jobs.run(spark, [str(src)], str(work / f"spark{n}-{rep}"), jobs=tables)
                h = time.perf_counter() - t1
                benchlib.check(f"{n} events: same missing count", f"duckdb {lacking}, huddle {summary.missing_events}",
                               lacking == summary.missing_events)
                base_t.append(b)
                huddle_t.append(h)
                rows.append([n, summary.rows, f"{load:.2f}", f"{b:.2f}", f"{h:.2f}", f"{h / b:.1f}x"])
                print(f"  {n} events, run {rep + 1}: DuckDB {b:.2f} s, huddle {h:.2f} s, {h / b:.2f}x "
                      f"(load avg {load:.2f} at the start, {os.getloadavg()[0]:.2f} at the end)", flush=True)
                shutil.rmtree(work / f"duck{n}-{rep}", ignore_errors=True)
                shutil.rmtree(work / f"spark{n}-{rep}", ignore_errors=True)
            medians[n] = (benchlib.median(base_t), benchlib.median(huddle_t))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    benchlib.print_table(["events", "rows", "load avg", "duckdb s", "huddle s", "ratio"], rows)
    for n, (b, h) in medians.items():
        measured = f"{h:.2f} s vs {b:.2f} s = {h / b:.1f}x (medians of {reps})"
        if n == TARGET_EVENTS:
            benchlib.target(f"{n} events: huddle's pipeline <= 3x DuckDB's time", measured, h <= 3 * b)
        else:  # the issue states the 3x target at 10 M events, beside the naive version's 9.4x there
            print(f"RATIO  {n} events: huddle's pipeline against DuckDB's time: {measured} "
                  f"(the 3x target is for {TARGET_EVENTS} events)")
    if len(medians) > 1:
        (n0, (b0, h0)), (n1, (b1, h1)) = sorted(medians.items())[0], sorted(medians.items())[-1]
        benchlib.target(f"huddle's time grows at most linearly from {n0} to {n1} events",
                        f"{h1 / h0:.1f}x the time for {n1 / n0:.0f}x the events (DuckDB: {b1 / b0:.1f}x)",
                        h1 / h0 <= n1 / n0)
    benchlib.footer()


if __name__ == "__main__":
    main()
