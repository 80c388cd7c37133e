"""The replicated log on the simulated network: delivery, gaps, gossip, catch-up, crashes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from huddle import NodeId
from huddle.errors import LocalProtocolError
from huddle.log import SqliteStore
from huddle.protocol.logstate import ReplicationTiming
from huddle.protocol.logstore import MemoryStore, canonical_json
from huddle.protocol.replication import Replicator
from huddle.sim import SimNetwork, SimNode, check_converged, run_scenario
from huddle.wire import Gsip, LogRecord, Xmsg


def emit(net: SimNetwork, node: SimNode, kind: str, value: object) -> LogRecord:
    local = net.local(node)
    return node.log.append(kind, canonical_json(value), local, node.mesh.mesh_time(local))


def group(net: SimNetwork, n: int, **kw: object) -> list[SimNode]:
    nodes = [net.add(f"n{i}", "g", log=True, **kw) for i in range(n)]  # type: ignore[arg-type]
    for node in nodes[1:]:
        node.mesh.discovered(nodes[0].mesh.uuid, nodes[0].mesh.endpoint, net.now)
    assert net.settle(2.0, lambda: all(len(x.mesh.alive_peers()) == n - 1 for x in nodes))
    return nodes


# 200 seeds of 8 nodes: 50 each of a clean network, loss + duplication + reordering,
# partitions, and everything at once with crashes.
FAULTS = [
    {},
    {"loss": 0.1, "duplicate": 0.05, "jitter": 0.01},
    {"partitions": 3},
    {"loss": 0.05, "duplicate": 0.02, "jitter": 0.005, "partitions": 2, "crashes": 2},
]


@pytest.mark.parametrize("faults", FAULTS, ids=["clean", "lossy", "partitions", "everything"])
def test_simulated_groups_converge(faults: dict[str, float]) -> None:
    failures = []
    for seed in range(50):
        result = run_scenario(seed=seed, nodes=8, events=120, **faults)  # type: ignore[arg-type]
        if not result.converged:
            failures.append(f"seed {seed}: {result.problems[:2]} -- rerun: {result.rerun}")
    assert not failures, "\n".join(failures)


def test_a_failing_seed_replays_exactly() -> None:
    a = run_scenario(seed=7, loss=0.1, partitions=2, crashes=1)
    b = run_scenario(seed=7, loss=0.1, partitions=2, crashes=1)
    assert a == b
    assert a.rerun == "huddle simulate --nodes 8 --events 200 --seed 7 --loss 0.1 --partitions 2 --crashes 1"


def test_live_events_reach_everyone_once_in_order() -> None:
    net = SimNetwork()
    nodes = group(net, 4)
    for i in range(30):
        emit(net, nodes[i % 4], "tick", i)
        net.run(0.01)
    net.run(0.5)
    assert check_converged(nodes) == []
    for node in nodes:
        assert node.log.held() == 30
        assert node.log.stats.duplicates == 0
        seqs = {s: q for s, q in node.log.version_vector().items()}
        assert sorted(seqs.values()) == [7, 7, 8, 8]
    # Received records carry their hop count and where they came from.
    store = nodes[1].store
    assert store is not None
    rec = store.records[nodes[0].mesh.uuid][1]
    assert rec.hops == 1 and json.loads(rec.body) == 0
    assert store.receipts[(nodes[0].mesh.uuid, 1)][0] == nodes[0].mesh.uuid


def test_a_gap_is_detected_and_asked_for_at_once() -> None:
    r = Replicator(NodeId(b"\x01" * 16), MemoryStore(), now=0.0)
    src = NodeId(b"\x02" * 16)
    r.peer_up(src, 7, 0.0)
    r.take_actions()
    recs = tuple(LogRecord(src, q, 1.0, "k", "1") for q in (1, 2, 5, 6))
    r.on_xmsg(src, Xmsg(src, recs), 1.0, 1.0)
    assert r.version_vector()[src] == 2
    assert r.gaps() == {src: [(3, 4)]}
    sent = [a.message for a in r.take_actions() if hasattr(a, "message")]
    asks = [m for m in sent if isinstance(m, Gsip)]
    assert len(asks) == 1 and asks[0].ask == ((src, ((3, 4),)),)
    r.on_xmsg(src, Xmsg(src, (LogRecord(src, 3, 1.0, "k", "1"), LogRecord(src, 4, 1.0, "k", "1"))), 1.1, 1.1)
    assert r.version_vector()[src] == 6 and r.gaps() == {}


def test_the_origin_answers_an_ask_with_exactly_the_missing_range() -> None:
    store = MemoryStore()
    origin = Replicator(NodeId(b"\x01" * 16), store, now=0.0)
    for i in range(10):
        origin.append("k", str(i), 0.0, 0.0)
    origin.take_actions()
    peer = NodeId(b"\x02" * 16)
    origin.peer_up(peer, 3, 0.0)
    origin.take_actions()
    origin.on_gsip(peer, Gsip(peer, ((origin.uuid, 2),), ((origin.uuid, ((3, 4), (7, 0))),)), 0.1)
    sent = [a.message for a in origin.take_actions() if hasattr(a, "message")]
    seqs = [r.seq for m in sent if isinstance(m, Xmsg) for r in m.records]
    assert seqs == [3, 4, 7, 8, 9, 10]


def test_late_joiner_catches_up_in_windowed_batches() -> None:
    timing = ReplicationTiming(window=2_000, ack_every=500, batch_records=200)
    net = SimNetwork()
    old = group(net, 2, log_timing=timing)
    for i in range(12_000):
        old[i % 2].log.append("bulk", str(i), net.now, net.now)
    net.run(2.0)
    assert old[1].log.held() == 12_000
    late = net.add("late", "g", log=True, log_timing=timing)
    late.mesh.discovered(old[0].mesh.uuid, old[0].mesh.endpoint, net.now)
    assert net.settle(30.0, lambda: late.log.held() == 12_000)
    assert check_converged([*old, late]) == []
    assert late.log.stats.duplicates == 0
    # Each record arrived once: from its source, or from the introducer that was asked
    # before the source itself was met.
    assert late.log.stats.received == 12_000
    assert {r.hops for r in late.store.all_records()} <= {1, 2}  # type: ignore[union-attr]


def test_catch_up_never_has_more_than_a_window_in_flight() -> None:
    timing = ReplicationTiming(window=1_000, ack_every=250, batch_records=100)
    net = SimNetwork(latency=0.02)
    a = net.add("a", "g", log=True, log_timing=timing)
    for i in range(5_000):
        a.log.append("bulk", str(i), net.now, net.now)
    b = net.add("b", "g", log=True, log_timing=timing)
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    worst = 0
    for _ in range(400):
        net.run(0.01)
        sent = a.log.stats.records_sent
        worst = max(worst, sent - b.log.held())
        if b.log.held() == 5_000:
            break
    assert b.log.held() == 5_000
    assert worst <= 1_000


def test_restart_keeps_the_sequence_and_never_reuses_one() -> None:
    net = SimNetwork()
    a, b = group(net, 2)
    for i in range(5):
        emit(net, a, "k", i)
    net.run(0.5)
    net.crash(a)
    a2 = net.restart(a, rejoin=b)
    assert a2.mesh.uuid == a.mesh.uuid
    rec = emit(net, a2, "k", "after restart")
    assert rec.seq == 6
    assert net.settle(5.0, lambda: b.log.version_vector().get(a.mesh.uuid) == 6)


def test_records_lost_with_a_data_dir_are_replayed_by_the_others() -> None:
    net = SimNetwork()
    a, b, c = group(net, 3)
    for i in range(20):
        emit(net, a, "k", i)
    net.run(0.5)
    old_uuid = a.mesh.uuid
    net.crash(a)
    fresh = net.restart(a, lose_data=True, rejoin=b)
    assert fresh.mesh.uuid != old_uuid  # a lost data dir means a new identity
    assert net.settle(5.0, lambda: fresh.log.version_vector().get(old_uuid) == 20)
    assert emit(net, fresh, "k", "new").seq == 1
    assert check_converged([fresh, b, c]) == [] or net.settle(3.0, lambda: not check_converged([fresh, b, c]))


def test_own_records_lost_are_taken_back_from_peers_signed_with_the_nodes_key() -> None:
    """A node that lost its last records (same UUID) takes them back from its peers:
    they carry its own signature and continue its chain (protocol.md 12.1, "A restored
    log"); it continues after them, so no sequence number names two records."""
    net = SimNetwork()
    a, b = group(net, 2)
    for i in range(10):
        emit(net, a, "k", i)
    net.run(0.5)
    net.crash(a)
    assert a.store is not None
    for q in (8, 9, 10):  # as if the last transactions never reached the disk
        del a.store.records[a.mesh.uuid][q]
    a2 = net.restart(a, rejoin=b)
    assert a2.log.own_seq == 7
    assert net.settle(5.0, lambda: a2.log.own_seq == 10)
    assert a2.log.stats.own_taken_back == 3 and a2.log.retired is None
    assert a2.log.gaps() == {}
    assert emit(net, a2, "k", "next").seq == 11
    assert net.settle(3.0, lambda: not check_converged([a2, b]))


def test_partitioned_halves_merge_their_histories() -> None:
    net = SimNetwork()
    nodes = group(net, 4)
    left, right = nodes[:2], nodes[2:]
    for x in left:
        for y in right:
            net.partition(x, y)
    for i in range(40):
        emit(net, nodes[i % 4], "k", i)
        net.run(0.05)
    net.run(6.0)
    assert nodes[0].log.held() < 40
    net.heal()
    for x in left:
        for y in right:
            x.mesh.discovered(y.mesh.uuid, y.mesh.endpoint, net.now)
    assert net.settle(10.0, lambda: not check_converged(nodes))
    assert nodes[3].log.held() == 40


def test_bad_events_are_refused() -> None:
    r = Replicator(NodeId(b"\x01" * 16), MemoryStore(), now=0.0)
    with pytest.raises(LocalProtocolError, match="kind"):
        r.append("", "1", 0.0, 0.0)
    with pytest.raises(LocalProtocolError, match="larger than"):
        r.append("k", json.dumps("x" * (1024 * 1024)), 0.0, 0.0)
    with pytest.raises(LocalProtocolError, match="not a JSON value"):
        canonical_json({"x": float("nan")})
    assert r.own_seq == 0
    assert canonical_json({"b": 1, "a": [1, "é"]}) == '{"a":[1,"é"],"b":1}'


def test_sqlite_store_round_trip_and_reload(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    src = NodeId(b"\x05" * 16)
    peer = NodeId(b"\x06" * 16)
    store = SqliteStore(path, "g")
    store.stage([LogRecord(src, q, 10.0 + q, "k", f'{{"q":{q}}}', 1) for q in (1, 2, 3, 5)], peer, 99.0)
    store.commit()
    store.stage([LogRecord(src, 4, 1.0, "k", "1", 0)], None, 1.0)  # never committed:
    store._db.close()  # the process dies here
    reopened = SqliteStore(path, "g")
    state = reopened.load()
    assert (state[src].contig, state[src].ahead) == (3, [(5, 5)])
    assert [r.seq for r in reopened.read(src, 1, 2)] == [2, 3]
    page = reopened.page(src, 0, 10)
    assert page[0].received_from == peer and page[0].received_at == 99.0
    assert reopened.count() == 4
    other_group = SqliteStore(path, "h")
    assert other_group.load() == {}
    reopened.close()
    other_group.close()


def test_sqlite_store_rejects_a_broken_file(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    path.write_bytes(b"this is not a database" * 100)
    with pytest.raises(Exception, match="cannot be opened"):
        SqliteStore(path, "g")


def test_source_state_keeps_ranges() -> None:
    from huddle.log.model import SourceState

    st = SourceState()
    assert st.add(5, 9) == [(5, 9)]
    assert (st.contig, st.ahead, st.top) == (0, [(5, 9)], 9)
    assert st.add(1, 6) == [(1, 4)]
    assert (st.contig, st.ahead) == (9, [])
    assert st.add(20, 1_000_000) == [(20, 1_000_000)]
    assert st.add(15, 25) == [(15, 19)]
    assert st.missing() == [(10, 14)]
    assert st.count() == 9 + (1_000_000 - 15 + 1)
    assert st.add(3, 3) == [] and st.holds(3) and not st.holds(12) and st.holds(500_000)
    assert st.add(10, 14) == [(10, 14)] and (st.contig, st.ahead) == (1_000_000, [])
    assert SourceState.of([1, 2, 3, 7, 8, 10]) == SourceState(3, [(7, 8), (10, 10)])
