"""The audit pipeline on Spark: each transform against hand-written rows, bad
input, and exports of real runs (simulated, and three node processes) to report.html.

One SparkSession (``local[1]``, one shuffle partition, no UI) serves the module.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from html import escape, unescape
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from conftest import needs_java
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.testing import assertDataFrameEqual

from huddle import cli
from huddle.boutsim import plan_bout
from huddle.errors import ConfigError
from huddle.pipeline import jobs, schemas
from huddle.pipeline import transforms as T
from huddle.pipeline.io import InputError, read_events, read_stats
from huddle.pipeline.report import ReportData
from huddle.pipeline.report import render as render_report
from huddle.pipeline.session import SparkSetupError, require_java, start_session

pytestmark = pytest.mark.spark

A, B, C = "a" * 32, "b" * 32, "c" * 32  # node / source ids
G = "bout"


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    needs_java()
    # Adaptive execution re-plans every stage: on rows this few that is most of a query's time.
    session = start_session("local[1]", {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1",
                                         "spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"})
    yield session
    session.stop()


def ev(node: str, source: str, seq: int, *, ts: float = 100.0, kind: str = "k", body: str = '{"n":1}',
       hops: int | None = None, at: float | None = None, frm: str | None = None, group: str = G) -> tuple[Any, ...]:
    """An export row; the defaults make the source's own copy, recorded at ``ts``."""
    own = node == source
    return (node, group, source, seq, ts, kind, body, 0 if own else (1 if hops is None else hops),
            ts if at is None else at, None if own else (frm or source))


def events(spark: SparkSession, *rows: tuple[Any, ...]) -> DataFrame:
    return spark.createDataFrame(list(rows), schemas.EVENTS)


# ------------------------------------------------------------------ consolidate


def test_consolidate_keeps_one_row_per_event_with_first_receipt_copies_and_conflicts(spark: SparkSession) -> None:
    df = events(
        spark,
        ev(A, A, 1, ts=10.0), ev(B, A, 1, ts=10.0, at=10.5), ev(C, A, 1, ts=10.0, hops=2, at=10.25, frm=B),
        ev(A, A, 2, ts=11.0, body='{"n":2}'), ev(B, A, 2, ts=11.0, body='{"n":"forged"}', at=11.5),
        ev(B, B, 1, ts=12.0, kind="chat"),
    )
    want = spark.createDataFrame([
        (G, A, 1, 10.0, "k", '{"n":1}', 10.25, 3, False),
        (G, A, 2, 11.0, "k", '{"n":2}', 11.5, 2, True),  # the source's copy is the one kept
        (G, B, 1, 12.0, "chat", '{"n":1}', None, 1, False),  # only its source holds it: never received
    ], schemas.CONSOLIDATED)
    got = df.transform(T.consolidate)
    assertDataFrameEqual(got, want, checkRowOrder=False)
    assertDataFrameEqual(T.conflicts(df, got), spark.createDataFrame([
        (G, A, 2, A, 11.0, "k", '{"n":2}'),
        (G, A, 2, B, 11.0, "k", '{"n":"forged"}'),
    ], schemas.CONFLICTS))


def test_consolidate_from_sources_gives_the_same_rows_and_leaves_the_rest_to_consolidate(spark: SparkSession) -> None:
    df = events(
        spark,
        ev(A, A, 1, ts=10.0), ev(B, A, 1, ts=10.0, at=10.5), ev(C, A, 1, ts=10.0, hops=2, at=10.25, frm=B),
        ev(A, A, 2, ts=11.0, body='{"n":2}'), ev(B, A, 2, ts=11.0, body='{"n":"forged"}', at=11.5),
        # C's own copies are not here: seq 1 came over 2 hops to A and over 1 to B, seq 2 to A only.
        ev(A, C, 1, ts=20.0, hops=2, at=20.75, body='{"via":"a"}'), ev(B, C, 1, ts=20.0, at=20.5, body='{"via":"b"}'),
        ev(A, C, 2, ts=21.0, at=21.25),
        ev(A, B, 1, ts=30.0, hops=1, at=31.0), ev(C, B, 1, ts=30.0, hops=1, at=30.5, body='{"n":"c"}'),
    )
    known = spark.createDataFrame([
        (G, A, 1, 10.0, "k", '{"n":1}', 10.25, 3, False),
        (G, A, 2, 11.0, "k", '{"n":2}', 11.5, 2, True),
    ], schemas.CONSOLIDATED)
    fast = df.transform(T.consolidate_from_sources)
    assertDataFrameEqual(fast.filter(F.col("timestamp").isNotNull()), known, checkRowOrder=False)
    assert sorted((r.seq, r.first_received_at, r.copies, r.conflict, r.group, r.source, r.body)
                  for r in fast.filter(F.col("timestamp").isNull()).collect()) == [
        (1, 20.5, 2, True, None, None, None), (1, 30.5, 2, True, None, None, None),
        (2, 21.25, 1, False, None, None, None)]
    assertDataFrameEqual(df.transform(T.lacking_source_copy),
                         spark.createDataFrame([(G, C, 1), (G, C, 2), (G, B, 1)], "group string, source string, seq long"),
                         checkRowOrder=False)
    # Without the source's copy: the fewest hops, then the lowest node id.
    assertDataFrameEqual(df.transform(T.consolidate).filter(F.col("source") != A), spark.createDataFrame([
        (G, C, 1, 20.0, "k", '{"via":"b"}', 20.5, 2, True),
        (G, C, 2, 21.0, "k", '{"n":1}', 21.25, 1, False),
        (G, B, 1, 30.0, "k", '{"n":1}', 30.5, 2, True),
    ], schemas.CONSOLIDATED), checkRowOrder=False)


def test_a_run_takes_the_content_of_events_without_their_sources_copy_from_the_closest_copy(
        spark: SparkSession, tmp_path: Path) -> None:
    export = _export(tmp_path, [ev(A, A, 1, ts=10.0), ev(B, A, 1, ts=10.0, at=10.5),
                                ev(A, C, 1, ts=20.0, hops=2, at=20.75, body='{"via":"a"}'),
                                ev(B, C, 1, ts=20.0, at=20.5, body='{"via":"b"}')])
    summary = jobs.run(spark, [str(export)], str(tmp_path / "audit"), jobs=["consolidate"])
    assert (summary.events, summary.conflicts) == (2, 1)
    table = spark.read.parquet(str(tmp_path / "audit" / "consolidated"))
    assertDataFrameEqual(table, spark.createDataFrame([
        (G, A, 1, 10.0, "k", '{"n":1}', 10.5, 2, False),
        (G, C, 1, 20.0, "k", '{"via":"b"}', 20.5, 2, True),
    ], schemas.CONSOLIDATED), checkRowOrder=False)


def test_a_source_copy_given_twice_still_makes_one_row_an_event(spark: SparkSession) -> None:
    df = events(spark, ev(A, A, 1, ts=10.0), ev(A, A, 1, ts=10.0), ev(B, A, 1, ts=10.0, at=10.5),
                ev(A, A, 2, ts=11.0), ev(B, A, 2, ts=11.0, at=11.25))
    fast = df.transform(T.consolidate_from_sources)
    assert sorted(((r.group, r.seq, r.timestamp, r.copies) for r in fast.collect()), key=lambda t: t[1]) == [
        (None, 1, None, 3), (None, 1, None, 3), (G, 2, 11.0, 2)]  # seq 1: a row for each of A's two copies
    assertDataFrameEqual(df.transform(T.lacking_source_copy),
                         spark.createDataFrame([(G, A, 1)], "group string, source string, seq long"))
    assertDataFrameEqual(df.transform(T.consolidate), spark.createDataFrame([
        (G, A, 1, 10.0, "k", '{"n":1}', 10.5, 3, False),
        (G, A, 2, 11.0, "k", '{"n":1}', 11.25, 2, False),
    ], schemas.CONSOLIDATED), checkRowOrder=False)


