"""The replicator's collaborators, each on its own (protocol/replication.py lists them):
vouching and eviction, the signing outbox, asking, the GSIP's sizes, serving, the
start-up window.  The replicator's own tests (test_replication*.py, test_logsig.py,
test_own_sequence.py, test_log_sources.py) drive them together."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from huddle import NodeId
from huddle.limits import LogLimits
from huddle.log.model import SourceState
from huddle.protocol.asking import GSIP_BUDGET, Asking, gsip_pieces
from huddle.protocol.logchain import GENESIS, chain_hashes, check_batch
from huddle.protocol.logstate import PeerLog, ReplicationStats, ReplicationTiming
from huddle.protocol.logstore import MemoryStore
from huddle.protocol.outbox import Outbox
from huddle.protocol.ownseq import IdentityRetired, OwnSequence, StartWindow
from huddle.protocol.serving import Serve, Server
from huddle.protocol.vouching import Vouching
from huddle.security import NodeIdentity
from huddle.wire import MAX_BODY, LogRecord, Message, Xmsg, encode_parts

ALICE = NodeIdentity.generate()
A = ALICE.node_id
P, Q, S, T = (NodeId(bytes([i]) * 16) for i in (1, 2, 3, 4))


def held(n: int) -> SourceState:
    st = SourceState()
    if n:
        st.add(1, n)
    return st


# ---------------------------------------------------------------------------- vouching


def test_the_victim_is_the_unvouched_source_holding_least_then_from_the_busiest_forwarder() -> None:
    v = Vouching(A, {P: "10.0.0.1"}, LogLimits())
    assert v.introduce(S, "addr:x", 0, 3) and v.introduce(T, "addr:y", 0, 4) and v.introduce(Q, "addr:y", 0, 5)
    sources = {A: held(9), P: held(0), S: held(2), T: held(2), Q: held(5)}
    assert v.victim(sources) == (T, 2)  # S and T hold 2; T's forwarder brought two
    v.unintroduce(T)
    assert v.victim(sources) == (S, 2)  # T counts against no forwarder now: S's ties first (tracked first)
    assert v.victim({A: held(1), P: held(0)}) is None  # every source vouched for


def test_a_forwarder_introduces_within_its_limits() -> None:
    lim = LogLimits(max_sources=10, max_new_sources_per_peer=2, max_new_sources_per_message=3)
    v = Vouching(A, {}, lim)
    assert not v.introduce(S, "addr:x", 3, 1)  # the message's new sources
    assert not v.introduce(S, "addr:x", 0, 10)  # the table is full
    assert v.introduce(S, "addr:x", 0, 1) and v.introduce(T, "addr:x", 1, 2)
    assert not v.introduce(Q, "addr:x", 0, 3)  # its quota
    assert v.introduce(Q, "addr:y", 0, 3)  # another forwarder's is its own
    assert v.introductions == {"addr:x": 2, "addr:y": 1}


def test_an_address_vouches_for_at_most_its_share_and_a_vouch_frees_the_forwarder() -> None:
    v = Vouching(A, {P: "10.0.0.1"}, LogLimits(max_vouched_per_address=2))
    assert v.introduce(S, "addr:10.0.0.1", 0, 2)
    assert v.vouch(S, "10.0.0.1") and v.introductions == {}  # vouched for: it counts against no one
    assert not v.vouch(T, "10.0.0.1")  # P and S already
    assert v.vouch(T, "")  # the trust list vouches whatever the address
    assert set(v.vouched) == {A, P, S, T} and v.from_address == {"10.0.0.1": 2}


# ------------------------------------------------------------------------------- the outbox


class Stages(MemoryStore):
    def __init__(self) -> None:
        super().__init__()
        self.stages: list[tuple[int, int]] = []

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        self.stages.append((records[0].seq, records[-1].seq))
        super().stage(records, received_from, received_at, chain)


def records(first: int, n: int, stamp: float) -> list[LogRecord]:
    return [LogRecord(A, q, stamp, "k", str(q)) for q in range(first, first + n)]


def test_the_outbox_stages_one_write_per_run_of_equal_stamps_and_signs_each_batch() -> None:
    store = Stages()
    out = Outbox(A, store, ReplicationTiming(batch_records=4), ALICE)
    out.add(records(1, 3, 1.0))
    out.add(records(4, 3, 1.0))  # the same stamp: one write with the first
    out.add(records(7, 2, 2.0))
    assert out.waiting and store.stages == []
    out.stage()
    assert store.stages == [(1, 6), (7, 8)] and out.unstaged == []
    batches = out.sign()
    assert [(b[0].seq, b[-1].seq) for b, _ in batches] == [(1, 4), (5, 8)]  # the appends joined, cut at 4
    prev = GENESIS
    for batch, ((before, head),) in batches:
        assert before == prev and check_batch(before, batch, head) == chain_hashes(before, batch)
        prev = head.chain
    assert [h.seq for h in store.heads_in(A, 1, 8)] == [4, 8]  # staged with the records: one commit
    assert not out.waiting and out.tip == (8, prev)


def test_the_outbox_chains_a_log_from_before_signed_heads_once() -> None:
    store = MemoryStore()
    store.stage(records(1, 5, 1.0), None, 1.0)  # no chains, no heads
    out = Outbox(A, store, ReplicationTiming(batch_records=2), ALICE)
    assert out.chain_stored(5) == 5
    hashes = chain_hashes(GENESIS, records(1, 5, 1.0))
    assert out.tip == (5, hashes[-1]) and [h.seq for h in store.heads_in(A, 1, 5)] == [2, 4, 5]
    again = Outbox(A, store, ReplicationTiming(batch_records=2), ALICE)
    assert again.chain_stored(5) == 0 and again.tip == (5, hashes[-1])  # chained and signed already
    run = again.add(records(6, 1, 2.0))
    assert again.own_hash(6) == chain_hashes(hashes[-1], run)[0] and again.own_hash(3) == hashes[2]


# -------------------------------------------------------------------------------- asking


def peer(conn: int, known: dict[NodeId, int]) -> PeerLog:
    return PeerLog(conn=conn, known=known)


def test_the_source_itself_is_asked_else_the_peer_that_holds_most_then_another() -> None:
    stats = ReplicationStats()
    asking = Asking(ReplicationTiming(resend_after=2.0), LogLimits(), stats, {S, T})
    asking.best = {S: 10, T: 10}
    sources = {A: held(0), S: held(3), T: held(3)}
    peers = {S: peer(1, {S: 10}), P: peer(2, {S: 10, T: 10}), Q: peer(3, {T: 6})}
    plan = asking.plan(0.0, A, sources, peers, OwnSequence(0))
    assert plan == {S: [(S, ((4, 0),))], P: [(T, ((4, 0),))]}
    assert asking.plan(1.0, A, sources, peers, OwnSequence(0)) == {}  # asked: waits resend_after
    plan = asking.plan(2.5, A, sources, peers, OwnSequence(0))  # no progress: T asked of another
    assert plan[Q] == [(T, ((4, 0),))] and stats.resends == 2 and stats.asks == 4


def test_asks_that_do_not_fit_one_gsip_wait_for_a_later_tick() -> None:
    stats = ReplicationStats()
    lacking = {NodeId(bytes([9, i]) + bytes(14)) for i in range(20)}  # about 12 fit one GSIP
    asking = Asking(ReplicationTiming(), LogLimits(max_ask_ranges=1000), stats, set(lacking))
    sources = {A: held(0)}
    for s in lacking:  # 1000 gaps each: one source's ask takes about 42 KB
        st = sources[s] = SourceState()
        for q in range(2, 2002, 2):
            st.add(q, q)
    peers = {P: peer(1, dict.fromkeys(lacking, 3000))}
    asking.best = dict.fromkeys(lacking, 3000)
    (asks,) = asking.plan(0.0, A, sources, peers, OwnSequence(0)).values()
    assert 0 < len(asks) < len(lacking) and stats.asks_deferred == len(lacking) - len(asks)
    assert all(len(m) <= MAX_BODY for piece in gsip_pieces(A, (), tuple(asks)) for m in encode_parts(piece))


def test_a_digest_too_large_for_one_body_goes_in_pieces_the_ask_with_the_first() -> None:
    items = tuple((NodeId(i.to_bytes(16, "big")), 2**62 + i) for i in range(1, 40_000))
    ask = ((S, ((5, 0),)),)
    pieces = gsip_pieces(A, items, ask)
    assert len(pieces) > 1 and pieces[0].ask == ask and all(not p.ask for p in pieces[1:])
    assert tuple(i for p in pieces for i in p.vv) == items
    assert all(len(encode_parts(p)[1]) <= MAX_BODY for p in pieces)
    assert gsip_pieces(A, items[:10], ask) == [pieces[0].__class__(A, items[:10], ask)]
    assert GSIP_BUDGET < MAX_BODY


# -------------------------------------------------------------------------------- serving


def test_one_gsip_is_served_within_its_window_and_says_what_it_left() -> None:
    store = MemoryStore()
    for s in (S, T):
        store.stage([LogRecord(s, q, 1.0, "k", "x" * 100) for q in range(1, 101)], P, 1.0)
    sent: list[tuple[int, Message]] = []
    server = Server(A, store, ReplicationTiming(batch_records=30), ReplicationStats(), strict=False,
                    before_read=lambda: None, send=lambda conn, msg: sent.append((conn, msg)))
    sources = {S: held(100), T: held(100)}
    p = peer(7, {})
    serve = Serve(records=150, octets=10**6)
    server.answer(p, ((S, ((1, 0),)), (T, ((1, 100),)), (Q, ((1, 5),))), sources, serve=serve, max_ranges=10, now=0.0)
    got = [(m.records[0].source, m.records[0].seq, m.records[-1].seq) for _, m in sent if isinstance(m, Xmsg)]
    assert got[:4] == [(S, 1, 30), (S, 31, 60), (S, 61, 90), (S, 91, 100)]  # the tail, in batches
    assert sum(b - a + 1 for _, a, b in got) == 150 and serve.cut  # T's range cut at the window
    assert p.sent == {S: 100} and all(conn == 7 for conn, _ in sent)


def test_what_was_sent_recently_is_not_sent_again() -> None:
    store = MemoryStore()
    store.stage([LogRecord(S, q, 1.0, "k", "1") for q in range(1, 11)], P, 1.0)
    sent: list[Message] = []
    server = Server(A, store, ReplicationTiming(resend_after=2.0), ReplicationStats(), strict=False,
                    before_read=lambda: None, send=lambda conn, msg: sent.append(msg))
    p = peer(1, {})
    p.sent, p.sent_at = {S: 6}, {S: 0.0}  # 1..6 in flight
    server.answer(p, ((S, ((1, 0),)),), {S: held(10)}, serve=Serve(100, 10**6), max_ranges=10, now=1.0)
    assert [(m.records[0].seq, m.records[-1].seq) for m in sent if isinstance(m, Xmsg)] == [(7, 10)]


# ---------------------------------------------------------------------- the start-up window


@pytest.mark.parametrize(("now", "peer_at", "claimed", "over"), [
    (1.9, None, False, False),  # no peer admitted: until ``until``
    (2.0, None, False, True),
    (1.4, 0.5, False, False),  # a peer admitted: ``quiet`` after it
    (1.5, 0.5, False, True),
    (2.4, 0.5, True, False),  # a claim: ``wait`` past the last record taken back (moved)
    (2.5, 0.5, True, True),
])
def test_the_start_up_window_ends_as_its_table_says(now: float, peer_at: float | None, claimed: bool,
                                                      over: bool) -> None:
    window = StartWindow(until=2.0, quiet=1.0, wait=2.0, moved=0.0)
    if peer_at is not None:
        window.admitted(peer_at)
        window.admitted(peer_at + 0.3)  # only the first admission counts
    assert window.over(now, claimed) is over


def test_an_identity_retires_once() -> None:
    own = OwnSequence(start_top=7)
    own.hold(0.0, 2.0, 1.0)
    own.claims[P] = 9
    assert not own.recording and "starting" in own.why_not_recording()
    event = own.retire(P, 5)
    assert isinstance(event, IdentityRetired) and event.since == 7 and "record 5" in event.reason
    assert own.window is None and own.claims == {} and not own.recording
    assert own.retire(Q, 6) is None and own.retired == event.reason  # the first reason stays
    assert own.why_not_recording().startswith(event.reason)
