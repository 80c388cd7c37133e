"""A node never reuses its own sequence numbers (protocol.md 12.1, "A restored log"), with real node
processes on 127.0.0.1: a data directory restored from an older copy (with its mark
file, or with its last rows and the mark deleted) takes back from a peer what it
lost and continues after it; one that recorded alone before it met that peer
retires its identity and goes on under a new one.  In every case, in the end, every
node holds the same record for every (source, seq)."""

from __future__ import annotations

import shutil
import signal
import sqlite3
import urllib.error
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, get, http, wait_for

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes


def emit(node: NodeProcess, i: int) -> int:
    status, data = http(node.api, "/api/v1/events", {"kind": "score", "body": {"i": i}})
    assert status == 201, data
    seq: int = data["seq"]
    return seq


def uuid_of(node: NodeProcess) -> str:
    uuid: str = get(node.api, "/api/v1/node")["uuid"]
    return uuid


def records(node: NodeProcess) -> dict[tuple[str, int], tuple[float, str, object]]:
    """Every record the node holds: (source, seq) -> its content."""
    vv = get(node.api, "/api/v1/log/summary")["version_vector"]
    out: dict[tuple[str, int], tuple[float, str, object]] = {}
    for source in vv:
        for e in get(node.api, f"/api/v1/log?source={source}&limit=10000")["events"]:
            out[(source, e["seq"])] = (e["timestamp"], e["kind"], e["body"])
    return out


def same_records(nodes: list[NodeProcess], count: int) -> bool:
    held = [records(n) for n in nodes]
    return len(held[0]) == count and all(h == held[0] for h in held[1:])


def renewed(node: NodeProcess) -> dict[str, Any] | None:
    """The node's info once it took a new identity (None before; its API is down while it changes)."""
    try:
        info: dict[str, Any] = get(node.api, "/api/v1/node")
    except (urllib.error.URLError, ConnectionError):
        return None
    return info if info["identity_renewed"] else None


def stop(node: NodeProcess) -> None:
    node.signal(signal.SIGTERM)
    assert node.wait(20) == 0


def snapshot(src: Path, dst: Path) -> None:
    """A copy of a running node's data directory (a backup, a virtual machine's snapshot):
    its files, the log taken whole by SQLite's backup."""
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("log.sqlite*", "lock"))
    live, copy = sqlite3.connect(src / "log.sqlite"), sqlite3.connect(dst / "log.sqlite")
    try:
        live.backup(copy)
    finally:
        live.close()
        copy.close()


def sixty_with_a_copy_at_thirty(cluster: Cluster, tmp_path: Path, *, stopped: bool = False,
                                ) -> tuple[NodeProcess, NodeProcess, str]:
    """a records 30 events, its data directory is copied aside (to ``tmp/a-copy``: ``stopped``,
    a stopped for it, so its mark file says 30; else a snapshot of it running), it records 30
    more, all reach b; a is stopped.  Returns a (stopped), b and a's id."""
    a, b = cluster.start("a"), cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "mesh")
    me = uuid_of(a)
    assert [emit(a, i) for i in range(1, 31)][-1] == 30
    if stopped:
        stop(a)
        shutil.copytree(tmp_path / "a", tmp_path / "a-copy")
        assert '"test": 30' in (tmp_path / "a-copy" / "log-mark.json").read_text()
        a = cluster.start("a", data_dir=tmp_path / "a")
        wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a back in the mesh")
    else:
        snapshot(tmp_path / "a", tmp_path / "a-copy")
    assert [emit(a, i) for i in range(31, 61)][-1] == 60
    wait_for(lambda: get(b.api, "/api/v1/log/summary")["version_vector"].get(me) == 60, 10, "b to hold a's 60")
    stop(a)
    return a, b, me


def test_a_data_dir_restored_from_an_older_copy_takes_back_what_it_lost(cluster: Cluster, tmp_path: Path) -> None:
    _, b, me = sixty_with_a_copy_at_thirty(cluster, tmp_path, stopped=True)
    shutil.rmtree(tmp_path / "a")
    shutil.copytree(tmp_path / "a-copy", tmp_path / "a")  # log and mark file as they were at 30
    a = cluster.start("a", data_dir=tmp_path / "a")
    assert [emit(a, i) for i in range(61, 66)] == [61, 62, 63, 64, 65]  # held until it took back 31..60
    assert uuid_of(a) == me
    wait_for(lambda: same_records([a, b], 65), 10, "a and b to hold the same 65 records")
    stats = get(a.api, "/api/v1/log/summary")["stats"]
    assert stats["own_taken_back"] == 30 and stats["own_conflicts"] == 0


def test_a_log_cut_with_its_mark_deleted_takes_back_what_it_lost(cluster: Cluster, tmp_path: Path) -> None:
    _, b, me = sixty_with_a_copy_at_thirty(cluster, tmp_path)
    db = sqlite3.connect(tmp_path / "a" / "log.sqlite")
    with db:
        db.execute("DELETE FROM events WHERE source=? AND seq>30", (bytes.fromhex(me),))
        db.execute("DELETE FROM heads WHERE source=? AND seq>30", (bytes.fromhex(me),))
    db.close()
    (tmp_path / "a" / "log-mark.json").unlink()
    a = cluster.start("a", data_dir=tmp_path / "a")
    assert [emit(a, i) for i in range(61, 66)] == [61, 62, 63, 64, 65]
    wait_for(lambda: same_records([a, b], 65), 10, "a and b to hold the same 65 records")


def test_a_node_that_recorded_alone_takes_a_new_identity_when_it_meets_a_peer_holding_more(
    cluster: Cluster, tmp_path: Path,
) -> None:
    _, b, me = sixty_with_a_copy_at_thirty(cluster, tmp_path)
    stop(b)
    shutil.rmtree(tmp_path / "a")
    shutil.copytree(tmp_path / "a-copy", tmp_path / "a")
    a = cluster.start("a", data_dir=tmp_path / "a")
    assert [emit(a, i) for i in range(131, 136)] == [31, 32, 33, 34, 35]  # alone: the window ended, 31..35 reused
    b = cluster.start("b", data_dir=tmp_path / "b")
    # b shows a's old 31..60, signed with a's key: a retires that identity and goes on under a new one,
    # its API at the same address, recording again there what it recorded alone.
    info = wait_for(lambda: renewed(a), 20, "a to take a new identity")
    assert info["uuid"] != me and info["identity_renewed"]["previous"] == me
    assert "reused" in info["identity_renewed"]["reason"]
    new = info["uuid"]
    wait_for(lambda: same_records([a, b], 65), 20, "a and b to hold the same 65 records")
    held = records(a)
    assert [held[(new, q)][2] for q in range(1, 6)] == [{"i": i} for i in range(131, 136)]
    assert [held[(me, q)][2] for q in range(31, 61)] == [{"i": i} for i in range(31, 61)]  # the group's 31..60
    assert (tmp_path / "a" / "previous-ids").read_text().startswith(me)
