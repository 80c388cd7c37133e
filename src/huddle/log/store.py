"""The node's event log on disk: SQLite in WAL mode, in the data directory.

Records are written in a transaction that :meth:`SqliteStore.commit` closes;
the replicator commits before anything is sent or acknowledged, so an event
a caller was told about, or a peer received, survives a crash of the process.
(``synchronous=NORMAL``: a power cut may lose the last transactions, never
corrupt the file.)
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from ..errors import HuddleError
from ..ids import NodeId
from ..protocol.replication import SourceState
from ..wire import LogRecord
from ..wire.messages import MAX_SEQ

__all__ = ["SCHEMA_VERSION", "SqliteStore", "StoredRecord"]

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS events (
    grp           TEXT    NOT NULL,
    source        BLOB    NOT NULL,
    seq           INTEGER NOT NULL,
    ts            REAL    NOT NULL,
    kind          TEXT    NOT NULL,
    body          TEXT    NOT NULL,
    hops          INTEGER NOT NULL,
    received_at   REAL    NOT NULL,
    received_from BLOB,
    PRIMARY KEY (grp, source, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS node_stats (
    ts     REAL NOT NULL,
    grp    TEXT NOT NULL,
    event  TEXT NOT NULL,
    peer   BLOB,
    detail TEXT NOT NULL
);
"""


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record with the receipt metadata this node kept."""

    group: str
    record: LogRecord
    received_at: float
    received_from: NodeId | None


class SqliteStore:
    """An :class:`~huddle.protocol.replication.EventStore` for one group."""

    def __init__(self, path: Path, group: str) -> None:
        self.path = path
        self.group = group
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise HuddleError(f"the event log {path} cannot be opened: {exc}") from None
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif row[0] != str(SCHEMA_VERSION):
            raise HuddleError(f"the event log {path} has schema {row[0]}; this huddle reads {SCHEMA_VERSION}")
        self._in_txn = False

    # ---------------------------------------------------------- EventStore

    def load(self) -> dict[NodeId, SourceState]:
        state: dict[NodeId, SourceState] = {}
        rows = self._db.execute(
            "SELECT source, COUNT(*), MAX(seq) FROM events WHERE grp=? GROUP BY source", (self.group,)
        ).fetchall()
        for source, count, top in rows:
            if count == top:
                st = SourceState(contig=top)
            else:
                seqs = self._db.execute(
                    "SELECT seq FROM events WHERE grp=? AND source=? ORDER BY seq", (self.group, source)
                )
                st = SourceState.of(q for (q,) in seqs)
            state[NodeId(source)] = st
        return state

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float) -> None:
        if not self._in_txn:
            self._db.execute("BEGIN")
            self._in_txn = True
        frm = None if received_from is None else bytes(received_from)
        hop = 0 if received_from is None else 1
        self._db.executemany(
            "INSERT OR IGNORE INTO events VALUES (?,?,?,?,?,?,?,?,?)",
            [  # hops stop at what an INTEGER (and the wire) holds
                (self.group, bytes(r.source), r.seq, r.timestamp, r.kind, r.body, min(r.hops + hop, MAX_SEQ),
                 received_at, frm)
                for r in records
            ],
        )

    def commit(self) -> None:
        if self._in_txn:
            self._db.execute("COMMIT")
            self._in_txn = False

    def read(self, source: NodeId, after: int, limit: int) -> list[LogRecord]:
        rows = self._db.execute(
            "SELECT seq, ts, kind, body, hops FROM events WHERE grp=? AND source=? AND seq>? ORDER BY seq LIMIT ?",
            (self.group, bytes(source), after, limit),
        )
        return [LogRecord(source, q, ts, kind, body, hops) for q, ts, kind, body, hops in rows]

    # ------------------------------------------------------------- queries

    def page(self, source: NodeId | None, after: int, limit: int) -> list[StoredRecord]:
        """Records in (source, seq) order; with ``source``, only its records after ``after``."""
        sql = "SELECT grp, source, seq, ts, kind, body, hops, received_at, received_from FROM events WHERE grp=?"
        args: list[object] = [self.group]
        if source is not None:
            sql += " AND source=? AND seq>?"
            args += [bytes(source), after]
        sql += " ORDER BY source, seq LIMIT ?"
        args.append(limit)
        return [_stored(row) for row in self._db.execute(sql, args)]

    def drop_returned(self, source: NodeId) -> int:
        """Delete the records of ``source`` this node received from others (not
        written by itself); returns how many.  A node's own records are the ones
        it wrote: records in its name from peers (accepted by versions before
        the rule that refuses them) must not decide its next sequence."""
        self.commit()
        cur = self._db.execute(
            "DELETE FROM events WHERE grp=? AND source=? AND received_from IS NOT NULL", (self.group, bytes(source)))
        return cur.rowcount

    def drop_others(self, keep: NodeId) -> int:
        """Delete every event of this group whose source is not ``keep``; returns how many."""
        self.commit()
        cur = self._db.execute("DELETE FROM events WHERE grp=? AND source<>?", (self.group, bytes(keep)))
        return cur.rowcount

    def count(self) -> int:
        row = self._db.execute("SELECT COUNT(*) FROM events WHERE grp=?", (self.group,)).fetchone()
        return int(row[0])

    def scan(self, batch: int = 10_000) -> Iterator[list[StoredRecord]]:
        """Every record of every group, in batches (for export)."""
        cur = self._db.execute(
            "SELECT grp, source, seq, ts, kind, body, hops, received_at, received_from FROM events "
            "ORDER BY grp, source, seq"
        )
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                return
            yield [_stored(row) for row in rows]

    def of_kind(self, kind: str, batch: int = 10_000) -> Iterator[list[LogRecord]]:
        """This group's records of one kind, in batches (no order promised)."""
        cur = self._db.execute(
            "SELECT grp, source, seq, ts, kind, body, hops, received_at, received_from FROM events "
            "WHERE grp=? AND kind=?", (self.group, kind),
        )
        while True:
            rows = cur.fetchmany(batch)
            if not rows:
                return
            yield [_stored(row).record for row in rows]

    def add_stat(self, ts: float, event: str, peer: NodeId | None, detail: str) -> None:
        """A statistics row: a membership change, or a snapshot of counters (``detail`` is JSON)."""
        if not self._in_txn:
            self._db.execute("BEGIN")
            self._in_txn = True
        self._db.execute(
            "INSERT INTO node_stats VALUES (?,?,?,?,?)",
            (ts, self.group, event, None if peer is None else bytes(peer), detail),
        )

    def scan_stats(self) -> Iterator[tuple[float, str, str, NodeId | None, str]]:
        for ts, grp, event, peer, detail in self._db.execute(
            "SELECT ts, grp, event, peer, detail FROM node_stats ORDER BY ts"
        ):
            yield ts, grp, event, None if peer is None else NodeId(peer), detail

    def close(self) -> None:
        self.commit()
        self._db.close()


def _stored(row: tuple[str, bytes, int, float, str, str, int, float, bytes | None]) -> StoredRecord:
    grp, source, seq, ts, kind, body, hops, received_at, frm = row
    return StoredRecord(
        group=grp,
        record=LogRecord(NodeId(source), seq, ts, kind, body, hops),
        received_at=received_at,
        received_from=None if frm is None else NodeId(frm),
    )
