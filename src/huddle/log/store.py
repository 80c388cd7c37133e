"""The node's event log on disk: SQLite in WAL mode, in the data directory.

Records are written in a transaction that :meth:`SqliteStore.commit` closes;
the replicator commits before anything is sent or acknowledged, so an event
a caller was told about, or a peer received, survives a crash of the process.
(``synchronous=NORMAL``: a power cut may lose the last transactions, never
corrupt the file.)  A transaction holding records this node originated
(``received_from`` is None) is committed with ``synchronous=FULL``: its own
records reach the disk before any peer sees them, so a power cut never leaves
the node holding fewer of its own records than the group, and a later start
that finds fewer knows the file was damaged (docs/protocol.md section 12).

A row keeps the record's chain hash when it came signed (``chain``: SHA-256 of
the previous record's hash and this record's content, docs/protocol.md 12.5),
and a digest of its content (:func:`record_digest`, BLAKE2b) when it has no
chain hash or its chain cannot be followed from the row before it: the first
row of each batch stored.  :meth:`SqliteStore.verify` checks every row by one or
the other.
The ``heads`` table keeps the signed heads that cover them (docs/security.md,
"Signed log").
"""

from __future__ import annotations

import hashlib
import sqlite3
import struct
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import chain as itertools_chain
from pathlib import Path

from ..errors import HuddleError
from ..ids import NodeId
from ..wire import MAX_SEQ, LogHead, LogRecord, RecordBatch, make_record
from .model import GENESIS, RECORD_HEAD, SourceState

__all__ = ["GENESIS", "SCHEMA_VERSION", "SqliteStore", "StoredRecord", "Verified", "record_digest", "row_verifies"]

