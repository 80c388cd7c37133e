"""``huddle pipeline live``: the streaming forms against the batch transforms on a
finished input, a stream over growing exports (a missing range shown, then
healed; a corrupt part skipped), the page it serves, and three node processes.

One SparkSession (``local[2]``: the stream's own thread and its micro-batches'
jobs; one shuffle partition, no UI) serves the module.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, http, needs_java, wait_for
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from huddle.ids import NodeId
from huddle.log.follow import follow
from huddle.log.store import SqliteStore
from huddle.pipeline import schemas
from huddle.pipeline import transforms as T
from huddle.pipeline.live import Live, check_live_inputs, facts
from huddle.pipeline.livepage import LivePage
from huddle.pipeline.livestate import LiveState, gaps_of, line, missing_of
from huddle.pipeline.session import start_session
from huddle.wire import make_record

pytestmark = pytest.mark.spark

G = "bout"
NODES = [f"{i:x}" * 32 for i in range(10, 14)]  # aaaa…, bbbb…, cccc…, dddd…: four nodes, the first three record


@pytest.fixture(scope="module")
def spark() -> Iterator[SparkSession]:
    needs_java()
    session = start_session("local[2]", {"spark.sql.shuffle.partitions": "1", "spark.default.parallelism": "1",
                                         "spark.driver.memory": "1g", "spark.sql.adaptive.enabled": "false"})
    yield session
    session.stop()


# ------------------------------------------------------------------ the state alone


def test_missing_and_gaps_over_merged_ranges() -> None:
    a, b, c = NODES[:3]
    state = LiveState()
    state.merge([{"node": a, "group": G, "source": a, "first_seq": 1, "last_seq": 10},
                 {"node": b, "group": G, "source": a, "first_seq": 1, "last_seq": 3}], [], [], rows=13, now=0.0)
    state.merge([{"node": b, "group": G, "source": a, "first_seq": 4, "last_seq": 5},  # joins 1..3
                 {"node": b, "group": G, "source": a, "first_seq": 12, "last_seq": 12},  # nobody else has 11, 12
                 {"node": c, "group": G, "source": b, "first_seq": 1, "last_seq": 1}], [], [], rows=4, now=1.0)
    assert state.held[b, G, a] == [(1, 5), (12, 12)]
    assert [(m["node"], m["source"], m["first_seq"], m["last_seq"]) for m in missing_of(state.held)] == [
        (a, a, 12, 12), (b, a, 6, 10), (c, a, 1, 10), (c, a, 12, 12), (a, b, 1, 1), (b, b, 1, 1)]
    assert [(g["source"], g["first_seq"], g["last_seq"]) for g in gaps_of(state.held)] == [(a, 11, 11)]
    doc = state.report(now=2.0)
    assert not doc["converged"] and doc["rows_total"] == 17 and doc["update"] == 2
    assert "NOT converged: aaaaaaaa lacks 12-12 of aaaaaaaa" in line(doc)
    assert "1 events no node holds" in line(doc)


def test_recent_lag_keeps_only_the_last_seconds() -> None:
    a, b = NODES[:2]

    def count(fine: int, n: int, delay: float) -> dict[str, Any]:
        return {"group": G, "source": a, "node": b, "hops": 1, "received_from": a, "fine": fine, "receipts": n,
                "low": delay, "high": delay}

    state = LiveState(recent=10.0)
    state.merge([], [count(1200, 5, 1.0)], [], rows=5, now=100.0)
    state.merge([], [count(400, 5, 0.01)], [], rows=5, now=105.0)
    assert state.report(now=105.0)["recent_lag"]["link"][0]["receipts"] == 10
    state.merge([], [count(400, 1, 0.01)], [], rows=1, now=111.0)  # the batch of t=100 is past the window now
    doc = state.report(now=111.0)
    assert doc["recent_lag"]["link"][0]["receipts"] == 6 and doc["recent_lag"]["link"][0]["max"] == 0.01
    assert doc["lag"]["link"][0]["receipts"] == 11 and doc["lag"]["link"][0]["max"] == 1.0
    assert len(state.window) == 2


# ------------------------------------------------------------------ streaming forms against the batch transforms


def finished_input(spark: SparkSession) -> DataFrame:
    """Four nodes, three sources of 400 events; each copy held with probability
    0.9 (so nodes lack ranges), the sources' own copies of 391..395 dropped
    by everyone (a gap), delays spread over four orders of magnitude."""
    rnd = random.Random(7)
    rows = []
    for source in NODES[:3]:
        for seq in range(1, 401):
            ts = 1000.0 + seq * 0.01
            for node in NODES:
                if 391 <= seq <= 395 or (node != source and rnd.random() > 0.9):
                    continue
                own = node == source
                frm = source if rnd.random() < 0.7 else rnd.choice([n for n in NODES if n != node])
                delay = 0.0 if own else 10 ** rnd.uniform(-4, 0) * rnd.choice([1, 1, 1, -0.01])
                rows.append((node, G, source, seq, ts, "k", "{}", 0 if own else rnd.choice([1, 2]), ts + delay,
                             None if own else frm))
    return spark.createDataFrame(rows, schemas.EVENTS)


def test_the_streaming_forms_agree_with_the_batch_transforms_on_a_finished_input(spark: SparkSession) -> None:
    events = finished_input(spark).persist()
    state = LiveState()
    for part in range(3):  # three micro-batches of rows in no order at all
        held, counts, newest, rows, refused = facts(events.filter(F.abs(F.hash("node", "seq")) % 3 == part))
        assert refused == 0
        state.merge(held, counts, newest, rows)
    doc = state.report()
    assert doc["rows_total"] == events.count()
    key = ["node", "group", "source", "first_seq", "last_seq", "events"]
    held = T.held_ranges(events)
    batch_missing = sorted(tuple(r) for r in T.missing(held).select(*key).collect())
    assert batch_missing and sorted(tuple(m[k] for k in key) for m in doc["missing"]) == batch_missing
    batch_gaps = sorted(tuple(r) for r in T.gaps(held).select(*key[1:]).collect())
    assert batch_gaps == sorted(tuple(g[k] for k in key[1:]) for g in doc["gaps"]) == [
        (G, s, 391, 395, 5) for s in sorted(NODES[:3])]
    cols = ["group", "by", "key", "receipts", "p50", "p90", "p99", "max"]
    batch_delays = sorted(tuple(r) for r in T.delays(events).filter(F.col("by").isin("source", "link"))
                          .select(*cols).collect())
    assert len(batch_delays) > 10
    assert sorted(tuple(r[c] for c in cols) for by in ("source", "link") for r in doc["lag"][by]) == batch_delays
    assert doc["recent_lag"] == doc["lag"]  # all three batches are recent
    events.unpersist()


def test_a_json_line_that_does_not_parse_is_refused_and_counted(spark: SparkSession, tmp_path: Path) -> None:
    good = {"node": NODES[0], "group": G, "source": NODES[0], "seq": 1, "timestamp": 1.0, "kind": "k", "body": "{}",
            "hops": 0, "received_at": 1.0, "received_from": None}
    file = tmp_path / "events.jsonl"
    file.write_text(json.dumps(good) + "\n{not json\n" + json.dumps(good | {"seq": "x"}) + "\n")
    held, _, _, rows, refused = facts(spark.read.schema(schemas.EVENTS).json(str(file)))
    assert (rows, refused) == (3, 2) and [(h["first_seq"], h["last_seq"]) for h in held] == [(1, 1)]


# ------------------------------------------------------------------ a stream over growing exports


class Node:
    """A data directory with a log, and its follow export."""

    def __init__(self, tmp: Path, node: NodeId) -> None:
        self.dir, self.out = tmp / "data" / str(node), tmp / "exports" / str(node)
        self.dir.mkdir(parents=True)
        (self.dir / "node-id").write_text(str(node))
        self.store = SqliteStore(self.dir / "log.sqlite", group=G)

    def add(self, source: NodeId, seqs: range, *, at: float) -> None:
        frm = None if str(source) == (self.dir / "node-id").read_text() else source
        self.store.stage([make_record(source, q, 1000.0 + q, "k", "{}", 0) for q in seqs], frm, at)
        self.store.commit()
        follow(self.dir, self.out)  # one poll: a part with the new rows

    def heard(self, peer: NodeId, name: str) -> None:
        """A statistics row naming ``peer``, as a node writes when a peer joins."""
        self.store.add_stat(1000.0, "peer_joined", peer, json.dumps({"name": name, "endpoint": "tcp://127.0.0.1:1"}))
        self.store.commit()
        follow(self.dir, self.out)


@pytest.mark.timeout(300)  # a stream's micro-batches on a loaded machine
def test_a_stream_shows_a_missing_range_then_its_healing_and_skips_a_corrupt_part(
        spark: SparkSession, tmp_path: Path) -> None:
    a_id, b_id = NodeId(bytes.fromhex(NODES[0])), NodeId(bytes.fromhex(NODES[1]))
    a, b = Node(tmp_path, a_id), Node(tmp_path, b_id)
    a.add(a_id, range(1, 21), at=1000.0)
    b.add(a_id, range(1, 11), at=1011.0)
    docs: list[dict[str, Any]] = []
    live = Live(spark, check_live_inputs([str(tmp_path / "exports")]), docs.append, trigger=0.3)
    try:
        def lacking() -> list[tuple[str, int, int]]:
            return [(m["node"], m["first_seq"], m["last_seq"]) for m in docs[-1]["missing"]] if docs else [("?", 0, 0)]

        wait_for(lambda: lacking() == [(NODES[1], 11, 20)], 60, "b lacking a's 11..20")
        assert "NOT converged: bbbbbbbb lacks 11-20 of aaaaaaaa" in line(docs[-1])
        b.heard(a_id, "alice")  # the statistics stream: a name learnt is an update of its own
        wait_for(lambda: docs[-1]["names"] == {NODES[0]: "alice"}, 60, "a's name")  # within 10 s and a batch
        assert "NOT converged: bbbbbbbb lacks 11-20 of alice (aaaaaaaa)" in line(docs[-1])
        corrupt = tmp_path / "exports" / "intruder" / "events" / "000001"  # in the watched tree, no follower's
        corrupt.mkdir(parents=True)
        (corrupt / "events.parquet").write_bytes(b"PAR1 not really")
        b.add(a_id, range(11, 21), at=1040.0)
        wait_for(lambda: docs[-1]["converged"], 60, "the range healed")
        assert live.failed() is None  # the corrupt part was skipped, not the end of the stream
        link = {r["key"]: r for r in docs[-1]["lag"]["link"]}[f"{NODES[0]}>{NODES[1]}"]
        assert link["receipts"] == 20 and link["max"] == 29.0  # #11: recorded at 1011, received at 1040
        held = {(h["node"], h["source"]): h for h in docs[-1]["held"]}
        assert held[NODES[1], NODES[0]]["events"] == 20 and held[NODES[1], NODES[0]]["behind_seconds"] == 0
    finally:
        live.stop()
        a.store.close()
        b.store.close()


# ------------------------------------------------------------------ the page


def raw(port: int, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_the_page_serves_two_things_and_refuses_the_rest_counted() -> None:
    page = LivePage("127.0.0.1", 0)
    page.start()
    try:
        state = LiveState()
        state.merge([{"node": NODES[0], "group": G, "source": NODES[0], "first_seq": 1, "last_seq": 5}], [], [], 5)
        page.publish(state.report())
        assert raw(page.port, b"GET /nope HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 404")
        assert raw(page.port, b"POST / HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc").startswith(b"HTTP/1.0 501")
        assert raw(page.port, b"GET /" + b"x" * 70_000 + b" HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.0 414")
        assert b"Error code: 400" in raw(page.port, b"\x16\x03\x01 not http at all\r\n\r\n")  # a TLS hello
        assert raw(page.port, b"GET / HTTP/1.0\r\n" + b"X: y\r\n" * 200 + b"\r\n").startswith(b"HTTP/1.0 431")
        status, doc = http(f"http://127.0.0.1:{page.port}", "/live.json")
        assert status == 200 and doc["update"] == 1 and doc["refused"] == 5 and doc["converged"]
    finally:
        page.close()


@pytest.mark.parametrize("width", [390, 1280])
def test_the_page_draws_an_update_in_chromium_without_error(browser: Any, width: int) -> None:
    page = LivePage("127.0.0.1", 0)
    page.start()
    try:
        state = LiveState()
        state.merge([{"node": n, "group": G, "source": NODES[0], "first_seq": 1, "last_seq": 5 if n != NODES[2] else 3}
                     for n in NODES[:3]],
                    [{"group": G, "source": NODES[0], "node": NODES[1], "hops": 1, "received_from": NODES[0],
                      "fine": 400, "receipts": 4, "low": 0.01, "high": 0.0123}],
                    [{"node": n, "group": G, "source": NODES[0], "timestamp": 1000.0, "received_at": 1000.5}
                     for n in NODES[:3]], 13)
        state.names[NODES[2]] = "<b>carol</b>"  # a name is text, whatever it holds
        page.publish(state.report())
        tab = browser.new_page(viewport={"width": width, "height": 844})
        problems: list[str] = []
        tab.on("console", lambda m: problems.append(m.text) if m.type in ("error", "warning") else None)
        tab.on("pageerror", lambda e: problems.append(str(e)))
        tab.goto(f"http://127.0.0.1:{page.port}/")
        # Selectors, not scripts: the page's CSP forbids the eval a script from the test would need.
        tab.wait_for_selector("#verdict.bad", timeout=15_000)
        assert tab.inner_text("#verdict") == "NOT converged: 2 events missing in 1 ranges"
        assert "<b>carol</b> (cccccccc)" in tab.inner_text("#missing") and "0.0123 s" in tab.inner_text("#links")
        state.merge([{"node": NODES[2], "group": G, "source": NODES[0], "first_seq": 4, "last_seq": 5}], [], [], 2)
        page.publish(state.report())  # the page asks again by itself and shows the healing
        tab.wait_for_selector("#verdict.ok", timeout=15_000)
        for box in tab.locator(".box, #verdict, h1").all():  # tables scroll in their boxes; the page does not
            shape = box.bounding_box()
            assert shape is not None and shape["x"] + shape["width"] <= width
        assert not problems
    finally:
        page.close()


# ------------------------------------------------------------------ three node processes


def huddle(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "huddle", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def emit(api: str, i: int) -> dict[str, Any]:
    status, data = http(api, "/api/v1/events", {"kind": "k", "body": {"i": i}})
    assert status == 201, data
    result: dict[str, Any] = data
    return result


class Updates:
    """The JSON updates ``pipeline live --json`` prints, read as they come."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        self.docs: list[tuple[float, dict[str, Any]]] = []
        self.proc = proc
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            self.docs.append((time.monotonic(), json.loads(text)))

    def top(self, node: str, source: str) -> int:
        if not self.docs:
            return 0
        return max((h["top"] for h in self.docs[-1][1]["held"] if h["node"] == node and h["source"] == source),
                   default=0)