def test_a_run_with_a_source_copy_given_twice_counts_each_event_once(spark: SparkSession, tmp_path: Path) -> None:
    export = _export(tmp_path, [ev(A, A, 1, ts=10.0), ev(A, A, 1, ts=10.0), ev(B, A, 1, ts=10.0, at=10.5),
                                ev(A, A, 2, ts=11.0, body='{"n":2}'), ev(B, A, 2, ts=11.0, body='{"n":"forged"}')])
    summary = jobs.run(spark, [str(export)], str(tmp_path / "audit"), jobs=["consolidate"])
    assert (summary.events, summary.conflicts) == (2, 1)
    assertDataFrameEqual(spark.read.parquet(str(tmp_path / "audit" / "consolidated")), spark.createDataFrame([
        (G, A, 1, 10.0, "k", '{"n":1}', 10.5, 3, False),
        (G, A, 2, 11.0, "k", '{"n":2}', 11.0, 2, True),
    ], schemas.CONSOLIDATED), checkRowOrder=False)


# ------------------------------------------------------------------ convergence


def test_held_ranges_are_islands_of_consecutive_numbers(spark: SparkSession) -> None:
    df = events(spark, *(ev(B, A, q) for q in (1, 2, 2, 3, 5, 6, 9)), ev(B, B, 1), ev(C, A, 4))
    assertDataFrameEqual(df.transform(T.held_ranges), spark.createDataFrame([
        (B, G, A, 1, 3), (B, G, A, 5, 6), (B, G, A, 9, 9), (B, G, B, 1, 1), (C, G, A, 4, 4),
    ], schemas.HELD_RANGES))


@pytest.fixture(scope="module")
def patchy(spark: SparkSession) -> DataFrame:
    """A holds source A 1..10 and source B 1..2; B holds A 1..3, 6..10 and 12;
    C holds A 1..2 and 12.  Nobody holds A#11."""
    held = [(A, q) for q in range(1, 11)] + [(B, q) for q in (1, 2, 3, 6, 7, 8, 9, 10, 12)] + [(C, q) for q in (1, 2, 12)]
    return events(spark, *(ev(node, A, q) for node, q in held), ev(A, B, 1), ev(A, B, 2))


def test_missing_lists_what_each_node_lacks_as_ranges(spark: SparkSession, patchy: DataFrame) -> None:
    assertDataFrameEqual(patchy.transform(T.held_ranges).transform(T.missing), spark.createDataFrame([
        (A, G, A, 12, 12, 1),
        (B, G, A, 4, 5, 2),
        (C, G, A, 3, 10, 8),
        (B, G, B, 1, 2, 2),  # holds nothing of source B: lacks all it could have
        (C, G, B, 1, 2, 2),
    ], schemas.MISSING), checkRowOrder=False)


def test_gaps_are_the_numbers_no_node_holds(spark: SparkSession, patchy: DataFrame) -> None:
    lost = events(spark, ev(A, C, 4), ev(B, C, 5), ev(B, C, 9))
    held = patchy.unionByName(lost).transform(T.held_ranges)
    assertDataFrameEqual(held.transform(T.gaps), spark.createDataFrame([
        (G, A, 11, 11, 1), (G, C, 1, 3, 3), (G, C, 6, 8, 3),
    ], schemas.GAPS), checkRowOrder=False)


def test_a_converged_mesh_lacks_nothing(spark: SparkSession) -> None:
    df = events(spark, *(ev(node, src, q) for node in (A, B) for src in (A, B) for q in (1, 2, 3)))
    held = df.transform(T.held_ranges)
    assert held.transform(T.missing).count() == 0 and held.transform(T.gaps).count() == 0


# ------------------------------------------------------------------ propagation


@pytest.fixture(scope="module")
def travelled(spark: SparkSession) -> DataFrame:
    """A's events 1..3 at t=100 reach B after 0.25, 0.5, 0.75 s; C gets #1 from B after 1 s (2 hops)."""
    return events(
        spark, *(ev(A, A, q) for q in (1, 2, 3)),
        ev(B, A, 1, at=100.25), ev(B, A, 2, at=100.5), ev(B, A, 3, at=100.75),
        ev(C, A, 1, hops=2, frm=B, at=101.0),
    )


def test_delays_by_source_receiver_hops_and_link(spark: SparkSession, travelled: DataFrame) -> None:
    assertDataFrameEqual(travelled.transform(T.delays), spark.createDataFrame([
        (G, "source", A, 4, 0.5, 1.0, 1.0, 1.0),
        (G, "receiver", B, 3, 0.5, 0.75, 0.75, 0.75),
        (G, "receiver", C, 1, 1.0, 1.0, 1.0, 1.0),
        (G, "hops", "1", 3, 0.5, 0.75, 0.75, 0.75),
        (G, "hops", "2", 1, 1.0, 1.0, 1.0, 1.0),
        (G, "link", f"{A}>{B}", 3, 0.5, 0.75, 0.75, 0.75),
        (G, "link", f"{B}>{C}", 1, 1.0, 1.0, 1.0, 1.0),
    ], schemas.DELAYS), checkRowOrder=False)


def test_a_percentile_is_found_within_its_delay_bucket(spark: SparkSession) -> None:
    """Ranks inside one fine bucket (10.000, 10.010, 10.020 ms and 10.030 ms share one, 0.58 % wide):
    the first and the last of a bucket are exact, one between gets the bucket's least delay."""
    at = [100.0, 100.010, 100.01001, 100.01002, 100.01003, 100.5]  # delays 0, 10, 10.01, 10.02, 10.03, 500 ms
    df = events(spark, *(ev(B, A, q + 1, at=t) for q, t in enumerate(at)))
    got = {r["by"]: r for r in df.transform(T.delays).collect()}["receiver"]
    assert got["receipts"] == 6
    # p50: rank 3 of 6 = 10.01 ms, the second of its bucket's four: the bucket's least, 10.00 ms
    assert got["p50"] == pytest.approx(0.010, abs=1e-9)
    # p90: rank 6 = 500 ms, alone in its bucket; p99 likewise; max exact
    assert (got["p90"], got["p99"], got["max"]) == pytest.approx((0.5, 0.5, 0.5), abs=1e-9)
    # Four of six at or below 10.03 ms: p60 would be rank 4 (10.02), p67 rank 5, the bucket's last (10.03).
    counts = df.transform(T.delay_counts)
    assert sorted((r["receipts"], round(r["low"] * 1000, 5), round(r["high"] * 1000, 5)) for r in counts.collect()) == [
        (1, 0.0, 0.0), (1, 500.0, 500.0), (4, 10.0, 10.03)]
    late = events(spark, *(ev(B, A, q + 1, at=t) for q, t in enumerate(at[:5])))  # rank ceil(0.9 * 5) = 5: the last
    assert late.transform(T.delays).filter("by = 'receiver'").first()["p90"] == pytest.approx(0.01003, abs=1e-9)


def test_delay_histogram_buckets_are_quarter_decades_of_milliseconds(spark: SparkSession) -> None:
    df = events(spark, ev(B, A, 1, at=100.002), ev(B, A, 2, at=100.0025), ev(B, A, 3, at=100.3),
                ev(C, A, 1, at=99.99), ev(C, A, 2, at=100.0))
    # 2 ms and 2.5 ms: 10^(1/4)=1.78 .. 10^(2/4)=3.16 -> bucket 1; 300 ms: 10^(9/4)=178 .. 316 -> 9; <= 0: -13
    assertDataFrameEqual(df.transform(T.delay_histogram), spark.createDataFrame([
        (G, -13, 2), (G, 1, 2), (G, 9, 1),
    ], schemas.DELAY_HISTOGRAM), checkRowOrder=False)


