"""Does the event log still hold what this node wrote?  The start-up check,
the own-sequence mark, and ``huddle repair``.

A damaged ``log.sqlite`` must not be believed: a node that starts holding 53
of its own 300 events would record new events under sequence numbers its peers
already hold with other content, and the group would diverge for good.  So,
before a node uses its log (docs/protocol.md section 12):

* SQLite's own structural check (``PRAGMA quick_check``) must pass;
* every record must match the digest stored beside it (BLAKE2b of its content),
  or its chain hash from the record before it (a signed record: store.row_verifies);
* the records this node wrote itself must be contiguous from 1, and reach at
  least the **mark**: the highest own sequence the node has seen durable,
  kept outside the log in ``log-mark.json`` (written at start, on the periodic
  snapshot and at close, always after the records it names were committed
  with ``synchronous=FULL``).  An emptied or deleted log falls short of it.

A log that fails is refused with a :class:`LogDamaged` naming ``huddle repair``.
:func:`repair` keeps every record that reads and verifies, moves the damaged
file aside (``log.sqlite.damaged-<time>``) and gives the node a new identity,
the old one listed in ``previous-ids``: the records it may have lost were
in the old identity's name, which the group still holds and replays to it as
any other source's, and the new identity's sequence starts at 1 with nothing
in the group to collide with (a crashed node "should have a new UUID", as the
DerbyOS document says).
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import struct
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from ..errors import HuddleError
from ..ids import NodeId
from ..wire import LogRecord, check_record
from .store import GENESIS, SqliteStore, record_digest, row_verifies

__all__ = ["MARK_FILE", "PREVIOUS_FILE", "Check", "LogDamaged", "LogGuard", "Repaired", "check", "read_mark",
           "repair", "write_mark"]

log = logging.getLogger("huddle.log")

LOG_FILE = "log.sqlite"
MARK_FILE = "log-mark.json"
PREVIOUS_FILE = "previous-ids"
_SKIPS = 40  # unreadable stretches one source's scan steps over before it gives that source up


class LogDamaged(HuddleError):
    """The event log fails its start-up check; ``huddle repair`` is the way out."""


def _way_out(data_dir: Path) -> str:
    return (f"Nothing was changed. Run `huddle repair --data-dir {data_dir}`: it keeps the records that verify, "
            "moves the damaged file aside and gives this node a new identity (the group replays the old "
            "identity's records to it), so no sequence number is ever reused.")


# ---------------------------------------------------------------- the mark


def read_mark(data_dir: Path, node: NodeId) -> dict[str, int]:
    """Per group, the highest own sequence ``node`` saw durable; {} if none
    was kept (a data dir from before the mark, or another identity's mark)."""
    path = data_dir / MARK_FILE
    try:
        raw = json.loads(path.read_text())
        if raw.get("node") != str(node):
            return {}
        return {str(g): int(q) for g, q in raw["own"].items()}
    except FileNotFoundError:
        return {}
    except (ValueError, TypeError, KeyError, AttributeError):
        log.warning("%s is unreadable: the own-sequence mark is ignored this time", path)
        return {}


def write_mark(data_dir: Path, node: NodeId, group: str, top: int) -> None:
    marks = read_mark(data_dir, node)
    marks[group] = top
    path = data_dir / MARK_FILE
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"node": str(node), "own": marks}, sort_keys=True) + "\n")
    os.replace(tmp, path)


# --------------------------------------------------------------- the check


@dataclass(frozen=True, slots=True)
class Check:
    """What the start-up check found: ``problems`` is empty when the log is whole."""

    problems: tuple[str, ...]
    rows: int
    own: int
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems


def check(store: SqliteStore, node: NodeId, mark: int) -> Check:
    """SQLite's check, every record's digest or chain hash, and this node's own records
    (contiguous from 1, up to at least ``mark``) in ``store``'s group."""
    started = time.perf_counter()
    problems: list[str] = []
    sound = store.quick_check()
    if sound:
        problems.append("SQLite's check of the file fails (" + "; ".join(sound[:3]) + ")")
    verified = store.verify()
    if verified.bad:
        where = ", ".join(f"{s.hex()[:8]}:{q}" for _g, s, q in verified.examples[:3])
        problems.append(f"{verified.bad} of {verified.rows} records do not match their stored digest or chain hash ({where})")
    own = store.own_rows(node)
    if own.ahead:
        gaps = ", ".join(f"{a}..{b}" for a, b in own.missing()[:3])
        problems.append(f"this node's own records have holes (missing {gaps})")
    if own.top < mark:
        problems.append(f"it holds this node's own records up to {own.top}, but the node had written {mark} "
                        f"(see {MARK_FILE}): the log was emptied, replaced or cut")
    return Check(tuple(problems), verified.rows, own.count(), time.perf_counter() - started)


