"""Signed log records (protocol.md 12.5): the chain and head codec, the verifier, and the
replicator driven directly — every forged, altered, wrongly signed or replayed
batch is rejected whole (nothing stored), counted against the peer that sent it,
and that peer is excluded at ``log.max-forgeries``.  SQLite's schema migration too."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

import pytest

from huddle import NodeId
from huddle.limits import LogLimits
from huddle.log import SqliteStore
from huddle.log.store import Verified
from huddle.protocol.core import build_services
from huddle.protocol.events import Send
from huddle.protocol.logchain import GENESIS, chain_hashes, check_batch, key_bound, sign_head
from huddle.protocol.logstore import MemoryStore
from huddle.protocol.picture_compute import compute
from huddle.protocol.replication import Replicator
from huddle.security import NodeIdentity
from huddle.wire import MAX_BODY, Gsip, LogHead, LogRecord, PeerStat, Raws, Xmsg, decode, encode, encode_parts

ALICE = NodeIdentity.generate()  # the source
BOB = NodeIdentity.generate()  # an honest receiver
MALLORY = NodeIdentity.generate()  # a hostile forwarder with a key of its own
A, B, M = ALICE.node_id, BOB.node_id, MALLORY.node_id
LEGACY = NodeId(b"\x07" * 16)  # a random-id (not key-bound) source


class View:
    """The mesh as a replicator sees it: its clock, and the exclusions it asked for."""

    excluded: Mapping[NodeId, str] = {}

    def __init__(self) -> None:
        self.ended: list[tuple[NodeId, str]] = []

    def mesh_time(self, now: float) -> float:
        return now

    def end_incarnation(self, peer: NodeId, reason: str, now: float) -> bool:
        self.ended.append((peer, reason))
        return True


def attached(r: Replicator) -> Replicator:
    r.attach(View())  # type: ignore[arg-type]
    return r


def source_with(n: int, store: MemoryStore | None = None) -> Replicator:
    """Alice, signing, with ``n`` events recorded and taken (signed, committed)."""
    r = Replicator(A, store or MemoryStore(), now=0.0, signer=ALICE)
    if n:
        r.append_many([("score", f'{{"i":{i}}}') for i in range(1, n + 1)], 0.0, 100.0)
    r.take_actions()
    return r


def xmsgs(actions: object) -> list[Xmsg]:
    out = []
    for a in actions:  # type: ignore[attr-defined]
        if isinstance(a, Send) and isinstance(a.message, Xmsg):
            assert len(encode_parts(a.message)[1]) <= MAX_BODY
            out.append(a.message)
    return out


def receiver(*, secure: bool = False, limits: LogLimits | None = None, store: MemoryStore | None = None
             ) -> tuple[Replicator, MemoryStore]:
    store = store or MemoryStore()
    r = attached(Replicator(B, store, now=0.0, signer=BOB, secure=secure, limits=limits))
    r.peer_up(M, 1, 0.0)
    r.take_actions()
    return r, store


def signed_batch(n: int) -> Xmsg:
    """Alice's first ``n`` records as Alice sends them live: one XMSG, one head."""
    src = Replicator(A, MemoryStore(), now=0.0, signer=ALICE)
    src.peer_up(B, 1, 0.0)
    src.take_actions()
    src.append_many([("score", f'{{"i":{i}}}') for i in range(1, n + 1)], 0.0, 100.0)
    (msg,) = xmsgs(src.take_actions())
    return msg


def nothing_kept(r: Replicator, store: MemoryStore, forgeries: int = 1) -> None:
    assert store.records == {} and store.heads == {} and store.chains == {}
    assert r.stats.received == 0
    assert r.stats.forgeries == forgeries and r.forgeries == {M: forgeries}


# ---------------------------------------------------------------------------- the chain itself