def test_throughput_counts_originated_and_received_per_window(spark: SparkSession, travelled: DataFrame) -> None:
    consolidated = travelled.transform(T.consolidate)
    assertDataFrameEqual(T.throughput(travelled, consolidated, 0.5), spark.createDataFrame([
        (G, 100.0, 3, 1), (G, 100.5, 0, 2), (G, 101.0, 0, 1),
    ], schemas.THROUGHPUT), checkRowOrder=False)
    with pytest.raises(ValueError, match="positive"):
        T.throughput(travelled, consolidated, 0)


# ------------------------------------------------------------------ replay


PERSON = '{"children":[{"attrs":{"name":"Ada","number":"12"},"tag":"person"}],"op":"add","to":{"team":"home"}}'
JAM = '{"attribute":"start","op":"set","to":{"jam":1,"period":1},"value":"100"}'


def test_replay_compares_each_nodes_document_with_the_groups(spark: SparkSession) -> None:
    df = events(
        spark,
        ev(A, A, 1, ts=5.0, kind="doc", body=PERSON), ev(A, B, 1, ts=6.0, kind="doc", body=JAM),
        ev(B, B, 1, ts=6.0, kind="doc", body=JAM),
        ev(C, C, 1, kind="chat"),  # C holds no doc event: its document is the empty bout
    )
    docs = df.transform(T.documents)
    assertDataFrameEqual(T.replay(df, docs), spark.createDataFrame([
        (G, A, 2, 2, True, None, None, "none"), (G, B, 1, 2, False, None, None, "none"),
        (G, C, 0, 2, False, None, None, "none"),
    ], schemas.REPLAY), checkRowOrder=False)
    whole = {r["node"]: r for r in docs.collect()}
    assert set(whole) == {A, B, "*"}
    assert whole["*"]["doc_events"] == 2 and whole["*"]["dropped"] == 0
    assert '<person name="Ada" number="12"/>' in whole["*"]["xml"] and 'start="100"' in whole["*"]["xml"]
    assert whole["*"]["xml"] == whole[A]["xml"] and "Ada" not in whole[B]["xml"]


def test_replay_checks_the_document_each_node_showed(spark: SparkSession) -> None:
    """A node's last ``document`` row against the document its events received by then make."""
    from huddle.doc import DocEngine, digest
    from huddle.ids import NodeId
    from huddle.wire import LogRecord

    only_person = DocEngine()  # what a node holding PERSON alone shows, computed as the node does
    only_person.add(LogRecord(NodeId.from_hex(A), 1, 5.0, "doc", PERSON))
    shown_by_a = digest(only_person.document.root)
    df = events(
        spark,
        ev(A, A, 1, ts=5.0, at=10.0, kind="doc", body=PERSON), ev(A, B, 1, ts=6.0, at=20.0, kind="doc", body=JAM),
        ev(B, B, 1, ts=6.0, at=15.0, kind="doc", body=JAM),
        ev(C, C, 1, kind="chat"),
        ev("d" * 32, "d" * 32, 1, kind="chat"),
    )
    stats = spark.createDataFrame([
        stat(A, 1.0, "document", None, doc_events=0, applied=0, dropped=0, digest="0" * 64),  # an older row
        stat(A, 15.0, "document", None, doc_events=1, applied=1, dropped=0, digest=shown_by_a),  # PERSON only
        stat(A, 16.0, "snapshot", None, received=1),
        stat(B, 30.0, "document", None, doc_events=1, applied=1, dropped=0, digest="f" * 64),  # not what JAM makes
        stat("d" * 32, 9.0, "document", None, doc_events=2, applied=2, dropped=0, digest="e" * 64),  # events gone
    ], schemas.STATS)
    last = stats.transform(T.shown)
    assertDataFrameEqual(last, spark.createDataFrame([
        (G, A, 15.0, 1, shown_by_a), (G, B, 30.0, 1, "f" * 64), (G, "d" * 32, 9.0, 2, "e" * 64),
    ], schemas.SHOWN), checkRowOrder=False)
    checked = T.replay(df, df.transform(T.documents), last, T.shown_documents(df, last))
    assertDataFrameEqual(checked, spark.createDataFrame([
        (G, A, 2, 2, True, 15.0, 1, "same"),
        (G, B, 1, 2, False, 30.0, 1, "differs"),
        (G, C, 0, 2, False, None, None, "none"),
        (G, "d" * 32, 0, 2, False, 9.0, 2, "uncomparable"),
    ], schemas.REPLAY), checkRowOrder=False)
    assert stats.transform(T.membership).count() == 0, "document rows are not membership events"


def test_replay_uses_the_nodes_own_engine(spark: SparkSession) -> None:
    """One definition: the pipeline's document is byte for byte what huddle.doc makes of the same records."""
    from huddle.doc import DocEngine, to_xml
    from huddle.ids import NodeId
    from huddle.wire import LogRecord

    remove = '{"op":"remove","to":{"jam":1,"period":1}}'
    rows = [ev(A, A, 1, ts=7.0, kind="doc", body=remove), ev(A, B, 1, ts=6.0, kind="doc", body=JAM),
            ev(A, A, 2, ts=8.0, kind="doc", body="not json")]
    engine = DocEngine()
    for r in reversed(rows):
        engine.add(LogRecord(NodeId.from_hex(r[2]), r[3], r[4], r[5], r[6]))
    docs = {r["node"]: r for r in events(spark, *rows).transform(T.documents).collect()}
    assert docs["*"]["xml"] == to_xml(engine.document.root)
    assert docs["*"]["dropped"] == 1 and docs["*"]["applied"] == engine.document.applied


# ------------------------------------------------------------------ system picture


def stat(node: str, ts: float, event: str, peer: str | None, **detail: Any) -> tuple[Any, ...]:
    return (node, G, ts, event, peer, json.dumps(detail))


def test_system_picture_from_the_statistics_rows(spark: SparkSession) -> None:
    snap = {"received": 40, "sent": 30, "decode_errors": 0, "refused": 1, "send_dropped": 0, "beacons": {"sent": 3},
            "log": {"originated": 5, "received": 9, "duplicates": 2, "resends": 1, "asks": 0},
            "peers": [{"uuid": B, "state": "alive", "rtt_ms": 1.5}, {"uuid": C, "state": "suspect", "rtt_ms": None}]}
    stats = spark.createDataFrame([
        stat(A, 1.0, "peer_joined", B, name="b", endpoint="tcp://127.0.0.1:1"),
        stat(A, 2.0, "peer_state", C, name="c", state="suspect"),
        stat(A, 3.0, "peer_left", C, name="c", reason="timeout"),
        stat(A, 4.0, "peer_excluded", C, name="c", reason="excluded: garbage"),
        stat(A, 5.0, "snapshot", None, **snap),
        stat(B, 1.5, "peer_joined", A, name="a", endpoint="tcp://127.0.0.1:2"),
    ], schemas.STATS)
    assertDataFrameEqual(stats.transform(T.membership), spark.createDataFrame([
        (G, A, 1.0, "peer_joined", B, "b", None),
        (G, A, 2.0, "peer_state", C, "c", "suspect"),
        (G, A, 3.0, "peer_left", C, "c", "timeout"),
        (G, A, 4.0, "peer_excluded", C, "c", "excluded: garbage"),
        (G, B, 1.5, "peer_joined", A, "a", None),
    ], schemas.MEMBERSHIP), checkRowOrder=False)
    assertDataFrameEqual(stats.transform(T.node_health), spark.createDataFrame([
        (G, A, 1.0, 5.0, 1, 1, 1, 1, 0, 1, 1),
        (G, B, 1.5, 1.5, 1, 0, 0, 0, 0, 0, 0),
    ], schemas.NODE_HEALTH), checkRowOrder=False)
    assertDataFrameEqual(stats.transform(T.snapshots), spark.createDataFrame([
        (G, A, 5.0, 40, 30, 0, 1, 0, 5, 9, 2, 1, 2, 1, 1.5),
    ], schemas.SNAPSHOTS))


