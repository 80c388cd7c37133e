"""The document desk: the node's bout document and the rules for writing to it.

The desk keeps the :class:`~huddle.doc.engine.DocEngine` the node shows (made
from the log's ``doc`` events), checks document operations against it before
they are recorded (all or none), turns "start / stop the jam" into operations,
and says when a ``document`` statistics row is due and what it holds.

It records nothing itself: the node's side is a :class:`Recording` (check that
recording is allowed now, the mesh time, this node's next key, record events).
No I/O, no network, no storage: the engine is fed records and batches of them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import LocalProtocolError, NotRunning, TooLarge
from ..wire import LogRecord, RecordBatch
from .engine import DocEngine, Key, jams
from .model import digest
from .ops import DOC_KIND, JamStateError, OperationError

__all__ = ["DOC_ROW_INTERVAL", "DOC_ROW_SHARE", "DocumentDesk", "Recording"]

# A ``document`` statistics row (the digest of the bout document as the node shows it) is due
# when the document changed, at most this often, and when the node stops.  A big document is
# digested less often: at most this share of the node's time goes to it.
DOC_ROW_INTERVAL = 10.0
DOC_ROW_SHARE = 0.01


@dataclass(frozen=True, slots=True)
class Recording:
    """How the desk gets operations recorded: the node's side."""

    writable: Callable[[], None]  # raises (CutOffReadOnly) when nothing may be recorded now
    stamp: Callable[[], float]  # the mesh time now: the timestamp the next events get
    origin: Callable[[], tuple[bytes, int]]  # this node's id and the sequence its next event gets
    record: Callable[[list[tuple[str, Any]]], list[LogRecord]]  # record events in one transaction


class DocumentDesk:
    """The bout document of a node and the rules for writing to it."""

    def __init__(self, recording: Recording) -> None:
        self.recording = recording
        self.engine = DocEngine()
        self.refused = 0  # operations refused (malformed for the document, or against the bout's rules)
        self._row_of: tuple[int, int] | None = None  # (engine, events) of the last document row
        self._row_due = 0.0  # local time before which no document row is due

    # ----------------------------------------------------------------- reading

    def reload(self, batches: Iterable[list[LogRecord]]) -> None:
        """Make the document afresh from the log's ``doc`` records (in batches, any order)."""
        engine = DocEngine()
        for batch in batches:
            engine.load(batch)
        old, self.engine = self.engine, engine
        old.discard()

    def take(self, records: Iterable[LogRecord]) -> None:
        """Records new in the log: the ``doc`` ones change the document."""
        if isinstance(records, RecordBatch) and DOC_KIND not in records.kinds:
            return  # a received batch with no doc record: no record made to look at
        engine = self.engine
        for record in records:
            if record.kind == DOC_KIND:
                engine.add(record)

    def mesh_time(self) -> float:
        """The group's time now, as this node keeps it: what the clocks are read at."""
        return self.recording.stamp()

    # ----------------------------------------------------------------- writing

    def apply_ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Record document operations (normalised, see ``huddle.doc.ops``) as
        ``doc`` events, after checking each against the document as it is now
        (and as the previous ones leave it).  Raises ``OperationError`` and
        records nothing if any does not fit.  Returns, per operation, its
        source, sequence and the eids of the elements it adds, and for a write
        by a role that does not own its field, the conflict it is held as
        (recorded, not applied: docs/document.md "Roles")."""
        rec = self.recording
        rec.writable()
        scratch = self.engine.document.clone()
        try:
            stamp = rec.stamp()
            author, next_seq = rec.origin()
            made: list[list[str]] = []
            held: list[dict[str, Any] | None] = []
            for i, op in enumerate(ops):
                try:
                    scratch.check(op)
                except OperationError as exc:
                    self.refused += 1
                    raise OperationError(f"operation {i + 1}: {exc}" if len(ops) > 1 else str(exc)) from None
                key: Key = (stamp, author, next_seq + i)
                scratch.made = []
                scratch.ledger.last = None
                scratch.apply(op, key)
                made.append([e.eid for e in scratch.made])
                held.append(scratch.ledger.last)
        finally:
            scratch.discard()  # a copy of the whole document per write: freed now, not by a full collection
        try:
            records = rec.record([(DOC_KIND, op) for op in ops])
        except NotRunning:
            raise
        except LocalProtocolError as exc:  # the log refused the ops' events: valid JSON by now, so their size
            raise TooLarge(str(exc)) from None
        return [{"source": str(r.source), "seq": r.seq, "timestamp": r.timestamp, "eids": eids,
                 **({} if conflict is None else {"conflict": conflict})}
                for r, eids, conflict in zip(records, made, held, strict=True)]

    def start_jam(self, role: str | None = None) -> dict[str, Any]:
        """Start the upcoming jam now (its ``start`` is this node's mesh time), written by ``role``."""
        state = jams(self.engine.document.root)
        if state["active"] is not None:
            a = state["active"]
            raise JamStateError(f"period {a['period']} jam {a['jam']} is being skated: stop it first")
        up = state["upcoming"]
        if up is None:
            raise JamStateError("the bout is over: there is no jam to start")
        now = round(self.recording.stamp(), 3)
        self.apply_ops([_with_role({"op": "set", "to": up, "attribute": "start", "value": repr(now)}, role)])
        return jams(self.engine.document.root)

    def stop_jam(self, role: str | None = None) -> dict[str, Any]:
        """Stop the active jam now (its ``duration`` runs to this node's mesh time), written by ``role``."""
        active = jams(self.engine.document.root)["active"]
        if active is None:
            raise JamStateError("no jam is being skated")
        duration = round(max(0.0, self.recording.stamp() - active["start"]), 3)
        to = {"period": active["period"], "jam": active["jam"]}
        self.apply_ops([_with_role({"op": "set", "to": to, "attribute": "duration", "value": repr(duration)}, role)])
        return jams(self.engine.document.root)

    # ------------------------------------------------------- the statistics row

    def row(self, now: float, *, final: bool = False) -> dict[str, Any] | None:
        """The detail of a ``document`` statistics row, if one is due at local time
        ``now``: the document changed since the last one, and DOC_ROW_INTERVAL (or
        more, for a big document) has passed, or ``final`` (the node stops).  It holds
        how many ``doc`` events the document is made of and the digest of what the
        node shows; the pipeline's replay makes the document again from the node's
        exported events and checks the digest (docs/export.md)."""
        if now < self._row_due and not final:
            return None
        engine = self.engine
        state = (id(engine), len(engine))
        if state == self._row_of:
            return None
        t0 = time.perf_counter()
        doc = engine.document
        detail = {"doc_events": len(engine), "applied": doc.applied, "dropped": len(doc.dropped),
                  "digest": digest(doc.root)}
        cost = time.perf_counter() - t0
        self._row_of = state
        self._row_due = now + max(DOC_ROW_INTERVAL, cost / DOC_ROW_SHARE)
        return detail


def _with_role(op: dict[str, Any], role: str | None) -> dict[str, Any]:
    return op if role is None else {**op, "role": role}