def test_the_chain_binds_every_record_and_the_head_verifies() -> None:
    records = [LogRecord(A, q, 1.5, "k", f"[{q}]") for q in range(1, 6)]
    hashes = chain_hashes(GENESIS, records)
    assert len(set(hashes)) == 5 and all(len(h) == 32 for h in hashes)
    assert chain_hashes(hashes[1], records[2:]) == hashes[2:]  # a batch from mid-chain
    head = sign_head(ALICE, A, 5, hashes[-1])
    assert check_batch(GENESIS, records, head) == hashes
    assert check_batch(hashes[1], records[2:], head) == hashes[2:]
    # hops are not part of a record's content: a forwarded copy verifies
    assert check_batch(GENESIS, [replace(r, hops=3) for r in records], head) == hashes


def test_key_bound_ids_are_the_ones_keys_give() -> None:
    assert key_bound(A) and key_bound(M)
    assert not key_bound(LEGACY) and not key_bound(NodeId.random())


@pytest.mark.parametrize("case", ["altered body", "altered stamp", "altered kind", "reordered", "dropped one",
                                  "wrong prev", "not from genesis", "key of another", "bad signature",
                                  "head of another source", "head elsewhere"])
def test_check_batch_refuses(case: str) -> None:
    records = [LogRecord(A, q, 1.5, "k", f"[{q}]") for q in range(1, 6)]
    hashes = chain_hashes(GENESIS, records)
    head = sign_head(ALICE, A, 5, hashes[-1])
    prev = GENESIS
    if case == "altered body":
        records[2] = replace(records[2], body="[99]")
    elif case == "altered stamp":
        records[2] = replace(records[2], timestamp=2.5)
    elif case == "altered kind":
        records[2] = replace(records[2], kind="x")
    elif case == "reordered":
        records[1], records[2] = replace(records[2], seq=2), replace(records[1], seq=3)
    elif case == "dropped one":
        records = records[:2] + [replace(r, seq=r.seq - 1) for r in records[3:]]
        head = sign_head(ALICE, A, 4, hashes[-1])
    elif case == "wrong prev":
        records, prev = records[2:], hashes[0]
    elif case == "not from genesis":
        prev = hashes[0]
    elif case == "key of another":  # Mallory signs Alice's true chain with its own key
        head = sign_head(MALLORY, A, 5, hashes[-1])
    elif case == "bad signature":
        head = replace(head, signature=bytes(64))
    elif case == "head of another source":
        head = sign_head(MALLORY, M, 5, hashes[-1])
    elif case == "head elsewhere":
        head = sign_head(ALICE, A, 4, hashes[3])
    assert isinstance(check_batch(prev, records, head), str)


def test_xmsg_heads_round_trip_and_are_checked_for_shape() -> None:
    msg = signed_batch(3)
    assert len(msg.heads) == 1 and msg.heads[0][0] == GENESIS
    back = decode(encode(msg))
    assert isinstance(back, Xmsg) and back.heads == msg.heads and tuple(back.records) == tuple(msg.records)
    frames = encode(msg)
    for bad in (b'"heads":[]', b'"heads":[["x"]]', b'"heads":[[1,2,3,4,5,6]]'):
        body = frames[2].split(b',"heads":')[0] + b"," + bad + b"}"
        with pytest.raises(Exception, match="head"):
            decode([frames[0], frames[1], body])


# ------------------------------------------------------------------- the replicator, receiving


def test_a_signed_live_batch_is_kept_with_its_chain_and_head() -> None:
    r, store = receiver()
    msg = signed_batch(4)
    r.receive(M, msg, 1.0)
    r.take_actions()
    assert sorted(store.records[A]) == [1, 2, 3, 4]
    assert store.heads[A][4] == msg.heads[0][1]
    assert store.chain_of(A, 4) == msg.heads[0][1].chain
    assert r.stats.forgeries == 0


def test_an_altered_copy_of_a_real_record_is_rejected_whole() -> None:
    r, store = receiver()
    msg = signed_batch(4)
    records = list(msg.records)
    records[1] = replace(records[1], body='{"i":1000}')
    r.receive(M, Xmsg(M, tuple(records), msg.heads), 1.0)
    r.take_actions()
    nothing_kept(r, store)
    r.receive(M, msg, 2.0)  # the true batch still gets in afterwards
    r.take_actions()
    assert store.records[A][2].body == '{"i":2}'


