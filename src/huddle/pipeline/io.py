"""Read exported logs; write the pipeline's tables.

An input path is any path or URI Hadoop understands (``/data/run1``,
``file:///…``, ``hdfs://…``, ``s3a://…`` when the cluster has the S3A jars).
It may be:

- one file: ``…/events.parquet``, ``…/events.jsonl`` (or any ``*.parquet``,
  ``*.jsonl``, ``*.json``): read as it is, in the format its name says;
- a directory: every ``events.parquet`` and ``events.jsonl`` found below it, at
  any depth, so one ``huddle export`` directory, the directory
  ``huddle simulate --export`` wrote (one sub-directory per node) or a tree of
  many runs all work.  Statistics are found the same way (``stats.*``).

Schemas are given (:mod:`.schemas`), never inferred; a JSON line that does not
fit fails the read (FAILFAST) instead of becoming a row of nulls, and a local
path that does not exist, or a directory with no table in it, is an
:class:`InputError` before any job starts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql.types import DataType, DoubleType, IntegerType, LongType, StringType, StructType

from ..errors import HuddleError
from . import schemas

__all__ = [
    "FooterCount", "InputError", "check_inputs", "count_from_footers", "read_events", "read_stats", "read_table",
    "write_table", "write_text",
]


class InputError(HuddleError):
    """An input path is missing, holds no exported table, or a table breaks its schema."""


def _local(path: str) -> Path | None:
    """The local file a path names (plain path or ``file:``), None for other URIs."""
    if path.startswith("file:"):
        return Path(re.sub(r"^file:(//)?", "", path) or "/")
    if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", path):
        return None
    return Path(path)

_PARQUET = (".parquet",)
_JSON = (".jsonl", ".json", ".ndjson")


def check_inputs(paths: Sequence[str]) -> None:
    """Raise :class:`InputError` if there is no path or a local one does not
    exist (URIs are checked when read); cheap, so callers can check before
    starting Spark."""
    if not paths:
        raise InputError("no input paths")
    for path in paths:
        local = _local(path)
        if local is not None and not local.exists():
            raise InputError(f"input {path} does not exist")


def read_table(spark: SparkSession, paths: Sequence[str], stem: str, schema: StructType, *,
               required: bool = True) -> DataFrame:
    """Every ``stem.parquet`` / ``stem.jsonl`` under ``paths`` (see the module's
    doc), as one DataFrame with ``schema``.  ``required``: a path with no such
    table is an :class:`InputError` (else it adds no rows)."""
    check_inputs(paths)
    parts: list[DataFrame] = []
    for path in paths:
        try:
            found = [df for df in _read_one(spark, path, stem, schema) if df.inputFiles()]
        except AnalysisException as exc:  # a URI that does not resolve, a file Spark cannot read
            raise InputError(f"cannot read {path}: {exc}") from None
        if not found and required:
            raise InputError(f"no {stem}.parquet or {stem}.jsonl under {path} (give the directories huddle export "
                             "or huddle simulate --export wrote, or the files in them)")
        parts += found
    if not parts:
        return spark.createDataFrame([], schema)
    return reduce(DataFrame.unionByName, parts)


def _read_one(spark: SparkSession, path: str, stem: str, schema: StructType) -> list[DataFrame]:
    """One path: a file read as its name says, or a directory searched for ``stem`` tables."""
    name = path.rstrip("/").rsplit("/", 1)[-1].lower()
    if name.endswith(_PARQUET):
        return [spark.read.schema(schema).parquet(path)]
    if name.endswith(_JSON):
        return [spark.read.schema(schema).option("mode", "FAILFAST").json(path)]
    def tree(ext: str) -> DataFrameReader:
        return spark.read.schema(schema).option("recursiveFileLookup", "true").option("pathGlobFilter", f"{stem}.{ext}")
    return [tree("parquet").parquet(path), tree("jsonl").option("mode", "FAILFAST").json(path)]


def read_events(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """The ``events`` tables under ``paths``, in :data:`schemas.EVENTS`."""
    return read_table(spark, paths, "events", schemas.EVENTS)


def read_stats(spark: SparkSession, paths: Sequence[str]) -> DataFrame:
    """The ``stats`` tables under the directories in ``paths`` and beside the
    event files named in them (``…/events.parquet`` -> ``…/stats.parquet``),
    in :data:`schemas.STATS`; empty if there are none (stats are optional)."""
    parts: list[DataFrame] = []
    for path in paths:
        stripped = path.rstrip("/")
        head, _, name = stripped.rpartition("/")
        if name.lower().endswith(_PARQUET + _JSON):
            stem, _, ext = name.rpartition(".")
            sibling = f"{head}/stats.{ext}" if head else f"stats.{ext}"
            local = _local(sibling)
            if stem != "events" or (local is not None and not local.exists()):
                continue
            try:
                parts += [df for df in _read_one(spark, sibling, "stats", schemas.STATS) if df.inputFiles()]
            except AnalysisException:
                continue  # no stats beside this file
        else:
            parts.append(read_table(spark, [path], "stats", schemas.STATS, required=False))
    if not parts:
        return spark.createDataFrame([], schemas.STATS)
    return reduce(DataFrame.unionByName, parts)


def write_table(df: DataFrame, path: str, files: int | None = 1, *, append: bool = False) -> None:
    """Write ``df`` as Parquet at ``path`` (a directory), replacing what is
    there (``append``: adding to it).  ``files``: how many part files (1 for
    the small summary tables; None keeps Spark's partitioning, for large ones)."""
    out = df if files is None else df.coalesce(files)
    out.write.mode("append" if append else "overwrite").option("compression", "zstd").parquet(path)


def write_text(spark: SparkSession, path: str, text: str) -> None:
    """Write one text file (the report) at ``path``: a local path directly,
    any other URI through Hadoop's file system, as the tables are."""
    local = _local(path)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text, encoding="utf-8")
        return
    jvm: Any = spark.sparkContext._jvm  # Hadoop's FileSystem has no Python API
    hadoop_path = jvm.org.apache.hadoop.fs.Path(path)
    fs = hadoop_path.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration())
    stream = fs.create(hadoop_path, True)
    try:
        stream.write(bytearray(text.encode("utf-8")))
    finally:
        stream.close()


