"""The pipeline's jobs: read, transform, write.  :func:`run` takes a session;
:func:`run_session` makes one for the CLI.  Each job is also a function of
DataFrames (:func:`consolidate`, :func:`convergence`, :func:`propagation`,
:func:`replay`, :func:`bout`, :func:`system`, :func:`names`), for a notebook or another
Spark job with its own session: nothing written, every table a plan to show,
join or write (docs/pipeline.md, "In a notebook").

Each job writes Parquet directories under the output path (docs/pipeline.md):

- ``consolidate``: ``consolidated``, ``conflicts``
- ``convergence``: ``held_ranges``, ``missing``, ``gaps``
- ``propagation``: ``delays``, ``delay_histogram``, ``throughput``
- ``replay``: ``documents``, ``replay``
- ``bout``: ``bout``, ``bout_penalties``, ``bout_writers``, ``bout_corrections``, and the group's
  final bout as ``bout-GROUP.xml`` (the document) and ``bout-GROUP.json`` (its summary)
- ``system``: ``membership``, ``node_health``, ``snapshots``

and, where the inputs have statistics rows, ``names`` (the name each node went by),

and every run writes ``summary`` (one row of headline numbers) and
``report.html`` (the findings and plots, for a person, readable without Spark).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from py4j.protocol import Py4JJavaError
from pyspark.errors import PySparkException
from pyspark.sql import Column, DataFrame, Observation, SparkSession
from pyspark.sql import functions as F

from ..doc.model import Element
from ..doc.ops import DOC_KIND
from ..errors import ConfigError
from . import schemas
from . import transforms as T
from .bout import replay_bout
from .errors import InputError, first_line
from .io import check_local, check_output, count_from_footers, find_bad_line, read_events, read_stats, write_table, write_text
from .remote import connect_session, parse_remote
from .report import ReportData, render
from .session import launched_by_spark_submit, start_session

__all__ = [
    "JOBS", "Bout", "BoutWriter", "Consolidated", "Convergence", "Propagation", "Replay", "Summary", "System", "bout",
    "check_jobs", "consolidate", "convergence", "names", "parse_jobs", "propagation", "read_events", "read_stats",
    "replay", "run", "run_session", "system",
]

JOBS = ("consolidate", "convergence", "propagation", "replay", "bout", "system")

# Rows of each detail table the report shows (the Parquet tables have them all).
REPORT_ROWS = 50
# A table of at most this many rows is collected whole and summarised here, not by Spark jobs.
SMALL_ROWS = 10_000
# The report's rows that go into Summary.details (`huddle pipeline run --json`): the findings'
# evidence, not the plots' series (histogram, throughput, snapshots) nor the documents' XML.
DETAIL_TABLES = ("conflicts", "missing", "missing_by_node", "gaps", "delays", "replay", "bout", "bout_penalties",
                 "bout_writers", "bout_corrections", "health")


@dataclass
class Summary:
    """Headline numbers of a run (None: the job that finds it did not run)."""

    rows: int
    nodes: int
    groups: int
    events: int | None = None
    conflicts: int | None = None
    missing_ranges: int | None = None
    missing_events: int | None = None
    gap_events: int | None = None
    worst_p99: float | None = None
    worst_receiver: str | None = None
    divergent: list[str] | None = None  # nodes whose document is not their group's, or not what they showed
    misshown: list[str] = field(default_factory=list)  # nodes that showed another document than their events make
    stats_rows: int | None = None
    timeouts: int | None = None
    suspects: int | None = None
    exclusions: int | None = None
    # per group with a bout: its final score, jams, penalties, corrections, status and sign-off (the bout job)
    bouts: list[dict[str, Any]] | None = None
    bout_disagree: list[str] = field(default_factory=list)  # nodes whose bout is not their group's
    bout_files: list[str] = field(default_factory=list)  # the groups' final bouts: document (XML), summary (JSON)
    tables: list[str] = field(default_factory=list)
    names: dict[str, str] = field(default_factory=dict)  # node id -> the name it went by (table names)
    # The rows behind the findings, as the report shows them: table name -> its first rows (DETAIL_TABLES).
    details: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    def who(self, node: str | None) -> str:
        """A node for a person: ``bob (35c9e1d4)``, or its id's first 8 digits when no name is known."""
        text = str(node)
        return f"{self.names[text]} ({text[:8]})" if text in self.names else text[:8]

    @property
    def converged(self) -> bool | None:
        """Every node holds every event some node holds, no copies differ, and
        every node's document is its group's (None: convergence did not run)."""
        if self.missing_ranges is None:
            return None
        return self.missing_ranges == 0 and not self.conflicts and not self.divergent

    def lines(self) -> list[str]:
        """The findings, for a person: worst news first."""
        out: list[str] = []
        if self.converged is not None:
            out.append("converged: every node holds every event" + (" and the same document" if self.divergent == [] else "")
                       if self.converged else "NOT converged")
        if self.conflicts:
            out.append(f"integrity: {self.conflicts} event(s) have different content on different nodes (table conflicts)")
        if self.missing_ranges:
            out.append(f"missing: {self.missing_events} event copies in {self.missing_ranges} range(s) (table missing)")
        if self.gap_events:
            out.append(f"lost: {self.gap_events} event(s) below a source's last number that no node holds (table gaps)")
        if self.misshown:
            out.append(f"documents: {len(self.misshown)} node(s) showed another document than their own events make: "
                       f"{', '.join(self.who(n) for n in self.misshown[:10])} (table replay, column shown)")
        differ = [n for n in self.divergent or [] if n not in self.misshown]
        if differ:
            out.append(f"documents: {len(differ)} node(s) differ from their group's document: "
                       f"{', '.join(self.who(n) for n in differ[:10])} (table replay)")
        for b in self.bouts or []:
            out.append(f"bout ({b['group']}): {b['home_name'] or 'home'} {b['home']} - {b['away']} "
                       f"{b['away_name'] or 'away'}, {b['jams']} jams, {b['penalties']} penalties, {b['corrections']} "
                       f"correction(s), {b['status'] or 'not final'}" + (f", signed by {b['signed']}" if b["signed"] else "")
                       + " (tables bout, bout_penalties, bout_writers, bout_corrections)")
        if self.bout_disagree:
            out.append(f"bout: {len(self.bout_disagree)} node(s) record another bout than their group's: "
                       f"{', '.join(self.who(n) for n in self.bout_disagree[:10])} (table bout)")
        if self.worst_p99 is not None:
            out.append(f"worst lag: receiver {self.who(self.worst_receiver)}, p99 delay {self.worst_p99 * 1000:.1f} ms "
                       "(table delays)")
        if self.timeouts or self.suspects or self.exclusions:
            out.append(f"system: {self.suspects} heartbeat loss(es), {self.timeouts} peer timeout(s), "
                       f"{self.exclusions} exclusion(s) (table node_health)")
        counted = f"{self.rows} rows from {self.nodes} node(s) in {self.groups} group(s)"
        out.append(f"input: {counted}" + ("" if self.events is None else f", {self.events} distinct events"))
        return out


