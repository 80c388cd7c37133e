"""Sources no one vouches for are reclaimable (docs/protocol.md 12.2): made-up
sources, validly signed (a key per source is cheap), fill the sources limit; an admitted member's
records are still stored, in place of the made-up sources holding least, and the forwarder's
quota is its address's, not its id's.  The Replicator driven by hand, time passed in."""

from __future__ import annotations

import hashlib
from pathlib import Path

from huddle import NodeId
from huddle.limits import LogLimits
from huddle.log import SqliteStore
from huddle.log.export import export
from huddle.protocol.logchain import GENESIS, chain_hashes, sign_head
from huddle.protocol.logstore import EventStore, MemoryStore
from huddle.protocol.replication import Replicator
from huddle.protocol.service import PeerFacts
from huddle.security import NodeIdentity
from huddle.wire import Gsip, LogRecord, Xmsg

LIMITS = LogLimits(max_sources=16, max_new_sources_per_peer=64, max_new_sources_per_message=64)
VILLAIN_HOST = "10.0.0.66"


def identity(name: str) -> NodeIdentity:
    return NodeIdentity.from_seed(hashlib.blake2b(name.encode(), digest_size=32).digest())


ME = identity("me")
VILLAIN = identity("villain")
HONEST = identity("honest")
NEWCOMER = identity("newcomer")


def signed(key: NodeIdentity, count: int, sender: NodeId) -> Xmsg:
    """An XMSG of ``key``'s records 1..count, chained and signed as its source would."""
    source = key.node_id
    records = tuple(LogRecord(source, q, 1.0, "score", str(q)) for q in range(1, count + 1))
    return Xmsg(sender, records, ((GENESIS, sign_head(key, source, count, chain_hashes(GENESIS, records)[-1])),))


def made_up(n: int, start: int = 0) -> list[NodeIdentity]:
    return [identity(f"made-up {i}") for i in range(start, start + n)]


def replicator(store: EventStore, limits: LogLimits = LIMITS) -> Replicator:
    return Replicator(ME.node_id, store, now=0.0, limits=limits, signer=ME)


def admit(r: Replicator, key: NodeIdentity | NodeId, conn: int, address: str, now: float = 1.0) -> NodeId:
    peer = key if isinstance(key, NodeId) else key.node_id
    r.peer_up(peer, conn, now, PeerFacts(address=address))
    r.take_actions()
    return peer


def flood(r: Replicator, sender: NodeId, keys: list[NodeIdentity], count: int = 1, now: float = 2.0) -> None:
    """``sender`` forwards ``count`` records of each of ``keys``' sources."""
    for key in keys:
        r.on_xmsg(sender, signed(key, count, sender), now, now)
    r.take_actions()


def test_made_up_signed_sources_past_the_limit_do_not_keep_an_admitted_members_records_out() -> None:
    store = MemoryStore()
    r = replicator(store)
    villain = admit(r, VILLAIN, 1, VILLAIN_HOST)
    junk = made_up(40)
    flood(r, villain, junk)
    assert len(r.sources) == 16  # the table is full of made-up sources (and ours)
    assert r.stats.sources_refused == 40 - 15
    # An honest newcomer is admitted and its records come: stored, in the place of a made-up source.
    newcomer = admit(r, NEWCOMER, 2, "10.0.0.5")
    r.on_xmsg(newcomer, signed(NEWCOMER, 3, newcomer), 3.0, 3.0)
    r.take_actions()
    assert r.sources[newcomer].contig == 3
    assert [q.seq for q in store.read(newcomer, 0, 10)] == [1, 2, 3]
    assert len(r.sources) == 16 and r.stats.sources_evicted == 1
    # The evicted source's records are gone from the store with it (bounded disk).
    assert set(store.records) <= set(r.sources) and sum(k.node_id in store.records for k in junk) == 14
    # The member that sent them is admitted: its own source is vouched for (and takes a place too).
    r.on_xmsg(villain, signed(VILLAIN, 2, villain), 4.0, 4.0)
    r.take_actions()
    assert r.sources[villain].contig == 2 and r.stats.sources_evicted == 2
    assert sum(k.node_id in store.records for k in junk) == 13


