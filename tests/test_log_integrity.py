"""The log's start-up check and ``huddle repair``, on small logs damaged on purpose."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from huddle.cli import main
from huddle.ids import NodeId
from huddle.log import SqliteStore
from huddle.log.datadir import DataDir
from huddle.log.integrity import MARK_FILE, PREVIOUS_FILE, LogDamaged, LogGuard, read_mark, repair
from huddle.log.store import Verified
from huddle.protocol.logchain import GENESIS, chain_hashes
from huddle.security import KEY_FILE, load_or_create_identity, node_id_for, own_id_refusal
from huddle.wire import LogRecord, RecordBatch, Xmsg, decode, encode

GROUP = "g"
PEER = NodeId(b"\x07" * 16)


def make_dir(tmp_path: Path, own: int = 30, others: int = 20, *, chained: bool = False) -> tuple[Path, NodeId]:
    """A data dir whose node wrote ``own`` events and received ``others`` from PEER, closed cleanly.
    ``chained``: its records chained (signed log), stored in two runs, 1..10 and 11..own."""
    data = tmp_path / "n1"
    data.mkdir()
    me = NodeId.random()
    (data / "node-id").write_text(f"{me}\n")
    guard = LogGuard(data, GROUP, me)
    store = guard.open()
    mine = [LogRecord(me, q, 100.0 + q, "chat", f'{{"text":"mine {q:04d}"}}', 0) for q in range(1, own + 1)]
    if chained:
        hashes = chain_hashes(GENESIS, mine)
        store.stage(mine[:10], None, 1.0, hashes[:10])
        store.stage(mine[10:], None, 1.0, hashes[10:])
    else:
        store.stage(mine, None, 1.0)
    store.stage([LogRecord(PEER, q, 200.0 + q, "chat", f'{{"text":"theirs {q:04d}"}}', 0)
                 for q in range(1, others + 1)], PEER, 2.0)
    store.commit()
    guard.note(store)
    store.close()
    return data, me


def start_check(data: Path, me: NodeId) -> SqliteStore:
    return LogGuard(data, GROUP, me).open()


def flip(path: Path, needle: bytes) -> None:
    """Flip one bit inside the first occurrence of ``needle`` in the file."""
    raw = bytearray(path.read_bytes())
    at = raw.index(needle)
    raw[at + len(needle) - 1] ^= 0x01
    path.write_bytes(bytes(raw))


def test_a_whole_log_opens_and_keeps_the_mark(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    assert read_mark(data, me) == {GROUP: 30}
    guard = LogGuard(data, GROUP, me)
    store = guard.open()
    assert guard.checked is not None and guard.checked.ok
    assert (guard.checked.rows, guard.checked.own) == (50, 30)
    store.close()


def test_an_emptied_log_is_refused_naming_repair(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    (data / "log.sqlite").write_bytes(b"")
    with pytest.raises(LogDamaged, match=r"own records up to 0, but the node had written 30.*huddle repair"):
        start_check(data, me)


def test_a_deleted_log_is_refused(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    (data / "log.sqlite").unlink()
    with pytest.raises(LogDamaged, match="huddle repair"):
        start_check(data, me)


def test_a_flipped_byte_in_a_record_is_refused(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    flip(data / "log.sqlite", b"theirs 0007")
    with pytest.raises(LogDamaged, match="1 of 50 records do not match their stored digest"):
        start_check(data, me)


def test_a_flipped_byte_in_the_header_is_refused(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    raw = bytearray((data / "log.sqlite").read_bytes())
    raw[0] ^= 0xFF  # "SQLite format 3"
    (data / "log.sqlite").write_bytes(bytes(raw))
    with pytest.raises(LogDamaged, match=r"cannot be opened.*huddle repair"):
        start_check(data, me)


def test_a_missing_own_record_in_the_middle_is_refused(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    db = sqlite3.connect(data / "log.sqlite")
    db.execute("DELETE FROM events WHERE source=? AND seq=12", (bytes(me),))
    db.commit()
    db.close()
    with pytest.raises(LogDamaged, match=r"own records have holes \(missing 12..12\)"):
        start_check(data, me)


def test_the_last_own_records_cut_off_are_refused(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    db = sqlite3.connect(data / "log.sqlite")
    db.execute("DELETE FROM events WHERE source=? AND seq>25", (bytes(me),))
    db.commit()
    db.close()
    with pytest.raises(LogDamaged, match="up to 25, but the node had written 30"):
        start_check(data, me)


def test_a_digest_that_does_not_match_is_refused(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    db = sqlite3.connect(data / "log.sqlite")  # a rewritten body, digest untouched
    db.execute("UPDATE events SET body='{\"text\":\"forged\"}' WHERE source=? AND seq=3", (bytes(me),))
    db.commit()
    db.close()
    with pytest.raises(LogDamaged, match="do not match their stored digest"):
        start_check(data, me)


def test_repair_keeps_what_verifies_and_takes_a_new_identity(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                             ) -> None:
    data, me = make_dir(tmp_path)
    flip(data / "log.sqlite", b"mine 0017")
    assert main(["repair", "--data-dir", str(data)]) == 0
    out = capsys.readouterr().out
    assert "kept 49 records that verify; 1 did not verify" in out
    new = NodeId.from_hex((data / "node-id").read_text())
    assert new != me
    assert new == load_or_create_identity(data).node_id  # the new identity is the one a new key gives
    assert (data / PREVIOUS_FILE).read_text().split()[0] == str(me)
    assert list(data.glob("log.sqlite.damaged-*")), "the damaged file is kept aside"
    store = start_check(data, new)  # the repaired log opens under the new identity
    state = store.load()
    assert (state[me].contig, state[me].ahead) == (16, [(18, 30)])  # the old identity's records, one missing
    assert state[PEER].contig == 20
    assert NodeId(new) not in state
    store.close()
    assert main(["repair", "--data-dir", str(data)]) == 0  # a whole log: nothing to do
    assert "nothing to repair" in capsys.readouterr().out
    assert NodeId.from_hex((data / "node-id").read_text()) == new


def test_repair_of_an_emptied_log(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    (data / "log.sqlite").write_bytes(b"")
    done = repair(data)
    assert done.problems and done.kept == 0 and done.old_id == me and done.new_id not in (None, me)
    assert not (data / MARK_FILE).exists()
    assert done.new_id is not None
    start_check(data, done.new_id).close()


def test_repair_of_a_file_that_is_not_a_database(tmp_path: Path) -> None:
    data, _me = make_dir(tmp_path)
    (data / "log.sqlite").write_bytes(b"this is not a database" * 100)
    done = repair(data)
    assert done.problems and done.kept == 0 and done.unreadable >= 1
    assert done.new_id is not None
    start_check(data, done.new_id).close()


def test_a_schema_1_log_is_migrated_and_then_checked(tmp_path: Path) -> None:
    data = tmp_path / "old"
    data.mkdir()
    me = NodeId.random()
    db = sqlite3.connect(data / "log.sqlite")
    db.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE events (grp TEXT NOT NULL, source BLOB NOT NULL, seq INTEGER NOT NULL, ts REAL NOT NULL,
            kind TEXT NOT NULL, body TEXT NOT NULL, hops INTEGER NOT NULL, received_at REAL NOT NULL,
            received_from BLOB, PRIMARY KEY (grp, source, seq)) WITHOUT ROWID;
        CREATE TABLE node_stats (ts REAL NOT NULL, grp TEXT NOT NULL, event TEXT NOT NULL, peer BLOB,
            detail TEXT NOT NULL);
        INSERT INTO meta VALUES ('schema', '1');
    """)
    db.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,?,?,?)",
                   [(GROUP, bytes(me), q, 1.0 + q, "chat", '"old"', 0, 1.0, None) for q in range(1, 6)])
    db.commit()
    db.close()
    store = start_check(data, me)
    assert store.load()[me].contig == 5
    store.close()
    flip(data / "log.sqlite", b'"old"')
    with pytest.raises(LogDamaged, match="digest"):
        start_check(data, me)


