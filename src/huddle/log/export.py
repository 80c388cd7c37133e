"""Export a node's log for the data pipeline: Parquet or JSON Lines.

``OUT/events.<ext>`` has one row per event the node holds, with its receipt
metadata; ``OUT/stats.<ext>`` has the node's statistics rows (membership
changes and periodic counter snapshots).  Schemas: docs/export.md.  Records
are streamed in batches, so memory stays flat whatever the log's size.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..errors import HuddleError
from .store import SqliteStore

__all__ = ["event_schema", "export", "stat_schema", "write_tables"]

PIPELINE_INSTALL = "pip install 'huddle[pipeline]' (or pyarrow alone)"



def event_schema() -> Any:
    import pyarrow as pa  # noqa: PLC0415 - pyarrow: deferred, only Parquet needs it

    return pa.schema([
        pa.field("node", pa.string(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("timestamp", pa.float64(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("body", pa.string(), nullable=False),
        pa.field("hops", pa.int32(), nullable=False),
        pa.field("received_at", pa.float64(), nullable=False),
        pa.field("received_from", pa.string(), nullable=True),
    ])


def stat_schema() -> Any:
    import pyarrow as pa  # noqa: PLC0415 - pyarrow: deferred, only Parquet needs it

    return pa.schema([
        pa.field("node", pa.string(), nullable=False),
        pa.field("group", pa.string(), nullable=False),
        pa.field("ts", pa.float64(), nullable=False),
        pa.field("event", pa.string(), nullable=False),
        pa.field("peer", pa.string(), nullable=True),
        pa.field("detail", pa.string(), nullable=False),
    ])


def export(data_dir: Path, out: Path, fmt: str = "parquet") -> int:
    """Write the log in ``data_dir`` to the directory ``out``; returns the number of events."""
    db_path = data_dir / "log.sqlite"
    id_path = data_dir / "node-id"
    if not db_path.exists() or not id_path.exists():
        raise HuddleError(f"{data_dir} is not a huddle data directory (no log.sqlite / node-id)")
    if fmt not in ("parquet", "jsonl"):
        raise HuddleError(f"unknown export format {fmt!r}: use parquet or jsonl")
    node = id_path.read_text().strip()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise HuddleError(f"cannot create {out}: {exc.strerror}") from None
    store = SqliteStore(db_path, group="")
    try:
        event_rows = (
            [
                {
                    "node": node, "group": r.group, "source": str(r.record.source), "seq": r.record.seq,
                    "timestamp": r.record.timestamp, "kind": r.record.kind, "body": r.record.body,
                    "hops": r.record.hops, "received_at": r.received_at,
                    "received_from": None if r.received_from is None else str(r.received_from),
                }
                for r in batch
            ]
            for batch in store.scan()
        )
        stat_rows = [
            {"node": node, "group": grp, "ts": ts, "event": event,
             "peer": None if peer is None else str(peer), "detail": detail}
            for ts, grp, event, peer, detail in store.scan_stats()
        ]
        count = write_tables(out, fmt, event_rows, stat_rows)
    finally:
        store.close()
    return count


def write_tables(out: Path, fmt: str, event_batches: Iterable[Any], stat_rows: list[dict[str, Any]]) -> int:
    """Write ``events`` (given in batches: lists of row dicts, or Arrow tables
    in the event schema) and ``stats`` into ``out``; returns the event rows."""
    if fmt != "jsonl":
        try:  # pyarrow is the pipeline extra's: a node may not have it
            import pyarrow  # noqa: F401, PLC0415 - deferred, only Parquet needs it
        except ImportError:
            raise HuddleError(f"Parquet export needs pyarrow: {PIPELINE_INSTALL}, or use --format jsonl") from None
    out.mkdir(parents=True, exist_ok=True)
    if fmt == "jsonl":
        count = _write_jsonl(out / "events.jsonl", event_batches)
        _write_jsonl(out / "stats.jsonl", iter([stat_rows]))
    else:
        count = _write_parquet(out / "events.parquet", event_schema(), event_batches)
        _write_parquet(out / "stats.parquet", stat_schema(), iter([stat_rows]))
    return count


def _write_jsonl(path: Path, batches: Any) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as fh:
        for batch in batches:
            if not isinstance(batch, list):  # an Arrow table
                for part in batch.to_batches(max_chunksize=50_000):
                    rows = part.to_pylist()
                    for row in rows:
                        fh.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
                        fh.write("\n")
                count += batch.num_rows
                continue
            for row in batch:
                fh.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")))
                fh.write("\n")
            count += len(batch)
    return count


ROW_GROUP_ROWS = 131_072  # rows per Parquet row group: big enough to read fast, small enough to split


def _write_parquet(path: Path, schema: Any, batches: Any) -> int:
    """Write ``batches`` as one Parquet file, in row groups of
    :data:`ROW_GROUP_ROWS` whatever the batches' sizes (a row group per small
    batch would make readers pay per group: Spark and DuckDB both read by
    row group)."""
    try:
        import pyarrow as pa  # noqa: PLC0415 - pyarrow: deferred, only Parquet needs it
        import pyarrow.parquet as pq  # noqa: PLC0415 - as above
    except ImportError:
        raise HuddleError(f"Parquet export needs pyarrow: {PIPELINE_INSTALL}, or use --format jsonl") from None
    count = 0
    pending: list[Any] = []
    held = 0
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        def flush(final: bool) -> None:
            nonlocal pending, held
            if not pending:
                return
            whole = pa.concat_tables(pending)
            cut = held if final else held - held % ROW_GROUP_ROWS
            if cut:
                writer.write_table(whole.slice(0, cut), row_group_size=ROW_GROUP_ROWS)
            pending, held = ([whole.slice(cut)], held - cut) if cut < held else ([], 0)

        for batch in batches:
            if isinstance(batch, list):
                if not batch:
                    continue
                batch = pa.Table.from_pylist(batch, schema=schema)  # noqa: PLW2901
            pending.append(batch)
            held += batch.num_rows
            count += batch.num_rows
            if held >= ROW_GROUP_ROWS:
                flush(final=False)
        flush(final=True)
    return count