def test_node_names_are_the_names_peers_knew_each_node_by(spark: SparkSession) -> None:
    stats = spark.createDataFrame([
        stat(A, 1.0, "peer_joined", B, name="bob", endpoint="tcp://127.0.0.1:1"),
        stat(C, 2.0, "peer_state", B, name="bob", state="suspect"),
        stat(A, 3.0, "peer_joined", C, name="carol", endpoint="tcp://127.0.0.1:3"),
        stat(A, 9.0, "peer_joined", C, name="carol-2", endpoint="tcp://127.0.0.1:3"),  # restarted, renamed
        stat(A, 4.0, "peer_refused", None, endpoint="tcp://127.0.0.1:4", reason="x"),  # no node: no name
        stat(B, 5.0, "snapshot", None, received=1),
    ], schemas.STATS)
    assertDataFrameEqual(stats.transform(T.node_names), spark.createDataFrame(
        [(G, B, "bob"), (G, C, "carol-2")], schemas.NAMES), checkRowOrder=False)


def test_findings_and_report_show_names_beside_ids() -> None:
    summary = jobs.Summary(rows=3, nodes=3, groups=1, missing_ranges=0, divergent=[B, C], worst_p99=0.5,
                           worst_receiver=B, names={B: "bob"})
    text = "\n".join(summary.lines())
    assert f"differ from their group's document: bob ({B[:8]}), {C[:8]}" in text  # carol: no name known
    assert f"worst lag: receiver bob ({B[:8]})" in text
    page = render_report(ReportData(inputs=["x"], jobs=["convergence", "system"], names={B: "bob"},
                                    missing_by_node=[{"group": G, "node": B, "events": 2, "ranges": 1}],
                                    health=[{"group": G, "node": C, "joins": 1, "leaves": 0, "timeouts": 0,
                                             "suspects": 0, "refusals": 0, "exclusions": 0, "snapshots": 0}]))
    assert f"<td class=t>bob ({B[:8]})</td>" in page and f"<td class=t>{C[:8]}</td>" in page


# ------------------------------------------------------------------ bad input and bad use


def test_missing_and_empty_inputs_are_clear_errors(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        read_events(spark, [str(tmp_path / "nope")])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"no events\.parquet or events\.jsonl under"):
        read_events(spark, [str(tmp_path / "empty")])
    assert read_stats(spark, [str(tmp_path / "empty")]).count() == 0  # statistics are optional


def test_input_that_breaks_the_schema_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "events.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"node":"x","group":"g","source":"s","seq":"one","timestamp":1.0,"kind":"k","body":"{}",'
                   '"hops":0,"received_at":1.0,"received_from":null}\n')
    with pytest.raises(InputError, match="does not match the export's schema"):
        jobs.run(spark, [str(bad)], str(tmp_path / "out"), jobs=["consolidate"])
    short = tmp_path / "short" / "events.jsonl"
    short.parent.mkdir()
    short.write_text('{"node":"x","group":"g","seq":1}\n')
    with pytest.raises(InputError, match="lack a required column"):
        jobs.run(spark, [str(short.parent)], str(tmp_path / "out"), jobs=["consolidate"])


def _export(tmp_path: Path, rows: list[tuple[Any, ...]]) -> Path:
    """``rows`` written as huddle export writes them: one directory per node."""
    from huddle.log.export import write_tables

    names = [f.name for f in schemas.EVENTS.fields]
    out = tmp_path / "export"
    for node in sorted({r[0] for r in rows}):
        write_tables(out / node[:8], "parquet", iter([[dict(zip(names, r, strict=True)) for r in rows if r[0] == node]]), [])
    return out


def test_the_footers_count_huddles_own_parquet(spark: SparkSession, tmp_path: Path) -> None:
    from huddle.pipeline.io import count_from_footers

    export = _export(tmp_path, [ev(A, A, 1), ev(A, A, 2), ev(B, A, 1), ev(C, C, 1, group="other")])
    files = sorted(str(p) for p in export.rglob("events.parquet"))
    got = count_from_footers(files, schemas.EVENTS)
    assert got is not None and (got.rows, got.nodes, got.groups) == (4, {A, B, C}, {G, "other"})
    # What the footers cannot vouch for is left to a pass over the rows:
    assert count_from_footers([*files, str(tmp_path / "x.jsonl")], schemas.EVENTS) is None
    two = _export(tmp_path / "two", [ev(A, A, 1), ev(A, A, 2, group="other")])  # two groups in one row group
    assert count_from_footers([str(p) for p in two.rglob("events.parquet")], schemas.EVENTS) is None
    mixed = tmp_path / "mixed"  # Spark's own Parquet: columns nullable, nodes mixed in a row group
    events(spark, ev(A, A, 1), ev(B, A, 1)).coalesce(1).write.parquet(str(mixed))
    assert count_from_footers([str(p) for p in mixed.glob("*.parquet")], schemas.EVENTS) is None
    import pyarrow as pa
    import pyarrow.parquet as pq

    odd = tmp_path / "odd.parquet"  # seq written as text
    pq.write_table(pa.table({f.name: [str(v)] for f, v in zip(schemas.EVENTS.fields, ev(A, A, 1), strict=True)}), odd)
    assert count_from_footers([str(odd)], schemas.EVENTS) is None
    with pytest.raises(InputError, match="does not match the export's schema"):
        jobs.run(spark, [str(odd)], str(tmp_path / "out"), jobs=["consolidate"])
    holes = tmp_path / "holes.parquet"  # a required column with a null in it
    row = dict(zip([f.name for f in schemas.EVENTS.fields], ev(A, A, 1), strict=True))
    from huddle.log.export import event_schema

    loose = event_schema()
    loose = loose.set(loose.get_field_index("hops"), loose.field("hops").with_nullable(True))
    pq.write_table(pa.Table.from_pylist([row, {**row, "seq": 2, "hops": None}], schema=loose), holes)
    assert count_from_footers([str(holes)], schemas.EVENTS) is None
    with pytest.raises(InputError, match=r"1 input row\(s\) lack a required column"):
        jobs.run(spark, [str(holes)], str(tmp_path / "out"), jobs=["consolidate"])


