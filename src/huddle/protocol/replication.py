"""The replicated log, sans-I/O: XMSG delivery, gap detection and GSIP gossip.

Every node holds every event of every source of its group.  Per source the
replicator tracks the highest sequence held with no gap before it
(``contig``) and the sequences held beyond a gap (``ahead``).  The rules, after
the source document's "GSIP engine":

* A node sends its own new events (XMSG) to every peer at once.
* A record whose sequence is beyond ``contig + 1`` reveals a gap: the node
  sends the peer it came from its GSIP, which that peer answers with the
  missing range.
* On admitting a peer, and then periodically, a node sends each peer a GSIP:
  its whole version vector.  The receiver learns what the sender holds; if it
  holds more of its own records, it sends them; if the sender holds more, the
  receiver asks for them.
* Only contiguous runs are forwarded, so a record from peer P with sequence q
  proves P holds 1..q of that source.  What each peer is known to hold (from
  its GSIPs and its XMSGs) and what was already sent to it is remembered, so
  nothing is sent twice while it may still be in flight.
* Missing records are asked for: for each source it lacks, a node names one
  peer in its GSIP's ``ask`` list (the source itself when it is a peer, else
  the peer known to hold the most), and asks another if no progress follows
  within ``resend_after``.  A node sends a peer only what that peer asked for,
  and its own records: a record still on its way from its source is not sent
  again by everyone.
* Catch-up streams ranges in batches, at most ``window`` records in flight per
  peer; the receiver acknowledges progress with a GSIP every ``ack_every``
  records, so a catch-up of millions of events exhausts neither side's memory.
* A node's own source is its own: records of it from others are dropped, and a
  peer's claim to hold more of it than the node holds is not believed.  A node
  that signs asks for them, though: records in its name signed with its own key
  that continue its chain are its own from an earlier life (a log restored from
  an older copy), taken back; one that differs from its own record of that
  number means this identity's sequence was reused, and it records no more under
  it (:attr:`Replicator.retired`).  A node started with :meth:`Replicator.hold_own`
  records nothing until its peers have had a short window to show what they hold
  of its source (docs/protocol.md 12.1, "A restored log").
* Sources no one vouches for are reclaimable (protocol.md 12.2): a source is
  *vouched for* when it is this node, a peer this node admitted (now or before:
  kept in the store), or a key of the node's trust list.  Any other source
  counts against the forwarder that made the node track it, keyed by the
  forwarding session's address (so a new id does not renew the quota), and is
  evicted, records and all, the one holding least first, when a vouched-for
  source needs its place: an admitted member's records are never refused for
  room.
* What a peer can make the node hold or send is bounded (:class:`LogLimits`):
  the sources it may introduce (per message, per peer, in all), the ranges
  held beyond a gap, and what one GSIP is served (records and octets, across
  all its asks).  The node's own GSIPs and asks are cut to fit the body cap.
* Records are verifiable back to their source's key (protocol/logchain.py): a
  node with a ``signer`` chains its records and signs a head per batch it
  emits; batches travel cut at heads, with them.  A batch with a bad chain or
  signature, or unsigned records of a key-bound source, is a *forgery*: it is
  dropped whole and counted against the peer that sent it, which is excluded
  until it restarts after ``max_forgeries``.  In secure mode (``secure``)
  unsigned records of any source are refused.

Storage is a port (:class:`EventStore`); the node passes SQLite, the
simulator an in-memory store.  Time (mesh time) is passed in.
"""

from __future__ import annotations

import json
import logging
import math
import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from operator import add as _add
from typing import Any, Final, Protocol, overload

import orjson

from ..errors import LocalProtocolError
from ..ids import NodeId
from ..limits import LogLimits
from ..log.model import SourceState
from ..ratelog import RateLog
from ..security import node_id_for
from ..wire import (
    MAX_BODY,
    MAX_SEQ,
    Gsip,
    LogHead,
    LogRecord,
    Message,
    RecordBatch,
    Xmsg,
    check_record,
    checked_room,
    make_records,
)
from .events import Counters, LogAppended, Notify, Send, ServiceEvent
from .logchain import GENESIS, LogSigner, chain_hashes, check_batch, key_bound, sign_head
from .service import BUSY_POLL, DETACHED, MeshView, PeerFacts, group_scale

__all__ = [
    "EventStore", "IdentityRetired", "MemoryStore", "RecordRun", "ReplicationTiming", "Replicator", "SourceState",
    "canonical_json",
]

log = logging.getLogger("huddle.replication")

_RECORD_OVERHEAD: Final = 120  # octets of JSON framing per record, at most (source, seq, stamp, hops)
# The most octets one entry of a GSIP takes: a vv entry ``"<32 hex>":<19 digits>,``;
# an ask entry ``"<32 hex>":[...],`` and each of its ranges ``[<19 digits>,<19 digits>],``.
_GSIP_BUDGET: Final = MAX_BODY - 64  # ``{"vv":{},"ask":{}}`` and change
_VV_ENTRY: Final = 56
_ASK_SOURCE: Final = 40
_ASK_RANGE: Final = 42
_MAX_WIRE_RANGES: Final = 10_000  # ranges of one source in an ask, at most (docs/protocol.md 2.4)
_TAILS_PER_GSIP: Final = _GSIP_BUDGET // 2 // (_ASK_SOURCE + _ASK_RANGE)  # open tails repeated in one GSIP


_CANONICAL = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), allow_nan=False)
# orjson writes what _CANONICAL writes for plain dicts, lists, strings, integers and booleans;
# subclasses, dataclasses and dates it is told to refuse (json decides).  It writes NaN and the
# infinities as null, and floats below 1e-4 or with an exponent otherwise than json: text where
# these may be is left to json too.
_ORJSON_CANONICAL: Final = (orjson.OPT_SORT_KEYS | orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS
                            | orjson.OPT_PASSTHROUGH_DATETIME)
_JSON_DECIDES: Final = ("e+", "e-", "0.0000", "null")  # orjson writes an exponent with its sign
_PLAIN: Final = frozenset({str, int, bool, type(None)})


def canonical_json(value: Any) -> str:
    """The one text form of a JSON value: sorted keys, no spaces, UTF-8 (``json``'s
    with ``sort_keys``, compact separators, ``ensure_ascii`` and ``allow_nan`` off)."""
    try:  # orjson first (about 4x faster), where its text is provably json's
        text = orjson.dumps(value, option=_ORJSON_CANONICAL)
    except orjson.JSONEncodeError:  # a type it does not take, a key that is not text, an integer past 64 bits...
        pass
    else:
        out = text.decode()
        # A flat object of text, integers, booleans and nulls (the usual event; exact types, the keys
        # text as orjson takes no other): json writes these as orjson did, nothing to look for.
        if type(value) is dict and _PLAIN.issuperset(map(type, value.values())):
            return out
        # Read back equal: no type orjson writes and json refuses (a UUID, an Enum, a tuple for a list).
        # Searched in the decoded text: ``b"e+" in octets`` first tries the needle as an integer,
        # which raises and catches a TypeError each time (4x slower than the whole dumps).
        a, b, c, d = _JSON_DECIDES
        if a not in out and b not in out and c not in out and d not in out and orjson.loads(text) == value:
            return out
    try:
        return _CANONICAL.encode(value)
    except (TypeError, ValueError) as exc:
        raise LocalProtocolError(f"event body is not a JSON value: {exc}") from None


class RecordRun(Sequence[LogRecord]):
    """The records ``first..last`` of one source, all with the same ``hops``,
    made on demand by ``make(source, seq, hops)``.

    The replicator handles a run as one unit (one range to mark held, one
    store write, one XMSG per batch), so the simulator can move millions of
    records without a Python object per record; a real node uses tuples.
    ``record_size`` is the octets one record takes on the wire, roughly.
    """

    __slots__ = ("first", "hops", "last", "make", "record_size", "source")

    def __init__(
        self, source: NodeId, first: int, last: int, make: Callable[[NodeId, int, int], LogRecord],
        *, hops: int = 0, record_size: int = 64,
    ) -> None:
        if first < 1 or last < first:
            raise ValueError(f"a run needs 1 <= first <= last, not {first}..{last}")
        self.source, self.first, self.last, self.hops = source, first, last, hops
        self.make, self.record_size = make, record_size

    def __len__(self) -> int:
        return self.last - self.first + 1

    @overload
    def __getitem__(self, index: int) -> LogRecord: ...
    @overload
    def __getitem__(self, index: slice) -> RecordRun: ...
    def __getitem__(self, index: int | slice) -> LogRecord | RecordRun:
        n = self.last - self.first + 1
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1 or stop <= start:
                raise ValueError("a run slices only to a non-empty run with step 1")
            return RecordRun(self.source, self.first + start, self.first + stop - 1, self.make,
                             hops=self.hops, record_size=self.record_size)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        return self.make(self.source, self.first + index, self.hops)

    def __iter__(self) -> Iterator[LogRecord]:
        for q in range(self.first, self.last + 1):
            yield self.make(self.source, q, self.hops)

    def with_hops(self, hops: int) -> RecordRun:
        return RecordRun(self.source, self.first, self.last, self.make, hops=hops, record_size=self.record_size)

    def __repr__(self) -> str:
        return f"RecordRun({self.source.short}, {self.first}..{self.last}, hops={self.hops})"