def _by_node(missing: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Missing ranges summed per (group, node): group, node, events, ranges; most events first."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in missing:
        row = out.setdefault((r["group"], r["node"]), {"group": r["group"], "node": r["node"], "events": 0, "ranges": 0})
        row["events"] += r["events"]
        row["ranges"] += 1
    return sorted(out.values(), key=lambda r: (-r["events"], r["group"], r["node"]))


def _join(base: str, name: str) -> str:
    return f"{base.rstrip('/')}/{name}"


def parse_jobs(text: str, flag: str = "") -> list[str]:
    """``consolidate,convergence`` -> the jobs, checked (:class:`ConfigError`, naming ``flag`` if given)."""
    jobs = [j.strip() for j in text.split(",") if j.strip()]
    check_jobs(jobs, flag)
    return jobs


def check_jobs(jobs: Sequence[str], flag: str = "") -> None:
    """Raise :class:`ConfigError` unless ``jobs`` is a non-empty subset of :data:`JOBS`."""
    unknown = sorted(set(jobs) - set(JOBS))
    if unknown or not jobs:
        where = f" in {flag}" if flag else ""
        raise ConfigError(f"unknown job(s) {', '.join(unknown) or '(none given)'}{where}: choose from {', '.join(JOBS)}")


# ------------------------------------------------------------------ the jobs as functions of DataFrames
#
# ``events`` and ``stats`` as :func:`read_events` and :func:`read_stats` give them (or any
# DataFrame in schemas.EVENTS / schemas.STATS).  run() makes the same tables, each written and
# read back before the next step, and consolidates by a faster path (docs/pipeline.md).


class Consolidated(NamedTuple):
    """consolidate's tables."""

    consolidated: DataFrame  # one row per event (group, source, seq)
    conflicts: DataFrame  # every copy of an event whose copies differ


class Convergence(NamedTuple):
    """convergence's tables."""

    held_ranges: DataFrame  # runs of consecutive numbers each node holds from each source
    missing: DataFrame  # ranges a node lacks that some node holds
    gaps: DataFrame  # ranges below a source's highest number that no node holds


class Propagation(NamedTuple):
    """propagation's tables."""

    delays: DataFrame  # p50/p90/p99/max delay by source, receiver, hops and link
    delay_histogram: DataFrame  # receipts per quarter decade of delay
    throughput: DataFrame  # events originated and copies received per window


class Replay(NamedTuple):
    """replay's tables."""

    documents: DataFrame  # each node's document from its doc events, and the group's (node "*")
    replay: DataFrame  # per node: its document against the group's, and against the one it showed


class Bout(NamedTuple):
    """bout's tables."""

    bout: DataFrame  # each node's bout and its group's (node "*"): score, jams, penalties, same
    bout_penalties: DataFrame  # the group's bout: penalties per team and skater
    bout_writers: DataFrame  # the group's bout: operations per source, role and kind
    bout_corrections: DataFrame  # the group's bout: every correction, by whom, of whose value


class System(NamedTuple):
    """system's tables."""

    membership: DataFrame  # joins, leaves, timeouts, exclusions: a row each
    node_health: DataFrame  # per node, counted
    snapshots: DataFrame  # the periodic counter snapshots


def consolidate(events: DataFrame) -> Consolidated:
    """One row per event and the copies that conflict (the direct aggregate:
    right whatever copies the inputs hold)."""
    table = events.transform(T.consolidate)
    return Consolidated(table, T.conflicts(events, table))


def convergence(events: DataFrame) -> Convergence:
    """What each node holds, lacks, and what no node holds, as sequence ranges."""
    held = events.transform(T.held_ranges)
    return Convergence(held, held.transform(T.missing), held.transform(T.gaps))


def propagation(events: DataFrame, consolidated: DataFrame, window_seconds: float = 1.0) -> Propagation:
    """Delays from origin to each receipt, and throughput per ``window_seconds``
    (``consolidated``: :func:`consolidate`'s first table)."""
    if window_seconds <= 0:
        raise ConfigError(f"the throughput window must be positive, got {window_seconds}")
    counts = T.delay_counts(events)
    return Propagation(T.delays_of(counts), T.delay_histogram_of(counts), T.throughput(events, consolidated, window_seconds))


def replay(events: DataFrame, stats: DataFrame) -> Replay:
    """Each node's document made again by huddle's own engine, against the
    group's and against the one the node showed (its ``document`` statistics rows)."""
    docs = events.transform(T.documents)
    last_shown = stats.transform(T.shown)
    return Replay(docs, T.replay(events, docs, last_shown, T.shown_documents(events, last_shown)))


def bout(events: DataFrame) -> Bout:
    """The roller-derby bout the ``doc`` events make, per node and per group, and the group's
    in detail: penalties, who recorded what, corrections (docs/pipeline.md, "bout")."""
    return Bout(T.bouts(events), T.bout_penalties(events), T.bout_writers(events), T.bout_corrections(events))


def system(stats: DataFrame) -> System:
    """Membership changes, each node's health and its counter snapshots."""
    return System(stats.transform(T.membership), stats.transform(T.node_health), stats.transform(T.snapshots))


def names(stats: DataFrame) -> DataFrame:
    """``group, node, name``: the name each node went by, as its peers knew it."""
    return stats.transform(T.node_names)


# ------------------------------------------------------------------ running the jobs

Progress = Callable[[str], None]  # told a line as each job starts and ends (the CLI prints them on stderr)
# Given each group's final bout as Python values: the group, the document's root, its summary
# (doc/summary.py), e.g. to write a statsbook from them.
BoutWriter = Callable[[str, Element, dict[str, Any]], None]


class _Steps:
    """The progress lines of a run: ``job 2/6 convergence …`` as a job starts,
    ``job 2/6 convergence done in 1.4 s`` as it ends (when the next starts)."""

    def __init__(self, progress: Progress | None, jobs: Sequence[str]) -> None:
        self.progress, self.jobs = progress, list(jobs)
        self.name: str | None = None
        self.started = 0.0

    def _say(self, what: str) -> None:
        if self.progress is not None and self.name is not None:
            self.progress(f"job {self.jobs.index(self.name) + 1}/{len(self.jobs)} {self.name} {what}")

    def start(self, name: str) -> None:
        self.done()
        self.name, self.started = name, time.perf_counter()
        self._say("…")

    def done(self) -> None:
        self._say(f"done in {time.perf_counter() - self.started:.1f} s")
        self.name = None


# A server on one of these names reads and writes this machine's files: a --remote there has
# its inputs and output checked here first, as a local run has.
_THIS_MACHINE = ("127.0.0.1", "localhost", "::1")


def run_session(inputs: Sequence[str], output: str, *, jobs: Sequence[str] = JOBS, master: str | None = None,
                remote: str | None = None, conf: Mapping[str, str] | None = None, window_seconds: float = 1.0,
                progress: Progress | None = None, log_level: str = "WARN", stacks: bool = True,
                bout_writer: BoutWriter | None = None) -> Summary:
    """:func:`run` in a session of its own, stopped at the end (the CLI's entry).
    The local inputs and output are checked before Spark starts (its seconds
    are not spent on a typo); ``log_level`` and ``stacks`` go to :func:`start_session`.
    ``remote``: an ``sc://`` address, the session is on that Spark Connect
    server (:mod:`.remote`; the paths are the server's, checked here when it
    is on this machine)."""
    check_jobs(jobs)
    if window_seconds <= 0:
        raise ConfigError(f"the throughput window must be positive, got {window_seconds}")
    if remote is None or parse_remote(remote)[0] in _THIS_MACHINE:
        check_local(inputs)
        check_output(output)
    started = time.perf_counter()
    if remote is not None:
        if progress is not None:
            progress(f"spark {remote} connecting …")
        spark = connect_session(remote, conf)
        if progress is not None:
            progress(f"spark {remote} connected in {time.perf_counter() - started:.1f} s")
        try:
            return run(spark, inputs, output, jobs=jobs, window_seconds=window_seconds, progress=progress,
                       bout_writer=bout_writer)
        finally:
            spark.stop()  # the client's session; the server goes on
    if progress is not None:
        progress(f"spark {master or ('(spark-submit)' if launched_by_spark_submit() else 'local[*]')} starting …")
    spark = start_session(master, conf, log_level=log_level, stacks=stacks)
    if progress is not None:
        progress(f"spark {spark.sparkContext.master} up in {time.perf_counter() - started:.1f} s")
    try:
        return run(spark, inputs, output, jobs=jobs, window_seconds=window_seconds, progress=progress,
                   bout_writer=bout_writer)
    finally:
        spark.stop()


def _check_events(events: DataFrame, inputs: Sequence[str]) -> tuple[int, int, int]:
    """(rows, nodes, groups) of the input; an :class:`InputError` if a row breaks
    the schema (a JSON line that does not parse, a required value null).

    From the Parquet footers when they can tell (``huddle export``'s files:
    required columns declared so, one node and group per row group), else one
    pass over the rows."""
    footers = count_from_footers(events.inputFiles(), schemas.EVENTS)
    if footers is not None:  # huddle's own Parquet export: the footers answer without reading a row
        if not footers.rows:
            raise InputError("the inputs hold no events")
        return footers.rows, len(footers.nodes), len(footers.groups)
    required = [f.name for f in schemas.EVENTS.fields if not f.nullable]
    broken = F.count(F.when(F.greatest(*(F.col(c).isNull() for c in required)), True))
    try:  # per (group, node): a few rows out, counted in a hash table (a count of distinct strings sorts them all)
        found = events.groupBy("group", "node").agg(F.count(F.lit(1)).alias("rows"), broken.alias("broken")).collect()
    except (PySparkException, Py4JJavaError) as exc:  # FAILFAST: a malformed JSON line, a Parquet column of another type
        where = find_bad_line(inputs) or first_line(exc)  # a local JSON line: named, file and line
        raise InputError(f"an input file does not match the export's schema (docs/export.md): {where}") from None
    bad = sum(int(r["broken"]) for r in found)
    if bad:
        raise InputError(f"{bad} input row(s) lack a required column ({', '.join(required)}); "
                         "are these huddle export files? (docs/export.md)")
    if not found:
        raise InputError("the inputs hold no events")
    return sum(int(r["rows"]) for r in found), len({r["node"] for r in found}), len({r["group"] for r in found})


def run(spark: SparkSession, inputs: Sequence[str], output: str, *, jobs: Sequence[str] = JOBS,
        window_seconds: float = 1.0, progress: Progress | None = None, bout_writer: BoutWriter | None = None) -> Summary:
    """Run ``jobs`` (a subset of :data:`JOBS`, in any order) over the exports
    under ``inputs``, writing tables and ``report.html`` under ``output``.
    ``progress``: told a line as each job starts and ends (propagation needs
    the consolidated events: with it, consolidate is counted as run too).
    ``bout_writer``: with the bout job, given each group's final bout (:data:`BoutWriter`)."""
    check_jobs(jobs)
    if window_seconds <= 0:
        raise ConfigError(f"the throughput window must be positive, got {window_seconds}")
    steps = _Steps(progress, [j for j in JOBS if j in jobs or (j == "consolidate" and "propagation" in jobs)])
    events = read_events(spark, inputs)
    rows, nodes, groups = _check_events(events, inputs)
    summary = Summary(rows=rows, nodes=nodes, groups=groups)
    data = ReportData(inputs=list(inputs), jobs=list(jobs))

    def write(name: str, df: DataFrame, *, files: int | None = 1, counted: Mapping[str, Column] | None = None,
              keep: Column | None = None) -> DataFrame:
        """Write, then read back: later steps start from the stored table, not
        from the plan.  ``counted``: aggregates over the rows, computed while
        they are written (no pass of their own), into ``metrics[name]``;
        ``keep``: the rows written, of those counted (all when None)."""
        path = _join(output, name)
        observation = None
        if counted:
            observation = Observation(name)
            df = df.observe(observation, *(c.alias(k) for k, c in counted.items()))
        write_table(df if keep is None else df.filter(keep), path, files)
        if observation is not None:
            metrics[name] = observation.get
        summary.tables.append(name)
        return spark.read.schema(df.schema).parquet(path)

    def rows_of(df: DataFrame, *order: Any, limit: int = REPORT_ROWS) -> list[dict[str, Any]]:
        return [r.asDict() for r in df.orderBy(*order).limit(limit).collect()]

    def small(df: DataFrame, count: int, *order: str) -> list[dict[str, Any]] | None:
        """All ``count`` rows of ``df`` sorted by ``order`` (descending the first),
        when they are few enough to sort here; None otherwise."""
        if count > SMALL_ROWS:
            return None
        got = [r.asDict() for r in df.collect()]
        return sorted(got, key=lambda r: (-r[order[0]], *(r[k] for k in order[1:])))

    metrics: dict[str, dict[str, Any]] = {}
    consolidated: DataFrame | None = None
    if "consolidate" in jobs or "propagation" in jobs:
        steps.start("consolidate")
        # The events whose source's own copy is here (all, usually) without sorting their
        # contents; the others, counted as they go by, from consolidate itself.
        consolidated = write("consolidated", events.transform(T.consolidate_from_sources), files=None,
                             keep=F.col("timestamp").isNotNull(),
                             counted={"n": F.count(F.lit(1)), "c": F.count(F.when(F.col("conflict"), True)),
                                      "lacking": F.count(F.when(F.col("timestamp").isNull(), True))})
        if metrics["consolidated"]["lacking"]:
            lacking = events.transform(T.lacking_source_copy)
            rest = events.join(lacking, T.KEY, "left_semi").transform(T.consolidate)
            write_table(rest, _join(output, "consolidated"), None, append=True)
            consolidated = spark.read.schema(schemas.CONSOLIDATED).parquet(_join(output, "consolidated"))
            # Counted again from the table: an event whose source's copy was given twice had a row per copy.
            metrics["consolidated"] = {"n": consolidated.count(), "c": consolidated.filter(F.col("conflict")).count()}
    if "consolidate" in jobs and consolidated is not None:
        summary.events, summary.conflicts = int(metrics["consolidated"]["n"]), int(metrics["consolidated"]["c"])
        # No conflict (the usual case): no pass over the input to find the copies of none.
        found = T.conflicts(events, consolidated) if summary.conflicts else spark.createDataFrame([], schemas.CONFLICTS)
        conflicting = write("conflicts", found)
        data.conflicts = rows_of(conflicting, "group", "source", "seq", "node") if summary.conflicts else []
    if "convergence" in jobs:
        steps.start("convergence")
        held = write("held_ranges", events.transform(T.held_ranges), files=None)
        totals = {"n": F.count(F.lit(1)), "e": F.sum("events")}
        lacking = write("missing", held.transform(T.missing), counted=totals)
        lost = write("gaps", held.transform(T.gaps), counted=totals)
        summary.missing_ranges = int(metrics["missing"]["n"])
        summary.missing_events = int(metrics["missing"]["e"] or 0)
        summary.gap_events = int(metrics["gaps"]["e"] or 0)
        # Usually a few rows (none when converged): sorted and summed here, without a job each.
        every = small(lacking, summary.missing_ranges, "events", "node", "source", "first_seq")
        if every is None:
            data.missing = rows_of(lacking, F.desc("events"), "node", "source", "first_seq")
            data.missing_by_node = rows_of(
                lacking.groupBy("group", "node").agg(F.sum("events").alias("events"), F.count(F.lit(1)).alias("ranges")),
                F.desc("events"), limit=1000)
        else:
            data.missing = every[:REPORT_ROWS]
            data.missing_by_node = _by_node(every)[:1000]
        gone = small(lost, int(metrics["gaps"]["n"]), "events", "source", "first_seq")
        data.gaps = rows_of(lost, F.desc("events"), "source", "first_seq") if gone is None else gone[:REPORT_ROWS]
    if "propagation" in jobs and consolidated is not None:
        steps.start("propagation")
        # One pass over the receipts for the delays and the histogram: counted per fine
        # delay bucket and the rest of the keys, a few thousand rows kept in memory.
        counts = T.delay_counts(events).persist()
        lag = write("delays", T.delays_of(counts))
        hist = write("delay_histogram", T.delay_histogram_of(counts))
        counts.unpersist()
        flow = write("throughput", T.throughput(events, consolidated, window_seconds))
        data.delays = rows_of(lag, "group", "by", F.desc("p99"), limit=10_000)
        data.histogram = rows_of(hist, "group", "bucket", limit=10_000)
        data.throughput = rows_of(flow, "group", "window_start", limit=100_000)
        data.window_seconds = window_seconds
        # What the delays' mesh times rest on (the report says so): each node's measured clock offsets.
        synced = read_stats(spark, inputs).filter(F.col("event") == "clock_synced").select(
            "group", "node", "peer", "ts", F.get_json_object("detail", "$.offset").cast("double").alias("offset"),
            F.get_json_object("detail", "$.rtt_ms").cast("double").alias("rtt_ms"))
        data.clocks = rows_of(synced, "group", "node", "ts", limit=1000)
        worst = [r for r in data.delays if r["by"] == "receiver"]
        if worst:
            top = max(worst, key=lambda r: r["p99"])
            summary.worst_p99, summary.worst_receiver = float(top["p99"]), str(top["key"])
    if "replay" in jobs:
        steps.start("replay")
        docs = write("documents", events.transform(T.documents))
        last_shown = read_stats(spark, inputs).transform(T.shown)
        remade = T.shown_documents(events, last_shown)
        checked = write("replay", T.replay(events, docs, last_shown, remade))
        data.replay = rows_of(checked, "same", "group", "node", limit=1000)
        data.documents = rows_of(docs.filter(F.col("node") == T.GROUP_DOCUMENT), "group", limit=20)
        summary.misshown = [str(r["node"]) for r in data.replay if r["shown"] == "differs"]
        summary.divergent = [str(r["node"]) for r in data.replay if not r["same"] or r["shown"] == "differs"]
    if "bout" in jobs:
        steps.start("bout")
        _bout_job(spark, events, output, summary=summary, data=data, write=write, bout_writer=bout_writer)
    if "system" in jobs:
        steps.start("system")
        stats = read_stats(spark, inputs)
        member = write("membership", stats.transform(T.membership))
        health = write("node_health", stats.transform(T.node_health))
        snaps = write("snapshots", stats.transform(T.snapshots))
        data.health = rows_of(health, "group", "node", limit=1000)
        data.membership = rows_of(member, "ts", limit=500)
        data.snapshots = rows_of(snaps.select("group", "node", "ts", "peers", "peers_alive", "received", "sent"),
                                 "node", "ts", limit=20_000)
        summary.stats_rows = int(stats.count())
        summary.timeouts = sum(int(r["timeouts"]) for r in data.health)
        summary.suspects = sum(int(r["suspects"]) for r in data.health)
        summary.exclusions = sum(int(r["exclusions"]) for r in data.health)
    steps.done()
    named = read_stats(spark, inputs).transform(T.node_names)
    summary.names = {str(r["node"]): str(r["name"]) for r in named.collect()}  # a row a node: few
    if summary.names:
        write("names", named)
    data.names = summary.names
    summary.tables.append("summary")
    spark.createDataFrame([(
        summary.rows, summary.events, summary.conflicts, summary.missing_ranges, summary.missing_events,
        summary.gap_events, summary.worst_p99, None if summary.divergent is None else len(summary.divergent),
        summary.converged,
    )], schemas.SUMMARY).coalesce(1).write.mode("overwrite").parquet(_join(output, "summary"))
    data.findings = summary.lines()
    data.converged = summary.converged
    summary.details = {name: getattr(data, name) for name in DETAIL_TABLES if getattr(data, name)}
    write_text(spark, _join(output, "report.html"), render(data))
    summary.tables.append("report.html")
    return summary


def _bout_job(spark: SparkSession, events: DataFrame, output: str, *, summary: Summary, data: ReportData,
              write: Callable[..., DataFrame], bout_writer: BoutWriter | None) -> None:
    """The bout job's part of :func:`run`: its four tables, each group's final bout as files
    beside them (and to ``bout_writer``), the findings' numbers.  Inputs with no ``doc``
    event hold no bout: nothing is written (one look at the events, not a Spark job a table)."""
    summary.bouts = []
    if not events.filter(F.col("kind") == DOC_KIND).limit(1).collect():
        return
    tables = bout(events)
    rows = [r.asDict() for r in write("bout", tables.bout).orderBy("group", "node").collect()]  # a row a node: few
    penalties = write("bout_penalties", tables.bout_penalties)
    writers = write("bout_writers", tables.bout_writers)
    fixes = write("bout_corrections", tables.bout_corrections)
    data.bout = [{k: v for k, v in r.items() if k not in ("summary", "xml")} for r in rows]
    data.bout_penalties = [r.asDict() for r in penalties.orderBy(F.desc("penalties"), "team", "number").limit(
        REPORT_ROWS).collect()]
    data.bout_writers = [r.asDict() for r in writers.orderBy("group", "source", "role", "what").limit(1000).collect()]
    data.bout_corrections = [r.asDict() for r in fixes.orderBy("group", "timestamp", "source", "seq").limit(
        REPORT_ROWS).collect()]
    summary.bout_disagree = [str(r["node"]) for r in rows if not r["same"]]
    for r in rows:
        if r["node"] != T.GROUP_DOCUMENT or not r["doc_events"]:
            continue
        got = json.loads(r["summary"])
        named = {f"{t}_name": got["teams"][t]["name"] for t in ("home", "away")}
        data.bout_jams.extend({"group": r["group"], **j} for j in got["jams"])
        data.bout = [x | named if (x["group"], x["node"]) == (r["group"], r["node"]) else x for x in data.bout]
        summary.bouts.append({k: r[k] for k in ("group", "home", "away", "jams", "penalties", "corrections", "status",
                                                "signed")} | named)
        stem = _join(output, "bout-" + (re.sub(r"[^A-Za-z0-9_.-]", "_", str(r["group"])) or "_"))
        write_text(spark, stem + ".xml", str(r["xml"]))
        write_text(spark, stem + ".json", json.dumps(got, indent=2, sort_keys=True) + "\n")
        summary.bout_files += [stem + ".xml", stem + ".json"]
        if bout_writer is not None:  # the document itself, made again here from the group's events: a bout is small
            group = events.filter((F.col("group") == r["group"]) & (F.col("kind") == DOC_KIND)).transform(T.consolidate)
            replayed = replay_bout((x["source"], x["seq"], x["timestamp"], x["body"]) for x in group.select(
                "source", "seq", "timestamp", "body").toLocalIterator())
            bout_writer(str(r["group"]), replayed.root, replayed.summary())