@pytest.mark.parametrize("small_rows", [10_000, 0])
def test_a_run_reports_what_is_missing(spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                       small_rows: int) -> None:
    """The same findings whether the missing ranges are summed here (few) or by Spark jobs (many)."""
    monkeypatch.setattr(jobs, "SMALL_ROWS", small_rows)
    held = [(A, q) for q in range(1, 11)] + [(B, q) for q in (1, 2, 3, 6, 7, 8, 9, 10, 12)] + [(C, q) for q in (1, 2, 12)]
    export = _export(tmp_path, [*(ev(node, A, q) for node, q in held), ev(A, B, 1), ev(A, B, 2)])
    summary = jobs.run(spark, [str(export)], str(tmp_path / "audit"), jobs=["consolidate", "convergence"])
    assert (summary.rows, summary.nodes, summary.events, summary.conflicts) == (24, 3, 13, 0)
    assert (summary.missing_ranges, summary.missing_events, summary.gap_events) == (5, 15, 1)
    page = (tmp_path / "audit" / "report.html").read_text()
    assert "missing: 15 event copies in 5 range(s)" in page and "lost: 1 event(s)" in page
    lacks = page.split("<h2>What each node lacks</h2>")[1].split("<h3>")[0]
    rows = [re.findall(r"<td class=.>(.*?)</td>", tr) for tr in lacks.split("<tr>")[1:]]
    a, b, c = A[:8], B[:8], C[:8]
    assert [r for r in rows if r] == [
        [G, c, "10", "2"], [G, b, "4", "2"], [G, a, "1", "1"],  # per node, most missing first
        [G, c, a, "3", "10", "8"], [G, b, a, "4", "5", "2"], [G, b, b, "1", "2", "2"], [G, c, b, "1", "2", "2"],
        [G, a, a, "12", "12", "1"],
    ]
    assert summary.tables[:5] == ["consolidated", "conflicts", "held_ranges", "missing", "gaps"]


def test_bad_job_names_and_flags_are_refused_before_spark_starts(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(ConfigError, match="unknown job"):
        jobs.check_jobs(["consolidate", "nonsense"])
    assert cli.main(["pipeline", "run", "--input", "x", "--output", "y", "--jobs", "converge"]) == 2
    assert "unknown job(s) converge in --jobs: choose from consolidate, convergence" in capsys.readouterr().err
    assert cli.main(["pipeline", "run", "--input", "x", "--output", "y", "--conf", "novalue"]) == 2
    assert cli.main(["pipeline", "run", "--input", "/nonexistent/export", "--output", "y"]) == 4  # bad input
    assert "huddle pipeline: input /nonexistent/export does not exist" in capsys.readouterr().err
    assert cli.main(["pipeline", "run", "--input", "x", "--output", "y", "--jobs", ","]) == 2
    assert "unknown job(s) (none given) in --jobs" in capsys.readouterr().err


def test_the_workers_import_no_network_dependency() -> None:
    """A Spark executor imports huddle's pure parts only: no pyzmq, aiohttp or zeroconf to ship."""
    code = ("import sys, huddle, huddle.pipeline.transforms, huddle.doc, huddle.wire\n"
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'zmq', 'aiohttp', 'zeroconf', 'ifaddr'}))\n"
            "print(huddle.Node.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["[]", "Node"]  # and the facade still gives the node when asked


