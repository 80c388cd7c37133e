"""Explicit schemas: the export's two tables (docs/export.md) and every table the
pipeline writes (docs/pipeline.md).  Nothing is inferred: readers are given
these, and the tests compare against them.

Spark reads every file column as nullable, whatever the file says; the
``nullable`` flags below state what the export promises and what the pipeline
writes, and the tests compare DataFrames ignoring nullability.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

__all__ = [
    "BOUT",
    "BOUT_CORRECTIONS",
    "BOUT_PENALTIES",
    "BOUT_ROWS",
    "BOUT_WRITERS",
    "CONFLICTS",
    "CONSOLIDATED",
    "DELAYS",
    "DELAY_HISTOGRAM",
    "DOCUMENTS",
    "DOCUMENT_DETAIL",
    "EVENTS",
    "GAPS",
    "HELD_RANGES",
    "MEMBERSHIP",
    "MISSING",
    "NAMES",
    "NODE_HEALTH",
    "REPLAY",
    "SHOWN",
    "SNAPSHOTS",
    "SNAPSHOT_DETAIL",
    "STATS",
    "SUMMARY",
    "THROUGHPUT",
]


def _f(name: str, kind: DataType, nullable: bool = False) -> StructField:
    return StructField(name, kind, nullable)


def _many(kind: DataType, *names: str, nullable: bool = False) -> list[StructField]:
    return [StructField(n, kind, nullable) for n in names]


def _text(*names: str) -> list[StructField]:
    return _many(StringType(), *names)


def _long(*names: str, nullable: bool = False) -> list[StructField]:
    return _many(LongType(), *names, nullable=nullable)


# ---- input: one row per event a node holds (huddle export / huddle simulate --export)
EVENTS = StructType([
    *_text("node", "group", "source"),
    _f("seq", LongType()),
    _f("timestamp", DoubleType()),
    *_text("kind", "body"),
    _f("hops", IntegerType()),
    _f("received_at", DoubleType()),
    _f("received_from", StringType(), nullable=True),
])

# ---- input: a node's statistics rows
STATS = StructType([
    *_text("node", "group"),
    _f("ts", DoubleType()),
    _f("event", StringType()),
    _f("peer", StringType(), nullable=True),
    _f("detail", StringType()),
])

# ---- consolidate
CONSOLIDATED = StructType([
    *_text("group", "source"),
    _f("seq", LongType()),
    _f("timestamp", DoubleType()),
    *_text("kind", "body"),
    _f("first_received_at", DoubleType(), nullable=True),
    _f("copies", LongType()),
    _f("conflict", BooleanType()),
])

CONFLICTS = StructType([
    *_text("group", "source"), _f("seq", LongType()), _f("node", StringType()),
    _f("timestamp", DoubleType()), *_text("kind", "body"),
])

# ---- convergence: ranges of sequence numbers, both ends included
HELD_RANGES = StructType([*_text("node", "group", "source"), *_long("first_seq", "last_seq")])
MISSING = StructType([*_text("node", "group", "source"), *_long("first_seq", "last_seq", "events")])
GAPS = StructType([*_text("group", "source"), *_long("first_seq", "last_seq", "events")])

# ---- propagation: delays in seconds (received_at - timestamp)
DELAYS = StructType([
    *_text("group", "by", "key"),  # by: source, receiver, hops, link
    _f("receipts", LongType()),
    *_many(DoubleType(), "p50", "p90", "p99", "max"),
])
DELAY_HISTOGRAM = StructType([_f("group", StringType()), _f("bucket", IntegerType()), _f("receipts", LongType())])
THROUGHPUT = StructType([_f("group", StringType()), _f("window_start", DoubleType()), *_long("originated", "receipts")])

# ---- replay: documents made by huddle.doc.DocEngine (node "*": the group's, from every node's events)
DOCUMENTS = StructType([*_text("group", "node"), *_long("doc_events", "applied", "dropped"), *_text("digest", "xml")])
REPLAY = StructType([
    *_text("group", "node"), *_long("doc_events", "group_doc_events"), _f("same", BooleanType()),
    _f("shown_ts", DoubleType(), True), _f("shown_doc_events", LongType(), True), _f("shown", StringType()),
])
# a node's last ``document`` statistics row (docs/export.md)
SHOWN = StructType([*_text("group", "node"), _f("ts", DoubleType()), _f("doc_events", LongType()),
                    _f("digest", StringType())])
DOCUMENT_DETAIL = StructType([_f("doc_events", LongType(), True), _f("digest", StringType(), True)])

# ---- bout: the bout each node's doc events make (node "*": the group's), and the group's bout in detail
_BOUT = [*_text("group", "node"), *_long("doc_events", "home", "away", "jams", "penalties", "corrections"),
         *_text("status", "signed", "digest", "summary", "xml")]
BOUT_ROWS = StructType(_BOUT)
BOUT = StructType([*_BOUT, _f("same", BooleanType())])  # same: the node's bout is its group's
BOUT_PENALTIES = StructType([*_text("group", "team", "number"), _f("penalties", LongType()), _f("codes", StringType())])
BOUT_WRITERS = StructType([*_text("group", "source", "role", "what"), _f("ops", LongType())])
BOUT_CORRECTIONS = StructType([
    *_text("group", "source", "role"), _f("seq", LongType()), _f("timestamp", DoubleType()),
    *_text("op", "tag", "eid", "attribute"), *_many(StringType(), "before", "after", nullable=True),
    *_text("wrote_source", "wrote_role"), _f("own", BooleanType()),
])

# ---- system picture, from the statistics rows
MEMBERSHIP = StructType([
    *_text("group", "node"), _f("ts", DoubleType()), _f("event", StringType()),
    *_many(StringType(), "peer", "name", "reason", nullable=True),
])
# the name each node went by, as its peers' statistics rows give it (its latest)
NAMES = StructType([*_text("group", "node", "name")])
NODE_HEALTH = StructType([
    *_text("group", "node"), *_many(DoubleType(), "first_ts", "last_ts"),
    *_long("joins", "leaves", "timeouts", "suspects", "refusals", "exclusions", "snapshots"),
])
_COUNTERS = ("received", "sent", "decode_errors", "refused", "send_dropped")
_LOG_COUNTERS = ("originated", "received", "duplicates", "resends")
# the parts of a snapshot row's detail the pipeline reads (docs/export.md); other keys are ignored
SNAPSHOT_DETAIL = StructType([
    *_long(*_COUNTERS, nullable=True),
    _f("log", StructType(_long(*_LOG_COUNTERS, nullable=True)), nullable=True),
    _f("peers", ArrayType(StructType([
        *_many(StringType(), "uuid", "state", nullable=True), _f("rtt_ms", DoubleType(), nullable=True),
    ])), nullable=True),
])
SNAPSHOTS = StructType([
    *_text("group", "node"), _f("ts", DoubleType()),
    *_long(*_COUNTERS, *(f"log_{c}" for c in _LOG_COUNTERS), nullable=True),
    _f("peers", IntegerType()),
    _f("peers_alive", IntegerType(), nullable=True),
    _f("rtt_ms_max", DoubleType(), nullable=True),
])

# ---- one row per run: the headline numbers (null: the job that finds it did not run)
SUMMARY = StructType([
    _f("rows", LongType()),
    *_long("events", "conflicts", "missing_ranges", "missing_events", "gap_events", nullable=True),
    _f("worst_p99", DoubleType(), nullable=True),
    _f("divergent_nodes", LongType(), nullable=True),
    _f("converged", BooleanType(), nullable=True),
])