def test_a_forged_record_for_another_source_is_rejected() -> None:
    """Unsigned: refused as a forgery (a key-bound source's records always travel signed)."""
    r, store = receiver()
    forged = (LogRecord(A, 1, 100.0, "score", '{"i":666}'),)
    r.receive(M, Xmsg(M, forged), 1.0)
    nothing_kept(r, store)
    # signed by the forwarder's own key: its key does not give Alice's id
    h = chain_hashes(GENESIS, forged)[-1]
    r.receive(M, Xmsg(M, forged, ((GENESIS, sign_head(MALLORY, A, 1, h)),)), 1.0)
    nothing_kept(r, store, 2)
    # claiming Alice's key with Mallory's signature
    r.receive(M, Xmsg(M, forged, ((GENESIS, replace(sign_head(MALLORY, A, 1, h), key=ALICE.public_key)),)), 1.0)
    nothing_kept(r, store, 3)


def test_a_valid_head_with_a_tampered_record_and_a_good_one_beside_is_rejected_whole() -> None:
    """One XMSG, two sources: Mallory's own honest records and Alice's tampered one: none kept."""
    r, store = receiver()
    mine = Replicator(M, MemoryStore(), now=0.0, signer=MALLORY)
    mine.peer_up(B, 1, 0.0)
    mine.take_actions()
    mine.append("note", "1", 0.0, 5.0)
    (own,) = xmsgs(mine.take_actions())
    alice = signed_batch(2)
    tampered = (alice.records[0], replace(alice.records[1], timestamp=99.0))
    r.receive(M, Xmsg(M, tuple(own.records) + tampered, own.heads + alice.heads), 1.0)
    r.take_actions()
    nothing_kept(r, store)


@pytest.mark.parametrize("case", ["head for records not carried", "two heads for one source", "replayed head",
                                  "head out of range"])
def test_heads_that_do_not_fit_their_records_are_forgeries(case: str) -> None:
    r, store = receiver()
    msg = signed_batch(4)
    records, heads = tuple(msg.records), msg.heads
    if case == "head for records not carried":
        heads = (*heads, (GENESIS, sign_head(MALLORY, M, 1, bytes(32))))
    elif case == "two heads for one source":
        heads = heads + heads
    elif case == "replayed head":  # an old valid head (at 2) on records that go on to 4
        src = source_with(0)
        src.append_many([("score", '{"i":1}'), ("score", '{"i":2}')], 0.0, 100.0)
        src.take_actions()
        old = src.store.heads_in(A, 2, 2)[0]
        heads = ((GENESIS, old),)
    elif case == "head out of range":  # the true head, records cut before it
        records = records[:3]
    r.receive(M, Xmsg(M, records, heads), 1.0)
    r.take_actions()
    nothing_kept(r, store)


def test_forgeries_are_counted_per_forwarder_and_exclusion_follows_at_the_limit() -> None:
    r, store = receiver(limits=LogLimits(max_forgeries=3))
    view = View()
    r.attach(view)  # type: ignore[arg-type]
    forged = Xmsg(M, (LogRecord(A, 1, 1.0, "k", "1"),))
    for i in range(2):
        r.receive(M, forged, float(i))
    assert view.ended == [] and r.forgeries == {M: 2}
    r.receive(M, forged, 3.0)
    assert view.ended and view.ended[0][0] == M and "forged" in view.ended[0][1]
    assert r.stats.forgers_excluded == 1
    assert store.records == {}


def test_legacy_unsigned_sources_pass_in_open_mode_and_are_refused_in_secure_mode() -> None:
    legacy = (LogRecord(LEGACY, 1, 1.0, "k", "1"),)
    r, store = receiver()
    r.receive(M, Xmsg(M, legacy), 1.0)
    assert LEGACY in store.records and r.stats.forgeries == 0
    r, store = receiver(secure=True)
    r.receive(M, Xmsg(M, legacy), 1.0)
    assert store.records == {} and r.stats.unsigned_refused == 1 and r.stats.forgeries == 0


