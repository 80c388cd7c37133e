"""``huddle export --follow``: parts added whole as the log grows, a restart that resumes after them."""

from __future__ import annotations

import hashlib
import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from conftest import Cluster, http, wait_for

from huddle.errors import HuddleError
from huddle.ids import NodeId
from huddle.log import follow as follow_mod
from huddle.log.follow import Followed, follow, parts
from huddle.log.store import SqliteStore
from huddle.wire import make_record

ME = NodeId(bytes(range(16)))
OTHER = NodeId(bytes(range(16, 32)))


def data_dir(tmp: Path) -> tuple[Path, SqliteStore]:
    d = tmp / "node"
    d.mkdir()
    (d / "node-id").write_text(str(ME))
    return d, SqliteStore(d / "log.sqlite", group="g")


def add(store: SqliteStore, source: NodeId, seqs: range, frm: NodeId | None = OTHER) -> None:
    store.stage([make_record(source, q, 100.0 + q, "k", json.dumps({"q": q}), 0) for q in seqs], frm, 200.0)
    store.commit()


def exported(out: Path, fmt: str = "parquet") -> list[tuple[str, str, int]]:
    """Every event key in the export's parts, in part order (duplicates kept)."""
    keys: list[tuple[str, str, int]] = []
    for _, file in parts(out, "events"):
        if fmt == "jsonl":
            keys += [(r["group"], r["source"], r["seq"]) for r in map(json.loads, file.read_text().splitlines())]
        else:
            t = pq.read_table(file, columns=["group", "source", "seq"])
            keys += list(zip(*(t.column(c).to_pylist() for c in ("group", "source", "seq")), strict=True))
    return keys


@pytest.mark.parametrize("fmt", ["parquet", "jsonl"])
def test_each_poll_adds_a_part_with_only_the_new_rows_gaps_filled_later_included(tmp_path: Path, fmt: str) -> None:
    d, store = data_dir(tmp_path)
    out = tmp_path / "out"
    add(store, OTHER, range(1, 101))
    add(store, ME, range(1, 11), frm=None)
    store.add_stat(1.0, "snapshot", None, "{}")
    store.commit()
    assert follow(d, out, fmt).events() == 110
    add(store, OTHER, range(101, 121))
    add(store, OTHER, range(131, 141))  # beyond a gap: 121..130 come later
    done = follow(d, out, fmt)
    assert done.held[("g", str(OTHER))].missing() == [(121, 130)] and done.stats == 1
    add(store, OTHER, range(121, 131))
    store.add_stat(2.0, "snapshot", None, "{}")
    store.commit()
    follow(d, out, fmt)
    assert follow(d, out, fmt).events() == 150  # nothing new: no part
    assert [n for n, _ in parts(out, "events")] == [1, 2, 3]
    assert [n for n, _ in parts(out, "stats")] == [1, 3]
    keys = exported(out, fmt)
    assert len(keys) == len(set(keys)) == 150
    assert [k[2] for k in keys[110:]] == [*range(101, 121), *range(131, 141), *range(121, 131)]
    store.close()


def test_a_restart_resumes_after_the_parts_there(tmp_path: Path) -> None:
    d, store = data_dir(tmp_path)
    out = tmp_path / "out"
    add(store, OTHER, range(1, 51))
    follow(d, out)
    resumed = Followed(out, "parquet")  # what a new follower finds, from the parts alone
    assert resumed.held[("g", str(OTHER))].contig == 50 and resumed.next == 2
    add(store, OTHER, range(51, 61))
    follow(d, out)
    keys = exported(out)
    assert len(keys) == len(set(keys)) == 60
    with pytest.raises(HuddleError, match="is not jsonl: follow this export with --format parquet"):
        Followed(tmp_path / "out", "jsonl")
    with pytest.raises(HuddleError, match=f"is the export of node {ME}, not of {OTHER}: give each node an --out"):
        Followed(tmp_path / "out", "parquet", str(OTHER))
    store.close()


def test_a_big_log_is_cut_into_parts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(follow_mod, "PART_ROWS", 40)
    d, store = data_dir(tmp_path)
    add(store, OTHER, range(1, 101))
    out = tmp_path / "out"
    stop = threading.Event()
    sizes: list[int] = []

    def told(part: follow_mod.Part) -> None:
        sizes.append(part.events)
        if sum(sizes) == 100:
            stop.set()

    follow(d, out, interval=30, stop=stop, on_part=told)  # a full part goes on at once: no 30 s wait
    assert sizes == [40, 40, 20]
    store.close()


