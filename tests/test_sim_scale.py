"""The simulator's compact logs: runs of records, range stores, column-wise export, bulk scenarios."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from huddle import NodeId
from huddle.errors import LocalProtocolError
from huddle.protocol import Commit
from huddle.protocol.logstore import RecordRun
from huddle.protocol.replication import Replicator
from huddle.sim import run_scenario
from huddle.simlog import Origin, RangeStore
from huddle.wire import LogRecord, Xmsg, decode, encode

A = NodeId(bytes(range(16)))
B = NodeId(bytes(range(1, 17)))


def origin_with(source: NodeId = A) -> Origin:
    origin = Origin()
    origin.register(source, 1, 10, 100.0)  # 1..10 at 100.0
    origin.register(source, 11, 5, 101.5)  # 11..15 at 101.5
    return origin


def test_a_run_indexes_and_slices_like_a_tuple() -> None:
    origin = origin_with()
    run = RecordRun(A, 3, 14, origin.record)
    as_tuple = tuple(origin.record(A, q) for q in range(3, 15))
    assert len(run) == 12
    assert list(run) == list(as_tuple)
    assert run[0] == as_tuple[0] and run[-1] == as_tuple[-1] and run[8] == as_tuple[8]
    assert list(run[2:5]) == list(as_tuple[2:5])
    assert run[9:].first == 12 and run[9:].last == 14
    assert run[11].timestamp == 101.5 and run[0].timestamp == 100.0
    with pytest.raises(IndexError):
        run[12]
    with pytest.raises(ValueError, match="step 1"):
        run[::2]
    with pytest.raises(ValueError):
        RecordRun(A, 5, 4, origin.record)


def test_a_run_goes_through_the_codec_as_ordinary_records() -> None:
    origin = origin_with()
    msg = decode(encode(Xmsg(B, RecordRun(A, 1, 15, origin.record, hops=2))))
    assert isinstance(msg, Xmsg)
    assert msg.records == tuple(origin.record(A, q, 2) for q in range(1, 16))
    assert msg.records[4].body == '{"n":39853}'  # 5 * 7919 + 0x000102, the salt from A's first octets


def test_range_store_keeps_ranges_and_reads_runs_within_one_arrival() -> None:
    origin = origin_with()
    store = RangeStore(origin)
    store.stage(RecordRun(A, 1, 4, origin.record), None, 100.0)  # own, not received
    store.stage(RecordRun(A, 8, 15, origin.record, hops=1), B, 102.0)  # received: one more hop
    store.stage(tuple(origin.record(A, q, 1) for q in (5, 6)), B, 103.0)
    store.commit()
    assert store.committed == 14
    assert store.ranges(A) == [(1, 6), (8, 15)]
    assert store.load()[A].contig == 6 and store.load()[A].ahead == [(8, 15)]
    first = store.read(A, 0, 100)
    assert isinstance(first, RecordRun) and (first.first, first.last, first.hops) == (1, 4, 0)
    assert [r.hops for r in store.read(A, 4, 100)] == [2, 2]
    assert store.read(A, 6, 100) == []  # 7 is not held
    assert (store.read(A, 9, 3)[0].seq, len(store.read(A, 9, 3))) == (10, 3)
    assert store.conflicts == [] and store.overlaps == []


def test_range_store_refuses_other_content_and_double_storage() -> None:
    origin = origin_with()
    store = RangeStore(origin)
    good = origin.record(A, 2)
    forged = LogRecord(A, 3, good.timestamp, "score", '{"n":1}', 0)
    store.stage((good, forged, origin.record(A, 4)), B, 1.0)
    store.stage((LogRecord(B, 1, 1.0, "x", "{}", 0),), B, 1.0)
    assert len(store.conflicts) == 2
    assert "other content" in store.conflicts[0] and "never originated" in store.conflicts[1]
    assert store.ranges(A) == [(2, 2), (4, 4)]  # the forged record is not stored
    store.stage(RecordRun(A, 1, 2, origin.record), B, 2.0)
    assert store.overlaps and store.ranges(A) == [(2, 2), (4, 4)]


def test_columns_are_the_same_records_as_made_one_by_one() -> None:
    origin = origin_with()
    cols = origin.columns(A, 7, 14)
    rows = [origin.record(A, q) for q in range(7, 15)]
    assert cols["seq"].to_pylist() == [r.seq for r in rows]
    assert cols["timestamp"].to_pylist() == [r.timestamp for r in rows]
    assert cols["kind"].to_pylist() == [r.kind for r in rows]
    assert cols["body"].to_pylist() == [r.body for r in rows]
    assert [json.loads(b) for b in cols["body"].to_pylist()] == [json.loads(r.body) for r in rows]


def test_appending_a_run_must_continue_our_own_sequence() -> None:
    origin = Origin()
    store = RangeStore(origin)
    log = Replicator(A, store, now=0.0)
    log.append_run(origin.register(A, 1, 1000, 5.0), now=0.0)
    assert log.next_seq == 1001 and log.version_vector() == {A: 1000}
    commit, *_ = log.take_actions()  # the commit is the driver's to carry out, before anything else
    assert commit == Commit(store) and store.committed == 0
    commit.store.commit()
    assert store.committed == 1000
    with pytest.raises(LocalProtocolError, match="start at 1001"):
        log.append_run(RecordRun(A, 5, 9, origin.record), now=0.0)
    with pytest.raises(LocalProtocolError, match="must be ours"):
        log.append_run(RecordRun(B, 1001, 1002, origin.record), now=0.0)


def test_bulk_scenario_with_faults_converges_and_exports_every_row(tmp_path: Path) -> None:
    result = run_scenario(seed=3, nodes=6, events=60_000, appends=50, loss=0.05, partitions=2, crashes=2,
                          export=str(tmp_path), wire=False)
    assert result.converged, result.problems
    assert result.events == 60_000
    dirs = sorted(tmp_path.iterdir())
    assert len(dirs) == 6
    counts = set()
    for d in dirs:
        table = pq.read_table(d / "events.parquet")
        counts.add(table.num_rows)
        assert table.column("node").unique().to_pylist() == [d.name]
        keys = set(zip(table.column("source").to_pylist(), table.column("seq").to_pylist(), strict=True))
        assert len(keys) == table.num_rows  # no duplicates
        stats = pq.read_table(d / "stats.parquet")
        assert "peer_joined" in stats.column("event").to_pylist()
    assert len(counts) == 1  # every node holds the same number of events
    # Records of nodes that crashed and lost their data may be gone; everyone else's are all there.
    assert 0 < counts.pop() <= 60_000
    assert result.stats["duplicates"] < result.stats["received"] // 10


def test_simulate_cli_handles_a_large_group(tmp_path: Path) -> None:
    """The CLI at scale (the full 200 nodes x 10 million events run is in bench/README.md)."""
    out = subprocess.run(
        [sys.executable, "-m", "huddle", "simulate", "--nodes", "40", "--events", "1000000", "--seed", "2"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "seed 2: converged: 40 nodes, 1000000 events" in out.stdout
    assert re.search(r"^  received +39000000$", out.stdout, re.M)  # each of 40 nodes got everyone else's events, once


def test_simulate_cli_rejects_bad_flags() -> None:
    for flags, message in (
        (["--appends", "0"], "--appends must be between 1 and --events"),
        (["--duplicate", "1.5"], "0 <= --duplicate < 1"),
        (["--nodes", "0"], "--nodes >= 1"),
    ):
        out = subprocess.run([sys.executable, "-m", "huddle", "simulate", *flags],
                             capture_output=True, text=True, timeout=60, check=False)
        assert out.returncode == 2, (flags, out.stdout, out.stderr)
        assert message in out.stderr