# ---------------------------------------------------------------- the replicator, sending


def test_catch_up_is_served_in_batches_cut_at_heads_and_verifies_at_the_joiner() -> None:
    store = MemoryStore()
    src = source_with(0, store)
    for k in range(7):  # seven emissions of 300: heads at 300, 600, ... (batch_records 500 cuts none)
        src.append_many([("score", f'{{"i":{k * 300 + i}}}') for i in range(300)], 0.0, 100.0 + k)
        src.take_actions()
    joiner = attached(Replicator(B, MemoryStore(), now=0.0, signer=BOB))
    attached(src)
    src.peer_up(B, 1, 0.0)
    joiner.peer_up(A, 1, 0.0)
    for _ in range(20):  # GSIPs and XMSGs back and forth until nothing moves
        moved = False
        for a in src.take_actions():
            if isinstance(a, Send):
                joiner.receive(A, a.message, 1.0)
                moved = True
        for a in joiner.take_actions():
            if isinstance(a, Send):
                src.receive(B, a.message, 1.0)
                moved = True
        if not moved:
            break
    assert joiner.version_vector() == {A: 2100}
    assert joiner.stats.forgeries == 0
    assert joiner.store.chain_of(A, 2100) == store.chain_of(A, 2100)  # type: ignore[attr-defined]


def test_an_unsigned_key_bound_source_is_not_passed_on() -> None:
    """Records of a key-bound source held without heads (a log from before signing) stay here."""
    store = MemoryStore()
    store.stage([LogRecord(M, q, 1.0, "k", "1") for q in (1, 2)], LEGACY, 0.0)
    r = Replicator(B, store, now=0.0, signer=BOB)
    assert r._server.signed_batches(store.read(M, 0, 10)) == []


# ------------------------------------------------------------------------ storage, migration