def test_a_legacy_id_is_refused_for_a_group_with_a_secret_and_repair_new_identity_fixes_it(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data, me = make_dir(tmp_path)  # a data dir from before ids came from keys: a random (version-4) id
    old_key = load_or_create_identity(data)  # the key such a node made at its first start since
    why = own_id_refusal(me, old_key, data)
    assert why is not None and f"huddle repair --new-identity --data-dir {data}" in why and "--data-dir" in why
    assert main(["repair", "--data-dir", str(data)]) == 0  # the log is whole: without the flag, nothing changes
    assert "nothing to repair" in capsys.readouterr().out and NodeId.from_hex((data / "node-id").read_text()) == me

    assert main(["repair", "--new-identity", "--data-dir", str(data)]) == 0
    assert "new identity" in capsys.readouterr().out
    new_key = load_or_create_identity(data)
    new = DataDir(data).node_id()
    assert new == node_id_for(new_key.public_key) != me and new_key.public_key != old_key.public_key
    assert own_id_refusal(new, new_key, data) is None
    assert (data / PREVIOUS_FILE).read_text().split()[0] == str(me)
    [aside] = data.glob(f"{KEY_FILE}.previous-*")  # the old key is kept, private
    assert aside.read_text() == old_key.file_text() and aside.stat().st_mode & 0o077 == 0
    store = start_check(data, new)  # the log opens under the new identity, the old one's records kept
    assert store.load()[me].contig == 30
    store.close()


def test_a_new_data_dir_takes_the_id_its_key_gives(tmp_path: Path) -> None:
    data = tmp_path / "fresh"
    data.mkdir()
    key = load_or_create_identity(data)
    node = DataDir(data).node_id(new=node_id_for(key.public_key))
    assert own_id_refusal(node, key, data) is None


# ---------------------------------------------------------------- chained rows (signed records)


def rewrite(data: Path, sql: str, *args: object) -> None:
    db = sqlite3.connect(data / "log.sqlite")
    db.execute(sql, args)
    db.commit()
    db.close()


def test_a_chained_run_keeps_the_digest_of_its_first_row_only(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path, chained=True)
    store = start_check(data, me)
    digested = store._db.execute(
        "SELECT seq FROM events WHERE source=? AND digest IS NOT NULL ORDER BY seq", (bytes(me),)).fetchall()
    assert digested == [(1,), (11,)]  # the chain hash covers the others from the row before
    assert store.verify() == Verified(50, 0, ())
    store.close()


@pytest.mark.parametrize("seq", [5, 11, 30])  # a row without its digest, the first of a run, the last
def test_a_flipped_byte_in_a_chained_record_is_refused(tmp_path: Path, seq: int) -> None:
    data, me = make_dir(tmp_path, chained=True)
    flip(data / "log.sqlite", f"mine {seq:04d}".encode())
    with pytest.raises(LogDamaged, match="1 of 50 records do not match their stored digest or chain hash"):
        start_check(data, me)


@pytest.mark.parametrize(("seq", "bad"), [(5, 2), (11, 1), (30, 1)])  # the row after it, and itself if digest-less
def test_a_damaged_chain_hash_is_refused(tmp_path: Path, seq: int, bad: int) -> None:
    data, me = make_dir(tmp_path, chained=True)
    rewrite(data, "UPDATE events SET chain=? WHERE source=? AND seq=?", bytes(32), bytes(me), seq)
    with pytest.raises(LogDamaged, match=f"{bad} of 50 records do not match"):
        start_check(data, me)


def test_a_chained_row_that_lost_the_row_before_it_is_refused(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path, chained=True)
    rewrite(data, "DELETE FROM events WHERE source=? AND seq=12", bytes(me))
    with pytest.raises(LogDamaged, match="1 of 49 records do not match"):  # 13: nothing to check it by
        start_check(data, me)


def test_repair_keeps_the_chained_records_that_verify(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path, chained=True)
    flip(data / "log.sqlite", b"mine 0017")
    done = repair(data)
    assert (done.kept, done.dropped) == (49, 1)
    assert done.new_id is not None
    store = start_check(data, done.new_id)
    state = store.load()
    assert (state[me].contig, state[me].ahead) == (16, [(18, 30)])
    store.close()


def test_a_schema_3_log_opens_as_schema_4(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    rewrite(data, "UPDATE meta SET value='3' WHERE key='schema'")
    store = start_check(data, me)
    assert store._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone() == ("4",)
    store.close()


def test_a_new_log_has_16_kib_pages(tmp_path: Path) -> None:
    data, me = make_dir(tmp_path)
    store = start_check(data, me)
    assert store._db.execute("PRAGMA page_size").fetchone() == (16384,)
    store.close()


def test_a_chained_run_stores_each_row_its_own_chain_hash(tmp_path: Path) -> None:
    """250 rows: two statements of 100 rows and one of 50, the hashes bound as one blob."""
    store = SqliteStore(tmp_path / "log.sqlite", GROUP)
    me = NodeId.random()
    mine = [LogRecord(me, q, 100.0 + q, "chat" if q % 3 else "doc", f'{{"n":{q}}}', q % 2) for q in range(1, 251)]
    hashes = chain_hashes(GENESIS, mine)
    store.stage(mine, PEER, 5.0, hashes)
    store.commit()
    rows = store._db.execute(
        "SELECT seq, ts, kind, body, hops, received_at, received_from, digest IS NOT NULL, chain FROM events "
        "ORDER BY seq").fetchall()
    assert rows == [(r.seq, r.timestamp, r.kind, r.body, r.hops + 1, 5.0, bytes(PEER), r.seq == 1, h)
                    for r, h in zip(mine, hashes, strict=True)]
    assert store.verify() == Verified(250, 0, ())
    store.close()


def test_a_run_whose_chain_hashes_do_not_line_up_is_refused(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "log.sqlite", GROUP)
    me = NodeId.random()
    mine = [LogRecord(me, q, 100.0, "chat", "{}", 0) for q in (1, 2, 4)]  # not consecutive
    with pytest.raises(ValueError, match="chain hashes"):
        store.stage(mine, None, 1.0, chain_hashes(GENESIS, mine))
    with pytest.raises(ValueError, match="chain hashes"):
        store.stage(mine[:2], None, 1.0, [bytes(32), bytes(31)])  # a hash of the wrong size
    store.commit()
    assert store.count() == 0
    store.close()


@pytest.mark.parametrize("uniform", [False, True])  # every row of one kind and hop count: those bound once
@pytest.mark.parametrize("n", [1, 2, 99, 100, 101, 227, 500])  # the statement sizes: 100, then 64, 32, ... 1
def test_a_received_batch_is_stored_as_its_records_would_be(tmp_path: Path, n: int, uniform: bool) -> None:
    """A decoded XMSG's records (a RecordBatch of columns) go into the same rows as the
    same records one by one: each value, the digest of the first row only, every chain
    hash a BLOB; and every row verifies."""
    records = tuple(LogRecord(PEER, q, 1000.0 + q, "k" if q % 3 or uniform else "doc", f'{{"i":{q}}}',
                              3 if uniform else q % 4) for q in range(1, n + 1))
    hashes = chain_hashes(GENESIS, records)
    batch = decode(encode(Xmsg(PEER, records))).records
    assert isinstance(batch, RecordBatch)
    rows = []
    for name, recs in (("tuple", records), ("batch", batch)):
        store = SqliteStore(tmp_path / f"{name}.sqlite", GROUP)
        store.stage(recs, NodeId(b"\x09" * 16), 5.0, hashes)
        store.commit()
        assert store.verify() == Verified(n, 0, ())
        rows.append(store._db.execute(
            "SELECT grp, source, seq, ts, kind, body, hops, received_at, received_from, digest, chain, typeof(chain) "
            "FROM events ORDER BY seq").fetchall())
        store.close()
    assert rows[0] == rows[1]
    assert [r[2] for r in rows[1]] == list(range(1, n + 1))
    assert [r[6] for r in rows[1]] == [(3 if uniform else q % 4) + 1 for q in range(1, n + 1)]  # one hop more
    assert [r[9] is not None for r in rows[1]] == [True] + [False] * (n - 1)
    assert {r[11] for r in rows[1]} == {"blob"}
    assert [r[10] for r in rows[1]] == hashes


def test_a_provider_reads_consecutive_records_as_one_batch_and_a_gap_record_by_record(tmp_path: Path) -> None:
    records = [LogRecord(PEER, q, 1000.0 + q, "k", f'{{"i":{q}}}', 1) for q in (*range(1, 11), *range(12, 16))]
    store = SqliteStore(tmp_path / "log.sqlite", GROUP)
    store.stage(records, None, 5.0)
    store.commit()
    whole = store.read(PEER, 0, 10)
    assert isinstance(whole, RecordBatch) and whole == records[:10]
    assert encode(Xmsg(PEER, whole)) == encode(Xmsg(PEER, tuple(records[:10])))  # served as the records would be
    tail = store.read(PEER, 11, 5)
    assert isinstance(tail, RecordBatch) and tail.first == 12 and tail == records[10:]
    gap = store.read(PEER, 0, 20)
    assert not isinstance(gap, RecordBatch) and list(gap) == records
    assert store.read(PEER, 15, 5) == []
    store.close()