def test_a_member_forwarded_before_it_is_admitted_is_stored_once_it_is() -> None:
    """An honest peer forwards the newcomer's records before the newcomer and we meet: refused while
    the table is full; once the newcomer is admitted, the next digest naming it brings them in."""
    r = replicator(MemoryStore())
    villain = admit(r, VILLAIN, 1, VILLAIN_HOST)
    honest = admit(r, HONEST, 2, "10.0.0.4")
    flood(r, villain, made_up(40))
    assert len(r.sources) == 16
    r.on_xmsg(honest, signed(NEWCOMER, 2, honest), 3.0, 3.0)
    assert NEWCOMER.node_id not in r.sources  # no one vouches for it yet
    admit(r, NEWCOMER, 3, "10.0.0.5", 4.0)
    r.on_gsip(honest, Gsip(honest, ((NEWCOMER.node_id, 2),)), 5.0)
    assert NEWCOMER.node_id in r.sources and r.stats.sources_evicted == 1
    r.on_xmsg(honest, signed(NEWCOMER, 2, honest), 5.5, 5.5)
    assert r.sources[NEWCOMER.node_id].contig == 2


def test_the_source_holding_least_goes_first_and_an_evicted_one_comes_back_once_vouched_for() -> None:
    r = replicator(MemoryStore(), LogLimits(max_sources=8, max_new_sources_per_peer=64))
    villain = admit(r, VILLAIN, 1, VILLAIN_HOST)
    big, small = made_up(3), made_up(3, 10)
    flood(r, villain, big, count=5)
    flood(r, villain, small, count=1)
    claimed = identity("claimed only")
    r.on_gsip(villain, Gsip(villain, ((claimed.node_id, 9),)), 2.5)  # named, nothing held of it
    assert len(r.sources) == 8
    newcomer = admit(r, NEWCOMER, 2, "10.0.0.5")
    r.on_xmsg(newcomer, signed(NEWCOMER, 1, newcomer), 3.0, 3.0)
    assert claimed.node_id not in r.sources  # held nothing: first
    honest = admit(r, HONEST, 3, "10.0.0.4")
    r.on_xmsg(honest, signed(HONEST, 1, honest), 3.5, 3.5)
    assert all(k.node_id in r.sources for k in big)  # 5 records each: kept over the 1-record ones
    assert sum(k.node_id in r.sources for k in small) == 2 and r.stats.sources_evicted == 2
    # The evicted one was an honest node that was away: it comes back, is admitted, and its
    # records are taken again (in the place of another source no one vouches for).
    back = next(k for k in small if k.node_id not in r.sources)
    peer = admit(r, back, 4, "10.0.0.7", 4.0)
    r.on_xmsg(peer, signed(back, 1, peer), 4.5, 4.5)
    assert r.sources[peer].contig == 1 and r.stats.sources_evicted == 3


def test_a_forwarders_quota_is_its_addresss_and_survives_new_ids() -> None:
    limits = LogLimits(max_sources=100, max_new_sources_per_peer=10, max_new_sources_per_message=100)
    r = replicator(MemoryStore(), limits)
    first = admit(r, VILLAIN, 1, VILLAIN_HOST)
    flood(r, first, made_up(15))
    assert len(r.sources) == 1 + 10 and r.stats.sources_refused == 5
    r.peer_down(first, 2.0)
    again = admit(r, identity("villain, a new id"), 2, VILLAIN_HOST, 3.0)  # the same address
    flood(r, again, made_up(15, 100), now=4.0)
    assert len(r.sources) == 1 + 10 and r.stats.sources_refused == 20
    elsewhere = admit(r, HONEST, 3, "10.0.0.4", 5.0)  # another address has a quota of its own
    flood(r, elsewhere, made_up(3, 200), now=6.0)
    assert len(r.sources) == 1 + 10 + 3