class LogGuard:
    """Opens a node's log for one group, refuses it if damaged, and keeps the mark."""

    def __init__(self, data_dir: Path, group: str, node: NodeId) -> None:
        self.data_dir, self.group, self.node = data_dir, group, node
        self.mark = read_mark(data_dir, node).get(group, 0)
        self.checked: Check | None = None

    def open(self) -> SqliteStore:
        """The checked store; raises :class:`LogDamaged` if the log fails the check."""
        path = self.data_dir / LOG_FILE
        try:
            store = SqliteStore(path, self.group)
        except HuddleError as exc:
            raise LogDamaged(f"{exc}. {_way_out(self.data_dir)}") from None
        result = check(store, self.node, self.mark)
        if not result.ok:
            store.close()
            raise LogDamaged(f"the event log {path} is damaged: {'; '.join(result.problems)}. "
                             f"{_way_out(self.data_dir)}")
        self.checked = result
        log.info("event log checked: %d records (%d of this node's own) in %.2f s",
                 result.rows, result.own, result.seconds)
        self.note(store)
        return store

    def note(self, store: SqliteStore) -> None:
        """Raise the mark to the node's own records now committed (durably: FULL)."""
        top = store.own_top(self.node)
        if top > self.mark:
            write_mark(self.data_dir, self.node, self.group, top)
            self.mark = top


# -------------------------------------------------------------- the repair


@dataclass(frozen=True, slots=True)
class Repaired:
    """What :func:`repair` did.  ``problems`` empty: the log was whole, nothing changed."""

    problems: tuple[str, ...]
    kept: int = 0  # records that read and verify, in the new log
    dropped: int = 0  # records read that do not verify (left in the file aside)
    unreadable: int = 0  # stretches of the file that could not be read
    aside: Path | None = None
    old_id: NodeId | None = None
    new_id: NodeId | None = None


_Row = tuple[str, bytes, int, float, str, str, int, float, bytes | None, bytes]


def _node_id(data_dir: Path) -> NodeId | None:
    try:
        return NodeId.from_hex((data_dir / "node-id").read_text())
    except (FileNotFoundError, ValueError):
        return None


def _problems(data_dir: Path, node: NodeId | None) -> list[str]:
    """Every group's check (the mark's groups and the log's), as the node would run it."""
    path = data_dir / LOG_FILE
    marks = read_mark(data_dir, node) if node is not None else {}
    if not path.exists():
        return [f"{path} is missing, but this node had written records"] if any(marks.values()) else []
    who = node if node is not None else NodeId(bytes(16))  # no identity: no own records to check
    problems: list[str] = []
    try:
        store = SqliteStore(path, "")
        try:
            groups = sorted(set(marks) | set(store.groups())) or [""]
        finally:
            store.close()
        for group in groups:
            store = SqliteStore(path, group)
            try:
                problems += [f"group {group!r}: {p}" for p in check(store, who, marks.get(group, 0)).problems]
            finally:
                store.close()
    except (HuddleError, sqlite3.DatabaseError) as exc:
        problems.append(str(exc))
    return problems


_SELECT_3 = ("SELECT grp, source, seq, ts, kind, body, hops, received_at, received_from, digest, chain "
             "FROM events WHERE grp=? AND source=? AND seq>? ORDER BY seq")
_SELECT_2 = _SELECT_3.replace("digest, chain", "digest, NULL")
_SELECT_1 = _SELECT_3.replace("digest, chain", "NULL, NULL")


def _salvage(db: sqlite3.Connection, counts: dict[str, int]) -> Iterator[_Row]:
    """Every events row that reads and verifies; steps over what cannot be read."""
    columns = {bytes(r[1]).decode() for r in db.execute("PRAGMA table_info(events)")}  # text_factory: bytes
    has_digest = "digest" in columns  # schema 1 had none: its rows are checked by check_record alone
    select = _SELECT_3 if "chain" in columns else _SELECT_2 if has_digest else _SELECT_1
    try:
        keys = db.execute("SELECT DISTINCT grp, source FROM events").fetchall()
    except sqlite3.DatabaseError:
        counts["unreadable"] += 1
        keys = []
        try:
            for key in db.execute("SELECT grp, source FROM events GROUP BY grp, source"):
                keys.append(key)
        except sqlite3.DatabaseError:
            counts["unreadable"] += 1
    for raw_grp, source in keys:
        try:
            grp = bytes(raw_grp).decode()
        except (UnicodeDecodeError, TypeError):
            counts["unreadable"] += 1
            continue
        after, step, skips = 0, 1, 0
        prev: object = GENESIS  # the chain hash before the next row, if it follows the last one read
        while skips < _SKIPS:
            try:
                for row in db.execute(select, (grp, source, after)):
                    follows = row[2] == after + 1
                    after, step = row[2], 1
                    good = _verified(row, has_digest, prev if follows else None)
                    prev = row[10]
                    if good is None:
                        counts["dropped"] += 1
                    else:
                        yield good
                break
            except sqlite3.DatabaseError:
                counts["unreadable"] += 1
                skips += 1
                prev = None  # rows were stepped over: the next one read follows none read
                after += step
                step *= 2


