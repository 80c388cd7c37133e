"""``huddle pipeline live``: the audit as Spark Structured Streaming over growing exports.

Each input is a directory ``huddle export --follow`` writes into (or one
holding several): its ``events`` part files (and ``stats`` ones, for the
nodes' names) are read by Spark's file-stream source, each new file once, in micro-batches every ``--trigger`` seconds
(a batch only when new files came).  Each micro-batch is turned by batch
transforms that are safe on a slice of the rows into small facts (runs of
held numbers, delay counts, newest times: a few rows per node and source),
collected, and merged on the driver into a :class:`~.livestate.LiveState`,
from which the update (convergence, missing ranges, lag) is made.  Why the
state is bounded: :mod:`.livestate`.

The stream keeps no checkpoint across runs: the state lives in this process,
so a new ``pipeline live`` reads the exports from their first part again.
A part file that is not Parquet (or is truncated) is skipped
(``ignoreCorruptFiles``); a JSON line that does not parse, or lacks a key
column, is left out and counted (``refused_rows``).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import signal
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from functools import reduce
from pathlib import Path
from typing import Any

from ..errors import ConfigError
from .errors import EXIT_FAILED, INSTALL, InputError, PipelineError, SparkSetupError, first_line, missing_modules
from .livestate import LiveState, line

__all__ = ["live_command"]

NAMES_SECONDS = 10.0  # the statistics parts (for the nodes' names) are read this often, or every trigger if longer
MAX_FILES_PER_TRIGGER = 1000  # files a micro-batch reads at most: a backlog is worked through in bounded steps
_REQUIRED = ("node", "group", "source", "seq", "timestamp", "received_at")  # a row without one of these is refused


def _format_of(path: Path) -> str:
    """``jsonl`` if the export under ``path`` is JSON Lines, else ``parquet`` (the export's default)."""
    return "jsonl" if next(path.rglob("events.jsonl"), None) is not None else "parquet"


def check_live_inputs(inputs: Sequence[str]) -> list[tuple[str, str]]:
    """Each input as (directory, format), checked before Spark starts."""
    found = []
    for given in inputs:
        path = Path(given)
        if not path.is_dir():
            raise InputError(f"input {given} is not a directory (give the directories huddle export --follow "
                             "writes into)")
        found.append((str(path.resolve()), _format_of(path)))
    if not found:
        raise InputError("no input directories")
    return found


def _stream(spark: Any, inputs: Sequence[tuple[str, str]], stem: str = "events") -> Any:
    """The ``stem`` table (``events`` or ``stats``) of every input as one streaming DataFrame."""
    from . import schemas  # noqa: PLC0415 - deferred: PySpark

    parts = []
    for path, fmt in inputs:
        reader = (spark.readStream.schema(schemas.EVENTS if stem == "events" else schemas.STATS)
                  .option("recursiveFileLookup", "true")
                  .option("pathGlobFilter", f"{stem}.{fmt}").option("maxFilesPerTrigger", MAX_FILES_PER_TRIGGER)
                  .option("ignoreCorruptFiles", "true"))
        parts.append(reader.json(path) if fmt == "jsonl" else reader.parquet(path))
    return reduce(lambda a, b: a.unionByName(b), parts)


def facts(batch: Any) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]], int, int]:
    """One micro-batch's facts (see :mod:`.livestate`): held ranges, delay
    counts, newest times, the rows read and the rows refused."""
    from pyspark.sql import functions as F  # noqa: PLC0415 - deferred: PySpark

    from . import transforms  # noqa: PLC0415 - as above

    batch.persist()
    try:
        whole = F.lit(True)
        for column in _REQUIRED:
            whole = whole & F.col(column).isNotNull()
        # One pass counts the rows read and those kept, and finds the kept rows' newest times
        # (the refused rows fall in groups of their own, with nothing kept).
        per = batch.groupBy("node", "group", "source").agg(
            F.count(F.lit(1)).alias("rows"), F.count_if(whole).alias("kept"),
            F.max(F.when(whole, F.col("timestamp"))).alias("timestamp"),
            F.max(F.when(whole, F.col("received_at"))).alias("received_at")).collect()
        total, kept = sum(r["rows"] for r in per), sum(r["kept"] for r in per)
        newest = [r.asDict() for r in per if r["kept"]]
        if not kept:
            return [], [], [], total, total
        good = batch.filter(whole)
        held = [r.asDict() for r in transforms.held_ranges(good).collect()]
        counts = [r.asDict() for r in transforms.delay_counts(good).collect()]
        return held, counts, newest, total, total - kept
    finally:
        batch.unpersist()


