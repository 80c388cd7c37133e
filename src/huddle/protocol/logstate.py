"""What the replicated log's state machine (protocol/replication.py) is tuned by, keeps
of each peer and counts: its timing, its per-peer view, its counters."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..ids import NodeId
from .events import Counters

__all__ = ["Ask", "PeerLog", "ReplicationStats", "ReplicationTiming"]


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
class PeerLog:
    """What the replicator knows of one admitted peer's log, and what it sent it."""

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
class Ask:
    """Whom we asked for a source's missing records, when, and how far we held it then."""

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

