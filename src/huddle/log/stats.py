"""The node's statistics rows, beside its events in the log store.

Three kinds of row (``huddle export`` writes them all, docs/export.md): a
membership or clock event as it happens, a ``snapshot`` of the node's counters
every STATS_INTERVAL seconds, and a feature's own rows (the bout document's
``document`` row when it changed).  Each row is committed at once; after a snapshot the log's own-sequence
mark follows what is durable (:class:`~huddle.log.integrity.LogGuard`).
"""

from __future__ import annotations

import json
from typing import Any

from ..ids import NodeId
from .integrity import LogGuard
from .store import SqliteStore

__all__ = ["STATS_INTERVAL", "StatRows"]

# How often the node writes a snapshot of its counters to its statistics rows.
STATS_INTERVAL = 10.0


class StatRows:
    """Writes a node's statistics rows to its store."""

    def __init__(self, store: SqliteStore, guard: LogGuard | None = None) -> None:
        self.store = store
        self.guard = guard

    def event(self, row: tuple[float, str, NodeId | None, str] | None) -> None:
        """A membership or clock event's row (``None``: the event is not a statistic)."""
        if row is not None:
            self.store.add_stat(*row)
            self.store.commit()

    def snapshot(self, stamp: float, detail: dict[str, Any]) -> None:
        """The node's counters and each peer's state and round trip."""
        self.store.add_stat(stamp, "snapshot", None, json.dumps(detail))
        self.store.commit()
        if self.guard is not None:
            self.guard.note(self.store)  # the own-sequence mark follows what is durable

    def feature(self, stamp: float, kind: str, detail: dict[str, Any]) -> None:
        """A feature's row of its own ``kind`` (the bout document's ``document``)."""
        self.store.add_stat(stamp, kind, None, json.dumps(detail))
        self.store.commit()
