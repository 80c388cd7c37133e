"""The pipeline's pure transforms: ``DataFrame -> DataFrame``, no session, no I/O.

Inputs are in :data:`.schemas.EVENTS`; outputs are in the schema of the same
name in :mod:`.schemas`.  Use them with ``df.transform(...)`` or call them.

Sequence numbers are handled as ranges (``first_seq`` .. ``last_seq``, both
included), never as one row per missing number: a node that lacks a million
events lacks one range, and no step crosses nodes' rows with each other.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from ..doc import DocEngine, digest, to_xml
from ..doc.ops import DOC_KIND
from ..ids import NodeId
from ..wire import LogRecord
from . import schemas
from .bout import BoutReplay, replay_bout

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "KEY",
    "bout_corrections",
    "bout_penalties",
    "bout_writers",
    "bouts",
    "conflicts",
    "consolidate",
    "consolidate_from_sources",
    "delay_counts",
    "delay_histogram",
    "delay_histogram_of",
    "delays",
    "delays_of",
    "document_facts",
    "documents",
    "gaps",
    "held_ranges",
    "lacking_source_copy",
    "membership",
    "missing",
    "node_health",
    "node_names",
    "receipts",
    "replay",
    "shown",
    "shown_documents",
    "snapshots",
    "throughput",
    "union_ranges",
]

KEY = ["group", "source", "seq"]  # identifies an event across the mesh
_PAIR = ["group", "source"]
_CONTENT = ["timestamp", "kind", "body"]  # what every copy of an event must agree on


# ---------------------------------------------------------------- consolidate

def consolidate(events: DataFrame) -> DataFrame:
    """One row per event (group, source, seq).

    - ``timestamp``, ``kind``, ``body``: the source's own copy when it is
      there, otherwise the copy closest to the source (fewest hops, then the
      lowest node id);
    - ``first_received_at``: the earliest ``received_at`` on a node other than
      the source; null when only the source holds the event;
    - ``copies``: how many rows hold the event (one per node, each node's
      export given once);
    - ``conflict``: some copy differs from another in timestamp, kind or body
      (compared by a 64-bit hash of the three: a fixed-width value Spark
      aggregates in a hash table, where comparing the strings themselves
      makes it sort every row; two different contents with the same hash, a
      chance of 2^-64 a pair, would go unflagged).

    This is the definition.  :func:`consolidate_from_sources` gives the same
    rows faster for the events whose source's copy is among the rows (the
    usual case); ``jobs.run`` uses it, and this for the rest.
    """
    content = F.struct(*_CONTENT)
    digest = F.xxhash64(*_CONTENT)
    # ``min_by`` over a struct has no fixed-width buffer, so Spark aggregates by
    # sorting.  Two things make that cheap: the rows are hash-partitioned by the
    # key first (the copies of an event are in different nodes' files, so an
    # aggregate before the shuffle would merge nothing and cost a sort of its
    # own), and the sort key starts with ``seq``, a long, so the sort compares
    # 8-byte prefixes instead of the group and the 32-character source ids.
    by_seq = ["seq", "source", "group"]
    return (
        events.repartition(*by_seq)
        .groupBy(*by_seq)
        .agg(
            F.min_by(content, F.struct(F.col("node") != F.col("source"), "hops", "node")).alias("c"),
            F.min(F.when(F.col("node") != F.col("source"), F.col("received_at"))).alias("first_received_at"),
            F.count(F.lit(1)).alias("copies"),
            (F.min(digest) != F.max(digest)).alias("conflict"),
        )
        .select(*KEY, *(F.col("c")[c].alias(c) for c in _CONTENT), "first_received_at", "copies", "conflict")
    )


def consolidate_from_sources(events: DataFrame) -> DataFrame:
    """:func:`consolidate`'s rows without sorting any content: for an event
    whose source's own copy is among the rows once, the same row; for any
    other event, rows with only ``seq``, ``first_received_at``, ``copies``
    and ``conflict`` set (``group``, ``source`` and the content null; one
    row for each of the source's copies when there are several, as when an
    export is given twice), for :func:`consolidate` over that event's
    copies to replace (:func:`lacking_source_copy` finds them).

    How: the copies are counted in a hash aggregate of fixed-width values
    only (the key as the sequence number and a 64-bit hash of group and
    source, the content's hash, the receipt time), and the content is taken
    from the sources' own copies, one row an event, joined on the key (a
    sort-merge join: a hash join was no faster, and its tables cannot spill).
    At 10 M events this takes about two thirds of :func:`consolidate`'s
    time, which moves and sorts every copy's strings.  Two (group, source) pairs
    with the same 64-bit hash, a chance of 2^-64 for each pair of them,
    would have their events counted together.
    """
    pair = F.xxhash64(*_PAIR).alias("pair")
    received = F.when(F.col("node") != F.col("source"), F.col("received_at"))
    counted = (
        events.select("seq", pair, F.xxhash64(*_CONTENT).alias("digest"), received.alias("received"),
                      F.when(F.col("node") == F.col("source"), True).alias("own"))
        .repartition("seq", "pair")
        .groupBy("seq", "pair")
        .agg(
            F.min("received").alias("first_received_at"),
            F.count(F.lit(1)).alias("copies"),
            (F.min("digest") != F.max("digest")).alias("conflict"),
            F.count("own").alias("own"),
        )
    )
    own = events.filter(F.col("node") == F.col("source")).select("seq", pair, *_PAIR, *_CONTENT)
    once = F.col("own") == 1
    return (
        counted.join(own, ["seq", "pair"], "left")
        .select(*(F.when(once, F.col(c)).alias(c) for c in _PAIR), "seq", *(F.when(once, F.col(c)).alias(c) for c in _CONTENT),
                "first_received_at", "copies", "conflict")
    )


def lacking_source_copy(events: DataFrame) -> DataFrame:
    """The keys (group, source, seq) of the events with no copy, or more than
    one, that is their source's own: where :func:`consolidate_from_sources`
    has no content."""
    return (
        events.groupBy(*KEY)
        .agg(F.count(F.when(F.col("node") == F.col("source"), True)).alias("own"))
        .filter(F.col("own") != 1)
        .select(*KEY)
    )


def conflicts(events: DataFrame, consolidated: DataFrame) -> DataFrame:
    """Every node's copy of each event :func:`consolidate` flagged, so the
    versions can be compared: group, source, seq, node, timestamp, kind, body."""
    flagged = consolidated.filter(F.col("conflict")).select(*KEY)
    return events.join(flagged, KEY, "left_semi").select(*KEY, "node", *_CONTENT)


# ---------------------------------------------------------------- convergence

_BLOCK_BITS = 6  # held_ranges: sequence numbers are grouped in blocks of 2^6 = 64, one bit each


def held_ranges(events: DataFrame) -> DataFrame:
    """The runs of consecutive sequence numbers each node holds from each source:
    node, group, source, first_seq, last_seq."""
    # No sort of the rows: each node's numbers are gathered into 64-bit masks
    # (block = seq >> 6, bit = seq & 63) by a hash aggregate that merges most
    # rows before the shuffle (a row given twice sets the same bit).  The runs
    # in a mask are read off its bits (a run starts at a set bit whose lower
    # neighbour is clear and ends at one whose upper neighbour is clear), and
    # the runs that touch across blocks are merged like any adjacent ranges.
    low = (1 << _BLOCK_BITS) - 1
    blocks = events.groupBy(
        "node", *_PAIR, F.expr(f"shiftright(seq, {_BLOCK_BITS})").alias("block"),
    ).agg(F.expr(f"bit_or(shiftleft(1L, cast(seq & {low} as int)))").alias("bits"))
    starts = "bits & ~shiftleft(bits, 1)"
    ends = "bits & ~shiftrightunsigned(bits, 1)"

    def bits(mask: str) -> str:
        return f"filter(sequence(0, {low}), i -> (shiftrightunsigned({mask}, i) & 1L) = 1L)"

    runs = F.expr(
        f"CASE WHEN bits = -1L THEN array(named_struct('s', 0, 'e', {low})) "
        f"ELSE zip_with({bits(starts)}, {bits(ends)}, (s, e) -> named_struct('s', s, 'e', e)) END")
    base = F.col("block") * (1 << _BLOCK_BITS)
    pieces = blocks.select("node", *_PAIR, "block", F.inline(runs)).select(
        "node", *_PAIR, (base + F.col("s")).alias("first_seq"), (base + F.col("e")).alias("last_seq"))
    return _merge(pieces, ["node", *_PAIR])


def _merge(ranges: DataFrame, keys: list[str]) -> DataFrame:
    """Overlapping or adjacent ranges with the same ``keys`` merged into one."""
    ordered = Window.partitionBy(*keys).orderBy("first_seq", "last_seq")
    reach = F.max("last_seq").over(ordered.rowsBetween(Window.unboundedPreceding, -1))
    starts = F.when(reach.isNull() | (F.col("first_seq") > reach + 1), 1).otherwise(0)
    return (
        ranges.withColumn("starts", starts)
        .withColumn("run", F.sum("starts").over(ordered.rowsBetween(Window.unboundedPreceding, Window.currentRow)))
        .groupBy(*keys, "run")
        .agg(F.min("first_seq").alias("first_seq"), F.max("last_seq").alias("last_seq"))
        .select(*keys, "first_seq", "last_seq")
    )


def union_ranges(held: DataFrame) -> DataFrame:
    """What at least one node holds, per group and source, from :func:`held_ranges`:
    group, source, first_seq, last_seq."""
    return _merge(held.select(*_PAIR, "first_seq", "last_seq"), _PAIR)


def _holes(ranges: DataFrame, keys: list[str]) -> DataFrame:
    """The numbers from 1 up to each range's start not covered by an earlier
    range with the same ``keys`` (ranges disjoint and not adjacent)."""
    ordered = Window.partitionBy(*keys).orderBy("first_seq")
    first = F.coalesce(F.lag("last_seq").over(ordered) + 1, F.lit(1).cast("long"))
    return (
        ranges.select(*keys, first.alias("hole_first"), (F.col("first_seq") - 1).alias("hole_last"))
        .filter(F.col("hole_first") <= F.col("hole_last"))
    )


def _count(first: str, last: str) -> Column:
    return (F.col(last) - F.col(first) + 1).alias("events")


def missing(held: DataFrame) -> DataFrame:
    """Per node and source, the ranges the node lacks that some node holds:
    node, group, source, first_seq, last_seq, events.

    The nodes of a group are the nodes with at least one event in it; a node
    lacks a source's events up to the highest number any node holds, and
    nothing beyond (no one can know of those)."""
    union = union_ranges(held)
    top = union.groupBy(*_PAIR).agg(F.max("last_seq").alias("top"))
    nodes = held.select("group", "node").distinct()
    # Each node gets a one-number range just past the top of every source of its
    # group, so its trailing gap (or all of [1, top] if it holds nothing from the
    # source) is a hole before that range like any other.
    sentinel = nodes.join(top, "group").select(
        "node", *_PAIR, (F.col("top") + 1).alias("first_seq"), (F.col("top") + 1).alias("last_seq"))
    holes = _holes(held.unionByName(sentinel), ["node", *_PAIR])
    # A hole is lacked only where some node holds the numbers: intersect with the union.
    u = union.select(*_PAIR, F.col("first_seq").alias("u_first"), F.col("last_seq").alias("u_last"))
    both = holes.join(u, _PAIR).filter((F.col("hole_first") <= F.col("u_last")) & (F.col("u_first") <= F.col("hole_last")))
    return both.select(
        "node", *_PAIR,
        F.greatest("hole_first", "u_first").alias("first_seq"),
        F.least("hole_last", "u_last").alias("last_seq"),
    ).select("node", *_PAIR, "first_seq", "last_seq", _count("first_seq", "last_seq"))


def gaps(held: DataFrame) -> DataFrame:
    """Per source, the numbers below the highest one held that no node holds
    (lost for good unless a node not in the input has them):
    group, source, first_seq, last_seq, events."""
    holes = _holes(union_ranges(held), _PAIR)
    return holes.select(
        *_PAIR, F.col("hole_first").alias("first_seq"), F.col("hole_last").alias("last_seq"),
    ).select(*_PAIR, "first_seq", "last_seq", _count("first_seq", "last_seq"))


# ---------------------------------------------------------------- propagation

DIMENSIONS = ("source", "receiver", "hops", "link")  # what the delays are grouped by

FINE_STEPS = 400  # delay_counts: buckets per factor of ten of delay, each 10^(1/400) = 1.0058 wide
HISTOGRAM_STEPS = 4  # delay_histogram: buckets per factor of ten of delay
_ZERO = -(1 << 39)  # delay_counts' bucket of a delay of exactly zero; negative delays lie below it


def receipts(events: DataFrame) -> DataFrame:
    """One row per copy a node received from elsewhere: group, source, node,
    hops, received_from, received_at, delay (seconds from the source's timestamp)."""
    return events.filter(F.col("node") != F.col("source")).select(
        *_PAIR, "node", "hops", "received_from", "received_at",
        (F.col("received_at") - F.col("timestamp")).alias("delay"))


def _fine_bucket() -> Column:
    """A long that orders delays, :data:`FINE_STEPS` buckets per factor of ten of
    milliseconds: floor(log10(ms) * 400) for a positive delay, :data:`_ZERO`
    for zero, and below that, mirrored, for a negative one (clocks apart)."""
    ms = F.col("delay") * 1000.0
    steps = F.lit(float(FINE_STEPS))
    return (
        F.when(ms > 0, F.floor(F.log10(ms) * steps))
        .when(ms < 0, F.lit(2 * _ZERO) - F.floor(F.log10(-ms) * steps))
        .otherwise(F.lit(_ZERO))
        .cast("long")
    )


def delay_counts(events: DataFrame) -> DataFrame:
    """The receipts (:func:`receipts`) counted per group, source, node, hops,
    received_from and fine delay bucket: those columns, ``fine``, ``receipts``,
    ``low`` and ``high`` (the least and the greatest delay in the bucket).

    One hash aggregate that merges rows before the shuffle: a few thousand
    rows however many receipts there are, from which :func:`delays_of` and
    :func:`delay_histogram_of` make their tables without another pass."""
    return (
        receipts(events)
        .groupBy(*_PAIR, "node", "hops", "received_from", _fine_bucket().alias("fine"))
        .agg(F.count(F.lit(1)).alias("receipts"), F.min("delay").alias("low"), F.max("delay").alias("high"))
    )


_QUANTILES = {"p50": 50, "p90": 90, "p99": 99}  # percent


def delays_of(counts: DataFrame) -> DataFrame:
    """:func:`delays` from :func:`delay_counts`."""
    link = F.concat_ws(">", F.coalesce("received_from", F.lit("?")), "node")
    keys = F.array(
        F.struct(F.lit("source").alias("by"), F.col("source").alias("key")),
        F.struct(F.lit("receiver").alias("by"), F.col("node").alias("key")),
        F.struct(F.lit("hops").alias("by"), F.col("hops").cast("string").alias("key")),
        F.struct(F.lit("link").alias("by"), link.alias("key")),
    )
    dims = ["group", "by", "key"]
    per = (
        counts.select("group", "fine", "receipts", "low", "high", F.inline(keys))
        .groupBy(*dims, "fine")
        .agg(F.sum("receipts").alias("n"), F.min("low").alias("low"), F.max("high").alias("high"))
    )
    upto = F.sum("n").over(Window.partitionBy(*dims).orderBy("fine").rowsBetween(Window.unboundedPreceding, 0))
    total = F.sum("n").over(Window.partitionBy(*dims))
    ranked = per.select(*dims, "n", "low", "high", upto.alias("upto"), total.alias("total"))

    def quantile(percent: int) -> Column:
        # The rank of the q-quantile among n delays: ceil(q n), at least 1, in integers.
        rank = F.greatest(F.lit(1).cast("long"), F.expr(f"(total * {percent} + 99) div 100"))
        inside = (F.col("upto") - F.col("n") < rank) & (rank <= F.col("upto"))
        # The bucket's last delay is its greatest; any other, the least (exact when it is the first).
        return F.max(F.when(inside, F.when(rank == F.col("upto"), F.col("high")).otherwise(F.col("low"))))

    return ranked.groupBy(*dims).agg(
        F.sum("n").alias("receipts"), *(quantile(pct).alias(name) for name, pct in _QUANTILES.items()),
        F.max("high").alias("max"),
    )


def delays(events: DataFrame) -> DataFrame:
    """Delay from origin to receiver, in one pass for every dimension:
    group, by, key, receipts, p50, p90, p99, max (seconds).

    ``by`` is ``source`` (key: the source), ``receiver`` (key: the node that
    received), ``hops`` (key: links crossed, as text) or ``link`` (key:
    ``from>to``, the peer a copy came from and the node).  A percentile q of
    n receipts is the delay of rank ceil(q n) in delay order, found in
    :func:`delay_counts`' buckets: exact when that rank is the first or the
    last of its bucket, else the least delay of its bucket, an actual delay
    less than 0.6 % below the exact one.  ``max`` is exact."""
    return delays_of(delay_counts(events))


def _coarse_bucket() -> Column:
    coarse = F.floor(F.col("fine") / F.lit(FINE_STEPS // HISTOGRAM_STEPS))
    return F.when(F.col("fine") <= F.lit(_ZERO), F.lit(-13)).otherwise(
        F.least(F.lit(19), F.greatest(F.lit(-12), coarse))).cast("int")


def delay_histogram_of(counts: DataFrame) -> DataFrame:
    """:func:`delay_histogram` from :func:`delay_counts`: group, bucket, receipts."""
    return counts.groupBy("group", _coarse_bucket().alias("bucket")).agg(F.sum("receipts").alias("receipts"))


def delay_histogram(events: DataFrame) -> DataFrame:
    """How many receipts took how long, on a log scale: group, bucket, receipts.
    Bucket ``b`` holds delays in [10^(b/4), 10^((b+1)/4)) milliseconds
    (-12 .. 19: 1 µs .. 100 s, the ends taking everything beyond); a delay of
    zero or less (clocks a little apart) is bucket -13."""
    return delay_histogram_of(delay_counts(events))


def _window(col: str, seconds: float) -> Column:
    return (F.floor(F.col(col) / seconds) * F.lit(seconds)).cast("double").alias("window_start")


def throughput(events: DataFrame, consolidated: DataFrame, window_seconds: float = 1.0) -> DataFrame:
    """Per group and window of ``window_seconds`` (starting on multiples of it,
    in mesh time): events originated (by timestamp, each event once, from the
    consolidated events) and copies received from elsewhere (by received_at).
    group, window_start, originated, receipts; windows with neither are left out."""
    if window_seconds <= 0:
        raise ValueError(f"window_seconds must be positive, got {window_seconds}")
    made = consolidated.groupBy("group", _window("timestamp", window_seconds)).agg(F.count(F.lit(1)).alias("originated"))
    got = receipts(events).groupBy("group", _window("received_at", window_seconds)).agg(
        F.count(F.lit(1)).alias("receipts"))
    return made.join(got, ["group", "window_start"], "full_outer").select(
        "group", "window_start",
        F.coalesce("originated", F.lit(0).cast("long")).alias("originated"),
        F.coalesce("receipts", F.lit(0).cast("long")).alias("receipts"),
    )


# ---------------------------------------------------------------- replay

GROUP_DOCUMENT = "*"  # the ``node`` of a group's document made from every node's events


def _document_of(pdf: pd.DataFrame) -> pd.DataFrame:
    """One (group, node)'s ``doc`` events -> its document, by huddle's own engine."""
    import pandas as pd  # noqa: PLC0415 - pandas: deferred, only the replay's Python workers need it

    engine = DocEngine()
    engine.load(
        LogRecord(NodeId.from_hex(src), int(seq), float(ts), DOC_KIND, body)
        for src, seq, ts, body in zip(pdf["source"], pdf["seq"], pdf["timestamp"], pdf["body"], strict=True)
    )
    group, node = (pdf["group"].iloc[0], pdf["node"].iloc[0]) if len(pdf) else ("", "")
    row = {"group": group, "node": node, **document_facts(engine)}
    return pd.DataFrame([row])


def document_facts(engine: DocEngine) -> dict[str, Any]:
    """What the replay keeps of a document: doc_events, applied, dropped,
    digest (:func:`huddle.doc.digest`, as the node computes it for its
    ``document`` rows), xml (without eids)."""
    doc = engine.document
    return {
        "doc_events": len(engine), "applied": doc.applied, "dropped": len(doc.dropped),
        "digest": digest(doc.root), "xml": to_xml(doc.root),
    }


def documents(events: DataFrame) -> DataFrame:
    """The document each node's ``doc`` events make, and the group's document
    (node ``*``) from every node's events consolidated: group, node,
    doc_events, applied, dropped, digest, xml.

    The documents are made by :class:`huddle.doc.DocEngine` itself in the
    Python workers (one pandas frame per group and node), so the order and
    the rules are the node's own, not a second definition.  A node with no
    ``doc`` event has no row here (its document is the empty bout)."""
    docs = events.filter(F.col("kind") == DOC_KIND)
    cols = ["group", "node", "source", "seq", "timestamp", "body"]
    whole = docs.transform(consolidate).select(
        "group", F.lit(GROUP_DOCUMENT).alias("node"), "source", "seq", "timestamp", "body")
    return (
        docs.select(*cols).unionByName(whole)
        .groupBy("group", "node").applyInPandas(_document_of, schema=schemas.DOCUMENTS)
    )


def shown(stats: DataFrame) -> DataFrame:
    """Each node's last ``document`` statistics row, the document as the node
    showed it then: group, node, ts, doc_events, digest (docs/export.md)."""
    d = F.from_json("detail", schemas.DOCUMENT_DETAIL)
    rows = stats.filter(F.col("event") == "document").select("group", "node", "ts", d.alias("d"))
    last = F.max_by(F.struct(F.col("d")["doc_events"].alias("doc_events"), F.col("d")["digest"].alias("digest")),
                    "ts")
    return rows.groupBy("group", "node").agg(F.max("ts").alias("ts"), last.alias("last")).select(
        "group", "node", "ts", F.coalesce(F.col("last")["doc_events"], F.lit(-1).cast("long")).alias("doc_events"),
        F.coalesce(F.col("last")["digest"], F.lit("")).alias("digest"))


def shown_documents(events: DataFrame, last_shown: DataFrame) -> DataFrame:
    """For each node with a ``document`` row (:func:`shown`), the document its
    ``doc`` events received by then (``received_at`` <= the row's ``ts``)
    make, in :data:`.schemas.DOCUMENTS`; none for a node that had none then."""
    cols = ["group", "node", "source", "seq", "timestamp", "body"]
    return (
        events.filter(F.col("kind") == DOC_KIND)
        .join(last_shown.select("group", "node", F.col("ts").alias("shown_ts")), ["group", "node"])
        .filter(F.col("received_at") <= F.col("shown_ts")).select(*cols)
        .groupBy("group", "node").applyInPandas(_document_of, schema=schemas.DOCUMENTS)
    )


def replay(events: DataFrame, docs: DataFrame, last_shown: DataFrame | None = None,
           remade: DataFrame | None = None) -> DataFrame:
    """Each node's document compared with its group's, and with what the node
    showed: group, node, doc_events, group_doc_events, same, shown_ts,
    shown_doc_events, shown.

    ``docs`` is :func:`documents` of ``events``; every node with an event in
    the group has a row, a node with no ``doc`` event counting as the empty
    bout.  ``last_shown`` is :func:`shown` of the statistics rows and
    ``remade`` :func:`shown_documents` of the two.  ``shown`` says whether the
    document the node recorded in its last ``document`` row is the one its
    exported events make: ``same``; ``differs`` (the node showed another
    document than its own events make); ``uncomparable`` (the export does not
    hold the ``doc`` events the node had then: it dropped them since, or its
    clock moved back); ``none`` (no ``document`` row)."""
    empty = document_facts(_empty_engine())
    nodes = events.select("group", "node").distinct()
    mine = docs.filter(F.col("node") != GROUP_DOCUMENT).select("group", "node", "doc_events", "digest")
    theirs = docs.filter(F.col("node") == GROUP_DOCUMENT).select(
        "group", F.col("doc_events").alias("group_doc_events"), F.col("digest").alias("group_digest"))
    out = nodes.join(mine, ["group", "node"], "left").join(theirs, "group", "left")
    if last_shown is not None and remade is not None:
        out = out.join(
            last_shown.select("group", "node", F.col("ts").alias("shown_ts"),
                              F.col("doc_events").alias("shown_doc_events"), F.col("digest").alias("shown_digest")),
            ["group", "node"], "left",
        ).join(
            remade.select("group", "node", F.col("doc_events").alias("remade_events"),
                          F.col("digest").alias("remade_digest")),
            ["group", "node"], "left",
        )
        state = (
            F.when(F.col("shown_ts").isNull(), "none")
            .when(F.coalesce("remade_events", F.lit(0).cast("long")) != F.col("shown_doc_events"), "uncomparable")
            .when(F.coalesce("remade_digest", F.lit(empty["digest"])) == F.col("shown_digest"), "same")
            .otherwise("differs")
        )
        shown_cols = [F.col("shown_ts"), F.col("shown_doc_events"), state.alias("shown")]
    else:
        shown_cols = [F.lit(None).cast("double").alias("shown_ts"), F.lit(None).cast("long").alias("shown_doc_events"),
                      F.lit("none").alias("shown")]
    return out.select(
        "group", "node",
        F.coalesce("doc_events", F.lit(0).cast("long")).alias("doc_events"),
        F.coalesce("group_doc_events", F.lit(0).cast("long")).alias("group_doc_events"),
        (F.coalesce("digest", F.lit(empty["digest"])) == F.coalesce("group_digest", F.lit(empty["digest"])))
        .alias("same"),
        *shown_cols,
    )


def _empty_engine() -> DocEngine:
    return DocEngine()


# ---------------------------------------------------------------- bout

def _replayed(pdf: pd.DataFrame) -> BoutReplay:
    return replay_bout(zip(pdf["source"], pdf["seq"], pdf["timestamp"], pdf["body"], strict=True))


def _bout_facts(r: BoutReplay) -> dict[str, Any]:
    """A bout's row in :data:`.schemas.BOUT_ROWS` but for group and node."""
    s = r.summary()
    return {
        "doc_events": r.events, "home": s["teams"]["home"]["score"], "away": s["teams"]["away"]["score"],
        "jams": len(s["jams"]), "penalties": sum(len(p) for by in s["penalties"].values() for p in by.values()),
        "corrections": len(r.corrections), "status": s["status"], "signed": s["signed"], "digest": r.digest(),
        "summary": json.dumps(s, sort_keys=True), "xml": to_xml(r.root),
    }


def _bout_of(pdf: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415 - pandas: deferred, only the Python workers need it

    return pd.DataFrame([{"group": pdf["group"].iloc[0], "node": pdf["node"].iloc[0], **_bout_facts(_replayed(pdf))}])


def _bout_penalties_of(pdf: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415 - as above

    penalties = _replayed(pdf).summary()["penalties"]
    return pd.DataFrame([
        {"group": pdf["group"].iloc[0], "team": team, "number": number, "penalties": len(got),
         "codes": " ".join(p["code"] for p in got)}
        for team, by in penalties.items() for number, got in by.items()], columns=schemas.BOUT_PENALTIES.names)


def _bout_writers_of(pdf: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415 - as above

    writers = _replayed(pdf).writers
    return pd.DataFrame([{"group": pdf["group"].iloc[0], "source": source, "role": role, "what": what, "ops": n}
                         for (source, role, what), n in writers.items()], columns=schemas.BOUT_WRITERS.names)


def _bout_corrections_of(pdf: pd.DataFrame) -> pd.DataFrame:
    import pandas as pd  # noqa: PLC0415 - as above

    fixes = _replayed(pdf).corrections
    return pd.DataFrame([{"group": pdf["group"].iloc[0], **c} for c in fixes], columns=schemas.BOUT_CORRECTIONS.names)


def _doc_rows(events: DataFrame) -> tuple[DataFrame, DataFrame]:
    """Each node's ``doc`` events, and each group's consolidated (node ``*``): group, node,
    source, seq, timestamp, body."""
    docs = events.filter(F.col("kind") == DOC_KIND)
    whole = docs.transform(consolidate).select(
        "group", F.lit(GROUP_DOCUMENT).alias("node"), "source", "seq", "timestamp", "body")
    return docs.select("group", "node", "source", "seq", "timestamp", "body"), whole


def bouts(events: DataFrame) -> DataFrame:
    """The bout each node's ``doc`` events make, and its group's (node ``*``), by huddle's own
    engine (:mod:`.bout`), in :data:`.schemas.BOUT`: the score, jams, penalties, corrections,
    status and sign-off, the digest, the summary (JSON, as ``GET /api/v1/bout/summary`` gives
    it), and ``same``: the node's bout is its group's (false: this node's devices disagree
    with the others', it lacks or holds other events).  A node with no ``doc`` event counts as
    the empty bout."""
    mine, whole = _doc_rows(events)
    rows = mine.unionByName(whole).groupBy("group", "node").applyInPandas(_bout_of, schema=schemas.BOUT_ROWS)
    empty = _bout_facts(replay_bout(()))
    nodes = events.select("group", "node").distinct().unionByName(whole.select("group", "node").distinct())
    filled = nodes.join(rows, ["group", "node"], "left").select(
        "group", "node", *(F.coalesce(c, F.lit(empty[c])).alias(c) for c in schemas.BOUT_ROWS.names[2:]))
    theirs = filled.filter(F.col("node") == GROUP_DOCUMENT).select("group", F.col("digest").alias("group_digest"))
    return filled.join(theirs, "group", "left").select(
        *schemas.BOUT_ROWS.names, (F.col("digest") == F.coalesce("group_digest", F.lit(empty["digest"]))).alias("same"))


def bout_penalties(events: DataFrame) -> DataFrame:
    """Each group's bout: penalties per team and skater (:data:`.schemas.BOUT_PENALTIES`)."""
    return _doc_rows(events)[1].groupBy("group").applyInPandas(_bout_penalties_of, schema=schemas.BOUT_PENALTIES)


def bout_writers(events: DataFrame) -> DataFrame:
    """Each group's bout: who recorded what, operations per source, role and kind (``add
    points``, ``set jam.start``, ``remove jam``; :data:`.schemas.BOUT_WRITERS`)."""
    return _doc_rows(events)[1].groupBy("group").applyInPandas(_bout_writers_of, schema=schemas.BOUT_WRITERS)


def bout_corrections(events: DataFrame) -> DataFrame:
    """Each group's bout: every correction (a set that changed a recorded value, a remove),
    by whom, and who wrote what it replaced (:data:`.schemas.BOUT_CORRECTIONS`)."""
    return _doc_rows(events)[1].groupBy("group").applyInPandas(_bout_corrections_of, schema=schemas.BOUT_CORRECTIONS)


# ---------------------------------------------------------------- system picture

def membership(stats: DataFrame) -> DataFrame:
    """The membership events of the statistics rows, in mesh time: group, node,
    ts, event, peer, name, reason.  ``reason`` is the detail's ``reason``
    (peer_left, peer_excluded, peer_refused) or ``state`` (peer_state:
    suspect when heartbeats stop, alive when they resume)."""
    detail = F.col("detail")
    return stats.filter(~F.col("event").isin("snapshot", "document")).select(
        "group", "node", "ts", "event", "peer",
        F.get_json_object(detail, "$.name").alias("name"),
        F.coalesce(F.get_json_object(detail, "$.reason"), F.get_json_object(detail, "$.state")).alias("reason"),
    )


def node_names(stats: DataFrame) -> DataFrame:
    """The name each node went by: group, node, name, from the statistics rows its peers
    wrote of it (``peer_joined``, ``peer_left``, ``peer_state``: the name its HELO announced),
    the latest where it changed (a node restarted under another name).  The report and
    the findings show it beside the node's id (a join on this small table)."""
    named = membership(stats).filter(F.col("peer").isNotNull() & (F.coalesce(F.col("name"), F.lit("")) != ""))
    return named.groupBy("group", F.col("peer").alias("node")).agg(F.max_by("name", "ts").alias("name"))


def node_health(stats: DataFrame) -> DataFrame:
    """Per node, what its statistics rows say happened: group, node, first_ts,
    last_ts, joins, leaves, timeouts (a peer gone silent), suspects (heartbeats
    missed), refusals, exclusions, snapshots."""
    m = membership(stats)

    def n(cond: Column) -> Column:
        return F.count(F.when(cond, True))

    event, reason = F.col("event"), F.coalesce(F.col("reason"), F.lit(""))
    rows = m.groupBy("group", "node").agg(
        n(event == "peer_joined").alias("joins"),
        n(event == "peer_left").alias("leaves"),
        n((event == "peer_left") & (reason == "timeout")).alias("timeouts"),
        n((event == "peer_state") & (reason == "suspect")).alias("suspects"),
        n(event == "peer_refused").alias("refusals"),
        n(event == "peer_excluded").alias("exclusions"),
    )
    span = stats.groupBy("group", "node").agg(
        F.min("ts").alias("first_ts"), F.max("ts").alias("last_ts"),
        n(F.col("event") == "snapshot").alias("snapshots"))
    zero = F.lit(0).cast("long")
    return span.join(rows, ["group", "node"], "left").select(
        "group", "node", "first_ts", "last_ts",
        *(F.coalesce(c, zero).alias(c) for c in ("joins", "leaves", "timeouts", "suspects", "refusals", "exclusions")),
        "snapshots",
    )


def snapshots(stats: DataFrame) -> DataFrame:
    """The counters of each periodic snapshot row: group, node, ts, received,
    sent, decode_errors, refused, send_dropped, log_originated, log_received,
    log_duplicates, log_resends, peers, peers_alive, rtt_ms_max."""
    d = F.from_json("detail", schemas.SNAPSHOT_DETAIL)
    return stats.filter(F.col("event") == "snapshot").select("group", "node", "ts", d.alias("d")).select(
        "group", "node", "ts",
        *(F.col("d")[c].alias(c) for c in ("received", "sent", "decode_errors", "refused", "send_dropped")),
        *(F.col("d")["log"][c].alias(f"log_{c}") for c in ("originated", "received", "duplicates", "resends")),
        F.coalesce(F.size(F.col("d")["peers"]), F.lit(0)).alias("peers"),
        F.size(F.filter(F.col("d")["peers"], lambda p: p["state"] == "alive")).alias("peers_alive"),
        F.array_max(F.transform(F.col("d")["peers"], lambda p: p["rtt_ms"])).alias("rtt_ms_max"),
    )
