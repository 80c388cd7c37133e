"""The Parquet writer of ``huddle export`` and ``huddle simulate --export``."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from huddle.log import export


def rows(first: int, n: int) -> list[dict[str, object]]:
    return [{"node": "n", "group": "g", "source": "s", "seq": q, "timestamp": 1.0, "kind": "k", "body": "{}",
             "hops": 0, "received_at": 1.0, "received_from": None} for q in range(first, first + n)]


def test_small_batches_are_gathered_into_full_row_groups(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "ROW_GROUP_ROWS", 100)
    batches = [rows(1 + 7 * i, 7) for i in range(43)] + [[]]  # 301 rows in batches of 7, and an empty one
    assert export.write_tables(tmp_path, "parquet", iter(batches), []) == 301
    meta = pq.read_metadata(tmp_path / "events.parquet")
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [100, 100, 100, 1]
    assert pq.read_table(tmp_path / "events.parquet").column("seq").to_pylist() == list(range(1, 302))


def test_a_batch_larger_than_a_row_group_is_split(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(export, "ROW_GROUP_ROWS", 100)
    assert export.write_tables(tmp_path, "parquet", iter([rows(1, 250), rows(251, 30)]), []) == 280
    meta = pq.read_metadata(tmp_path / "events.parquet")
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [100, 100, 80]
    assert pq.read_table(tmp_path / "events.parquet").column("seq").to_pylist() == list(range(1, 281))