def test_sqlite_keeps_chains_and_heads_and_migrates_schema_2(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    store = SqliteStore(path, "g")
    r = Replicator(A, store, now=0.0, signer=ALICE)
    r.append_many([("k", str(i)) for i in range(1, 11)], 0.0, 1.0)
    r.take_actions()
    heads = store.heads_in(A, 1, 10)
    assert [h.seq for h in heads] == [10]
    assert store.chain_of(A, 10) == heads[0].chain
    store.close()
    # make it a schema-2 file: no chain column, no heads
    db = sqlite3.connect(path)
    db.executescript("DROP TABLE heads; CREATE TABLE e2 AS SELECT grp, source, seq, ts, kind, body, hops, "
                     "received_at, received_from, digest FROM events; DROP TABLE events; "
                     "ALTER TABLE e2 RENAME TO events; UPDATE meta SET value='2' WHERE key='schema';")
    db.commit()
    db.close()
    store = SqliteStore(path, "g")
    assert store.chain_of(A, 10) is None and store.heads_in(A, 1, 10) == []
    r = Replicator(A, store, now=0.0, signer=ALICE)  # re-chains and re-signs its own
    assert r.stats.rechained == 10
    assert store.chain_of(A, 10) == heads[0].chain
    assert isinstance(store.heads_in(A, 10, 10)[0], LogHead)
    assert store.verify().bad == 0
    store.close()


# ------------------------------------------------------------------------------ the picture


def test_the_system_picture_reports_the_forwarder() -> None:
    def report(origin: NodeId, other: NodeId, forged: tuple[tuple[NodeId, int], ...] = ()) -> Raws:
        return Raws(origin, origin, 1, "n", "standard", 1.0, 4, False,
                    (PeerStat(other, 0.1, 0.001, "alive"),), forged)

    bob = report(B, M, ((M, 2),))
    back = decode(encode(bob))
    assert isinstance(back, Raws) and back.forged == ((M, 2),)
    picture = compute({B: bob, M: report(M, B)})
    health = {m["uuid"]: (m["health"], m["problems"]) for m in picture.members}
    assert health[str(M)] == ("forging", ["forging"]) and health[str(B)] == ("ok", [])
    assert compute({B: report(B, M), M: report(M, B)}).digest != picture.digest


def test_received_signed_records_are_stored_with_digests_that_verify(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "log.sqlite", "g")
    r = attached(Replicator(B, store, now=0.0, signer=BOB))
    r.peer_up(M, 1, 0.0)
    msg = signed_batch(7)
    r.receive(M, msg, 1.0)
    r.take_actions()
    assert [x.seq for x in store.read(A, 0, 10)] == list(range(1, 8))
    assert store.chain_of(A, 7) == msg.heads[0][1].chain and store.heads_in(A, 1, 7) == [msg.heads[0][1]]
    verified = store.verify()
    assert verified.rows == 7 and verified.bad == 0
    store.close()


def test_runs_of_hundreds_are_stored_whole_own_and_received(tmp_path: Path) -> None:
    # 250 = two statements of 100 rows and 50 by executemany (store.py, _insert_run).
    store = SqliteStore(tmp_path / "a.sqlite", "g")
    src = Replicator(A, store, now=0.0, signer=ALICE)
    src.peer_up(B, 1, 0.0)
    src.take_actions()
    made = src.append_many([("score", f'{{"i":{i}}}') for i in range(1, 251)], 0.0, 100.0)
    (msg,) = xmsgs(src.take_actions())
    assert store.read(A, 0, 300) == made and store.verify() == Verified(250, 0, ())
    assert store.chain_of(A, 250) == msg.heads[0][1].chain
    peer_store = SqliteStore(tmp_path / "b.sqlite", "g")
    r = attached(Replicator(B, peer_store, now=0.0, signer=BOB))
    r.peer_up(A, 1, 0.0)
    r.receive(A, msg, 1.0)
    r.take_actions()
    assert peer_store.read(A, 0, 300) == [replace(x, hops=1) for x in made]
    assert [peer_store.chain_of(A, q) for q in (1, 100, 101, 250)] == [store.chain_of(A, q) for q in (1, 100, 101, 250)]
    assert peer_store.verify() == Verified(250, 0, ())
    rows = peer_store._db.execute("SELECT DISTINCT grp, received_at, received_from FROM events").fetchall()
    assert rows == [("g", 1.0, bytes(A))]
    store.close()
    peer_store.close()


def test_catch_up_of_large_records_is_cut_at_heads_within_the_body_cap() -> None:
    src = attached(source_with(0))
    big = '"' + "x" * 150_000 + '"'
    for k in range(4):  # 40 records of 150 kB: the source cuts (and signs) by octets, not count
        src.append_many([("doc", big)] * 10, 0.0, 100.0 + k)
        src.take_actions()
    heads = src.store.heads_in(A, 1, 40)
    assert len(heads) > 4  # more than one per emission: cut by octets
    src.peer_up(B, 1, 0.0)
    src.take_actions()
    src.receive(B, Gsip(B, (), ((A, ((1, 0),)),)), 1.0)
    served = xmsgs(src.take_actions())  # each checked to fit the body cap
    assert served and all(m.heads and m.records[-1].seq == m.heads[0][1].seq for m in served)
    joiner, _ = receiver()
    for m in served:
        joiner.on_xmsg(M, m, 1.0, 1.0)
    assert joiner.version_vector().get(A) == served[-1].records[-1].seq and joiner.stats.forgeries == 0


def test_build_services_passes_the_signer_and_the_mode_to_the_log() -> None:
    log = build_services(A, now=0.0, store=MemoryStore(), log_signer=ALICE, log_secure=True).replicator
    assert log is not None and log.signer is ALICE and log.secure
    # a key that does not give the node's id does not sign (its heads would be refused)
    log = build_services(B, now=0.0, store=MemoryStore(), log_signer=ALICE).replicator
    assert log is not None and log.signer is None and not log.secure
