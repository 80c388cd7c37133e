"""A node never reuses its own sequence numbers (protocol.md 12.1, "A restored log"): the replicator
driven directly, time passed in.  A node started on a log restored from an older
copy holds its writes in a start-up window, takes back from its peers the records
in its name they hold (signed with its own key, continuing its chain) and continues
after them; one that recorded before a peer could show them retires its identity
when one does.  A peer's word alone moves nothing."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from huddle import NodeId
from huddle.errors import LocalProtocolError
from huddle.protocol.events import Send
from huddle.protocol.logchain import sign_head
from huddle.protocol.logstore import MemoryStore
from huddle.protocol.replication import Replicator
from huddle.security import NodeIdentity
from huddle.wire import MAX_SEQ, Gsip, LogRecord, Xmsg, decode, encode

ALICE = NodeIdentity.generate()  # the node restored from an older copy
BOB = NodeIdentity.generate()  # its honest peer, holding all it wrote
MALLORY = NodeIdentity.generate()
A, B, M = ALICE.node_id, BOB.node_id, MALLORY.node_id
CONN = {A: 1, B: 2, M: 3}
WAIT, QUIET = 2.0, 1.0


class View:
    """The mesh as a replicator sees it: its clock (no exclusions asked for here)."""

    excluded: Mapping[NodeId, str] = {}

    def mesh_time(self, now: float) -> float:
        return now

    def end_incarnation(self, peer: NodeId, reason: str, now: float) -> bool:
        return True


def node(uuid: NodeId, key: NodeIdentity, store: MemoryStore | None = None) -> Replicator:
    r = Replicator(uuid, store or MemoryStore(), now=0.0, signer=key)
    r.attach(View())  # type: ignore[arg-type]
    return r


def meet(x: Replicator, y: Replicator, now: float) -> None:
    x.peer_up(y.uuid, CONN[y.uuid], now)
    y.peer_up(x.uuid, CONN[x.uuid], now)


def pump(nodes: list[Replicator], now: float) -> None:
    """Deliver every message until none is left (each through the codec)."""
    by_conn = {CONN[r.uuid]: r for r in nodes}
    for _ in range(100):
        moved = False
        for r in nodes:
            for action in r.take_actions():
                if isinstance(action, Send) and action.conn in by_conn:
                    by_conn[action.conn].receive(r.uuid, decode(encode(action.message)), now)
                    moved = True
        if not moved:
            return
    raise AssertionError("the messages did not settle")


def alice_wrote(n: int, per_append: int = 5) -> tuple[MemoryStore, Replicator]:
    """Alice records ``n`` events (a head every ``per_append``), all received by Bob."""
    store = MemoryStore()
    alice, bob = node(A, ALICE, store), node(B, BOB)
    meet(alice, bob, 0.0)
    for i in range(0, n, per_append):
        alice.append_many([("score", f'{{"i":{j}}}') for j in range(i + 1, i + per_append + 1)], 0.0, 100.0 + i)
        pump([alice, bob], 0.0)
    assert bob.version_vector()[A] == n
    return store, bob


def restored(store: MemoryStore, upto: int) -> MemoryStore:
    """An older copy of Alice's store: her records (their chains and heads) up to ``upto``."""
    old = MemoryStore()
    old.records = {A: {q: r for q, r in store.records[A].items() if q <= upto}}
    old.chains = {(s, q): h for (s, q), h in store.chains.items() if q <= upto}
    old.heads = {A: {q: h for q, h in store.heads[A].items() if q <= upto}}
    return old


def records_of(r: Replicator, first: int, last: int) -> list[LogRecord]:
    held = list(r.store.read(A, first - 1, last - first + 1))
    return [LogRecord(x.source, x.seq, x.timestamp, x.kind, x.body) for x in held]