class EventStore(Protocol):
    """Where log records are kept.  ``stage`` writes, ``commit`` makes them durable."""

    def load(self) -> dict[NodeId, SourceState]: ...

    def vouched(self) -> dict[NodeId, str]:
        """The sources vouched for (:meth:`vouch`), each with the address it was vouched for from."""

    def vouch(self, source: NodeId, address: str) -> None:
        """Keep ``source`` as vouched for (with the next commit); ``address``: where its
        session came from ("" when none did: the trust list)."""

    def drop_source(self, source: NodeId) -> None:
        """Delete every record and head of ``source`` (with the next commit): it was evicted."""

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        """Write ``records`` (with their chain hashes, when they have them).  Received
        ones (``received_from`` set) are stored with one more hop than they arrived with."""

    def commit(self) -> None: ...

    def add_heads(self, heads: Sequence[LogHead]) -> None:
        """Keep signed heads (with the next commit)."""

    def heads_in(self, source: NodeId, first: int, last: int) -> Sequence[LogHead]:
        """The heads of ``source`` kept at ``first..last``, in order."""

    def chain_of(self, source: NodeId, seq: int) -> bytes | None:
        """The chain hash of record ``seq`` of ``source`` (None: not held, or unchained)."""

    def set_chain(self, source: NodeId, rows: Sequence[tuple[int, bytes]]) -> None:
        """Write chain hashes ``(seq, hash)`` of records held."""

    def read(self, source: NodeId, after: int, limit: int) -> Sequence[LogRecord]:
        """Up to ``limit`` records of ``source`` from ``after + 1`` on, consecutive;
        fewer (even none) where what is held stops or the store's pieces end."""


class MemoryStore:
    """An :class:`EventStore` in memory, for the simulator and tests."""

    def __init__(self) -> None:
        self.records: dict[NodeId, dict[int, LogRecord]] = {}
        self.receipts: dict[tuple[NodeId, int], tuple[NodeId | None, float]] = {}
        self.staged: list[LogRecord] = []
        self.committed = 0
        self.chains: dict[tuple[NodeId, int], bytes] = {}
        self.heads: dict[NodeId, dict[int, LogHead]] = {}
        self.vouches: dict[NodeId, str] = {}

    def load(self) -> dict[NodeId, SourceState]:
        return {source: SourceState.of(sorted(recs)) for source, recs in self.records.items()}

    def vouched(self) -> dict[NodeId, str]:
        return dict(self.vouches)

    def vouch(self, source: NodeId, address: str) -> None:
        self.vouches.setdefault(source, address)

    def drop_source(self, source: NodeId) -> None:
        for q in self.records.pop(source, {}):
            self.receipts.pop((source, q), None)
            self.chains.pop((source, q), None)
        self.heads.pop(source, None)

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        hop = 0 if received_from is None else 1
        if chain is not None:
            self.set_chain(records[0].source, [(r.seq, h) for r, h in zip(records, chain, strict=True)])
        for r in records:
            if hop:
                r = replace(r, hops=min(r.hops + 1, MAX_SEQ))  # noqa: PLW2901 - the stored copy
            self.records.setdefault(r.source, {})[r.seq] = r
            self.receipts[(r.source, r.seq)] = (received_from, received_at)
            self.staged.append(r)

    def commit(self) -> None:
        self.committed += len(self.staged)
        self.staged.clear()

    def add_heads(self, heads: Sequence[LogHead]) -> None:
        for h in heads:
            self.heads.setdefault(h.source, {}).setdefault(h.seq, h)

    def heads_in(self, source: NodeId, first: int, last: int) -> list[LogHead]:
        held = self.heads.get(source, {})
        return [held[q] for q in sorted(held) if first <= q <= last]

    def chain_of(self, source: NodeId, seq: int) -> bytes | None:
        return self.chains.get((source, seq))

    def set_chain(self, source: NodeId, rows: Sequence[tuple[int, bytes]]) -> None:
        for q, h in rows:
            self.chains[(source, q)] = h

    def read(self, source: NodeId, after: int, limit: int) -> list[LogRecord]:
        recs = self.records.get(source, {})
        out: list[LogRecord] = []
        q = after + 1
        while q in recs and len(out) < limit:
            out.append(recs[q])
            q += 1
        return out

    def all_records(self) -> list[LogRecord]:
        return [r for recs in self.records.values() for r in recs.values()]


@dataclass(frozen=True, slots=True)
class ReplicationTiming:
    gossip_interval: float = 1.0  # GSIP to each peer this often when our vector changed
    gossip_idle: float = 5.0  # ... and at least this often regardless
    resend_after: float = 2.0  # an ask with no progress is repeated (to another peer) after this
    batch_records: int = 500
    batch_bytes: int = 512 * 1024
    window: int = 20_000  # records in flight per peer during catch-up
    ack_every: int = 2_000  # a receiver acknowledges catch-up progress this often


@dataclass(slots=True)
class _Peer:
    conn: int
    known: dict[NodeId, int] = field(default_factory=dict)  # the peer holds 1..n of each source
    sent: dict[NodeId, int] = field(default_factory=dict)  # we sent it up to n (maybe in flight)
    sent_at: dict[NodeId, float] = field(default_factory=dict)
    told: dict[NodeId, int] | None = None  # the vector of our last GSIP to it
    told_at: float = float("-inf")
    phase: float = 0.0  # its idle GSIPs go when now / (gossip_idle x S) + phase is an integer ...
    idle_at: float = float("-inf")  # ... the next such time (a GSIP between does not move it)
    unacked: int = 0  # records of a catch-up we asked it for, received since our last GSIP to it
    forwarder: str = ""  # whose quota of sources no one vouches for it uses: "addr:<ip>" (else "peer:<uuid>")


