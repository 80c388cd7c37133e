"""How the node records its own events (docs/protocol.md 12.1, "A restored log").

:class:`Recorder` checks an event before it is recorded (the node may write now, it is
not starting nor retired, the body is JSON), hands it to the replicator, and has the
mesh's actions carried out (the commit comes before anything is sent or returned).  What
arrives while the node starts (a guest may speak as soon as its host is back) or was
recorded under an identity the node retired is *carried*: recorded once the start-up
window ends.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ..errors import LocalProtocolError, NotRecording, NotRunning
from ..ids import NodeId
from ..log import SqliteStore
from ..protocol.logstore import canonical_json
from ..protocol.replication import Replicator
from ..wire import LogRecord

__all__ = ["Recorder"]

log = logging.getLogger("huddle.node")


class Recorder:
    """The node's own events into its log: checked whole first, so an error means nothing was recorded."""

    def __init__(self, replicator: Callable[[], Replicator | None], *, writable: Callable[[], None],
                 local_now: Callable[[], float], mesh_time: Callable[[], float], execute: Callable[[], None],
                 carried: list[tuple[str, str]], renewed: bool) -> None:
        """``replicator``: the node's, None while it is not running; ``writable`` raises when
        nothing may be recorded now (CutOffReadOnly); ``execute`` carries out the mesh's
        actions; ``carried``: (kind, body as canonical JSON) to record once recording starts,
        some of them recorded under a retired identity when ``renewed``."""
        self._replicator, self._writable = replicator, writable
        self._local_now, self._mesh_time, self._execute = local_now, mesh_time, execute
        self.carried = carried
        self._renewed = renewed

    def describe(self) -> dict[str, object]:
        """Whether events are recorded now, and why not (starting, or this identity retired)."""
        replicator = self.replicator
        return {"recording": replicator.recording,
                "not_recording": None if replicator.recording else replicator.why_not_recording()}

    def keep_own_only(self, store: SqliteStore, uuid: NodeId, node_type: str) -> None:
        """Cut off, an ``empty`` node type drops every other node's events (store, log state;
        the document feature then makes its document again from what is left); its peers send
        them all again when it reconnects."""
        dropped = store.drop_others(uuid)
        self.replicator.reload(self._local_now())  # the same replicator, hosted by the mesh, reads the store afresh
        log.info("cut off: dropped %d events of other nodes (node type %s)", dropped, node_type)

    @property
    def replicator(self) -> Replicator:
        replicator = self._replicator()
        if replicator is None:
            raise NotRunning("the node is not running")
        return replicator

    def _check_recording(self, n: int = 1) -> None:
        """Events wait for the start-up window's end, and none is recorded under a retired identity."""
        replicator = self.replicator
        if not replicator.recording:
            replicator.stats.events_refused += n
            raise NotRecording(replicator.why_not_recording())

    async def until_recording(self, timeout: float) -> None:
        """Wait, at most ``timeout`` s, for the start-up window to end: a write made as the
        node starts is held, not refused."""
        deadline = time.monotonic() + timeout
        while ((replicator := self._replicator()) is not None and replicator.starting and replicator.retired is None
               and time.monotonic() < deadline):
            await asyncio.sleep(0.05)

    def emit(self, kind: str, body: Any) -> LogRecord:
        """Record an event of this node (the node's :meth:`~huddle.node.Node.emit`)."""
        self._writable()
        self._check_recording()
        # Checked whole (text, JSON, size, sequence) before it is recorded: a
        # LocalProtocolError here means nothing was.
        record = self.replicator.append(kind, self._body_texts([(kind, body)])[0][1], self._local_now(),
                                        self._mesh_time(), canonical=True)
        self._execute()  # commits before anything is sent or returned
        return record

    def _body_texts(self, events: list[tuple[str, Any]]) -> list[tuple[str, str]]:
        """The events with their bodies as canonical JSON text (all counted refused if one is not JSON)."""
        try:
            return [(kind, canonical_json(body)) for kind, body in events]
        except LocalProtocolError:
            self.replicator.stats.events_refused += len(events)
            raise

    def emit_many(self, events: list[tuple[str, Any]]) -> list[LogRecord]:
        """Record several events in one transaction and as few messages as possible."""
        self._writable()
        self._check_recording(len(events))
        now, stamp = self._local_now(), self._mesh_time()
        records = self.replicator.append_many(self._body_texts(events), now, stamp, canonical=True)
        self._execute()
        return records

    def record_soon(self, kind: str, body: Any) -> LogRecord | None:
        """An event recorded now, or kept for the start-up window's end (None then)."""
        if self.replicator.starting:
            self.carried.append(self._body_texts([(kind, body)])[0])
            return None
        return self.emit(kind, body)

    async def record_carried(self) -> None:
        """Once the start-up window ends: record what waited for it (guests' events), and,
        under a new identity, what the node recorded under the one it retired."""
        while self.replicator.starting:
            await asyncio.sleep(0.05)
        events, self.carried = self.carried, []
        if events and self.replicator.recording:
            try:
                self.replicator.append_many(events, self._local_now(), self._mesh_time())
            except LocalProtocolError as exc:  # they passed these checks once: not expected, but not fatal either
                log.error("could not record the %d events that waited for the start-up window: %s", len(events), exc)
                return
            self._execute()
            log.info("recorded %d events that waited for the start-up window's end%s", len(events),
                     "" if not self._renewed else " (with those recorded under the retired identity since its start)")