def test_parts_are_only_ever_added_whole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A reader listing the export while the follower writes sees each file
    complete the first time it sees it, and the same bytes ever after."""
    monkeypatch.setattr(follow_mod, "PART_ROWS", 500)
    d, store = data_dir(tmp_path)
    out = tmp_path / "out"
    stop, seen, bad = threading.Event(), dict[Path, str](), list[str]()

    def reader() -> None:
        while not stop.is_set():
            for _, file in parts(out, "events"):
                if file in seen:
                    continue
                try:
                    rows = pq.read_table(file).num_rows
                except Exception as exc:  # any failure to read is what the test looks for
                    bad.append(f"{file}: {exc}")
                    continue
                seen[file] = hashlib.sha256(file.read_bytes()).hexdigest()
                if rows == 0:
                    bad.append(f"{file}: empty")

    watcher = threading.Thread(target=reader)
    writer = threading.Thread(target=follow, args=(d, out), kwargs={"interval": 0.01, "stop": stop})
    watcher.start()
    writer.start()
    for first in range(1, 5001, 250):
        add(store, OTHER, range(first, first + 250))
    wait_for(lambda: len(exported(out)) == 5000, 30, "every event exported")
    stop.set()
    writer.join(10)
    watcher.join(10)
    assert not bad
    assert seen and all(hashlib.sha256(f.read_bytes()).hexdigest() == h for f, h in seen.items())
    assert not (out / ".partial").exists()
    store.close()


def test_a_damaged_export_or_data_dir_is_one_line(tmp_path: Path) -> None:
    d, store = data_dir(tmp_path)
    add(store, OTHER, range(1, 11))
    out = tmp_path / "out"
    follow(d, out)
    file = parts(out, "events")[0][1]
    file.write_bytes(file.read_bytes()[:40])  # truncated: someone else's doing, not the follower's
    with pytest.raises(HuddleError, match=r"000001/events.parquet cannot be read"):
        follow(d, out)
    (tmp_path / "once").mkdir()
    (tmp_path / "once" / "events.parquet").write_bytes(b"")
    with pytest.raises(HuddleError, match="holds a one-off export"):
        follow(d, tmp_path / "once")
    with pytest.raises(HuddleError, match="not a huddle data directory"):
        follow(tmp_path / "nope", tmp_path / "x")
    store.close()


def cli(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "huddle", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def emit(api: str, i: int) -> dict[str, Any]:
    status, data = http(api, "/api/v1/events", {"kind": "k", "body": {"i": i}})
    assert status == 201, data
    result: dict[str, Any] = data
    return result


@pytest.mark.processes
def test_follow_a_running_node_then_resume_without_duplicates(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a")
    out = tmp_path / "out"
    follower = cli("export", "--data-dir", str(cluster.tmp / "a"), "--out", str(out), "--interval", "0.5", "--follow")
    try:
        for i in range(10):
            emit(a.api, i)
        wait_for(lambda: len(exported(out)) == 10, 5, "10 events in the export within its interval")
        last = emit(a.api, 10)
        wait_for(lambda: len(exported(out)) == 11, 3, "a new event in the export")  # 0.5 s interval, loaded machine
        assert max(k[2] for k in exported(out)) == last["seq"]
    finally:
        follower.send_signal(signal.SIGTERM)
        said, err = follower.communicate(timeout=20)
    assert follower.returncode == 0, err
    assert said.splitlines()[-1].startswith("stopped: 11 events")
    for i in range(11, 20):
        emit(a.api, i)
    again = cli("export", "--data-dir", str(cluster.tmp / "a"), "--out", str(out), "--follow", "--json")
    try:
        wait_for(lambda: len(exported(out)) == 20, 10, "the restart's part")
    finally:
        again.send_signal(signal.SIGINT)
        said, err = again.communicate(timeout=20)
    assert again.returncode == 0, err
    keys = exported(out)
    assert len(keys) == len(set(keys)) == 20
    assert json.loads(said.splitlines()[0])["events"] == 9
