"""The replicated log between real node processes on 127.0.0.1."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for

pytestmark = pytest.mark.processes


def summary(api: str) -> dict[str, object]:
    result: dict[str, object] = get(api, "/api/v1/log/summary")
    return result


def emit(api: str, kind: str, body: object) -> dict[str, object]:
    status, data = http(api, "/api/v1/events", {"kind": kind, "body": body})
    assert status == 201, data
    return data  # type: ignore[no-any-return]


def same_log(apis: list[str], events: int) -> bool:
    sums = [summary(a) for a in apis]
    return all(s["events"] == events and s["version_vector"] == sums[0]["version_vector"] and not s["gaps"]
               for s in sums)


@pytest.fixture
def trio(cluster: Cluster) -> Cluster:
    nodes = [cluster.start(n) for n in ("a", "b", "c")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    return cluster


def test_events_are_replicated_to_every_node(trio: Cluster) -> None:
    a, b, c = trio.nodes
    first = emit(a.api, "penalty", {"skater": "12", "code": "X"})
    assert first["seq"] == 1 and len(str(first["source"])) == 32
    assert emit(a.api, "penalty", {"skater": "7"})["seq"] == 2
    emit(b.api, "jam.start", 3)
    wait_for(lambda: same_log([n.api for n in trio.nodes], 3), 10, "3 events everywhere")
    events = get(c.api, f"/api/v1/log?source={first['source']}")["events"]
    assert [(e["seq"], e["kind"], e["body"]) for e in events] == [
        (1, "penalty", {"code": "X", "skater": "12"}), (2, "penalty", {"skater": "7"})]
    assert all(e["hops"] == 1 and e["received_from"] == first["source"] for e in events)
    page = get(c.api, f"/api/v1/log?source={first['source']}&after=1&limit=1")["events"]
    assert [e["seq"] for e in page] == [2]


@pytest.mark.parametrize(
    ("body", "status", "complaint"),
    [
        ({"body": 1}, 400, "'kind' must be"),
        ({"kind": "k"}, 400, "'body' is required"),
        ({"kind": "k", "body": 1, "extra": 2}, 400, "unknown field"),
        ({"kind": "k" * 300, "body": 1}, 400, "kind must be"),
        ({"kind": "k", "body": "x" * (1024 * 1024 - 100)}, 400, "larger than"),
    ],
)
def test_bad_events_are_refused_and_nothing_is_recorded(trio: Cluster, body: dict[str, object], status: int,
                                                        complaint: str) -> None:
    api = trio.nodes[0].api
    got, data = http(api, "/api/v1/events", body)
    assert got == status and complaint in data["error"]
    assert summary(api)["events"] == 0


@pytest.mark.parametrize("query", ["?after=3", "?source=" + "x" * 201, "?limit=0", "?limit=x",
                                   "?source=" + "ab" * 16 + "&after=-1"])
def test_bad_log_queries_get_400(trio: Cluster, query: str) -> None:
    status, data = http(trio.nodes[0].api, "/api/v1/log" + query)
    assert status == 400 and data["error"]


def test_a_log_query_for_a_source_no_node_is_named_gets_404(trio: Cluster) -> None:
    status, data = http(trio.nodes[0].api, "/api/v1/log?source=zz")
    assert status == 404 and "'zz'" in data["error"]


def test_late_joiner_receives_the_whole_history(cluster: Cluster) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "mesh")
    for i in range(200):
        emit(a.api if i % 2 else b.api, "score", i)
    late = cluster.start("late")
    wait_for(lambda: same_log([a.api, b.api, late.api], 200), 20, "the late joiner to catch up")


def test_killed_node_restarts_and_catches_up_mid_stream(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "mesh")
    done = threading.Event()
    sent: list[int] = []

    def stream() -> None:
        for i in range(300):
            emit(a.api, "tick", i)
            sent.append(i)
        done.set()

    writer = threading.Thread(target=stream)
    writer.start()
    wait_for(lambda: len(sent) >= 50, 20, "the stream to start")
    b.signal(signal.SIGKILL)
    b.wait()
    b2 = cluster.start("b", data_dir=tmp_path / "b")
    writer.join(60)
    assert done.is_set()
    wait_for(lambda: same_log([a.api, b2.api], 300), 20, "b to catch up after its restart")


def test_restarted_source_continues_its_sequence(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "mesh")
    for i in range(5):
        emit(a.api, "k", i)
    a.signal(signal.SIGKILL)
    a.wait()
    a2 = cluster.start("a", data_dir=tmp_path / "a")
    assert emit(a2.api, "k", "after")["seq"] == 6
    wait_for(lambda: same_log([a2.api, b.api], 6), 20, "b to hold all six")


def test_event_stream_and_cli(trio: Cluster) -> None:
    a, b, _ = trio.nodes
    tail = subprocess.Popen([sys.executable, "-m", "huddle", "tail", "--api", b.api, "--json", "--count", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        def tail_saw_event() -> bool:
            out = subprocess.run([sys.executable, "-m", "huddle", "emit", "lineup", '{"jam": 1}', "--api", a.api],
                                 capture_output=True, text=True, timeout=30)
            assert out.returncode == 0, out.stderr
            try:
                tail.wait(0.5)
            except subprocess.TimeoutExpired:
                return False
            return True

        wait_for(tail_saw_event, 20, "tail to print an event")
        event = json.loads(tail.stdout.read().strip().splitlines()[-1])  # type: ignore[union-attr]
        assert event["type"] == "event" and event["kind"] == "lineup" and event["body"] == {"jam": 1}
    finally:
        tail.kill()
        tail.wait()
    bad = subprocess.run([sys.executable, "-m", "huddle", "emit", "k", "{not json", "--api", a.api],
                         capture_output=True, text=True, timeout=30)
    assert bad.returncode == 1 and "not JSON" in bad.stderr
    listing = subprocess.run([sys.executable, "-m", "huddle", "log", "--api", a.api],
                             capture_output=True, text=True, timeout=30)
    assert "lineup" in listing.stdout


def test_export_of_a_running_node(trio: Cluster, tmp_path: Path) -> None:
    a = trio.nodes[0]
    for i in range(25):
        emit(a.api, "k", {"i": i})
    wait_for(lambda: same_log([n.api for n in trio.nodes], 25), 10, "replication")
    out = subprocess.run([sys.executable, "-m", "huddle", "export", "--data-dir", str(trio.tmp / "b"),
                          "--out", str(tmp_path / "x"), "--format", "jsonl"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    rows = [json.loads(line) for line in (tmp_path / "x" / "events.jsonl").read_text().splitlines()]
    assert len(rows) == 25
    assert {r["hops"] for r in rows} == {1} and {r["kind"] for r in rows} == {"k"}
    assert sorted(json.loads(r["body"])["i"] for r in rows) == list(range(25))
    stats = [json.loads(line) for line in (tmp_path / "x" / "stats.jsonl").read_text().splitlines()]
    assert {"peer_joined", "snapshot"} <= {s["event"] for s in stats}
    parquet = subprocess.run([sys.executable, "-m", "huddle", "export", "--data-dir", str(trio.tmp / "b"),
                              "--out", str(tmp_path / "p")], capture_output=True, text=True, timeout=60)
    assert parquet.returncode == 0, parquet.stderr
    import pyarrow.parquet as pq

    table = pq.read_table(tmp_path / "p" / "events.parquet")
    assert table.num_rows == 25 and table.schema.field("seq").type == "int64"
    missing = subprocess.run([sys.executable, "-m", "huddle", "export", "--data-dir", str(tmp_path / "nope"),
                              "--out", str(tmp_path / "q")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 1 and "not a huddle data directory" in missing.stderr
