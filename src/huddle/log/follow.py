"""``huddle export --follow``: a node's export that grows as its log grows.

Every interval the events and statistics rows the export does not hold yet
are written as a new *part*: ``OUT/events/NNNNNN/events.<ext>`` and
``OUT/stats/NNNNNN/stats.<ext>``, the export's own tables (docs/export.md) in
numbered directories.  A part is written whole under ``OUT/.partial`` (hidden:
Spark, the pipeline's checks and ``os.walk``-style readers skip it) and then
renamed into place, one ``rename`` of its directory, so a reader listing the
export sees a part entirely or not at all; a part in place is never written
again.  ``huddle pipeline run --input OUT`` reads the parts as it reads any
export (it searches directories at any depth), and ``huddle pipeline live``
reads them as Spark's file-stream source does: each new file once.

What has been exported is known from the parts themselves, so a restart
continues after them without a file of its own to keep in step: the
``(group, source, seq)`` of every event part (its three key columns), and
the number of statistics rows (the node only ever appends them, so the
first rows in ``rowid`` order are the ones exported).  Per source this is a
:class:`~huddle.log.model.SourceState`: the exported prefix and the ranges
beyond a gap.  Each poll asks the log, by its primary key, for the rows past
each source's top and for the rows in each gap (a node that was missing a
range and got it since), and finds sources it has not seen yet by a skip
scan over the key: no poll reads the whole log.

A row the node deletes after it was exported (a log repaired, a source's
returned records dropped) stays in the export: parts are only ever added.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import HuddleError
from ..ids import NodeId
from .export import write_tables
from .model import SourceState

__all__ = ["PART_ROWS", "Followed", "Part", "follow", "parts"]

PART_ROWS = 1_000_000  # the most events one part holds: a first export of a big log is cut into parts of this size
_FETCH = 10_000  # rows read from the log at a time (memory stays flat whatever a part holds)
_PARTIAL = ".partial"  # where a part is written before its rename: hidden from every reader
_TABLES = ("events", "stats")
_SELECT = "SELECT grp, source, seq, ts, kind, body, hops, received_at, received_from FROM events WHERE grp=? AND source=? "
_IN_GAP = _SELECT + "AND seq BETWEEN ? AND ? ORDER BY seq"
_PAST_TOP = _SELECT + "AND seq>? ORDER BY seq"


@dataclass(frozen=True, slots=True)
class Part:
    """One part written: its number and how many rows each table got."""

    number: int
    events: int
    stats: int


def parts(out: Path, table: str) -> list[tuple[int, Path]]:
    """The parts of ``table`` in place under ``out``, by number: (number, file)."""
    found = []
    base = out / table
    if base.is_dir():
        for entry in base.iterdir():
            if entry.name.isdigit():
                found += [(int(entry.name), f) for f in entry.iterdir() if f.stem == table]
    return sorted(found)


_KEY = ("node", "group", "source", "seq")


def _exported_keys(file: Path) -> Iterator[tuple[str, str, str, int]]:
    """The ``(node, group, source, seq)`` of every row of an event part."""
    if file.suffix == ".jsonl":
        with file.open(encoding="utf-8") as fh:
            for line in fh:
                row = json.loads(line)
                yield row["node"], row["group"], row["source"], int(row["seq"])
        return
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow: deferred, only Parquet needs it

    table = pq.read_table(file, columns=list(_KEY))
    yield from zip(*(table.column(c).to_pylist() for c in _KEY), strict=True)


def _rows(file: Path) -> int:
    if file.suffix == ".jsonl":
        with file.open("rb") as fh:
            return sum(1 for _ in fh)
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow: deferred, only Parquet needs it

    return int(pq.ParquetFile(file).metadata.num_rows)


class Followed:
    """What an export directory holds, and the next part to write to it.

    ``held[(group, source)]``: the exported sequence numbers of each source;
    ``stats``: how many statistics rows are exported.  ``node``: the node
    whose log is followed (an export of another node's log is refused)."""

    def __init__(self, out: Path, fmt: str, node: str | None = None) -> None:
        if fmt not in ("parquet", "jsonl"):
            raise HuddleError(f"unknown export format {fmt!r}: use parquet or jsonl")
        self.out, self.fmt = out, fmt
        for stem in _TABLES:
            if any((out / f"{stem}.{ext}").exists() for ext in ("parquet", "jsonl")):
                raise HuddleError(f"{out} holds a one-off export ({stem}.parquet or {stem}.jsonl): "
                                  "follow into a directory of its own")
        self.held: dict[tuple[str, str], SourceState] = {}
        self.stats = 0
        self.next = 1
        event_parts, stat_parts = parts(out, "events"), parts(out, "stats")
        for number, file in event_parts + stat_parts:
            if file.suffix != f".{fmt}":
                raise HuddleError(f"{file} is not {fmt}: follow this export with --format {file.suffix[1:]}")
            self.next = max(self.next, number + 1)
        try:
            for _, file in event_parts:
                runs: dict[tuple[str, str], list[int]] = {}
                for holder, group, source, seq in _exported_keys(file):
                    if node is not None and holder != node:
                        raise HuddleError(f"{out} is the export of node {holder}, not of {node}: "
                                          "give each node an --out of its own")
                    runs.setdefault((group, source), []).append(seq)
                for pair, seqs in runs.items():
                    self.add(pair, sorted(seqs))
            for _, file in stat_parts:
                self.stats += _rows(file)
        except (OSError, ValueError, KeyError) as exc:  # pyarrow's errors are ValueErrors (ArrowInvalid)
            raise HuddleError(f"{file} cannot be read ({exc}): move the damaged part away to follow "
                              "this export again (its rows are then exported anew)") from None

    def add(self, pair: tuple[str, str], seqs: list[int]) -> None:
        """Mark ``seqs`` (increasing) of ``pair`` exported."""
        state = self.held.setdefault(pair, SourceState())
        first = prev = seqs[0]
        for seq in seqs[1:]:
            if seq != prev + 1:
                state.add(first, prev)
                first = seq
            prev = seq
        state.add(first, prev)

    def events(self) -> int:
        return sum(state.count() for state in self.held.values())


class _Log:
    """The node's log, read only, by its primary key."""

    def __init__(self, data_dir: Path) -> None:
        db_path, id_path = data_dir / "log.sqlite", data_dir / "node-id"
        if not db_path.exists() or not id_path.exists():
            raise HuddleError(f"{data_dir} is not a huddle data directory (no log.sqlite / node-id)")
        self.node = id_path.read_text().strip()
        # Read only (the node writes): the WAL lets a reader in while it does.
        self.db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, check_same_thread=False)

    def pairs(self) -> Iterator[tuple[str, bytes]]:
        """Every (group, source) with events: a skip scan, one index seek each."""
        row = self.db.execute("SELECT grp, source FROM events ORDER BY grp, source LIMIT 1").fetchone()
        while row is not None:
            yield row[0], row[1]
            row = self.db.execute("SELECT grp, source FROM events WHERE (grp, source) > (?, ?) "
                                  "ORDER BY grp, source LIMIT 1", row).fetchone()

    def after(self, group: str, source: bytes, state: SourceState) -> Iterator[list[tuple[Any, ...]]]:
        """The rows of one source the export lacks: in its gaps, then past its top."""
        key = (group, source)
        for first, last in state.missing():
            yield from self._fetch(_IN_GAP, (*key, first, last))
        yield from self._fetch(_PAST_TOP, (*key, state.top))

    def stats_after(self, exported: int) -> list[tuple[Any, ...]]:
        return self.db.execute("SELECT ts, grp, event, peer, detail FROM node_stats ORDER BY rowid LIMIT -1 OFFSET ?",
                               (exported,)).fetchall()

    def _fetch(self, sql: str, args: tuple[Any, ...]) -> Iterator[list[tuple[Any, ...]]]:
        cur = self.db.execute(sql, args)
        while rows := cur.fetchmany(_FETCH):
            yield rows

    def close(self) -> None:
        self.db.close()


