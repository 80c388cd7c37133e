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
  that signs asks for them, though, and takes back what is signed with its key and
  continues its chain; a record that differs from its own retires this identity
  (:attr:`Replicator.retired`; protocol/ownseq.py, docs/protocol.md 12.1).
* Sources no one vouches for are reclaimable (protocol/vouching.py, protocol.md
  12.2): an admitted member's records are never refused for room.
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

The replicator coordinates; its collaborators live beside it, each with its own tests:

    protocol/logstore.py   the store port (EventStore: SQLite for a node, memory for the
                           simulator); its commit is the driver's to carry out, an action
                           (events.Commit) ahead of anything sent after it
    protocol/outbox.py     this node's new records: chained, staged, signed in batches
    protocol/serving.py    peers' asks answered from the store, batches cut at heads
    protocol/asking.py     what this node lacks and whom it asks; the GSIP's sizes
    protocol/vouching.py   sources vouched for, forwarders' quotas, eviction
    protocol/ownseq.py     its own sequence after a restore: the start-up window, retirement
    protocol/logstate.py   timing, per-peer view, counters

Time (mesh time) is passed in.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable, Sequence
from typing import Final

from ..errors import LocalProtocolError
from ..ids import NodeId
from ..limits import LogLimits
from ..log.model import SourceState
from ..ratelog import RateLog
from ..security import node_id_for
from ..wire import MAX_SEQ, Gsip, LogHead, LogRecord, Message, Xmsg, check_record, checked_room, make_records
from .asking import Asking, gsip_pieces
from .events import Action, Commit, LogAppended, Notify, Send
from .logchain import LogSigner, check_heads, key_bound
from .logstate import PeerLog, ReplicationStats, ReplicationTiming
from .logstore import EventStore, RecordRun
from .outbox import Outbox
from .ownseq import OwnSequence
from .service import BUSY_POLL, DETACHED, MeshView, PeerFacts, group_scale
from .serving import Batch, Serve, Server, split_runs
from .vouching import Vouching

__all__ = ["Replicator"]