def _verified(row: tuple[object, ...], has_digest: bool, prev: object) -> _Row | None:
    """The row to keep, or None: it does not read as a record, fails its digest or
    its chain hash from ``prev`` (store.row_verifies), or 2's record checks."""
    grp, source, seq, ts, kind, body, hops, received_at, frm, digest, chain = row
    try:
        if not (isinstance(grp, bytes) and isinstance(source, bytes) and isinstance(seq, int)
                and isinstance(ts, float) and isinstance(kind, bytes) and isinstance(body, bytes)
                and isinstance(hops, int) and isinstance(received_at, float)
                and (frm is None or (isinstance(frm, bytes) and len(frm) == 16))):
            return None
        if has_digest and not row_verifies(
                prev if isinstance(prev, bytes) else None, source, seq, ts, kind, body,
                digest if isinstance(digest, bytes) else None, chain if isinstance(chain, bytes) else None):
            return None
        ours = record_digest(source, seq, ts, kind, body)
        text_kind, text_body = kind.decode(), body.decode()
        check_record(LogRecord(NodeId(source), seq, ts, text_kind, text_body, hops))
    except (UnicodeDecodeError, struct.error, ValueError, HuddleError):
        return None
    return (grp.decode(), source, seq, ts, text_kind, text_body, hops, received_at, frm, ours)


def repair(data_dir: Path, *, new_id: Callable[[], NodeId] = NodeId.random, always: bool = False) -> Repaired:
    """Check the log as a node would; if it fails, keep the records that
    verify in a new ``log.sqlite``, move the damaged file aside, and give the
    node a new identity: ``new_id()`` (the CLI's makes a new key and returns the
    id it gives).  ``always``: a new identity even for a whole log.  The caller
    holds the data dir's lock."""
    node = _node_id(data_dir)
    problems = _problems(data_dir, node)
    if not problems:
        if always:
            old_id, taken = take_new_identity(data_dir, new_id())
            return Repaired((), old_id=old_id, new_id=taken)
        return Repaired(())
    path = data_dir / LOG_FILE
    aside: Path | None = None
    counts = {"kept": 0, "dropped": 0, "unreadable": 0}
    if path.exists():
        aside = path.with_name(f"{LOG_FILE}.damaged-{time.strftime('%Y%m%dT%H%M%S')}-{os.getpid()}")
        for suffix in ("", "-wal", "-shm"):  # the WAL goes with its file: SQLite finds it by name
            if Path(f"{path}{suffix}").exists():
                os.replace(f"{path}{suffix}", f"{aside}{suffix}")
        fresh = SqliteStore(path, "")
        try:
            old = sqlite3.connect(aside, isolation_level=None)
            old.text_factory = bytes
            try:
                batch: list[_Row] = []
                for row in _salvage(old, counts):
                    batch.append(row)
                    if len(batch) >= 10_000:
                        counts["kept"] += fresh.insert_rows(batch)
                        batch = []
                counts["kept"] += fresh.insert_rows(batch)
            except sqlite3.DatabaseError:  # not even the table's layout reads
                counts["unreadable"] += 1
            finally:
                old.close()
        finally:
            fresh.close()
    old_id, taken = take_new_identity(data_dir, new_id())
    return Repaired(tuple(problems), counts["kept"], counts["dropped"], counts["unreadable"], aside, old_id, taken)


def take_new_identity(data_dir: Path, new: NodeId, why: str = "repair") -> tuple[NodeId | None, NodeId]:
    """``new`` as the ``node-id``; the old one is appended to ``previous-ids`` (with
    ``why``) and its mark dropped."""
    old = _node_id(data_dir)
    if old is not None:
        with (data_dir / PREVIOUS_FILE).open("a") as f:
            f.write(f"{old} {time.strftime('%Y-%m-%dT%H:%M:%S')} {why}\n")
    path = data_dir / "node-id"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{new}\n")
    os.replace(tmp, path)
    (data_dir / MARK_FILE).unlink(missing_ok=True)
    return old, new