@dataclass(slots=True)
class _Serve:
    """What is left of the records and octets one GSIP may be answered with,
    across all its asks, and the records in flight to its sender (computed once)."""

    records: int
    octets: int
    inflight: int | None = None
    cut: bool = False  # something asked for was left unsent

    def take(self, records: Sequence[LogRecord]) -> Sequence[LogRecord]:
        """The first of ``records`` that fit what is left (at least one record
        while any octets are left), taken from it."""
        n = min(len(records), self.records)
        if isinstance(records, RecordRun):
            n = min(n, max(1, self.octets // max(1, records.record_size)))
            octets = n * records.record_size
        else:
            if n < len(records):
                records = records[:n]
            octets = _text_octets(records) + n * _RECORD_OVERHEAD
            if octets > self.octets:  # the window ends within these: find where
                octets, i = 0, 0
                while i < n:
                    r = records[i]
                    size = len(r.body) + len(r.kind) + _RECORD_OVERHEAD
                    if i and octets + size > self.octets:
                        break
                    octets += size
                    i += 1
                n = i
        self.records -= n
        self.octets -= octets
        return records if n == len(records) else records[:n]

    def exhausted(self) -> bool:
        return self.records <= 0 or self.octets <= 0


@dataclass(frozen=True, slots=True)
class IdentityRetired(ServiceEvent):
    """This node's identity records nothing more (:attr:`Replicator.retired`): the node
    takes a new one.  ``since``: the own sequence it held at start (what it recorded
    after it was recorded under numbers its peers hold with other content)."""

    reason: str
    since: int


@dataclass(slots=True)
class _Hold:
    """The start-up window (:meth:`Replicator.hold_own`): nothing is recorded until
    it ends."""

    until: float  # no peer admitted by then: it ends
    quiet: float  # after the first admission, it ends this long after it unless a peer claims more of ours
    wait: float  # ... and a claim keeps it open until this long without a record of ours taken back
    moved: float  # the first admission, or the last record of ours taken back
    peer_at: float | None = None


@dataclass(slots=True)
class _Ask:
    provider: NodeId
    at: float
    contig_at: int


@dataclass(slots=True)
class ReplicationStats(Counters):
    originated: int = 0
    received: int = 0
    duplicates: int = 0
    records_sent: int = 0
    gsip_sent: int = 0
    asks: int = 0
    resends: int = 0
    events_refused: int = 0  # events of our own refused by append (not text, not JSON, too large, ...)
    own_refused: int = 0  # records of our own source received from others: dropped
    own_claims: int = 0  # GSIP entries claiming more of our source than we wrote: not believed
    sources_refused: int = 0  # records or GSIP entries of new sources past a sources limit: dropped
    sources_evicted: int = 0  # sources no one vouches for, dropped with their records to make room for one vouched for
    gaps_refused: int = 0  # records that would open a range past max_gap_ranges: dropped
    serve_trimmed: int = 0  # GSIPs whose asks were answered only up to serve_records / serve_bytes
    asks_deferred: int = 0  # sources not asked for yet: the GSIP was full (asked on a later tick)
    gsip_split: int = 0  # GSIPs sent in more than one message (the vector did not fit one body)
    gsip_empty: int = 0  # GSIPs not sent: they would have named no source and asked nothing (no record held)
    forgeries: int = 0  # batches rejected whole: a bad chain or signature, unsigned records of a key-bound source
    forgers_excluded: int = 0  # peers excluded (until they restart) after max_forgeries forged batches
    unsigned_refused: int = 0  # unsigned records refused in secure mode (a legacy, not key-bound source)
    rechained: int = 0  # own records chained and signed at start (a log from before signed heads)
    vouches_refused: int = 0  # admitted peers not vouched for: their address vouched for max_vouched_per_address
    own_taken_back: int = 0  # own records from peers, signed with our key and continuing our chain: taken back
    own_conflicts: int = 0  # records in our name signed with our key that differ from ours: the identity retired



class Replicator:
    """The replicated log as a peer service (protocol/service.py): XMSG and GSIP."""

    handles: tuple[type[Message], ...] = (Xmsg, Gsip)

    def __init__(
        self,
        uuid: NodeId,
        store: EventStore,
        *,
        now: float,
        timing: ReplicationTiming | None = None,
        limits: LogLimits | None = None,
        signer: LogSigner | None = None,
        secure: bool = False,
    ) -> None:
        self.uuid: Final = uuid
        self.store: Final = store
        self.timing: Final = timing or ReplicationTiming()
        self.limits: Final = limits or LogLimits()
        self.stats = ReplicationStats()
        # Only a key that gives this node's id signs: a legacy id's heads would be refused.
        self.signer: Final = signer if signer is not None and key_bound(uuid) and _gives(signer, uuid) else None
        self.secure: Final = secure
        # Signed records are required of key-bound sources (they are never sent unsigned).
        self._strict: Final = self.signer is not None or secure
        self.forgeries: dict[NodeId, int] = {}  # forged batches received, per peer that sent them
        self._mesh: MeshView = DETACHED
        self._peers: dict[NodeId, _Peer] = {}
        self._log_next: dict[str, int] = {}  # counter name -> the value at which it is logged next
        self._rng = random.Random(bytes(uuid))  # the idle GSIPs' phases (deterministic in the simulator)
        # Peers that claim more of our source than we hold (a node that signs asks them for it).
        self._claims: dict[NodeId, int] = {}
        self._hold: _Hold | None = None  # the start-up window, while it lasts
        # Why this identity records no more (None: it records): a peer showed a record in
        # our name, signed with our key, that differs from ours.
        self.retired: str | None = None
        self.reload(now)
        self.start_top = self.sources[uuid].top  # our own records held at start

    def reload(self, now: float) -> None:
        """Read what the store holds afresh (the node dropped records from it: an
        ``empty`` node type cut off), forgetting what was known of peers' logs.  The
        counters go on; peers still up stay, as if just admitted."""
        self.sources: dict[NodeId, SourceState] = self.store.load()
        self.sources.setdefault(self.uuid, SourceState())
        # Vouched for: this node, the peers it admitted (kept in the store, with the address each
        # was admitted from), its trust list's keys.  Sources reloaded that are none of these hold
        # no place: they count against no forwarder (who sent them is not known) and are the first
        # evicted when a source vouched for needs room, as junk kept across a restart must be.
        self._vouched: dict[NodeId, str] = self.store.vouched()
        self._vouched[self.uuid] = ""
        self._vouched_from: dict[str, int] = {}  # address -> ids admitted from it and vouched for
        for address in self._vouched.values():
            if address:
                self._vouched_from[address] = self._vouched_from.get(address, 0) + 1
        self._introduced: dict[NodeId, str] = {}  # a source no one vouches for -> the forwarder that brought it
        self._introductions: dict[str, int] = {}  # forwarder -> sources tracked that it brought, held now
        self._peers = {peer: _Peer(conn=p.conn, phase=p.phase, forwarder=p.forwarder) for peer, p in self._peers.items()}
        self._asks: dict[NodeId, _Ask] = {}  # source -> whom we asked for its missing records
        self._best: dict[NodeId, int] = {}  # source -> the most any peer is known to hold
        self._lacking: set[NodeId] = {s for s, st in self.sources.items() if st.ahead}
        self._outbox: list[list[LogRecord] | RecordRun] = []  # own records to push live, in pieces
        self._own: list[tuple[LogRecord, ...]] = []  # appended (one run per append_many), not yet staged
        self._appended: list[tuple[Sequence[LogRecord], NodeId | None]] = []
        self._actions: list[Send | Notify] = []
        self._dirty = False
        self._vv_changed = True  # our version vector changed since the last tick
        # Changed since the last tick (_vv_changed is also reset by a GSIP sent in between):
        # a peer may be owed a GSIP sooner than the gossip deadline the last tick computed.
        self._unsettled = True
        self._gossip_due = math.inf  # the soonest GSIP owed for a change (the last tick's view)
        self._vv: dict[NodeId, int] = {}
        self._vv_items: tuple[tuple[NodeId, int], ...] = ()
        self._now = now
        self._refusals_log = RateLog(log, period=60.0)  # per counter
        self._own_tip = self._chain_own() if self.signer is not None else (0, GENESIS)
        # Own records chained but not signed yet: those after _pending_base (whose hash is
        # _pending_prev) and their chain hashes, in sequence order.
        self._pending_base, self._pending_prev = self._own_tip
        self._pending_hashes: list[bytes] = []

    def _chain_own(self) -> tuple[int, bytes]:
        """The chain hash of our last record; own records from before signed heads
        are chained and signed first (once: a head every ``batch_records``)."""
        signer, uuid = self.signer, self.uuid
        assert signer is not None
        top = self.sources[uuid].contig
        if top == 0:
            return 0, GENESIS
        tip = self.store.chain_of(uuid, top)
        if tip is not None and self.store.heads_in(uuid, top, top):
            return top, tip
        prev, after, heads = GENESIS, 0, []
        while after < top:
            records = self.store.read(uuid, after, min(self.timing.batch_records, top - after))
            if not records:
                break
            hashes = chain_hashes(prev, records)
            self.store.set_chain(uuid, [(r.seq, h) for r, h in zip(records, hashes, strict=True)])
            heads.append(sign_head(signer, uuid, records[-1].seq, hashes[-1]))
            prev, after = hashes[-1], records[-1].seq
        self.store.add_heads(heads)
        self.store.commit()
        self.stats.rechained += after
        log.info("chained and signed this node's %d records from before signed heads", after)
        return after, prev

    def _forged(self, peer: NodeId, problem: str, now: float) -> None:
        """A forged batch from ``peer``: count it against it; exclude it at the limit."""
        n = self.forgeries[peer] = self.forgeries.get(peer, 0) + 1
        self._refused("forgeries", 1, f"rejected a forged batch of log records ({problem})", peer)
        limit = self.limits.max_forgeries
        if (limit and n >= limit and self._mesh is not DETACHED
                and self._mesh.end_incarnation(peer, f"forged log records ({n} batches; the last: {problem})", now)):
            self.stats.forgers_excluded += 1

    def _refused(self, counter: str, n: int, what: str, peer: NodeId) -> None:
        """Count ``n`` under ``counter``; log it at most once a minute per counter."""
        value = getattr(self.stats, counter) + n
        setattr(self.stats, counter, value)
        self._refusals_log.warning(counter, self._now, "%s (from %s; %d so far)", what, peer.short, value)

    def _new_source(self, p: _Peer, peer: NodeId, s: NodeId, new_here: int, n: int) -> SourceState | None:
        """Track source ``s``, named by ``peer`` for the first time, if the
        limits let it (``new_here`` other new sources came in the same message).
        A source vouched for is tracked whatever its forwarder brought before, and
        takes the place of one no one vouches for when the table is full."""
        lim = self.limits
        if s in self._vouched:
            if len(self.sources) >= lim.max_sources and not self._evict_one():
                self._refused("sources_refused", n, "dropped a new source past a sources limit", peer)
                return None
        else:
            forwarder = p.forwarder
            if (new_here >= lim.max_new_sources_per_message
                    or self._introductions.get(forwarder, 0) >= lim.max_new_sources_per_peer
                    or len(self.sources) >= lim.max_sources):
                self._refused("sources_refused", n, "dropped a new source past a sources limit", peer)
                return None
            self._introductions[forwarder] = self._introductions.get(forwarder, 0) + 1
            self._introduced[s] = forwarder
        st = self.sources[s] = SourceState()
        return st

    def _evict_one(self) -> bool:
        """Make room for a source vouched for: drop the source no one vouches for that holds
        the fewest records (ties: the one whose forwarder brought the most, then the one
        tracked first), with its records.  False if every source is vouched for."""
        vouched, introduced, introductions = self._vouched, self._introduced, self._introductions
        victim: NodeId | None = None
        least: tuple[int, int] | None = None
        for s, st in self.sources.items():
            if s in vouched:
                continue
            rank = (st.count(), -introductions.get(introduced.get(s, ""), 0))
            if least is None or rank < least:
                victim, least = s, rank
                if rank[0] == 0 and rank[1] <= -self.limits.max_new_sources_per_peer:
                    break  # nothing held, from a forwarder at its quota: none ranks lower
        if victim is None:
            return False
        self._drop(victim)
        self.stats.sources_evicted += 1
        self._refusals_log.warning("sources_evicted", self._now, "evicted source %s (no one vouches for it, "
                                   "%d records) to make room for one vouched for; %d so far", victim.short,
                                   least[0] if least else 0, self.stats.sources_evicted)
        return True

    def _drop(self, s: NodeId) -> None:
        """Forget source ``s`` (not ours) and what peers were known to hold of it, and
        delete its records from the store if it held any."""
        st = self.sources.pop(s)
        self._asks.pop(s, None)
        self._lacking.discard(s)
        self._best.pop(s, None)
        for p in self._peers.values():
            p.known.pop(s, None)
            p.sent.pop(s, None)
            p.sent_at.pop(s, None)
        self._unintroduce(s)
        if st.contig or st.ahead:
            self.store.drop_source(s)
            self._dirty = self._vv_changed = self._unsettled = True

    def _unintroduce(self, s: NodeId) -> None:
        """``s`` no longer counts against the forwarder that brought it."""
        forwarder = self._introduced.pop(s, None)
        if forwarder is not None:
            left = self._introductions[forwarder] - 1
            if left:
                self._introductions[forwarder] = left
            else:
                del self._introductions[forwarder]

    def vouch(self, sources: Iterable[NodeId], address: str = "") -> None:
        """Vouch for ``sources`` (the node's trust list in allow-list mode; the replicator
        itself for each peer it admits, ``address`` where its session came from): their
        records are stored whatever the sources limits, in place of sources no one vouches
        for.  An address vouches by admission for at most ``log.max-vouched-per-address``
        ids; past it an id admitted from there is counted (``vouches_refused``) and not
        vouched for."""
        for s in sources:
            if s in self._vouched:
                continue
            if address:
                n = self._vouched_from.get(address, 0)
                if n >= self.limits.max_vouched_per_address:
                    self.stats.vouches_refused += 1
                    self._refusals_log.warning("vouches_refused", self._now, "did not vouch for %s: its address "
                                               "%s vouched for %d ids already", s.short, address, n)
                    continue
                self._vouched_from[address] = n + 1
            self._vouched[s] = address
            self.store.vouch(s, address)
            self._unintroduce(s)
            self._dirty = True

    # ------------------------------------------------------------- queries

    def version_vector(self) -> dict[NodeId, int]:
        return {s: st.contig for s, st in self.sources.items() if st.contig}

    def _current_vv(self) -> dict[NodeId, int]:
        """The version vector, rebuilt only when it changed (do not mutate it)."""
        if self._vv_changed:
            self._vv = self.version_vector()
            self._vv_items = tuple(self._vv.items())
            self._vv_changed = False
        return self._vv

    @property
    def next_seq(self) -> int:
        """The sequence our next event gets."""
        return self.sources[self.uuid].top + 1

    def gaps(self) -> dict[NodeId, list[tuple[int, int]]]:
        """Per source with a gap: the missing ranges ``(first, last)`` below the highest held."""
        return {s: st.missing() for s, st in self.sources.items() if st.ahead}

    def held(self) -> int:
        return sum(st.count() for st in self.sources.values())

    @property
    def own_seq(self) -> int:
        return self.sources[self.uuid].contig

    # ------------------------------------------------------------ commands

    def append(self, kind: str, body: str, now: float, stamp: float, *, canonical: bool = False) -> LogRecord:
        """Originate an event at mesh time ``stamp`` (``now`` is the local clock
        that drives timers).  It is durable once :meth:`take_actions` has run.
        Raises :class:`LocalProtocolError` (and records nothing) unless the
        record passes :func:`~huddle.wire.records.check_record`."""
        return self.append_many([(kind, body)], now, stamp, canonical=canonical)[0]

    def append_many(self, events: Sequence[tuple[str, str]], now: float, stamp: float,
                    *, canonical: bool = False) -> list[LogRecord]:
        """Originate ``(kind, body)`` events at mesh time ``stamp``.  Every one
        is checked before any is recorded: on :class:`LocalProtocolError` none is.
        ``canonical``: every body is :func:`canonical_json`'s text, so its JSON is
        not parsed again (:func:`~huddle.wire.records.check_record`)."""
        own = self.sources[self.uuid]
        if self._hold is not None or self.retired is not None:
            self.stats.events_refused += len(events)
            raise LocalProtocolError(self.why_not_recording())
        # Our sequence continues what we wrote: records of ours never come from
        # others unless signed with our key and continuing our chain (on_xmsg).
        first = own.top + 1
        if len(events) > MAX_SEQ - own.top:
            self.stats.events_refused += len(events)
            raise LocalProtocolError(
                f"this node's sequence numbers are used up: it has recorded {own.top} events, "
                "and a sequence is at most 2^63-1; nothing was recorded")
        stamp = float(stamp)
        uuid = self.uuid
        records = make_records(uuid, first, stamp, events)
        # Canonical bodies (not parsed again): a record whose kind is the one an earlier record passed
        # check_record with in full (source, stamp and hops are that record's, its seq in range:
        # checked above) passes it too when its body is ASCII text short enough to be within
        # MAX_RECORD whatever it holds.  Any other record is checked in full.
        same: object = None
        room = 0
        for i, record in enumerate(records):
            if canonical:
                body = record.body
                if record.kind is same and type(body) is str and len(body) <= room and body.isascii():
                    continue
            try:
                check_record(record, canonical=canonical)
            except LocalProtocolError as exc:
                self.stats.events_refused += len(records)
                where = f"event {i + 1}: " if len(records) > 1 else ""
                raise LocalProtocolError(f"{where}{exc}; nothing was recorded") from None
            same, room = record.kind, checked_room(record.kind)
        if not records:
            return records
        self._now = now
        own.add(first, records[-1].seq)
        if (ask := self._asks.get(self.uuid)) is not None:
            ask.contig_at = own.contig  # our own records are no progress of an ask for records in our name
        if self.signer is not None:
            self._chain_new(records)
        run = tuple(records)  # a copy: the caller gets the list
        self._own.append(run)  # staged by _stage_own, one write per run of equal stamps
        if self._outbox and isinstance(self._outbox[-1], list):
            self._outbox[-1].extend(records)
        else:
            self._outbox.append(list(records))
        self._appended.append((run, None))
        self.stats.originated += len(records)
        self._dirty = self._vv_changed = self._unsettled = True
        return records

    def append_run(self, run: RecordRun, now: float) -> None:
        """Originate a whole run of events at once (the simulator's bulk load):
        ``run`` must be ours, start at :attr:`next_seq` and have ``hops`` 0.
        Its records are stored with the run's first record's timestamp as
        their receipt time."""
        if self._hold is not None or self.retired is not None:
            raise LocalProtocolError(self.why_not_recording())
        if run.source != self.uuid or run.first != self.next_seq or run.hops != 0:
            raise LocalProtocolError(
                f"a run to originate must be ours, start at {self.next_seq} and have 0 hops, not {run!r}")
        self._now = now
        self._stage_own()
        self.sources[self.uuid].add(run.first, run.last)
        if self.signer is None:
            self.store.stage(run, None, run[0].timestamp)
        else:
            at = self._chain_new(run)
            self.store.stage(run, None, run[0].timestamp, self._pending_hashes[at:])
        self._outbox.append(run)
        self._appended.append((run, None))
        self.stats.originated += len(run)
        self._dirty = self._vv_changed = self._unsettled = True

    def _chain_new(self, records: Sequence[LogRecord]) -> int:
        """Chain our new ``records`` on from our tip; kept until they are signed.
        Returns the index of the first in the pending lists."""
        seq, tip = self._own_tip
        at = len(self._pending_hashes)
        hashes = chain_hashes(tip, records)
        self._pending_hashes += hashes
        self._own_tip = (seq + len(hashes), hashes[-1])
        return at

    def _chained(self, seq: int) -> bytes:
        """The chain hash of our record ``seq``, pending or the last signed before them."""
        return self._pending_prev if seq == self._pending_base else self._pending_hashes[seq - self._pending_base - 1]

    # ------------------------------------------- our own sequence after a restore

    def hold_own(self, now: float, wait: float, quiet: float) -> None:
        """Record nothing until the peers have had a window to show what they hold
        of our source, signed with our key (a node starting on a log restored from
        an older copy takes back what it lost and continues after it, docs/protocol.md
        12.1).  The window ends ``wait`` after ``now`` if no peer is admitted; else
        ``quiet`` after the first admission, unless a peer claims more of ours than we
        hold: then once ``wait`` passes with no record of ours taken back.  Only a
        node that signs holds (what it cannot verify it would not take back)."""
        if wait > 0 and self.signer is not None:
            self._hold = _Hold(until=now + wait, quiet=quiet, wait=wait, moved=now)

    @property
    def recording(self) -> bool:
        """Does this node record events now (not in its start-up window, its identity not retired)?"""
        return self._hold is None and self.retired is None

    @property
    def starting(self) -> bool:
        """In the start-up window (:meth:`hold_own`): events wait for its end."""
        return self._hold is not None

    def why_not_recording(self) -> str:
        if self.retired is not None:
            return f"{self.retired}; this identity records nothing more, nothing was recorded"
        return ("this node is starting: it records nothing until its peers have shown what they hold in its "
                "name (a few seconds at most); nothing was recorded")

    def _settle(self, now: float) -> None:
        """End the start-up window when it is due (:meth:`hold_own`)."""
        hold = self._hold
        assert hold is not None
        top = self.sources[self.uuid].top
        claimed = max((q for peer, q in self._claims.items() if peer in self._peers), default=0)
        if claimed > top:
            if now - hold.moved < hold.wait:
                return  # a peer says it holds more of ours: wait while it shows them
        elif now < hold.until and (hold.peer_at is None or now < hold.peer_at + hold.quiet):
            return
        self._hold = None
        log.info("recording from sequence %d (%d of this node's records taken back from its peers)%s", top + 1,
                 self.stats.own_taken_back, f"; a claim of {claimed} went unproven" if claimed > top else "")

    def _own_hash(self, seq: int) -> bytes | None:
        """The chain hash of our record ``seq`` (held), pending or stored."""
        if seq == 0:
            return GENESIS
        if seq >= self._pending_base:
            return self._chained(seq)
        return self.store.chain_of(self.uuid, seq)

    def _take_back(self, peer: NodeId, msg: Xmsg, run: Sequence[LogRecord], signed: tuple[list[bytes], LogHead],
                   *, now: float, stamp: float) -> bool:
        """A verified run of records in our name from ``peer`` (signed with our key):
        where it meets our chain, the same record is ours (duplicates; records past
        our top are taken back as ours); a different one retires this identity.
        False: it does not meet our chain (dropped as before)."""
        uuid = self.uuid
        own = self.sources[uuid]
        hashes, head = signed
        lo, hi, top = run[0].seq, run[-1].seq, own.top
        if lo - 1 > top or own.ahead:
            return False  # past a gap: it does not continue ours (asks start right after our top)
        at = min(hi, top)
        theirs = hashes[at - lo] if at >= lo else next(prev for prev, h in msg.heads if h.source == uuid)
        ours = self._own_hash(at)
        if ours is None:
            return False  # an unchained record of ours (cannot be compared): dropped
        if ours != theirs:
            self._conflict(peer, at)
            return True
        self.stats.duplicates += at - lo + 1
        if hi <= top:
            return True
        if self._pending_hashes or self._own:
            return False  # our own new records not staged yet (cannot happen between our appends' actions)
        fresh = run[top + 1 - lo :]
        self.store.stage(fresh, None, stamp, hashes[top + 1 - lo :])  # ours: stored as written here
        self.store.add_heads((head,))
        own.add(top + 1, hi)
        self._own_tip = self._pending_base, self._pending_prev = hi, hashes[-1]
        # What the peers hold of ours is believed now up to what we hold (live records go to them).
        for other, q in ((peer, hi), *self._claims.items()):
            p = self._peers.get(other)
            if p is not None and min(q, hi) > p.known.get(uuid, 0):
                p.known[uuid] = min(q, hi)
        self._appended.append((fresh, None))
        self.stats.own_taken_back += len(fresh)
        if self._hold is not None:
            self._hold.moved = now
        self._dirty = self._vv_changed = self._unsettled = True
        return True

    def _conflict(self, peer: NodeId, seq: int) -> None:
        """``peer`` holds a record ``seq`` in our name, signed with our key, that is not
        ours: this identity's sequence was reused.  It records nothing more."""
        self.stats.own_conflicts += 1
        if self.retired is None:
            self.retired = (f"peer {peer.short} holds a record {seq} in this node's name, signed with its key, that "
                            "differs from its own: this identity's sequence numbers were reused (a log restored "
                            "from an older copy recorded before its peers could show what it had lost)")
            self._hold = None
            self._claims.clear()
            self._lacking.discard(self.uuid)
            self._asks.pop(self.uuid, None)
            log.error("%s; this identity records nothing more", self.retired)
            self._actions.append(Notify(IdentityRetired(self.retired, self.start_top)))

    # ---------------------------------------------------- the peer service

    def attach(self, mesh: MeshView) -> None:
        self._mesh = mesh

    def receive(self, peer: NodeId, msg: Message, now: float) -> None:
        if isinstance(msg, Xmsg):
            self.on_xmsg(peer, msg, now, self._mesh.mesh_time(now))
        else:
            assert isinstance(msg, Gsip)
            self.on_gsip(peer, msg, now)

    def forget(self, peer: NodeId) -> None:
        """Excluded: nothing more than its session's end (:meth:`peer_down`) to drop."""

    def next_deadline(self, now: float) -> float:
        """Asks open or records lacking (a catch-up), or a change since the last tick: every
        BUSY_POLL; else a GSIP owed for a change.  The idle GSIP (every gossip_idle) needs no
        deadline: it goes with the first heartbeat tick once due."""
        if self._unsettled or self._lacking or self._asks or self._hold is not None:
            return now + BUSY_POLL
        return self._gossip_due

    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts | None = None) -> None:
        """A peer was admitted: tell it at once what we hold (it may be a late joiner)."""
        self._now = now
        # Its idle GSIPs at a phase of their own (protocol.md 12.3): the group's, spread over the
        # interval, keep a node hearing some peer's digest about every gossip_idle x S / peers.
        phase = self._rng.random()
        address = "" if facts is None else facts.address
        forwarder = f"addr:{address}" if address else f"peer:{peer.hex()}"
        self._peers[peer] = p = _Peer(conn=conn, phase=phase, forwarder=forwarder)
        self.vouch((peer,), address or f"peer:{peer.hex()}")
        p.idle_at = _on_grid(now + BUSY_POLL, self._idle_every(), phase)
        hold = self._hold
        if hold is not None and hold.peer_at is None:
            hold.peer_at = hold.moved = now
        self._send_gsip(peer, now)

    def peer_down(self, peer: NodeId, now: float = 0.0) -> None:
        self._claims.pop(peer, None)
        if self._peers.pop(peer, None) is not None:
            self._best = {}
            for p in self._peers.values():
                for s, q in p.known.items():
                    if q > self._best.get(s, 0):
                        self._best[s] = q
            # Sources we hold nothing of and no peer left claims: forget them
            # (what a departed peer named does not keep a place in the table).
            empty = [s for s, st in self.sources.items()
                     if not st.contig and not st.ahead and s != self.uuid and s not in self._best]
            for s in empty:
                self._drop(s)

    def _note_known(self, p: _Peer, s: NodeId, q: int) -> None:
        if q > p.known.get(s, 0):
            p.known[s] = q
            if q > self._best.get(s, 0):
                self._best[s] = q
                st = self.sources[s]
                if q > st.top:
                    self._lacking.add(s)

    # ------------------------------------------------------------- receive

    def on_xmsg(self, peer: NodeId, msg: Xmsg, now: float, stamp: float) -> None:
        self._now = now
        p = self._peers.get(peer)
        if p is None:
            return
        got_any = got_asked = new_here = 0
        lacking = False
        max_gaps = self.limits.max_gap_ranges
        runs = list(_runs(msg.records))
        chains: dict[int, tuple[list[bytes], LogHead]] = {}
        if msg.heads or self._strict:
            checked = self._check_heads(msg, runs)
            if isinstance(checked, str):
                self._forged(peer, checked, now)  # nothing of the batch is kept
                return
            chains = checked
        for i, (s, lo, run) in enumerate(runs):
            hi = lo + len(run) - 1
            if s == self.uuid:  # ours come only from us: a peer cannot write in our name
                signed = chains.get(i)
                if signed is None or not self._take_back(peer, msg, run, signed, now=now, stamp=stamp):
                    self._refused("own_refused", len(run), "dropped records of this node's own source from a peer",
                                  peer)
                continue
            signed = chains.get(i)
            if signed is None and self.secure:
                self._refused("unsigned_refused", len(run), "refused unsigned records (secure mode)", peer)
                continue
            st = self.sources.get(s)
            if st is None:
                st = self._new_source(p, peer, s, new_here, len(run))
                if st is None:
                    continue
                new_here += 1
            elif len(st.ahead) >= max_gaps and st.opens_range(lo, hi):
                self._refused("gaps_refused", len(run), f"dropped records past {max_gaps} ranges held beyond a gap", peer)
                continue
            self._note_known(p, s, hi)  # contiguous forwarding: the peer holds 1..hi
            got = 0
            for a, b in st.add(lo, hi):
                fresh = run[a - lo : b - lo + 1]
                if signed is None:
                    self.store.stage(fresh, peer, stamp)
                else:
                    self.store.stage(fresh, peer, stamp, signed[0][a - lo : b - lo + 1])
                self._appended.append((fresh, peer))
                got += b - a + 1
            if signed is not None and got:
                self.store.add_heads((signed[1],))
            self.stats.duplicates += (hi - lo + 1) - got
            got_any += got
            if got:
                self._vv_changed = self._unsettled = True
                ask = self._asks.get(s)
                if ask is not None and ask.provider == peer:
                    got_asked += got  # a catch-up we asked this peer for: its window waits for our acks
            if st.ahead:
                self._lacking.add(s)
                lacking = True
        if got_any:
            self.stats.received += got_any
            p.unacked += got_asked
            self._dirty = True
        asked = self._plan_asks(now) if lacking else set()
        if peer not in asked and p.unacked >= self.timing.ack_every:
            self._send_gsip(peer, now)  # acknowledge: the sender's window moves on

    def _check_heads(
        self, msg: Xmsg, runs: list[tuple[NodeId, int, Sequence[LogRecord]]],
    ) -> dict[int, tuple[list[bytes], LogHead]] | str:
        """Per run of ``msg`` that is signed, its chain hashes and head; or what makes
        the message a forgery (then none of it may be kept)."""
        heads = {h.source: (prev, h) for prev, h in msg.heads}
        if len(heads) != len(msg.heads):
            return "two heads for one source"
        out: dict[int, tuple[list[bytes], LogHead]] = {}
        seen: set[NodeId] = set()
        for i, (s, _lo, run) in enumerate(runs):
            signed = heads.get(s)
            if s == self.uuid and (signed is None or self.signer is None):  # dropped as ours, unless signed
                seen.add(s)
                continue
            if signed is None:
                if self._strict and key_bound(s):
                    return "unsigned records of a key-bound source"
                continue
            if s in seen:
                return "a signed source's records in more than one run"
            seen.add(s)
            prev, head = signed
            hashes = check_batch(prev, run, head)
            if isinstance(hashes, str):
                return hashes
            out[i] = (hashes, head)
        if len(seen) < len(heads) and any(s not in seen for s in heads):
            return "a head for records the message does not carry"
        return out

    def on_gsip(self, peer: NodeId, msg: Gsip, now: float) -> None:
        self._now = now
        p = self._peers.get(peer)
        if p is None:
            return
        more = False
        sources, known, uuid = self.sources, p.known, self.uuid
        new_here = 0
        for s, claimed in msg.vv:
            q = claimed
            st = sources.get(s)
            if st is None:
                if not q:
                    continue
                st = self._new_source(p, peer, s, new_here, 1)
                if st is None:
                    continue
                new_here += 1
            elif s == uuid and q > st.top:  # more of ours than we hold: not believed, but asked for if we sign
                self._refused("own_claims", 1, "a peer claims more of this node's own source than it holds", peer)
                if self.signer is not None and self.retired is None and q > self._claims.get(peer, 0):
                    self._claims[peer] = q
                    self._lacking.add(uuid)
                    more = True  # asked for at once
                q = st.top
            if q > known.get(s, 0):
                self._note_known(p, s, q)
            if q > st.contig:
                more = True
        if msg.ask:
            serve = _Serve(self.limits.serve_records, self.limits.serve_bytes)
            answered, max_ranges = 0, self.limits.serve_ranges
            for s, ranges in msg.ask:
                for first, last in _coalesce(ranges):
                    if serve.exhausted() or answered >= max_ranges:
                        serve.cut = serve.cut or s in sources
                        break
                    answered += 1
                    if last == 0:
                        self._stream_tail(p, s, first, now, serve)
                    else:
                        self._send_range(p, s, first, last, serve)
            if serve.cut:
                self._refused("serve_trimmed", 1, "answered a GSIP's asks only up to the serve window", peer)
        if more:
            self._plan_asks(now)

    # ---------------------------------------------------------------- time

    def tick(self, now: float) -> None:
        self._now = now
        t = self.timing
        asked = self._plan_asks(now)
        if self._hold is not None:
            self._settle(now)
        vv = self._current_vv()
        # Idle: due every gossip_idle (scaled), at each peer's phase, on the first tick within
        # BUSY_POLL of that (ticks come with the heartbeats then: a tick a little early does not
        # put it off by one).  On a grid of the node's clock, so the phases stay spread.  Each
        # peer's next time is set when one goes, at least half an interval on: a change of the
        # group's size (of the interval) moves the grid from then on, and sends nothing itself.
        every = self._idle_every()
        soon = now + BUSY_POLL
        for peer, p in self._peers.items():
            if soon >= p.idle_at:
                p.idle_at = _on_grid(now + every / 2, every, p.phase)
                if peer not in asked:
                    self._send_gsip(peer, now, vv)
                    continue
            if peer in asked:
                continue
            if now - p.told_at >= t.gossip_interval and p.told is not vv and vv != p.told:
                self._send_gsip(peer, now, vv)
        self._unsettled = False
        due = math.inf
        for p in self._peers.values():
            if p.told is not vv and p.told_at < due and vv != p.told:
                due = p.told_at
        self._gossip_due = due + t.gossip_interval

    def _idle_every(self) -> float:
        """How often each peer gets an idle GSIP: ``gossip_idle``, times S = (peers + 1) / 10
        past 10 nodes, as the picture scales its reports (protocol.md 12.3, 14): every
        member gossips to every other, so the idle digests would grow with the square of the
        group; scaled, a node receives about 2 a second whatever the group's size."""
        return self.timing.gossip_idle * group_scale(len(self._peers) + 1)

    def take_actions(self) -> list[Send | Notify]:
        """Make staged records durable, then hand out what to send and announce."""
        if not (self._dirty or self._appended or self._outbox or self._actions):
            return []
        self._stage_own()
        signed = self._sign_outbox() if self._outbox else []  # heads kept with the records' commit
        if self._dirty:
            self.store.commit()
            self._dirty = False
        if self._appended:
            self._actions.append(Notify(LogAppended(tuple(self._appended))))
            self._appended = []
        if signed:
            self._push_live(signed)
        actions, self._actions = self._actions, []
        return actions

    # ----------------------------------------------------------- internals

    def _stage_own(self) -> None:
        calls, self._own = self._own, []
        signed = self.signer is not None
        i = 0
        while i < len(calls):  # one stage per run of equal stamps (an append_many has one)
            stamp = calls[i][0].timestamp
            j = i + 1
            while j < len(calls) and calls[j][0].timestamp == stamp:
                j += 1
            piece = calls[i] if j == i + 1 else tuple(r for call in calls[i:j] for r in call)
            if signed:
                a = piece[0].seq - self._pending_base - 1
                b = a + len(piece)
                self.store.stage(piece, None, stamp, self._pending_hashes[a:b])
            else:
                self.store.stage(piece, None, stamp)
            i = j

    def _sign_outbox(self) -> list[tuple[Sequence[LogRecord], tuple[tuple[bytes, LogHead], ...]]]:
        """Cut our new records into XMSG batches and sign a head at the end of each
        (kept in the store); the batches with the heads they travel with."""
        pieces, self._outbox = self._outbox, []
        out: list[tuple[Sequence[LogRecord], tuple[tuple[bytes, LogHead], ...]]] = []
        signer, chained = self.signer, self._chained
        heads: list[LogHead] = []
        for records in pieces:
            for batch in self._batches(records):
                if signer is None:
                    out.append((batch, ()))
                    continue
                first, last = batch[0].seq, batch[-1].seq
                head = sign_head(signer, self.uuid, last, chained(last))
                heads.append(head)
                out.append((batch, ((chained(first - 1), head),)))
        if heads:
            self.store.add_heads(heads)
            self._dirty = True
        self._pending_base, self._pending_prev = self._own_tip
        self._pending_hashes = []
        return out

    def _plan_asks(self, now: float) -> set[NodeId]:
        """Choose, for each source we lack records of, one peer to ask, and send
        each chosen peer a GSIP with the missing ranges.  Returns the peers asked."""
        t = self.timing
        payload: dict[NodeId, list[tuple[NodeId, tuple[tuple[int, int], ...]]]] = {}
        room: dict[NodeId, int] = {}  # octets of ask still free in each provider's GSIP
        max_ranges = min(self.limits.max_ask_ranges, _MAX_WIRE_RANGES)
        for s in list(self._lacking):
            st = self.sources[s]
            top = st.top
            if s == self.uuid:  # claims of more of ours (on_gsip): asked for, believed only signed
                if (ask := self._asks.get(s)) is not None and st.contig <= ask.contig_at and (
                        now - ask.at >= t.resend_after):
                    self._claims.pop(ask.provider, None)  # it did not back its claim up: asked no more
                self._claims = {peer: q for peer, q in self._claims.items() if q > top}
                best = max(self._claims.values(), default=0)
            else:
                best = self._best.get(s, 0)
            if best <= top and not st.ahead:
                self._asks.pop(s, None)
                self._lacking.discard(s)
                continue
            ask = self._asks.get(s)
            if ask is not None and ask.provider in self._peers:
                if st.contig > ask.contig_at:  # progress: keep the provider
                    ask.at, ask.contig_at = now, st.contig
                    continue
                if now - ask.at < t.resend_after:
                    continue
            if s == self.uuid:
                holders = [peer for peer in self._claims if peer in self._peers]
                claims = self._claims
                holders.sort(key=lambda peer: (-claims[peer], peer))
            else:
                holders = [peer for peer, p in self._peers.items() if p.known.get(s, 0) > st.contig]
            if not holders:
                continue
            if s in holders:
                provider = s  # the source itself, when it is a peer
            elif s == self.uuid:
                provider = holders[0]
            else:
                holders.sort(key=lambda peer: (-self._peers[peer].known.get(s, 0), peer))
                previous = None if ask is None else ask.provider
                provider = next((h for h in holders if h != previous), holders[0])
            ranges = st.missing()[:max_ranges]
            if best > top and len(ranges) < max_ranges:
                ranges.append((top + 1, 0))
            size = _ASK_SOURCE + _ASK_RANGE * len(ranges)
            free = room.get(provider, _GSIP_BUDGET // 2)
            if size > free:  # the GSIP is full: this source is asked for on a later tick
                self.stats.asks_deferred += 1
                continue
            room[provider] = free - size
            if ask is not None:
                self.stats.resends += 1
            self._asks[s] = _Ask(provider, now, st.contig)
            self.stats.asks += 1
            payload.setdefault(provider, []).append((s, tuple(ranges)))
        for peer, asks in payload.items():
            self._send_gsip(peer, now, ask=tuple(asks))
        return set(payload)

    def _push_live(self, batches: list[tuple[Sequence[LogRecord], tuple[tuple[bytes, LogHead], ...]]]) -> None:
        first = batches[0][0][0].seq
        last = batches[-1][0][-1].seq
        targets = []
        for p in self._peers.values():
            have = max(p.known.get(self.uuid, 0), p.sent.get(self.uuid, 0))
            if have != first - 1:
                continue  # it is behind (catching up): it will ask, and get them in order
            targets.append(p)
            p.sent[self.uuid] = last
            p.sent_at[self.uuid] = self._now
        if not targets:
            return
        # One Xmsg object per batch, shared by every peer: the driver encodes it once.
        for batch, heads in batches:
            msg = Xmsg(self.uuid, batch, heads)
            for p in targets:
                self._actions.append(Send(p.conn, msg))
            self.stats.records_sent += len(batch) * len(targets)

    def _stream_tail(self, p: _Peer, s: NodeId, first: int, now: float, serve: _Serve) -> None:
        """Stream ``s`` from ``first`` on (contiguous records only), within the
        window and what is left of ``serve``; what was sent recently and may
        still be in flight is not sent again."""
        st = self.sources.get(s)
        if st is None:
            return
        t = self.timing
        start = first - 1
        sent = p.sent.get(s, 0)
        if sent > start:
            if now - p.sent_at.get(s, now) < t.resend_after:
                start = sent  # in flight: continue after it
            else:
                self.stats.resends += 1  # sent long ago and still asked for: lost
        self._stage_own()
        if serve.inflight is None:  # once per GSIP: it may ask for every source
            serve.inflight = sum(max(0, q - p.known.get(src, 0)) for src, q in p.sent.items())
        mine = max(0, p.sent.get(s, 0) - p.known.get(s, 0))
        others = serve.inflight - mine
        inflight = others + max(0, start - (first - 1))
        while start < st.contig and inflight < t.window and not serve.exhausted():
            n = min(t.batch_records * 4, st.contig - start, t.window - inflight, serve.records)
            records = self.store.read(s, start, n)
            if not records:
                break
            records = serve.take(records)
            sent = self._send_records(p, records)
            if not sent:
                break  # nothing up to a head we hold (it is being signed, or the window ends first)
            inflight += sent - start
            start = sent
            p.sent[s] = start
            p.sent_at[s] = now
        serve.cut = serve.cut or (serve.exhausted() and start < st.contig and inflight < t.window)
        serve.inflight = others + max(0, p.sent.get(s, 0) - p.known.get(s, 0))

    def _send_range(self, p: _Peer, s: NodeId, first: int, last: int, serve: _Serve) -> None:
        """Send the records ``first..last`` of ``s`` that we hold (a gap the peer
        reported), within what is left of ``serve``."""
        st = self.sources.get(s)
        if st is None:
            return
        held = min(last, st.contig)
        last = min(held, first - 1 + self.timing.window)
        self._stage_own()
        start = first - 1
        while start < last and not serve.exhausted():  # a store may return less than asked
            records = self.store.read(s, start, min(last - start, serve.records))
            if not records:
                break
            records = serve.take(records)
            sent = self._send_records(p, records)
            if not sent:
                break
            start = sent
        # Held and asked for, but not sent: past the window, or what is left of this GSIP's.
        serve.cut = serve.cut or (start < held and (serve.exhausted() or start == last))

    def _send_records(self, p: _Peer, records: Sequence[LogRecord]) -> int:
        """Send ``records`` (consecutive, of one source) in batches cut at the heads
        held; returns the last sequence sent (0: none)."""
        last = 0
        for batch, heads in self._signed_batches(records):
            self._actions.append(Send(p.conn, Xmsg(self.uuid, batch, heads)))
            self.stats.records_sent += len(batch)
            last = batch[-1].seq
        return last

    def _signed_batches(
        self, records: Sequence[LogRecord],
    ) -> list[tuple[Sequence[LogRecord], tuple[tuple[bytes, LogHead], ...]]]:
        """``records`` in XMSG batches, each ending at a head held (with it and the
        chain hash before it); records past the last head are left.  A source with no
        heads here goes unsigned, unless it is key-bound and this node is strict:
        then nothing (what it cannot prove, it does not pass on)."""
        s, first, end = records[0].source, records[0].seq, records[-1].seq
        heads = self.store.heads_in(s, first, end)
        prev = (GENESIS if first == 1 else self.store.chain_of(s, first - 1)) if heads else None
        if prev is None:
            if self._strict and key_bound(s):
                return []
            return [(b, ()) for b in self._batches(records)]
        t = self.timing
        out: list[tuple[Sequence[LogRecord], tuple[tuple[bytes, LogHead], ...]]] = []
        start = i = size = 0
        cand: tuple[int, LogHead, int] | None = None  # a cut: end (exclusive), its head, octets up to it
        by_count = isinstance(records, RecordRun) or (  # short records (the usual): cut by count alone
            (6 * _longest(records) + _RECORD_OVERHEAD) * t.batch_records <= t.batch_bytes)
        for h in heads:
            j = h.seq - first + 1
            if by_count:
                i = j
            while i < j:
                r = records[i]
                size += len(r.body) * (2 if r.body.isascii() else 4) + len(r.kind) * 6 + _RECORD_OVERHEAD
                i += 1
            if cand is not None and (j - start > t.batch_records or size > t.batch_bytes):
                end_at, head, upto = cand
                out.append((records[start:end_at], ((prev, head),)))
                prev, start, size = head.chain, end_at, size - upto
            cand = (j, h, size)
        if cand is not None:
            end_at, head, _ = cand
            out.append((records[start:end_at], ((prev, head),)))
        return out

    def _batches(self, records: Sequence[LogRecord]) -> Iterable[Sequence[LogRecord]]:
        """Cut ``records`` into XMSG payloads within ``batch_records`` and ``batch_bytes``."""
        t = self.timing
        if isinstance(records, RecordRun):
            n = max(1, min(t.batch_records, t.batch_bytes // max(1, records.record_size)))
            for i in range(0, len(records), n):
                yield records[i : i + n]
            return
        if not records:
            return
        n = t.batch_records
        longest = _longest(records)
        if (6 * longest + _RECORD_OVERHEAD) * n <= t.batch_bytes:  # short records (the usual): by count alone
            for i in range(0, len(records), n):
                yield tuple(records[i : i + n])
            return
        batch: list[LogRecord] = []
        size = 0
        for r in records:
            # At most: in a JSON string an ASCII character of JSON text takes two
            # octets (``\"``, ``\n``), any other at most four; a kind's, six (``\u001f``).
            body = r.body
            rsize = len(body) * (2 if body.isascii() else 4) + len(r.kind) * 6 + _RECORD_OVERHEAD
            if batch and (len(batch) >= t.batch_records or size + rsize > t.batch_bytes):
                yield tuple(batch)
                batch, size = [], 0
            batch.append(r)
            size += rsize
        if batch:
            yield tuple(batch)

    def _send_gsip(
        self,
        peer: NodeId,
        now: float,
        vv: dict[NodeId, int] | None = None,
        ask: tuple[tuple[NodeId, tuple[tuple[int, int], ...]], ...] | None = None,
    ) -> None:
        """Send our digest.  Without an explicit ``ask``, it repeats the open
        tails we asked this peer for, which keeps a catch-up's window moving."""
        p = self._peers[peer]
        current = self._current_vv()
        if vv is None:
            vv = current
        if ask is None:
            tails = [s for s, a in self._asks.items() if a.provider == peer]
            ask = tuple((s, ((self.sources[s].top + 1, 0),)) for s in tails[:_TAILS_PER_GSIP])
        p.told = vv
        p.told_at = now
        p.unacked = 0
        items = self._vv_items if vv is current else tuple(vv.items())  # shared by every GSIP until it changes
        if not items and not ask:
            # We hold no record and ask for none: such a GSIP tells the peer nothing (its receiver
            # reads a source it does not name as none held).  A group forming, logs empty, sent
            # one each way on every admission and every peer's idle ones (protocol.md 12.3).
            self.stats.gsip_empty += 1
            return
        self.stats.gsip_sent += 1
        # The whole vector may not fit one body (many sources): then it goes in
        # pieces, the ask with the first; a GSIP need not name every source.
        room = (_GSIP_BUDGET - sum(_ASK_SOURCE + _ASK_RANGE * len(r) for _, r in ask)) // _VV_ENTRY
        if len(items) <= room:
            self._actions.append(Send(p.conn, Gsip(self.uuid, items, ask)))
            return
        self.stats.gsip_split += 1
        self._actions.append(Send(p.conn, Gsip(self.uuid, items[:room], ask)))
        step = _GSIP_BUDGET // _VV_ENTRY
        for i in range(room, len(items), step):
            self._actions.append(Send(p.conn, Gsip(self.uuid, items[i : i + step])))


def _on_grid(after: float, every: float, phase: float) -> float:
    """The first time past ``after`` at which ``time / every + phase`` is an integer."""
    return (math.floor(after / every + phase) + 1 - phase) * every


def _coalesce(ranges: Sequence[tuple[int, int]]) -> Sequence[tuple[int, int]]:
    """One source's asked ranges, sorted, with those that overlap or touch merged (``last`` 0:
    open-ended), so that asking for the same records many times over in one GSIP gets them once."""
    if len(ranges) < 2:
        return ranges
    merged: list[list[int]] = []
    for first, last in sorted((a, b or MAX_SEQ + 1) for a, b in ranges):
        if merged and first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], last)
        else:
            merged.append([first, last])
    return [(a, 0 if b > MAX_SEQ else b) for a, b in merged]


def _text_octets(records: Sequence[LogRecord]) -> int:
    """Characters of kind and body in ``records``, in all (a batch's from its columns)."""
    if isinstance(records, RecordBatch):
        return sum(map(len, records.bodies)) + sum(map(len, records.kinds))
    return sum([len(r.body) + len(r.kind) for r in records])


def _longest(records: Sequence[LogRecord]) -> int:
    """The most characters of kind and body one of ``records`` has (a batch's from its columns)."""
    if isinstance(records, RecordBatch):
        longest: int = max(map(_add, map(len, records.bodies), map(len, records.kinds)))
        return longest
    return max([len(r.body) + len(r.kind) for r in records])


def _runs(records: Sequence[LogRecord]) -> Iterator[tuple[NodeId, int, Sequence[LogRecord]]]:
    """Split ``records`` into runs of consecutive sequences of one source: ``(source, first, run)``."""
    if isinstance(records, (RecordRun, RecordBatch)):  # one run by construction
        yield records.source, records.first, records
        return
    i, n = 0, len(records)
    while i < n:
        s, lo = records[i].source, records[i].seq
        j = i + 1
        while j < n and records[j].seq == lo + (j - i) and records[j].source == s:
            j += 1
        yield s, lo, records[i:j]
        i = j


def _gives(signer: LogSigner, uuid: NodeId) -> bool:
    """Does ``signer``'s key give the node id ``uuid`` (:func:`~huddle.security.node_id_for`)?"""
    return node_id_for(signer.public_key) == uuid