log = logging.getLogger("huddle.replication")


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
        self._peers: dict[NodeId, PeerLog] = {}
        self._log_next: dict[str, int] = {}  # counter name -> the value at which it is logged next
        self._rng = random.Random(bytes(uuid))  # the idle GSIPs' phases (deterministic in the simulator)
        self._server: Final = Server(uuid, store, self.timing, self.stats, strict=self._strict,
                                     before_read=self._stage_own, send=self._send)
        self.reload(now)
        # The start-up window, peers' claims to more of ours, retirement (protocol.md 12.1).
        self._ownseq: Final = OwnSequence(self.sources[uuid].top)

    def reload(self, now: float) -> None:
        """Read what the store holds afresh (the node dropped records from it: an
        ``empty`` node type cut off), forgetting what was known of peers' logs.  The
        counters go on; peers still up stay, as if just admitted."""
        self.sources: dict[NodeId, SourceState] = self.store.load()
        self.sources.setdefault(self.uuid, SourceState())
        # Vouched for: this node, the peers it admitted (kept in the store), its trust list's keys.
        self._vouching = Vouching(self.uuid, self.store.vouched(), self.limits)
        self._peers = {peer: PeerLog(conn=p.conn, phase=p.phase, forwarder=p.forwarder) for peer, p in self._peers.items()}
        self._asking = Asking(self.timing, self.limits, self.stats, {s for s, st in self.sources.items() if st.ahead})
        self._appended: list[tuple[Sequence[LogRecord], NodeId | None]] = []
        self._actions: list[Action] = []
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
        self._out = Outbox(self.uuid, self.store, self.timing, self.signer)  # our new records on their way out
        if self.signer is not None and (n := self._out.chain_stored(self.sources[self.uuid].contig)):
            # Our records from before signed heads, chained and signed now: durable with the first
            # actions' Commit (a node that stops before then chains them again at its next start).
            self.stats.rechained += n
            self._dirty = True

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

    def _new_source(self, p: PeerLog, peer: NodeId, s: NodeId, new_here: int, n: int) -> SourceState | None:
        """Track source ``s``, named by ``peer`` for the first time, if the
        limits let it (``new_here`` other new sources came in the same message).
        A source vouched for is tracked whatever its forwarder brought before, and
        takes the place of one no one vouches for when the table is full."""
        if s in self._vouching.vouched:
            room = len(self.sources) < self.limits.max_sources or self._evict_one()
        else:
            room = self._vouching.introduce(s, p.forwarder, new_here, len(self.sources))
        if not room:
            self._refused("sources_refused", n, "dropped a new source past a sources limit", peer)
            return None
        st = self.sources[s] = SourceState()
        return st

    def _evict_one(self) -> bool:
        """Make room for a source vouched for: drop the one :meth:`Vouching.victim` names,
        with its records.  False if every source is vouched for."""
        found = self._vouching.victim(self.sources)
        if found is None:
            return False
        victim, held = found
        self._drop(victim)
        self.stats.sources_evicted += 1
        self._refusals_log.warning("sources_evicted", self._now, "evicted source %s (no one vouches for it, "
                                   "%d records) to make room for one vouched for; %d so far", victim.short,
                                   held, self.stats.sources_evicted)
        return True

    def _drop(self, s: NodeId) -> None:
        """Forget source ``s`` (not ours) and what peers were known to hold of it, and
        delete its records from the store if it held any."""
        st = self.sources.pop(s)
        self._asking.forget(s)
        for p in self._peers.values():
            p.known.pop(s, None)
            p.sent.pop(s, None)
            p.sent_at.pop(s, None)
        self._vouching.unintroduce(s)
        if st.contig or st.ahead:
            self.store.drop_source(s)
            self._dirty = self._vv_changed = self._unsettled = True

    def vouch(self, sources: Iterable[NodeId], address: str = "") -> None:
        """Vouch for ``sources`` (the node's trust list in allow-list mode; the replicator
        itself for each peer it admits, ``address`` where its session came from): their
        records are stored whatever the sources limits, in place of sources no one vouches
        for.  An address vouches by admission for at most ``log.max-vouched-per-address``
        ids; past it an id admitted from there is counted (``vouches_refused``) and not
        vouched for."""
        vouching = self._vouching
        for s in sources:
            if s in vouching.vouched:
                continue
            if not vouching.vouch(s, address):
                self.stats.vouches_refused += 1
                self._refusals_log.warning("vouches_refused", self._now, "did not vouch for %s: its address "
                                           "%s vouched for %d ids already", s.short, address,
                                           vouching.from_address[address])
                continue
            self.store.vouch(s, address)
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
        that drives timers).  It is durable once the Commit :meth:`take_actions` hands out is carried out.
        Raises :class:`LocalProtocolError` (and records nothing) unless the
        record passes :func:`~huddle.wire.records.check_record`."""
        return self.append_many([(kind, body)], now, stamp, canonical=canonical)[0]

    def append_many(self, events: Sequence[tuple[str, str]], now: float, stamp: float,
                    *, canonical: bool = False) -> list[LogRecord]:
        """Originate ``(kind, body)`` events at mesh time ``stamp``.  Every one
        is checked before any is recorded: on :class:`LocalProtocolError` none is.
        ``canonical``: every body is :func:`~huddle.protocol.logstore.canonical_json`'s text, so its JSON is
        not parsed again (:func:`~huddle.wire.records.check_record`)."""
        own = self.sources[self.uuid]
        if not self._ownseq.recording:
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
        if (ask := self._asking.asks.get(self.uuid)) is not None:
            ask.contig_at = own.contig  # our own records are no progress of an ask for records in our name
        self._appended.append((self._out.add(records), None))
        self.stats.originated += len(records)
        self._dirty = self._vv_changed = self._unsettled = True
        return records

    def append_run(self, run: RecordRun, now: float) -> None:
        """Originate a whole run of events at once (the simulator's bulk load):
        ``run`` must be ours, start at :attr:`next_seq` and have ``hops`` 0.
        Its records are stored with the run's first record's timestamp as
        their receipt time."""
        if not self._ownseq.recording:
            raise LocalProtocolError(self.why_not_recording())
        if run.source != self.uuid or run.first != self.next_seq or run.hops != 0:
            raise LocalProtocolError(
                f"a run to originate must be ours, start at {self.next_seq} and have 0 hops, not {run!r}")
        self._now = now
        self._out.add_run(run)
        self.sources[self.uuid].add(run.first, run.last)
        self._appended.append((run, None))
        self.stats.originated += len(run)
        self._dirty = self._vv_changed = self._unsettled = True

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
            self._ownseq.hold(now, wait, quiet)

    @property
    def recording(self) -> bool:
        """Does this node record events now (not in its start-up window, its identity not retired)?"""
        return self._ownseq.recording

    @property
    def starting(self) -> bool:
        """In the start-up window (:meth:`hold_own`): events wait for its end."""
        return self._ownseq.window is not None

    @property
    def retired(self) -> str | None:
        """Why this identity records no more (None: it records): a peer showed a record in
        our name, signed with our key, that differs from ours."""
        return self._ownseq.retired

    def why_not_recording(self) -> str:
        return self._ownseq.why_not_recording()

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
        ours = self._out.own_hash(at)
        if ours is None:
            return False  # an unchained record of ours (cannot be compared): dropped
        if ours != theirs:
            self.stats.own_conflicts += 1
            retired = self._ownseq.retire(peer, at)
            if retired is not None:
                self._asking.lacking.discard(uuid)
                self._asking.asks.pop(uuid, None)
                self._actions.append(Notify(retired))
            return True
        self.stats.duplicates += at - lo + 1
        if hi <= top:
            return True
        if self._out.waiting:
            return False  # our own new records not staged yet (cannot happen between our appends' actions)
        fresh = run[top + 1 - lo :]
        self.store.stage(fresh, None, stamp, hashes[top + 1 - lo :])  # ours: stored as written here
        self.store.add_heads((head,))
        own.add(top + 1, hi)
        self._out.continue_at(hi, hashes[-1])
        # What the peers hold of ours is believed now up to what we hold (live records go to them).
        for other, q in ((peer, hi), *self._ownseq.claims.items()):
            p = self._peers.get(other)
            if p is not None and min(q, hi) > p.known.get(uuid, 0):
                p.known[uuid] = min(q, hi)
        self._appended.append((fresh, None))
        self.stats.own_taken_back += len(fresh)
        if (window := self._ownseq.window) is not None:
            window.moved = now
        self._dirty = self._vv_changed = self._unsettled = True
        return True

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
        if self._unsettled or self._asking.lacking or self._asking.asks or self._ownseq.window is not None:
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
        self._peers[peer] = p = PeerLog(conn=conn, phase=phase, forwarder=forwarder)
        self.vouch((peer,), address or f"peer:{peer.hex()}")
        p.idle_at = _on_grid(now + BUSY_POLL, self._idle_every(), phase)
        if (window := self._ownseq.window) is not None:
            window.admitted(now)
        self._send_gsip(peer, now)

    def peer_down(self, peer: NodeId, now: float = 0.0) -> None:
        self._ownseq.claims.pop(peer, None)
        if self._peers.pop(peer, None) is not None:
            self._asking.best = {}
            for p in self._peers.values():
                for s, q in p.known.items():
                    if q > self._asking.best.get(s, 0):
                        self._asking.best[s] = q
            # Sources we hold nothing of and no peer left claims: forget them
            # (what a departed peer named does not keep a place in the table).
            empty = [s for s, st in self.sources.items()
                     if not st.contig and not st.ahead and s != self.uuid and s not in self._asking.best]
            for s in empty:
                self._drop(s)

    def _note_known(self, p: PeerLog, s: NodeId, q: int) -> None:
        if q > p.known.get(s, 0):
            p.known[s] = q
            if q > self._asking.best.get(s, 0):
                self._asking.best[s] = q
                st = self.sources[s]
                if q > st.top:
                    self._asking.lacking.add(s)

    # ------------------------------------------------------------- receive

    def on_xmsg(self, peer: NodeId, msg: Xmsg, now: float, stamp: float) -> None:
        self._now = now
        p = self._peers.get(peer)
        if p is None:
            return
        got_any = got_asked = new_here = 0
        lacking = False
        max_gaps = self.limits.max_gap_ranges
        runs = list(split_runs(msg.records))
        chains: dict[int, tuple[list[bytes], LogHead]] = {}
        if msg.heads or self._strict:
            checked = check_heads(msg.heads, runs, self.uuid, own_signed=self.signer is not None,
                                  strict=self._strict)
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
                ask = self._asking.asks.get(s)
                if ask is not None and ask.provider == peer:
                    got_asked += got  # a catch-up we asked this peer for: its window waits for our acks
            if st.ahead:
                self._asking.lacking.add(s)
                lacking = True
        if got_any:
            self.stats.received += got_any
            p.unacked += got_asked
            self._dirty = True
        asked = self._plan_asks(now) if lacking else set()
        if peer not in asked and p.unacked >= self.timing.ack_every:
            self._send_gsip(peer, now)  # acknowledge: the sender's window moves on

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
                claims = self._ownseq.claims
                if self.signer is not None and self.retired is None and q > claims.get(peer, 0):
                    claims[peer] = q
                    self._asking.lacking.add(uuid)
                    more = True  # asked for at once
                q = st.top
            if q > known.get(s, 0):
                self._note_known(p, s, q)
            if q > st.contig:
                more = True
        if msg.ask:
            serve = Serve(self.limits.serve_records, self.limits.serve_bytes)
            self._server.answer(p, msg.ask, sources, serve=serve, max_ranges=self.limits.serve_ranges, now=now)
            if serve.cut:
                self._refused("serve_trimmed", 1, "answered a GSIP's asks only up to the serve window", peer)
        if more:
            self._plan_asks(now)

    # ---------------------------------------------------------------- time

    def tick(self, now: float) -> None:
        self._now = now
        t = self.timing
        asked = self._plan_asks(now)
        if self._ownseq.window is not None:
            self._ownseq.settle(now, self.sources[self.uuid].top, self._peers, self.stats.own_taken_back)
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

    def take_actions(self) -> list[Action]:
        """What to carry out: first a :class:`~huddle.protocol.events.Commit` of what was
        staged (when anything was: our new records with their heads, records received,
        sources vouched for or dropped), then what to send and announce.  The driver
        commits before it sends: our records leave only once durable."""
        if not (self._dirty or self._appended or self._out.pieces or self._actions):
            return []
        self._out.stage()
        signed = self._out.sign() if self._out.pieces else []  # heads staged with the records: one commit
        if self._appended:
            self._actions.append(Notify(LogAppended(tuple(self._appended))))
            self._appended = []
        if signed:
            self._dirty = True
            self._push_live(signed)
        actions, self._actions = self._actions, []
        if self._dirty:
            self._dirty = False
            return [Commit(self.store), *actions]
        return actions

    # ----------------------------------------------------------- internals

    def _stage_own(self) -> None:
        """Write our records appended since the last actions to the store (to read them)."""
        self._out.stage()

    def _send(self, conn: int, msg: Message) -> None:
        self._actions.append(Send(conn, msg))

    def _plan_asks(self, now: float) -> set[NodeId]:
        """Ask for what we lack (:meth:`Asking.plan`): each chosen peer gets a GSIP with
        the missing ranges.  Returns the peers asked."""
        payload = self._asking.plan(now, self.uuid, self.sources, self._peers, self._ownseq)
        for peer, asks in payload.items():
            self._send_gsip(peer, now, ask=tuple(asks))
        return set(payload)

    def _push_live(self, batches: list[Batch]) -> None:
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
            ask = self._asking.tails(peer, self.sources)
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
        pieces = gsip_pieces(self.uuid, items, ask)
        if len(pieces) > 1:
            self.stats.gsip_split += 1
        for msg in pieces:
            self._actions.append(Send(p.conn, msg))


def _on_grid(after: float, every: float, phase: float) -> float:
    """The first time past ``after`` at which ``time / every + phase`` is an integer."""
    return (math.floor(after / every + phase) + 1 - phase) * every


def _gives(signer: LogSigner, uuid: NodeId) -> bool:
    """Does ``signer``'s key give the node id ``uuid`` (:func:`~huddle.security.node_id_for`)?"""
    return node_id_for(signer.public_key) == uuid