SCHEMA_VERSION = 4  # 2: events.digest; 3: events.chain and heads; 4: digest NULL where the chain covers a row
# A new file's page size.  The log is written in batches of hundreds of rows, and each commit
# writes every page it touched to the WAL, each page by its own system calls: with 16 KiB pages
# (4 by default) a row costs about 4 % fewer instructions in SQLite and a third of the pwrite and
# pread calls (callgrind and strace over bench/log_path.py).  Files made before keep theirs.
PAGE_SIZE = 16384

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
    digest        BLOB,
    chain         BLOB,
    PRIMARY KEY (grp, source, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS heads (
    grp       TEXT    NOT NULL,
    source    BLOB    NOT NULL,
    seq       INTEGER NOT NULL,
    chain     BLOB    NOT NULL,
    signature BLOB    NOT NULL,
    key       BLOB    NOT NULL,
    PRIMARY KEY (grp, source, seq)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vouched (
    grp     TEXT NOT NULL,
    source  BLOB NOT NULL,
    address TEXT NOT NULL,
    PRIMARY KEY (grp, source)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS node_stats (
    ts     REAL NOT NULL,
    grp    TEXT NOT NULL,
    event  TEXT NOT NULL,
    peer   BLOB,
    detail TEXT NOT NULL
);
"""
_INSERT = ("INSERT OR IGNORE INTO events (grp, source, seq, ts, kind, body, hops, received_at, received_from, digest) "
           "VALUES (?,?,?,?,?,?,?,?,?,?)")
# One source's consecutive rows, in statements of _RUN_SIZES rows (a run takes as many of the largest
# as fit, then at most one of each smaller size: a few statements the sqlite3 module keeps prepared).
# Bound once per statement (?1-?7): group, source, received_at, received_from, the run's first
# sequence and that row's digest, and the run's chain hashes as one blob (_CHAIN octets per row, a
# row's taken by ``substr`` at its offset from the first); per row only integers, floats and text.
# No bytes or None is bound per row: the sqlite3 module tries to adapt each such value, which costs a
# failed attribute lookup with a formatted exception (about 3 000-4 000 instructions a value,
# callgrind over bench/log_path.py).  Where every row has one kind and one hop count (a received batch,
# mostly) those are bound once too (?8, ?9): three values per row instead of five.
_RUN_SIZES = (100, 64, 32, 16, 8, 4, 2, 1)
_RUN_COLUMNS = 5
_UNIFORM_COLUMNS = 3
_CHAIN = 32


def _insert_run_sql(rows: int, uniform: bool) -> str:
    values = "column1, column2, ?8, column3, ?9" if uniform else "column1, column2, column3, column4, column5"
    row = "(?,?,?)" if uniform else "(?,?,?,?,?)"
    head = ("INSERT OR IGNORE INTO events (grp, source, seq, ts, kind, body, hops, received_at, received_from, "
            "digest, chain) SELECT ?1, ?2, ")
    tail = (", ?3, ?4, CASE column1 WHEN ?5 THEN ?6 END, substr(?7, (column1 - ?5) * 32 + 1, 32) "  # 32: _CHAIN
            "FROM (VALUES ")
    return head + values + tail + ",".join([row] * rows) + ")"  # constants only: no value in the text


_INSERT_RUN = {rows: _insert_run_sql(rows, False) for rows in _RUN_SIZES}
_INSERT_UNIFORM = {rows: _insert_run_sql(rows, True) for rows in _RUN_SIZES}
_from_iterable = itertools_chain.from_iterable


def record_digest(source: bytes, seq: int, ts: float, kind: bytes, body: bytes) -> bytes:
    """16 octets of BLAKE2b over a record's content: source, sequence,
    timestamp, kind and body (UTF-8); not the receipt metadata or hops, which
    differ from node to node."""
    return hashlib.blake2b(RECORD_HEAD.pack(source, seq, ts, len(kind)) + kind + body, digest_size=16).digest()


def row_verifies(prev: bytes | None, source: bytes, seq: int, ts: float, kind: bytes, body: bytes,  # noqa: PLR0917
                 digest: bytes | None, chain: bytes | None) -> bool:
    """Does a stored row hold what was written?  A row with a digest must match it; a
    row without one must have a chain hash that follows from ``prev``, the chain hash of
    the row before it (same source, ``seq - 1``; the genesis hash before ``seq`` 1), None
    when that row is not held or has none.  (So a damaged chain hash fails the row
    after it, or itself where it has no digest.)  Raises ``struct.error`` or
    ``TypeError`` for a damaged value of the wrong type or size."""
    encoded = RECORD_HEAD.pack(source, seq, ts, len(kind)) + kind + body
    if digest is not None:
        return hashlib.blake2b(encoded, digest_size=16).digest() == digest
    return chain is not None and prev is not None and hashlib.sha256(prev + encoded).digest() == chain


@dataclass(frozen=True, slots=True)
class Verified:
    """What :meth:`SqliteStore.verify` found: rows read, and the keys
    ``(group, source, seq)`` of the first few whose digest does not match
    (``bad`` counts them all)."""

    rows: int
    bad: int
    examples: tuple[tuple[str, bytes, int], ...]


@dataclass(frozen=True, slots=True)
class StoredRecord:
    """A record with the receipt metadata this node kept."""

    group: str
    record: LogRecord
    received_at: float
    received_from: NodeId | None


class SqliteStore:
    """An :class:`~huddle.protocol.logstore.EventStore` for one group."""

    def __init__(self, path: Path, group: str) -> None:
        self.path = path
        self.group = group
        try:
            self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
            self._db.execute(f"PRAGMA page_size={PAGE_SIZE}")  # a new file's; an existing one keeps its own
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
            row = self._db.execute("SELECT value FROM meta WHERE key='schema'").fetchone()
        except sqlite3.DatabaseError as exc:
            raise HuddleError(f"the event log {path} cannot be opened: {exc}") from None
        self._in_txn = False
        self._full = False  # the open transaction commits with synchronous=FULL
        if row is None:
            self._db.execute("INSERT INTO meta VALUES ('schema', ?)", (str(SCHEMA_VERSION),))
        elif row[0] == "1":
            self._migrate_1()
            self._migrate_2()
        elif row[0] == "2":
            self._migrate_2()
        elif row[0] == "3":  # the same tables; rows written from now on may lack a digest
            self._db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
        elif row[0] != str(SCHEMA_VERSION):
            raise HuddleError(f"the event log {path} has schema {row[0]}; this huddle reads {SCHEMA_VERSION}")

    def _migrate_1(self) -> None:
        """Schema 1 had no digests: add the column and fill it (once; the rows
        are believed as they are, from then on they are checked)."""
        try:
            self._db.execute("BEGIN")
            self._db.execute("ALTER TABLE events ADD COLUMN digest BLOB")
            rows = self._db.execute(
                "SELECT grp, source, seq, ts, CAST(kind AS BLOB), CAST(body AS BLOB) FROM events").fetchall()
            self._db.executemany(
                "UPDATE events SET digest=? WHERE grp=? AND source=? AND seq=?",
                [(record_digest(src, q, ts, k, b), g, src, q) for g, src, q, ts, k, b in rows])
            self._db.execute("UPDATE meta SET value='2' WHERE key='schema'")
            self._db.execute("COMMIT")
        except (sqlite3.DatabaseError, struct.error) as exc:
            self._db.execute("ROLLBACK")
            raise HuddleError(f"the event log {self.path} (schema 1) cannot be migrated: {exc}; "
                              f"run `huddle repair --data-dir {self.path.parent}`") from None

    def _migrate_2(self) -> None:
        """Schema 2 had no chain hashes: add the column (empty; the ``heads`` table the
        schema script made).  The node re-chains and re-signs its own records at start;
        other sources' old records stay unchained (docs/security.md, "Signed log")."""
        try:
            self._db.execute("BEGIN")
            self._db.execute("ALTER TABLE events ADD COLUMN chain BLOB")
            self._db.execute("UPDATE meta SET value=? WHERE key='schema'", (str(SCHEMA_VERSION),))
            self._db.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            self._db.execute("ROLLBACK")
            raise HuddleError(f"the event log {self.path} (schema 2) cannot be migrated: {exc}") from None

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

    def vouched(self) -> dict[NodeId, str]:
        rows = self._db.execute("SELECT source, address FROM vouched WHERE grp=?", (self.group,))
        return {NodeId(source): address for source, address in rows}

    def vouch(self, source: NodeId, address: str) -> None:
        self._begin(full=False)
        self._db.execute("INSERT OR IGNORE INTO vouched VALUES (?,?,?)", (self.group, bytes(source), address))

    def drop_source(self, source: NodeId) -> None:
        self._begin(full=False)
        self._db.execute("DELETE FROM events WHERE grp=? AND source=?", (self.group, bytes(source)))
        self._db.execute("DELETE FROM heads WHERE grp=? AND source=?", (self.group, bytes(source)))

    def _begin(self, full: bool) -> None:
        """Open a transaction; ``full``: one that commits with synchronous=FULL
        (SQLite changes the level only between transactions)."""
        if self._in_txn and (self._full or not full):
            return
        self.commit()
        if full:
            self._db.execute("PRAGMA synchronous=FULL")
            self._full = True
        self._db.execute("BEGIN")
        self._in_txn = True

    def stage(self, records: Sequence[LogRecord], received_from: NodeId | None, received_at: float,
              chain: Sequence[bytes] | None = None) -> None:
        """``records`` with their ``chain`` hashes: consecutive records of one source
        (a run), stored with the digest of the first only; without: any records,
        each with its digest."""
        self._begin(full=received_from is None)
        frm = None if received_from is None else bytes(received_from)
        hop = 0 if received_from is None else 1
        if chain is not None:
            if records:
                self._insert_run(records, received_at, frm, hop, chain)
            return
        rows = []
        for r in records:
            source = bytes(r.source)
            kind, body = r.kind.encode(), r.body.encode()
            rows.append((  # hops stop at what an INTEGER (and the wire) holds
                self.group, source, r.seq, r.timestamp, r.kind, r.body, min(r.hops + hop, MAX_SEQ), received_at, frm,
                record_digest(source, r.seq, r.timestamp, kind, body),
            ))
        self._db.executemany(_INSERT, rows)

    def _insert_run(self, records: Sequence[LogRecord], received_at: float, frm: bytes | None, hop: int,
                    chain: Sequence[bytes]) -> None:
        """Insert one source's consecutive records with their ``chain`` hashes: _RUN_SIZES rows
        per statement, the columns every row shares bound once and the chain hashes as one
        blob (about half the CPU of ``executemany``, which binds all eleven per row); a decoded
        :class:`RecordBatch` gives its columns as they are; hops stop at what an INTEGER (and
        the wire) holds.  Only the first row gets a digest: each other row's chain hash covers
        its content from the row before it (:meth:`verify`)."""
        n = len(records)
        hashes = b"".join(chain)
        batch = records if isinstance(records, RecordBatch) else None
        r = records[0]
        last = batch.first + n - 1 if batch is not None else records[-1].seq
        if len(chain) != n or len(hashes) != n * _CHAIN or last - r.seq != n - 1:
            raise ValueError(f"{n} records (seq {r.seq}..{last}) with {len(chain)} chain hashes, "
                             f"{len(hashes)} octets")
        first = record_digest(bytes(r.source), r.seq, r.timestamp, r.kind.encode(), r.body.encode())
        shared: tuple[object, ...] = (self.group, bytes(r.source), received_at, frm, r.seq, first, hashes)
        flat: list[object]
        if batch is not None:  # received: its columns as they are
            if batch.kind is not None and batch.hop is not None:  # one kind and hop count: bound once
                shared += (batch.kind, min(batch.hop + hop, MAX_SEQ))
                flat = list(_from_iterable(zip(batch.seqs, batch.stamps, batch.bodies, strict=True)))
                self._insert_rows(shared, flat, _INSERT_UNIFORM, _UNIFORM_COLUMNS)
                return
            hops = [min(h + hop, MAX_SEQ) for h in batch.hops] if hop else batch.hops
            flat = list(_from_iterable(zip(batch.seqs, batch.stamps, batch.kinds, batch.bodies, hops, strict=True)))
        else:
            # A loop, not zip and map over attrgetters: Python 3.11 reads a slot in the loop about 3x
            # faster than an attrgetter call does (500 rows: 140 against 450 ns a row).
            flat = []
            extend = flat.extend
            if hop:
                for r in records:
                    h = r.hops + hop
                    extend((r.seq, r.timestamp, r.kind, r.body, h if h < MAX_SEQ else MAX_SEQ))
            else:
                for r in records:
                    extend((r.seq, r.timestamp, r.kind, r.body, r.hops))
        self._insert_rows(shared, flat, _INSERT_RUN, _RUN_COLUMNS)

    def _insert_rows(self, shared: tuple[object, ...], flat: list[object], statements: dict[int, str],
                     columns: int) -> None:
        """Insert ``flat`` (``columns`` values a row) by ``statements`` (rows -> SQL), ``shared`` bound
        once per statement: as many of the largest as fit, then at most one of each smaller."""
        execute = self._db.execute
        at, left = 0, len(flat) // columns
        for size in _RUN_SIZES:
            step = size * columns
            sql = statements[size]
            while left >= size:
                execute(sql, (*shared, *flat[at : at + step]))
                at += step
                left -= size

    def add_heads(self, heads: Sequence[LogHead]) -> None:
        """Keep signed heads (in the open transaction; a head already kept is kept once)."""
        if not self._in_txn:
            self._begin(full=False)
        self._db.executemany(
            "INSERT OR IGNORE INTO heads VALUES (?,?,?,?,?,?)",
            [(self.group, bytes(h.source), h.seq, h.chain, h.signature, h.key) for h in heads])

    def heads_in(self, source: NodeId, first: int, last: int) -> list[LogHead]:
        """The heads of ``source`` kept at ``first..last``, in order."""
        rows = self._db.execute(
            "SELECT seq, chain, signature, key FROM heads WHERE grp=? AND source=? AND seq BETWEEN ? AND ? ORDER BY seq",
            (self.group, bytes(source), first, last))
        return [LogHead(source, q, bytes(c), bytes(sg), bytes(k)) for q, c, sg, k in rows]

    def chain_of(self, source: NodeId, seq: int) -> bytes | None:
        """The chain hash kept with record ``seq`` of ``source`` (None: not held, or unchained)."""
        row = self._db.execute("SELECT chain FROM events WHERE grp=? AND source=? AND seq=?",
                               (self.group, bytes(source), seq)).fetchone()
        return None if row is None or row[0] is None else bytes(row[0])

    def set_chain(self, source: NodeId, rows: Sequence[tuple[int, bytes]]) -> None:
        """Write the chain hashes ``(seq, hash)`` of records held (re-chaining own records)."""
        if not self._in_txn:
            self._begin(full=False)
        self._db.executemany("UPDATE events SET chain=? WHERE grp=? AND source=? AND seq=?",
                             [(h, self.group, bytes(source), q) for q, h in rows])

    def commit(self) -> None:
        if self._in_txn:
            self._db.execute("COMMIT")
            self._in_txn = False
        if self._full:
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._full = False

    # ------------------------------------------------------------ integrity

    def quick_check(self) -> list[str]:
        """SQLite's own structural check of the file (``PRAGMA quick_check``):
        [] when it is sound, else its complaints (at most 10)."""
        self.commit()
        try:
            rows = self._db.execute("PRAGMA quick_check(10)").fetchall()
        except sqlite3.DatabaseError as exc:
            return [str(exc)]
        found = [str(r[0]) for r in rows]
        return [] if found == ["ok"] else found

    def verify(self) -> Verified:
        """Check every row (all groups) by :func:`row_verifies`: against its digest where it
        has one, else against its chain hash from the row before it (same source, sequence
        - 1; the genesis hash before a source's first).  A row with neither is bad."""
        self.commit()
        rows = bad = 0
        examples: list[tuple[str, bytes, int]] = []
        pack, blake, sha = RECORD_HEAD.pack, hashlib.blake2b, hashlib.sha256
        last_grp = last_source = last_chain = None
        last_seq = 0
        try:
            cur = self._db.execute(
                "SELECT CAST(grp AS BLOB), source, seq, ts, CAST(kind AS BLOB), CAST(body AS BLOB), digest, chain "
                "FROM events ORDER BY grp, source, seq")
            while batch := cur.fetchmany(10_000):
                rows += len(batch)
                for grp, source, seq, ts, kind, body, digest, chained in batch:
                    # row_verifies, written out: this loop reads every row at every start
                    try:
                        if seq == last_seq + 1 and source == last_source and grp == last_grp:
                            prev = last_chain
                        else:
                            prev = GENESIS if seq == 1 else None
                        last_grp, last_source, last_seq, last_chain = grp, source, seq, chained
                        encoded = pack(source, seq, ts, len(kind)) + kind + body
                        if digest is not None:
                            ok = blake(encoded, digest_size=16).digest() == digest
                        else:
                            ok = chained is not None and prev is not None and sha(prev + encoded).digest() == chained
                    except (struct.error, TypeError):  # a damaged value of the wrong type or size
                        ok = False
                    if not ok:
                        bad += 1
                        if len(examples) < 5:
                            examples.append((bytes(grp).decode(errors="replace"), bytes(source), seq))
        except sqlite3.DatabaseError as exc:  # the table cannot be read to its end
            return Verified(rows, bad + 1, (*examples, (f"unreadable: {exc}", b"", 0)))
        return Verified(rows, bad, tuple(examples))

    def own_rows(self, source: NodeId) -> SourceState:
        """The records of ``source`` this node wrote itself (``received_from`` is None)."""
        self.commit()
        count, low, top = self._db.execute(
            "SELECT COUNT(*), MIN(seq), MAX(seq) FROM events WHERE grp=? AND source=? AND received_from IS NULL",
            (self.group, bytes(source))).fetchone()
        if not count:
            return SourceState()
        if low == 1 and count == top:
            return SourceState(contig=top)
        seqs = self._db.execute(
            "SELECT seq FROM events WHERE grp=? AND source=? AND received_from IS NULL ORDER BY seq",
            (self.group, bytes(source)))
        return SourceState.of(q for (q,) in seqs)

    def groups(self) -> list[str]:
        """The groups this file holds events of."""
        return [g for (g,) in self._db.execute("SELECT DISTINCT grp FROM events")]

    def insert_rows(self, rows: Sequence[tuple[object, ...]]) -> int:
        """Insert whole rows, digest included (``huddle repair`` copying what
        verified); returns how many were new."""
        if not rows:
            return 0
        self.commit()
        self._db.execute("BEGIN")
        before = self._db.total_changes
        self._db.executemany(_INSERT, rows)
        self._db.execute("COMMIT")
        return self._db.total_changes - before

    def own_top(self, source: NodeId) -> int:
        """The highest sequence of ``source`` this node wrote itself (committed first); 0 if none."""
        self.commit()
        row = self._db.execute(
            "SELECT seq FROM events WHERE grp=? AND source=? AND received_from IS NULL ORDER BY seq DESC LIMIT 1",
            (self.group, bytes(source))).fetchone()
        return 0 if row is None else int(row[0])

    def read(self, source: NodeId, after: int, limit: int) -> Sequence[LogRecord]:
        """Consecutive records as one :class:`RecordBatch` of columns (what a provider serves
        is encoded from them, no record made); records one by one where a gap comes first."""
        rows = self._db.execute(
            "SELECT seq, ts, kind, body, hops FROM events WHERE grp=? AND source=? AND seq>? ORDER BY seq LIMIT ?",
            (self.group, bytes(source), after, limit),
        ).fetchall()
        if not rows:
            return []
        seqs, stamps, kinds, bodies, hops = zip(*rows, strict=True)
        first = seqs[0]
        if seqs == tuple(range(first, first + len(seqs))):
            return RecordBatch(source, first, stamps, kinds, bodies, hops)
        return [make_record(source, q, ts, kind, body, hop) for q, ts, kind, body, hop in rows]

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

    def take_after(self, source: NodeId, seq: int) -> list[tuple[str, str]]:
        """Delete the records of ``source`` after ``seq`` and their heads; returns their
        kinds and bodies, in sequence order (a node that reused sequence numbers records
        them again under its new identity: docs/protocol.md 12.1)."""
        self.commit()
        key = (self.group, bytes(source), seq)
        taken = [(str(kind), str(body)) for kind, body in self._db.execute(
            "SELECT kind, body FROM events WHERE grp=? AND source=? AND seq>? ORDER BY seq", key)]
        self._db.execute("DELETE FROM events WHERE grp=? AND source=? AND seq>?", key)
        self._db.execute("DELETE FROM heads WHERE grp=? AND source=? AND seq>?", key)
        return taken

    def drop_others(self, keep: NodeId) -> int:
        """Delete every event of this group whose source is not ``keep``; returns how many."""
        self.commit()
        cur = self._db.execute("DELETE FROM events WHERE grp=? AND source<>?", (self.group, bytes(keep)))
        self._db.execute("DELETE FROM heads WHERE grp=? AND source<>?", (self.group, bytes(keep)))
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