@pytest.mark.processes
@pytest.mark.timeout(420)  # Spark's start on a loaded machine, then the test's own deadlines
def test_live_over_three_nodes_reports_new_events_within_10_s_and_a_healed_range(
        cluster: Cluster, tmp_path: Path) -> None:
    nodes = [cluster.start(n) for n in ("a", "b", "c")]
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "mesh")
    ids = {n.name: (cluster.tmp / n.name / "node-id").read_text().strip() for n in nodes}
    exports = tmp_path / "exports"
    followers = [huddle("export", "--data-dir", str(cluster.tmp / n.name), "--out", str(exports / n.name),
                        "--follow", "--interval", "0.5") for n in nodes]
    live = huddle("pipeline", "live", "--input", str(exports), "--json", "--trigger", "1", "--master", "local[2]")
    updates = Updates(live)
    a, b, c = nodes
    try:
        for i in range(5):
            emit(a.api, i)
        wait_for(lambda: updates.docs and updates.docs[-1][1]["converged"]
                 and all(updates.top(ids[n.name], ids["a"]) == 5 for n in nodes), 240, "the first update (Spark starts)")
        sent = time.monotonic()
        seq = emit(b.api, 100)["seq"]
        wait_for(lambda: all(updates.top(ids[n.name], ids["b"]) == seq for n in nodes), 10,
                 "b's new event reported held by every node within 10 s")
        assert time.monotonic() - sent < 10
        c.signal(signal.SIGSTOP)  # c hears nothing: its export stops growing
        try:
            last = [emit(a.api, 10 + i)["seq"] for i in range(3)][-1]
            wait_for(lambda: any(m["node"] == ids["c"] and m["source"] == ids["a"] and m["last_seq"] == last
                                 for m in updates.docs[-1][1]["missing"]), 10, "c shown lacking a's new events")
        finally:
            c.signal(signal.SIGCONT)
        wait_for(lambda: updates.docs[-1][1]["converged"] and updates.top(ids["c"], ids["a"]) == last, 30,
                 "c's missing range healed")
        wait_for(lambda: updates.docs[-1][1]["names"] == {ids[n.name]: n.name for n in nodes}, 30,
                 "each node's name, from its peers' statistics rows")
    finally:
        live.send_signal(signal.SIGTERM)
        for f in followers:
            f.send_signal(signal.SIGTERM)
        live.wait(60)
        for f in followers:
            f.wait(20)
    assert live.returncode == 0, live.stderr.read() if live.stderr else ""


@pytest.mark.parametrize(("argv", "status", "said"), [
    (["--input", "/nonexistent/live"], 4, "input /nonexistent/live is not a directory"),
    (["--input", ".", "--trigger", "0"], 2, "--trigger must be positive"),
    (["--input", ".", "--recent", "-1"], 2, "--recent must be positive"),
])
def test_bad_flags_and_inputs_are_one_line_before_spark_starts(argv: list[str], status: int, said: str) -> None:
    proc = subprocess.run([sys.executable, "-m", "huddle", "pipeline", "live", *argv], capture_output=True, text=True,
                          timeout=60, check=False)
    assert proc.returncode == status and said in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr


def test_serving_on_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "huddle", "pipeline", "live", "--input", str(tmp_path), "--serve",
                               str(port)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2 and f"--serve {port}: cannot listen on 127.0.0.1" in proc.stderr, proc.stderr