def test_a_restored_node_takes_back_its_records_from_a_peer_and_continues_after_them() -> None:
    full, bob = alice_wrote(60)
    alice = node(A, ALICE, restored(full, 30))
    alice.hold_own(0.0, WAIT, QUIET)
    assert alice.own_seq == 30 and not alice.recording
    with pytest.raises(LocalProtocolError, match="starting"):
        alice.append("score", "1", 0.1, 0.1)
    meet(alice, bob, 0.2)
    pump([alice, bob], 0.2)
    assert alice.own_seq == 60 and alice.stats.own_taken_back == 30
    assert records_of(alice, 1, 60) == records_of(bob, 1, 60)
    assert all(alice.store.receipts[(A, q)][0] is None for q in range(31, 61))  # kept as its own
    alice.tick(0.2 + QUIET / 2)
    assert not alice.recording  # still within the window
    alice.tick(0.2 + QUIET)
    assert alice.recording
    assert alice.append("score", '"next"', 2.0, 2.0).seq == 61
    pump([alice, bob], 2.0)
    assert bob.version_vector()[A] == 61 and bob.stats.forgeries == 0  # its chain goes on from 60
    assert not alice.retired and alice.stats.own_conflicts == 0


def test_the_window_ends_after_wait_alone_and_after_quiet_with_a_peer_that_claims_nothing() -> None:
    alone = node(A, ALICE)
    alone.hold_own(0.0, WAIT, QUIET)
    alone.tick(WAIT - 0.1)
    assert not alone.recording
    alone.tick(WAIT)
    assert alone.recording and alone.append("k", "1", WAIT, WAIT).seq == 1
    fresh = node(A, ALICE)
    fresh.hold_own(0.0, WAIT, QUIET)
    bob = node(B, BOB)
    meet(fresh, bob, 0.5)
    pump([fresh, bob], 0.5)
    fresh.tick(0.5 + QUIET - 0.1)
    assert not fresh.recording
    fresh.tick(0.5 + QUIET)
    assert fresh.recording


def test_a_node_that_recorded_alone_retires_its_identity_when_a_peer_shows_more() -> None:
    full, bob = alice_wrote(60)
    alice = node(A, ALICE, restored(full, 30))
    alice.hold_own(0.0, WAIT, QUIET)
    alice.tick(WAIT)  # no peer came
    assert alice.append_many([("score", '"again"')] * 5, WAIT, WAIT)[-1].seq == 35  # 31..35 reused
    alice.take_actions()
    meet(alice, bob, 3.0)
    pump([alice, bob], 3.0)
    alice.tick(3.1)
    pump([alice, bob], 3.1)
    assert alice.retired is not None and "reused" in alice.retired
    assert alice.stats.own_conflicts >= 1 and not alice.recording
    with pytest.raises(LocalProtocolError, match="records nothing more"):
        alice.append("score", '"more"', 4.0, 4.0)
    assert alice.own_seq == 35 and alice.stats.own_taken_back == 0  # nothing of the other 31..35 kept


def test_a_claim_in_our_name_without_signed_records_moves_nothing() -> None:
    full, _ = alice_wrote(30)
    alice = node(A, ALICE, restored(full, 30))
    alice.hold_own(0.0, WAIT, QUIET)
    mallory = node(M, MALLORY)
    meet(alice, mallory, 0.0)
    alice.take_actions()
    alice.receive(M, Gsip(M, ((A, MAX_SEQ),)), 0.1)
    asks = [a.message for a in alice.take_actions() if isinstance(a, Send) and isinstance(a.message, Gsip)]
    assert any(s == A for m in asks for s, _ in m.ask)  # asked for it: only its records would count
    alice.tick(QUIET + 0.5)
    assert not alice.recording  # a claim keeps the window open ...
    # ... its records in our name, unsigned or signed with another key, are refused ...
    fake = (LogRecord(A, 31, 1.0, "k", '"forged"'),)
    alice.receive(M, Xmsg(M, fake), 1.0)
    head = sign_head(MALLORY, A, 31, b"\x00" * 32)
    alice.receive(M, Xmsg(M, fake, ((b"\x00" * 32, head),)), 1.0)
    assert alice.stats.own_refused == 1 and alice.stats.forgeries == 1 and alice.own_seq == 30
    # ... and the window ends WAIT after the admission all the same: the claim is not believed.
    alice.tick(WAIT)
    assert alice.recording and alice.retired is None
    assert alice.append("score", '"after"', WAIT, WAIT).seq == 31
    # Its claim, unbacked after an ask's resend time, is not asked for again.
    alice.take_actions()
    alice.tick(WAIT + 3.0)
    later = [a.message for a in alice.take_actions() if isinstance(a, Send) and isinstance(a.message, Gsip)]
    assert not any(s == A for m in later for s, _ in m.ask)