def _poll(log: _Log, done: Followed) -> Part | None:
    """Write the rows ``done`` lacks as one part (at most :data:`PART_ROWS`
    events); None if there were none."""
    taken: dict[tuple[str, str], list[int]] = {}
    room = PART_ROWS

    def batches() -> Iterator[list[dict[str, Any]]]:
        nonlocal room
        for group, raw in log.pairs():
            source = str(NodeId(raw))
            state = done.held.get((group, source), SourceState())
            for rows in log.after(group, raw, state):
                rows = rows[:room]  # noqa: PLW2901 - the part's cap
                room -= len(rows)
                taken.setdefault((group, source), []).extend(r[2] for r in rows)
                yield [{"node": log.node, "group": grp, "source": source, "seq": seq, "timestamp": ts, "kind": kind,
                        "body": body, "hops": hops, "received_at": at,
                        "received_from": None if frm is None else str(NodeId(frm))}
                       for grp, _, seq, ts, kind, body, hops, at, frm in rows]
                if room <= 0:
                    return

    stat_rows = [{"node": log.node, "group": grp, "ts": ts, "event": event,
                  "peer": None if peer is None else str(NodeId(peer)), "detail": detail}
                 for ts, grp, event, peer, detail in log.stats_after(done.stats)]
    number = done.next
    partial = done.out / _PARTIAL / f"{number:06d}"
    shutil.rmtree(partial, ignore_errors=True)  # a part a killed run left half written
    events = write_tables(partial, done.fmt, batches(), stat_rows)
    if not events and not stat_rows:
        shutil.rmtree(partial)
        return None
    for stem in _TABLES:  # each table's part into place whole: one rename of its directory
        table = partial / stem
        table.mkdir()
        if (events if stem == "events" else stat_rows):
            (partial / f"{stem}.{done.fmt}").rename(table / f"{stem}.{done.fmt}")
            table.rename(done.out / stem / f"{number:06d}")
    shutil.rmtree(partial)
    for pair, seqs in taken.items():
        done.add(pair, sorted(seqs))
    done.stats += len(stat_rows)
    done.next += 1
    return Part(number, events, len(stat_rows))


def follow(data_dir: Path, out: Path, fmt: str = "parquet", *, interval: float = 1.0,
           stop: threading.Event | None = None, on_part: Callable[[Part], None] | None = None) -> Followed:
    """Export ``data_dir``'s log to ``out`` as parts, a poll every ``interval``
    seconds, until ``stop`` is set (None: one poll, then return).  A poll that
    fills a part goes on at once (a first export of a big log); ``on_part`` is
    told of each part written.  Returns what the export holds."""
    if interval <= 0:
        raise HuddleError(f"--interval must be positive, got {interval}")
    log = _Log(data_dir)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HuddleError(f"cannot create {out}: {exc.strerror}") from None
    done = Followed(out, fmt, log.node)
    for stem in _TABLES:  # there from the start, for a reader watching them
        (out / stem).mkdir(exist_ok=True)
    try:
        while True:
            part = _poll(log, done)
            if part is not None and on_part is not None:
                on_part(part)
            if stop is None:
                break
            if part is not None and part.events >= PART_ROWS:
                continue
            if stop.wait(interval):
                break
    finally:
        log.close()
        shutil.rmtree(out / _PARTIAL, ignore_errors=True)
    return done