class Live:
    """The streaming queries and the state they feed; ``on_update`` gets each update's document.

    Two queries: the events (each micro-batch an update), and the statistics
    rows, whose micro-batches only learn the names the nodes go by
    (:func:`.transforms.node_names`), shown beside their ids from the next update on."""

    def __init__(self, spark: Any, inputs: Sequence[tuple[str, str]], on_update: Callable[[dict[str, Any]], None], *,
                 trigger: float = 2.0, recent: float = 60.0) -> None:
        self.state = LiveState(recent=recent)
        self.refused_rows = 0
        self.on_update = on_update
        self._lock = threading.Lock()  # the two queries' micro-batches run in threads of their own
        self.checkpoint = tempfile.mkdtemp(prefix="huddle-live-")
        # Names seldom change and the statistics parts come every poll with a snapshot: their
        # query runs less often, not to take the events' CPU.
        every = {"events": trigger, "stats": max(NAMES_SECONDS, trigger)}
        self.queries = [
            (_stream(spark, inputs, stem).writeStream.foreachBatch(self._batch if stem == "events" else self._names)
             .option("checkpointLocation", f"{self.checkpoint}/{stem}")
             .trigger(processingTime=f"{every[stem]} seconds").start())
            for stem in ("events", "stats")]

    def _batch(self, batch: Any, batch_id: int) -> None:
        started = time.perf_counter()
        held, counts, newest, rows, refused = facts(batch)
        with self._lock:
            self.refused_rows += refused
            self.state.merge(held, counts, newest, rows)
            doc = self.state.report(batch_rows=rows) | {"batch": batch_id, "refused_rows": self.refused_rows,
                                                        "batch_seconds": round(time.perf_counter() - started, 3)}
            self.on_update(doc)  # under the lock: the two queries' updates come out in order

    def _names(self, batch: Any, batch_id: int) -> None:
        from . import transforms  # noqa: PLC0415 - deferred: PySpark

        named = {r["node"]: r["name"] for r in transforms.node_names(
            batch.dropna(subset=["node", "group", "ts", "event"])).collect()}
        with self._lock:
            if all(self.state.names.get(node) == name for node, name in named.items()):
                return  # nothing new to show
            self.state.names.update(named)
            self.on_update(self.state.report() | {"refused_rows": self.refused_rows})  # a name learnt is an update

    def failed(self) -> BaseException | None:
        """Why a query stopped by itself, if one did (None while both run)."""
        for query in self.queries:
            if not query.isActive:
                return query.exception() or PipelineError("a streaming query stopped")
        return None

    def stop(self) -> None:
        try:
            for query in self.queries:
                query.stop()
        finally:
            shutil.rmtree(self.checkpoint, ignore_errors=True)


def live_command(args: argparse.Namespace) -> int:
    """The exit status of ``huddle pipeline live`` with ``args``: 0 once stopped
    by Ctrl-C or SIGTERM (or after ``--updates``), else a failure's status."""
    try:
        return _live(args)
    except PipelineError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"huddle pipeline: {exc}", file=sys.stderr)
        return exc.exit_status
    except ConfigError:
        raise
    except Exception as exc:  # a Spark failure no check foresaw: its cause, not its stack
        if args.debug:
            raise
        print(f"huddle pipeline: the live audit failed: {first_line(exc)} (--debug shows the stacks)", file=sys.stderr)
        return EXIT_FAILED


def _live(args: argparse.Namespace) -> int:
    if args.trigger <= 0:
        raise ConfigError(f"--trigger must be positive, got {args.trigger}")
    if args.recent <= 0:
        raise ConfigError(f"--recent must be positive, got {args.recent}")
    inputs = check_live_inputs(args.input)
    missing = missing_modules()
    if missing:
        raise SparkSetupError(f"the pipeline needs the 'pipeline' extra, not installed here (no {', '.join(missing)}): "
                              f"{INSTALL}")
    from .livepage import LivePage  # noqa: PLC0415 - deferred: only --serve serves
    from .session import start_session  # noqa: PLC0415 - deferred: PySpark

    page = None
    if args.serve is not None:
        try:
            page = LivePage(args.bind, args.serve)
        except OSError as exc:
            raise ConfigError(f"--serve {args.serve}: cannot listen on {args.bind}: {exc.strerror}") from None
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    if not args.debug:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    started = time.perf_counter()
    _say(args, f"spark {args.master} starting …")
    spark = start_session(args.master, {"spark.sql.streaming.forceDeleteTempCheckpointLocation": "true"},
                          log_level="WARN" if args.debug else "OFF", stacks=args.debug)
    _say(args, f"spark {spark.sparkContext.master} up in {time.perf_counter() - started:.1f} s; "
               f"watching {len(inputs)} inputs, a micro-batch every {args.trigger:g} s")
    if page is not None:
        page.start()
        _say(args, f"live page at http://{args.bind}:{page.port}/")
    updates = 0

    def told(doc: dict[str, Any]) -> None:
        nonlocal updates
        updates += 1
        print(json.dumps(doc, default=str) if args.json else line(doc), flush=True)
        if page is not None:
            page.publish(doc)
        if args.updates and updates >= args.updates:
            stop.set()

    live = Live(spark, inputs, told, trigger=args.trigger, recent=args.recent)
    failed = None
    try:
        while not stop.wait(0.2):
            failed = live.failed()
            if failed is not None:
                break
    finally:
        live.stop()
        if page is not None:
            page.close()
        spark.stop()
    if failed is not None:
        raise PipelineError(f"the stream stopped: {first_line(failed)}")
    return 0


def _say(args: argparse.Namespace, text: str) -> None:
    if not args.quiet:
        print(text, file=sys.stderr, flush=True)