def test_one_address_vouches_for_a_bounded_number_of_ids() -> None:
    limits = LogLimits(max_sources=6, max_new_sources_per_peer=64, max_vouched_per_address=2)
    r = replicator(MemoryStore(), limits)
    ids = made_up(3, 300)
    for i, key in enumerate(ids):
        admit(r, key, i + 1, VILLAIN_HOST)
    assert r.stats.vouches_refused == 1
    honest = admit(r, HONEST, 9, "10.0.0.4")
    for i, key in enumerate(ids):  # each id's own records, from itself
        r.on_xmsg(key.node_id, signed(key, 1, key.node_id), 2.0 + i, 2.0 + i)
    flood(r, honest, made_up(3, 400), now=3.0)  # the table full: the third id's source holds 1
    assert len(r.sources) == 6
    newcomer = admit(r, NEWCOMER, 10, "10.0.0.5", 4.0)
    r.on_xmsg(newcomer, signed(NEWCOMER, 1, newcomer), 5.0, 5.0)
    assert newcomer in r.sources and r.stats.sources_evicted == 1
    assert ids[0].node_id in r.sources and ids[1].node_id in r.sources  # vouched for
    r.take_actions()


def test_after_a_restart_junk_gives_way_and_members_vouched_for_before_stay(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite"
    store = SqliteStore(path, "g")
    r = replicator(store)
    villain = admit(r, VILLAIN, 1, VILLAIN_HOST)
    honest = admit(r, HONEST, 2, "10.0.0.4")
    r.on_xmsg(honest, signed(HONEST, 1, honest), 1.5, 1.5)
    junk = made_up(40)
    flood(r, villain, junk, count=2)
    assert len(r.sources) == 16
    store.close()
    # The node restarts on that log, and meets a newcomer before anyone it knew.
    store = SqliteStore(path, "g")
    r = replicator(store)
    assert len(r.sources) == 16
    newcomer = admit(r, NEWCOMER, 1, "10.0.0.5")
    r.on_xmsg(newcomer, signed(NEWCOMER, 2, newcomer), 2.0, 2.0)
    r.take_actions()
    assert r.sources[newcomer].contig == 2 and r.stats.sources_evicted == 1
    # The honest member admitted before the restart is still vouched for: holding least (one
    # record), it is still not the one evicted, here or as more newcomers come.
    for i, key in enumerate(made_up(5, 500)):
        peer = admit(r, key, 10 + i, f"10.0.1.{i}", 3.0)
        r.on_xmsg(peer, signed(key, 1, peer), 3.0, 3.0)
    r.take_actions()
    assert r.sources[honest].contig == 1 and r.stats.sources_evicted == 6
    store.close()
    store = SqliteStore(path, "g")
    held = {s: st.count() for s, st in store.load().items()}
    assert held[honest] == 1 and held[newcomer] == 2 and len(held) == 15
    # The evicted are gone from disk, records and heads; the 8 made-up sources left give way next.
    assert [sum(k.node_id in held for k in junk), sum(bool(store.heads_in(k.node_id, 1, 2)) for k in junk)] == [8, 8]
    assert set(store.vouched()) == {VILLAIN.node_id, honest, newcomer} | {k.node_id for k in made_up(5, 500)}
    # What reads the whole log takes it as it is: the start's integrity check, the export.
    assert store.verify().bad == 0
    store.close()
    (tmp_path / "node-id").write_text(str(ME.node_id))
    assert export(tmp_path, tmp_path / "out", "jsonl") == sum(held.values())


def test_a_key_of_the_trust_list_is_vouched_for_before_it_is_ever_admitted() -> None:
    """Allow-list mode: the node vouches for its trust list's keys at start (node.py), so their
    records forwarded by others are stored even with the table full."""
    r = replicator(MemoryStore())
    villain = admit(r, VILLAIN, 1, VILLAIN_HOST)
    honest = admit(r, HONEST, 2, "10.0.0.4")
    flood(r, villain, made_up(40))
    r.vouch([NEWCOMER.node_id])
    r.on_xmsg(honest, signed(NEWCOMER, 2, honest), 3.0, 3.0)
    assert r.sources[NEWCOMER.node_id].contig == 2 and r.stats.sources_evicted == 1
    assert r.stats.vouches_refused == 0
    r.take_actions()
