"""The signing outbox, sans-I/O: this node's own new records on their way out.

What a node originates is kept here between the append and the replicator's next
actions: chained on from the node's tip (when it signs: protocol/logchain.py), staged
in the store one write per run of equal stamps (:meth:`Outbox.stage`), then cut into
XMSG batches with a signed head at the end of each (:meth:`Outbox.sign`), the heads
staged with the records so that one commit makes both durable.  A log from before
signed heads has its own records chained and signed once, at start
(:meth:`Outbox.chain_stored`).  Nothing here does I/O but through the store port.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Final

from ..ids import NodeId
from ..wire import LogHead, LogRecord
from .logchain import GENESIS, LogSigner, chain_hashes, sign_head
from .logstate import ReplicationTiming
from .logstore import EventStore, RecordRun
from .serving import Batch, batches

__all__ = ["Outbox"]

log = logging.getLogger("huddle.replication")


class Outbox:
    """This node's records appended and not yet handed out (module docstring); ``signer``
    None: an unsigned log (no chains, no heads)."""

    def __init__(self, uuid: NodeId, store: EventStore, timing: ReplicationTiming, signer: LogSigner | None) -> None:
        self.uuid: Final = uuid
        self.store: Final = store
        self.timing: Final = timing
        self.signer: Final = signer
        self.tip: tuple[int, bytes] = (0, GENESIS)  # our last record's sequence and chain hash
        # Own records chained but not signed yet: those after pending_base (whose hash is
        # pending_prev) and their chain hashes, in sequence order.
        self.pending_base, self.pending_prev = self.tip
        self.pending_hashes: list[bytes] = []
        self.unstaged: list[tuple[LogRecord, ...]] = []  # appended (one run per append_many), not yet staged
        self.pieces: list[list[LogRecord] | RecordRun] = []  # to push live, in pieces

    @property
    def waiting(self) -> bool:
        """Records appended that are not staged or not signed yet."""
        return bool(self.pending_hashes or self.unstaged)

    def chain_stored(self, top: int) -> int:
        """Start from our stored records ``1..top``: the chain hash of the last is the tip.
        Own records from before signed heads are chained and signed first (once: a head
        every ``batch_records``), staged for the next commit; returns how many (0: none)."""
        signer, uuid = self.signer, self.uuid
        assert signer is not None
        if top == 0:
            return 0
        tip = self.store.chain_of(uuid, top)
        if tip is not None and self.store.heads_in(uuid, top, top):
            self.continue_at(top, tip)
            return 0
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
        log.info("chained and signed this node's %d records from before signed heads", after)
        self.continue_at(after, prev)
        return after

    def continue_at(self, seq: int, chain: bytes) -> None:
        """Our records end at ``seq`` with chain hash ``chain`` (nothing pending): at start,
        or after records of ours were taken back from a peer."""
        self.tip = self.pending_base, self.pending_prev = seq, chain

    def add(self, records: Sequence[LogRecord]) -> tuple[LogRecord, ...]:
        """Our new ``records`` (one append), chained when we sign; returns them as a run."""
        if self.signer is not None:
            self._chain_new(records)
        run = tuple(records)  # a copy: the caller keeps its list
        self.unstaged.append(run)  # staged by stage(), one write per run of equal stamps
        pieces = self.pieces
        if pieces and isinstance(pieces[-1], list):
            pieces[-1].extend(records)
        else:
            pieces.append(list(records))
        return run

    def add_run(self, run: RecordRun) -> None:
        """A whole run of our new records (the simulator's bulk load), staged at once with
        the run's first record's timestamp as the receipt time."""
        self.stage()
        if self.signer is None:
            self.store.stage(run, None, run[0].timestamp)
        else:
            at = self._chain_new(run)
            self.store.stage(run, None, run[0].timestamp, self.pending_hashes[at:])
        self.pieces.append(run)

    def _chain_new(self, records: Sequence[LogRecord]) -> int:
        """Chain our new ``records`` on from our tip; kept until they are signed.
        Returns the index of the first in the pending lists."""
        seq, tip = self.tip
        at = len(self.pending_hashes)
        hashes = chain_hashes(tip, records)
        self.pending_hashes += hashes
        self.tip = (seq + len(hashes), hashes[-1])
        return at

    def chained(self, seq: int) -> bytes:
        """The chain hash of our record ``seq``, pending or the last signed before them."""
        return self.pending_prev if seq == self.pending_base else self.pending_hashes[seq - self.pending_base - 1]

    def own_hash(self, seq: int) -> bytes | None:
        """The chain hash of our record ``seq`` (held), pending or stored."""
        if seq == 0:
            return GENESIS
        if seq >= self.pending_base:
            return self.chained(seq)
        return self.store.chain_of(self.uuid, seq)

    def stage(self) -> None:
        """Write the records appended since the last call to the store."""
        calls, self.unstaged = self.unstaged, []
        signed = self.signer is not None
        i = 0
        while i < len(calls):  # one stage per run of equal stamps (an append_many has one)
            stamp = calls[i][0].timestamp
            j = i + 1
            while j < len(calls) and calls[j][0].timestamp == stamp:
                j += 1
            piece = calls[i] if j == i + 1 else tuple(r for call in calls[i:j] for r in call)
            if signed:
                a = piece[0].seq - self.pending_base - 1
                b = a + len(piece)
                self.store.stage(piece, None, stamp, self.pending_hashes[a:b])
            else:
                self.store.stage(piece, None, stamp)
            i = j

    def sign(self) -> list[Batch]:
        """Cut our new records into XMSG batches and sign a head at the end of each (staged
        in the store: the records' commit keeps them); the batches with the heads they
        travel with."""
        pieces, self.pieces = self.pieces, []
        out: list[Batch] = []
        signer, chained = self.signer, self.chained
        heads: list[LogHead] = []
        for records in pieces:
            for batch in batches(records, self.timing):
                if signer is None:
                    out.append((batch, ()))
                    continue
                first, last = batch[0].seq, batch[-1].seq
                head = sign_head(signer, self.uuid, last, chained(last))
                heads.append(head)
                out.append((batch, ((chained(first - 1), head),)))
        if heads:
            self.store.add_heads(heads)
        self.pending_base, self.pending_prev = self.tip
        self.pending_hashes = []
        return out