@dataclass(frozen=True)
class FooterCount:
    """What the Parquet footers of the input files say: rows, nodes, groups."""

    rows: int
    nodes: frozenset[str]
    groups: frozenset[str]


_ARROW_TYPES: dict[type[DataType], tuple[str, ...]] = {
    StringType: ("string", "large_string"), LongType: ("int64",), IntegerType: ("int32",), DoubleType: ("double",),
}


def count_from_footers(files: Sequence[str], schema: StructType) -> FooterCount | None:
    """Rows, nodes and groups of local Parquet ``files``, read from their
    footers alone (no row is read), when the footers can answer: every file
    local Parquet with every column of ``schema`` in its type, no null in a
    required column (the column declared required, or a null count of 0 in
    every row group's statistics), and ``node`` and ``group`` each one value
    per row group (min = max in the statistics, as ``huddle export`` writes).
    None when any of that cannot be told from the footers: the caller then
    counts with a pass over the rows, which also reports what is wrong."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow: deferred to keep the module's import light

    rows, values = 0, {"node": set[str](), "group": set[str]()}
    for name in files:
        local = _local(name)
        if local is None or local.suffix.lower() not in _PARQUET:
            return None
        try:
            meta = pq.read_metadata(local)
            arrow = meta.schema.to_arrow_schema()
        except (OSError, ValueError):  # unreadable here: Spark's pass says why
            return None
        columns = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
        for field in schema.fields:
            at = arrow.get_field_index(field.name)
            if at < 0 or str(arrow.field(at).type) not in _ARROW_TYPES.get(type(field.dataType), ()):
                return None
            if field.nullable or not arrow.field(at).nullable:
                continue
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(columns[field.name]).statistics
                if stats is None or not stats.has_null_count or stats.null_count:
                    return None
        for col, seen in values.items():
            for g in range(meta.num_row_groups):
                stats = meta.row_group(g).column(columns[col]).statistics
                if stats is None or not stats.has_min_max or stats.min != stats.max:
                    return None
                seen.add(str(stats.min))
        rows += meta.num_rows
    return FooterCount(rows, frozenset(values["node"]), frozenset(values["group"]))