def test_help_teaches_the_jobs_and_an_example() -> None:
    out = subprocess.run([sys.executable, "-m", "huddle", "pipeline", "run", "--help"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "convergence  per node and source" in out and "huddle pipeline run --input /tmp/sim" in out
    assert "exit status" in out


def test_no_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(SparkSetupError, match="needs Java 17 or newer, and there is no java"):
        require_java(str(tmp_path / "java"))
    old = tmp_path / "old-java"
    old.write_text('#!/bin/sh\necho \'openjdk version "11.0.20" 2023-07-18\' >&2\n')
    old.chmod(0o755)
    with pytest.raises(SparkSetupError, match="found Java 11"):
        require_java(str(old))
    monkeypatch.setenv("JAVA_HOME", str(tmp_path / "no-jdk"))
    monkeypatch.setenv("PATH", str(tmp_path))
    export = _export(tmp_path, [ev(A, A, 1)])  # a good input: Java is what is missing
    assert cli.main(["pipeline", "run", "--input", str(export), "--output", str(tmp_path / "o")]) == 6  # Spark cannot start


# ------------------------------------------------------------------ the jobs in a notebook


def test_the_notebook_example_in_the_docs_runs(spark: SparkSession, tmp_path: Path) -> None:
    """docs/pipeline.md's example, as it is written, over an export whose findings are known."""
    held = [(A, q) for q in range(1, 11)] + [(B, q) for q in (1, 2, 3, 6, 7, 8, 9, 10, 12)] + [(C, q) for q in (1, 2, 12)]
    export = _export(tmp_path, [*(ev(node, A, q, at=100.0 + q / 100) for node, q in held), ev(A, B, 1), ev(A, B, 2)])
    doc = (Path(__file__).resolve().parent.parent / "docs" / "pipeline.md").read_text()
    code = doc.split("## In a notebook")[1].split("```python\n")[1].split("```")[0]
    assert '"/tmp/sim"' in code
    found: dict[str, Any] = {}
    exec(code.replace('"/tmp/sim"', repr(str(export))), found)
    assert found["spark"] is spark  # getOrCreate: the session that runs, whatever it is
    missing = found["missing"].collect()
    assert (len(missing), sum(r["events"] for r in missing)) == (5, 15)  # as jobs.run finds them
    assert [r["events"] for r in found["gaps"].collect()] == [1]
    assert found["consolidated"].count() == 13 and found["conflicts"].count() == 0
    receivers = found["delays"].filter("by = 'receiver'").collect()
    assert {r["key"] for r in receivers} == {A, B, C}  # A holds B's two events too
    assert max(r["p99"] for r in receivers) == pytest.approx(0.12, abs=0.002)  # seq 12 arrived 0.12 s after it was made
    assert found["names"].count() == 0  # no statistics rows in this export


def test_each_job_is_a_function_of_dataframes(spark: SparkSession, travelled: DataFrame) -> None:
    """The notebook functions give the tables the transforms give."""
    consolidated, conflicts = jobs.consolidate(travelled)
    assertDataFrameEqual(consolidated, travelled.transform(T.consolidate))
    assert conflicts.count() == 0
    held, missing, gaps = jobs.convergence(travelled)
    assertDataFrameEqual(held, travelled.transform(T.held_ranges))
    assertDataFrameEqual(missing, held.transform(T.missing))
    assertDataFrameEqual(gaps, held.transform(T.gaps))
    went = jobs.propagation(travelled, consolidated, 0.5)
    assertDataFrameEqual(went.delays, travelled.transform(T.delays))
    assertDataFrameEqual(went.throughput, T.throughput(travelled, consolidated, 0.5))
    with pytest.raises(ConfigError, match="window must be positive"):
        jobs.propagation(travelled, consolidated, 0)
    docs, checked = jobs.replay(travelled, spark.createDataFrame([], schemas.STATS))
    assert docs.count() == 0 and checked.count() == 3  # no doc events: an empty document a node, all the same


# ------------------------------------------------------------------ end to end


def simulate(out: Path, fmt: str) -> None:
    done = subprocess.run([sys.executable, "-m", "huddle", "simulate", "--nodes", "3", "--events", "300",
                           "--loss", "0.05", "--seed", "3", "--export", str(out), "--format", fmt],
                          capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONHASHSEED": "0"})
    assert done.returncode == 0, done.stderr


def test_a_simulated_run_end_to_end_to_the_report(spark: SparkSession, tmp_path: Path) -> None:
    simulate(tmp_path / "sim", "jsonl")
    nodes = sorted(p.name for p in (tmp_path / "sim").iterdir())
    assert len(nodes) == 3
    # Take 7 events of one source away from one node: the pipeline must find exactly those.
    victim = tmp_path / "sim" / nodes[2] / "events.jsonl"
    rows = [json.loads(line) for line in victim.read_text().splitlines()]
    source = nodes[0]
    dropped = {r["seq"] for r in rows if r["source"] == source and 20 <= r["seq"] <= 26}
    assert len(dropped) == 7
    victim.write_text("".join(json.dumps(r) + "\n" for r in rows if not (r["source"] == source and r["seq"] in dropped)))
    summary = jobs.run(spark, [str(tmp_path / "sim")], str(tmp_path / "audit"))
    assert summary.nodes == 3 and summary.events == 300 and summary.conflicts == 0
    assert (summary.missing_ranges, summary.missing_events, summary.gap_events) == (1, 7, 0)
    assert summary.converged is False and summary.divergent == []  # simulated events are not doc events
    assert summary.worst_p99 is not None and 0 < summary.worst_p99 < 60
    missing = spark.read.parquet(str(tmp_path / "audit" / "missing")).collect()
    assert [(r["node"], r["source"], r["first_seq"], r["last_seq"]) for r in missing] == [(nodes[2], source, 20, 26)]
    page = (tmp_path / "audit" / "report.html").read_text()
    assert page.index("NOT converged") < page.index("class=plot ")  # findings first, then plots
    assert "missing: 7 event copies in 1 range(s)" in page and 'data-plot="throughput"' in page and "The mesh" in page
    assert set(summary.names) == set(nodes) and sorted(summary.names.values()) == ["n0", "n1", "n2"]  # the simulator's
    assert f"{summary.names[nodes[2]]} ({nodes[2][:8]})" in page.split("<h2>What each node lacks</h2>")[1]
    for table in ("consolidated", "held_ranges", "gaps", "delays", "throughput", "replay", "node_health", "names",
                  "summary"):
        assert (tmp_path / "audit" / table).is_dir(), table


class _Links(HTMLParser):
    """Every ``src`` and ``href`` of the page's own elements (a script's text is not an element)."""

    def __init__(self) -> None:
        super().__init__()
        self.found: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.found += [v or "" for k, v in attrs if k in ("src", "href")]


HOSTILE = '<img src="http://127.0.0.1:9/x" onerror="alert(1)">'  # a peer chooses its own name


def test_the_report_reads_on_a_phone_and_a_laptop_offline(spark: SparkSession, tmp_path: Path, browser: Any) -> None:
    """report.html from a simulated run whose clocks are apart (one node's receipts 50 ms early, some
    delays negative) and whose peer named itself with HTML: Chromium at 390 and 1280 px, every
    request but the page's own refused, no console error, no sideways scroll of the page, plots
    drawn by Plotly with titles and log delay axes, tables sortable."""
    simulate(tmp_path / "sim", "jsonl")
    nodes = sorted(p.name for p in (tmp_path / "sim").iterdir())
    skewed = tmp_path / "sim" / nodes[1]
    rows = [json.loads(line) for line in (skewed / "events.jsonl").read_text().splitlines()]
    for r in rows:
        if r["hops"]:
            r["received_at"] -= 0.05
    (skewed / "events.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    synced = {"node": nodes[1], "group": "sim", "ts": rows[0]["timestamp"], "event": "clock_synced", "peer": nodes[0],
              "detail": json.dumps({"peer": nodes[0], "offset": -0.0042, "rtt_ms": 0.8})}
    with (skewed / "stats.jsonl").open("a") as f:
        f.write(json.dumps(synced) + "\n")
    for node in nodes:  # every peer knew n2 by the hostile name
        stats = tmp_path / "sim" / node / "stats.jsonl"
        lines = [json.loads(line) for line in stats.read_text().splitlines()]
        for r in lines:
            detail = json.loads(r["detail"])
            if detail.get("name") == "n2":
                r["detail"] = json.dumps(detail | {"name": HOSTILE})
        stats.write_text("".join(json.dumps(r) + "\n" for r in lines))
    summary = jobs.run(spark, [str(tmp_path / "sim")], str(tmp_path / "audit"))
    [named] = [node for node, name in summary.names.items() if name == HOSTILE]
    report = tmp_path / "audit" / "report.html"
    html = report.read_text()
    links = _Links()
    links.feed(html)
    assert links.found == []  # nothing to load: the page is one file
    assert '<meta name=viewport content="width=device-width, initial-scale=1">' in html
    assert HOSTILE not in html and escape(HOSTILE) in html  # shown as text, never as markup
    assert "Delays are corrected by the group's measured clock offsets" in unescape(html)
    assert re.search(r"\d+ of [\d,]+ receipts \([\d.]+ %\) have a delay of zero or less", unescape(html))
    asked: list[str] = []  # requests the page made (all refused), and its console's errors: at both widths
    errors: list[str] = []
    for width, height in ((390, 844), (1280, 800)):
        page = browser.new_page(viewport={"width": width, "height": height})
        page.route("**/*", lambda route: route.continue_() if route.request.url.startswith("file:")
                   else (asked.append(route.request.url), route.abort()))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.goto(report.as_uri())
        page.wait_for_function("document.querySelectorAll('.plot').length > 0 && "
                               "[...document.querySelectorAll('.plot')].every(p => p.querySelector('.main-svg'))",
                               timeout=30_000)
        drawn = page.evaluate("""[...document.querySelectorAll('.plot')].map(p => ({
            plot: p.dataset.plot, title: p.layout.title.text, x: p.layout.xaxis.type, y: p.layout.yaxis.type,
            xtitle: p.layout.xaxis.title.text, ytitle: p.layout.yaxis.title.text,
            shown: p.querySelector('.gtitle').textContent,
            fits: p.querySelector('.gtitle').getBoundingClientRect().right <= p.getBoundingClientRect().right + 1,
        }))""")
        kinds = {d["plot"] for d in drawn}
        assert {"histogram", "delay-receiver", "delay-hops", "throughput", "links"} <= kinds, drawn
        for d in drawn:
            assert d["shown"] and d["xtitle"] and d["ytitle"] and d["fits"], d
            if d["plot"] in ("histogram", "delay-receiver", "delay-hops"):
                assert d["x"] == "log", d
        assert next(d for d in drawn if d["plot"] == "histogram")["y"] == "log"
        assert page.evaluate("document.documentElement.scrollWidth") <= width
        assert f"{HOSTILE} ({named[:8]})" in page.inner_text("body")
        # Sorting: the receivers' table by p99, ascending then descending.
        table = page.locator("h3:text-is('Delay by receiver') + .scroll table")
        table.locator("th", has_text="p99 ms").click()
        column = [float(t.replace(",", "")) for t in table.locator("tbody tr td:nth-child(6)").all_inner_texts()]
        assert column == sorted(column) and len(column) == 3
        table.locator("th", has_text="p99 ms").click()
        again = [float(t.replace(",", "")) for t in table.locator("tbody tr td:nth-child(6)").all_inner_texts()]
        assert again == sorted(column, reverse=True)
        assert asked == [] and errors == [], (asked, errors)
        page.close()


def test_the_command_tells_each_job_as_it_goes_and_prints_the_findings_as_json(spark: SparkSession, tmp_path: Path) -> None:
    """``huddle pipeline run --json`` as a user runs it: progress on stderr, the findings whole on stdout."""
    simulate(tmp_path / "sim", "parquet")
    nodes = sorted(p.name for p in (tmp_path / "sim").iterdir())
    proc = subprocess.run([sys.executable, "-m", "huddle", "pipeline", "run", "--input", str(tmp_path / "sim"),
                           "--output", str(tmp_path / "audit"), "--json", "--master", "local[1]",
                           "--conf", "spark.driver.memory=1g"], capture_output=True, text=True, timeout=300, check=False)
    lines = proc.stderr.strip().splitlines()
    assert lines[:1] == ["spark local[1] starting …"] and re.fullmatch(r"spark local\[1\] up in \d+\.\d s", lines[1]), lines
    want = [f"job {i}/{len(jobs.JOBS)} {name} " + end for i, name in enumerate(jobs.JOBS, 1)
            for end in ("…", r"done in \d+\.\d s")]
    assert len(lines) == 2 + len(want), proc.stderr[-4000:]
    for line, pattern in zip(lines[2:], want, strict=True):
        assert re.fullmatch(pattern, line), (line, pattern)
    for noise in ("WARNING: Using incubator", "Traceback", "at org.apache", "WARN "):
        assert noise not in proc.stderr
    found = json.loads(proc.stdout)  # one document: nothing else on stdout
    assert proc.returncode == (0 if found["converged"] else 3)
    assert (found["nodes"], found["groups"], found["events"], found["output"]) == (3, 1, 300, str(tmp_path / "audit"))
    assert found["findings"][-1] == f"input: {found['rows']} rows from 3 node(s) in 1 group(s), 300 distinct events"
    assert sorted(found["names"].values()) == ["n0", "n1", "n2"]
    details = found["details"]
    assert {r["by"] for r in details["delays"]} == {"source", "receiver", "hops", "link"}
    assert all(r["p50"] <= r["p99"] <= r["max"] for r in details["delays"])
    assert sorted(r["node"] for r in details["replay"]) == nodes and {r["node"] for r in details["health"]} == set(nodes)


@pytest.mark.processes
def test_three_node_processes_end_to_end(spark: SparkSession, tmp_path: Path) -> None:
    """A real run: three nodes on 127.0.0.1, events and document operations, each node exported."""
    from conftest import Cluster, http, wait_for

    cluster = Cluster(tmp_path)
    try:
        nodes = [cluster.start(n) for n in ("a", "b", "c")]
        wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
        for i in range(10):
            assert http(nodes[i % 3].api, "/api/v1/events", {"kind": "score", "body": {"i": i}})[0] == 201
        status, _ = http(nodes[1].api, "/api/v1/doc/ops", [
            {"op": "add", "to": {"team": "home"}, "children": [{"tag": "person", "attrs": {"number": "7", "name": "Bo"}}]}])
        assert status == 201

        def everywhere() -> bool:
            sums = [http(n.api, "/api/v1/log/summary")[1] for n in nodes]
            return all(s["events"] == 11 and not s["gaps"] for s in sums)

        wait_for(everywhere, 15, "11 events on every node")
        for n in nodes:  # a node that stops records the document it shows (a "document" statistics row)
            n.signal(15)
            assert n.wait(10) == 0
        for n in nodes:
            done = subprocess.run([sys.executable, "-m", "huddle", "export", "--data-dir", str(tmp_path / n.name),
                                   "--out", str(tmp_path / "export" / n.name)], capture_output=True, text=True, timeout=60)
            assert done.returncode == 0, done.stderr
    finally:
        cluster.close()
    summary = jobs.run(spark, [str(tmp_path / "export")], str(tmp_path / "audit"))
    assert (summary.nodes, summary.events, summary.rows) == (3, 11, 33)
    assert summary.converged is True and summary.divergent == [] and summary.missing_events == 0
    assert summary.stats_rows is not None and summary.stats_rows > 0
    page = (tmp_path / "audit" / "report.html").read_text()
    assert "Converged" in page and "Bo" in page and "peer_joined" in page
    replayed = spark.read.parquet(str(tmp_path / "audit" / "replay")).collect()
    assert sorted((r["doc_events"], r["shown_doc_events"], r["shown"]) for r in replayed) == [(1, 1, "same")] * 3


# ---------------------------------------------------------------- the bout job


def bout_rows(plan: list[Any], devices: dict[str, str], holders: dict[str, set[str]]) -> list[tuple[Any, ...]]:
    """Export rows of a planned bout as the nodes would hold it: each device writes through its
    node (the source); ``holders``: node -> the sources whose events it holds."""
    seqs: dict[str, int] = {}
    made = []
    for w in plan:
        source = devices[w.device]
        for op in w.ops:
            seqs[source] = seqs.get(source, 0) + 1
            made.append((source, seqs[source], 1.8e9 + w.at, json.dumps(op)))
    return [ev(node, source, seq, ts=ts, kind="doc", body=body, at=ts + 0.01)
            for node, held in holders.items() for source, seq, ts, body in made if source in held]


def test_the_bout_job_scores_attributes_corrections_and_finds_a_node_that_disagrees(spark: SparkSession) -> None:
    plan = plan_bout(3, jams=3)
    # the jam timer (and head NSO) writes through A, the scorekeepers and the penalty tracker through B,
    # the lineup tracker through C; C misses B's events after its first 40
    devices = {"jam-timer": A, "scorekeeper-home": B, "scorekeeper-away": B, "penalty-tracker": B, "lineup-tracker": C}
    rows = bout_rows(plan, devices, {A: {A, B, C}, B: {A, B, C}, C: {A, C}})
    rows += [r for r in bout_rows(plan, devices, {C: {B}}) if r[3] <= 40]
    tables = jobs.bout(events(spark, *rows))
    by_node = {r["node"]: r.asDict() for r in tables.bout.collect()}
    assert set(by_node) == {A, B, C, T.GROUP_DOCUMENT}
    whole = by_node[T.GROUP_DOCUMENT]
    score = {"home": 0, "away": 0}
    trips: dict[str, tuple[str, int]] = {}
    for w in plan:  # the score from the plan's own trips and fixes
        for op in w.ops:
            for c in op.get("children", ()):
                if c["tag"] == "points":
                    trips[c["eid"]] = (c["attrs"]["team"], int(c["attrs"]["points"]))
            if op["op"] == "set" and op["attribute"] == "points":
                trips[op["to"]["eid"]] = (trips[op["to"]["eid"]][0], int(op["value"]))
    for team, points in trips.values():
        score[team] += points
    assert (whole["home"], whole["away"]) == (score["home"], score["away"])
    assert (whole["status"], whole["jams"]) == ("final", 6)
    assert json.loads(whole["summary"])["teams"]["home"]["score"] == score["home"]
    assert by_node[A]["same"] and by_node[B]["same"] and whole["same"]
    assert not by_node[C]["same"] and by_node[C]["doc_events"] < whole["doc_events"]
    fixes = [r.asDict() for r in tables.bout_corrections.collect()]
    points = [f for f in fixes if (f["tag"], f["attribute"]) == ("points", "points")]
    assert points and all(f["source"] == B and f["own"] and f["before"] != f["after"] for f in points)
    code = [f for f in fixes if f["attribute"] == "code"]
    assert [(f["source"], f["wrote_source"], f["own"]) for f in code] == [(A, B, False)]
    writers = {(r["source"], r["what"]): r["ops"] for r in tables.bout_writers.collect()}
    assert writers[(C, "add lineup")] == 60 and writers[(A, "set jam.start")] == 6
    assert (B, "add points") in writers and (A, "add lineup") not in writers
    penalties = tables.bout_penalties.collect()
    assert sum(r["penalties"] for r in penalties) == whole["penalties"] > 0


def test_a_run_of_the_bout_job_writes_the_final_bout_and_tells_it(spark: SparkSession, tmp_path: Path) -> None:
    plan = plan_bout(5, jams=2)
    devices = dict.fromkeys(("jam-timer", "scorekeeper-home", "scorekeeper-away", "penalty-tracker", "lineup-tracker"), A)
    export = tmp_path / "export" / "events.jsonl"
    export.parent.mkdir()
    names = [f.name for f in schemas.EVENTS.fields]
    export.write_text("".join(json.dumps(dict(zip(names, r, strict=True))) + "\n"
                              for r in bout_rows(plan, devices, {A: {A}, B: {A}})))
    given: list[tuple[str, Any, dict[str, Any]]] = []
    summary = jobs.run(spark, [str(export.parent)], str(tmp_path / "audit"), jobs=["bout"],
                       bout_writer=lambda group, root, got: given.append((group, root, got)))
    assert summary.bouts is not None and len(summary.bouts) == 1 and summary.bout_disagree == []
    bout = summary.bouts[0]
    assert bout["status"] == "final" and bout["home_name"] == "Rainy City Rollers"
    line = next(x for x in summary.lines() if x.startswith("bout (bout): "))
    assert f"Rainy City Rollers {bout['home']} - {bout['away']} Steel Valley Vixens" in line
    xml, js = (tmp_path / "audit" / "bout-bout.xml"), (tmp_path / "audit" / "bout-bout.json")
    assert summary.bout_files == [str(xml), str(js)]
    assert json.loads(js.read_text())["teams"]["away"]["score"] == bout["away"]
    [(group, root, got)] = given
    assert group == G and root.tag == "bout" and got == json.loads(js.read_text())
    assert 'status="final"' in xml.read_text()
    page = (tmp_path / "audit" / "report.html").read_text()
    assert "The bout" in page and 'data-plot="bout-score"' in page and "Who recorded what" in page
    assert {"bout", "bout_penalties", "bout_writers", "bout_corrections"} <= set(summary.details)


def test_the_bout_job_reads_a_hostile_members_doc_events_without_failing() -> None:
    """Events a buggy or hostile peer recorded (not JSON, not an operation, an address that does not
    resolve, a role that is not text) are dropped or taken as the engine takes them: the bout is
    still made, and only real changes count as corrections."""
    from huddle.pipeline.bout import replay_bout

    person = {"op": "add", "to": {"team": "home"}, "children": [
        {"tag": "person", "eid": "6f1c0d7e-2a43-4e0b-9a8e-0d5f2f1b7c11", "attrs": {"number": "7"}}]}
    rows = [
        (A, 1, 1.0, json.dumps(person)),
        (B, 1, 2.0, "not json"),
        (B, 2, 3.0, json.dumps({"op": "explode"})),
        (B, 3, 4.0, json.dumps({"op": "set", "to": {"eid": "00000000-0000-4000-8000-000000000000"},
                                "attribute": "number", "value": "9"})),
        (B, 4, 5.0, json.dumps([1, 2, 3])),
        (B, 5, 6.0, json.dumps({"op": "remove", "to": {"period": 2, "jam": 40}})),
        (B, 6, 7.0, json.dumps({"op": "set", "to": {"eid": "6f1c0d7e-2a43-4e0b-9a8e-0d5f2f1b7c11"},
                                "attribute": "number", "value": "7"})),  # the same value again: no correction
        (C, 1, 8.0, json.dumps({"op": "set", "to": {"eid": "6f1c0d7e-2a43-4e0b-9a8e-0d5f2f1b7c11"},
                                "attribute": "number", "value": "77"})),
        (C, 1, 8.0, json.dumps({"op": "set", "to": {"path": "bout"}, "attribute": "name", "value": "x"})),  # a duplicate
    ]
    got = replay_bout(rows)
    assert got.events == 8 and len(got.document.dropped) == 4
    assert got.summary()["teams"]["home"]["skaters"] == [{"number": "77"}]
    assert [(c["source"], c["before"], c["after"], c["wrote_source"], c["own"]) for c in got.corrections] == [
        (C, "7", "77", A, False)]
    assert got.writers == {(A, "", "add person"): 1, (B, "", "remove jam"): 1, (B, "", "set person.number"): 1,
                           (C, "", "set person.number"): 1}


@pytest.mark.processes
def test_the_bout_job_on_the_exported_logs_of_a_bout_over_three_node_processes(spark: SparkSession,
                                                                                 tmp_path: Path) -> None:
    """A short simulated bout over three real nodes, their logs exported, and a fourth log made from c's
    without the last of b's events (a device that missed them): the bout job's score is the nodes'
    summary, a scorekeeper's correction is b's, the head NSO's fix of b's penalty is a's, and the
    fourth node is named as disagreeing."""
    import asyncio

    from conftest import Cluster, get, wait_for

    from huddle.boutsim.play import play
    from huddle.log.export import export

    cluster = Cluster(tmp_path)
    try:
        a, b, c = (cluster.start(n) for n in ("a", "b", "c"))
        wait_for(lambda: cluster.mesh_complete([a, b, c]), 30, "three nodes to mesh")
        plan = plan_bout(8, jams=2, t0=get(a.api, "/api/v1/node")["time"])
        devices = {"jam-timer": a.api, "scorekeeper-home": b.api, "scorekeeper-away": b.api,
                   "penalty-tracker": b.api, "lineup-tracker": a.api}
        played = asyncio.run(play(plan, devices, speed=500.0))
        assert played.refused == []
        wait_for(lambda: len({json.dumps(get(n.api, "/api/v1/bout/summary")) for n in (a, b, c)}) == 1, 20,
                 "the three summaries to agree")
        summary = get(c.api, "/api/v1/bout/summary")
        ids = {n.name: (tmp_path / n.name / "node-id").read_text().strip() for n in (a, b, c)}
        for n in (a, b, c):
            n.signal(15)
            assert n.wait(10) == 0
            export(tmp_path / n.name, tmp_path / "export" / n.name, "jsonl")
    finally:
        cluster.close()
    lines = (tmp_path / "export" / "c" / "events.jsonl").read_text().splitlines()
    b_docs = sorted(json.loads(x)["seq"] for x in lines if json.loads(x)["source"] == ids["b"]
                    and json.loads(x)["kind"] == "doc")
    cut, missed = "d" * 32, set(b_docs[-5:])
    (tmp_path / "export" / "d").mkdir()
    (tmp_path / "export" / "d" / "events.jsonl").write_text("".join(
        json.dumps(row | {"node": cut}) + "\n" for row in map(json.loads, lines)
        if not (row["source"] == ids["b"] and row["seq"] in missed)))
    got = jobs.run(spark, [str(tmp_path / "export")], str(tmp_path / "audit"), jobs=["bout"])
    assert got.bouts is not None and len(got.bouts) == 1
    bout = got.bouts[0]
    assert (bout["home"], bout["away"]) == (summary["teams"]["home"]["score"], summary["teams"]["away"]["score"])
    assert bout["status"] == "final" and got.bout_disagree == [cut]
    fixes = [r.asDict() for r in spark.read.parquet(str(tmp_path / "audit" / "bout_corrections")).collect()]
    assert any(f["attribute"] == "points" and f["source"] == ids["b"] and f["own"] for f in fixes)
    assert [(f["source"], f["wrote_source"]) for f in fixes if f["attribute"] == "code"] == [(ids["a"], ids["b"])]
    line = next(x for x in got.lines() if x.startswith("bout: 1 node(s)"))
    assert cut[:8] in line
    # The statsbook straight from the exported logs, as a user asks for it (a Spark of its own, cold).
    import openpyxl

    book = tmp_path / "bout.xlsx"
    proc = subprocess.run([sys.executable, "-m", "huddle", "pipeline", "run", "--input",
                           *(str(tmp_path / "export" / n) for n in "abc"), "--output", str(tmp_path / "audit2"),
                           "--jobs", "bout", "--statsbook", str(book), "--master", "local[1]", "--quiet"],
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0 and f"the statsbook: {book}" in proc.stdout, proc.stdout + proc.stderr[-3000:]
    wb = openpyxl.load_workbook(book)
    assert wb["IGRF"]["B11"].value == summary["teams"]["home"]["name"]  # the home team's name (from a's summary)
    jam_totals = [c.value for c in wb["Score"]["Q"][3:] if isinstance(c.value, int)]  # home's points per jam
    assert jam_totals and sum(jam_totals) == summary["teams"]["home"]["score"]
