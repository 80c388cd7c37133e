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
:class:`InputError` before any job starts.  :func:`check_local` goes further,
before Spark starts: each local event file is there, Parquet with a footer or
JSON Lines whose first line parses, with the export's columns; when a later
JSON line breaks the schema, :func:`find_bad_line` names it.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, DataFrameReader, SparkSession
from pyspark.sql.types import DataType, DoubleType, IntegerType, LongType, StringType, StructType

from . import schemas
from .errors import InputError, OutputError, first_line

__all__ = [
    "FooterCount", "check_inputs", "check_local", "check_output", "count_from_footers", "find_bad_line", "local_files",
    "read_events", "read_stats", "read_table", "write_table", "write_text",
]


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


def local_files(path: Path, stem: str) -> list[Path]:
    """The files a local input path names, as :func:`read_table` finds them: the
    file itself, the part files of a directory named like a table
    (``x.parquet/part-….parquet``), or every ``stem.parquet`` / ``stem.jsonl``
    below a directory (not under hidden or ``_`` directories, which Spark skips too)."""
    if not path.is_dir():
        return [path]
    if path.suffix.lower() in _PARQUET + _JSON:  # a table Spark wrote: a directory of part files, read as named
        return sorted(p for p in path.iterdir() if p.suffix.lower() == path.suffix.lower() and p.name[0] not in "._")
    found = []
    for top, dirs, files in os.walk(path):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
        found += [Path(top) / f for f in sorted(files) if f in (f"{stem}.parquet", f"{stem}.jsonl")]
    return found


def check_local(paths: Sequence[str], stem: str = "events", schema: StructType = schemas.EVENTS) -> None:
    """Raise :class:`InputError` naming the file, before Spark starts, when a
    local input cannot be an exported table: it does not exist, a directory
    holds none (its ``stats`` tables are checked too), a file's name says
    neither Parquet nor JSON Lines, a Parquet file has no footer (not Parquet,
    or truncated) or lacks a required column or has it in another type, a JSON
    Lines file's first line does not parse or lacks a required column.  Footers and first lines only: a later bad
    line is Spark's to find (:func:`find_bad_line` then names it)."""
    check_inputs(paths)
    for path in paths:
        local = _local(path)
        if local is None:
            continue  # hdfs://, s3a://: Spark reads them
        files = local_files(local, stem)
        if not files:
            raise InputError(f"no {stem}.parquet or {stem}.jsonl under {path} (give the directories huddle export "
                             "or huddle simulate --export wrote, or the files in them)")
        if stem == "events" and local.is_dir() and local.suffix.lower() not in _PARQUET + _JSON:
            # Statistics are optional; those there must be tables too.
            files += local_files(local, "stats")
        for file in files:
            suffix, fields = file.suffix.lower(), schemas.STATS if file.name.startswith("stats.") else schema
            if suffix in _PARQUET:
                _check_parquet(file, fields)
            elif suffix in _JSON:
                _check_json_head(file, fields)
            else:
                raise InputError(f"{file}: not an exported table (the name must end in .parquet or .jsonl)")


def _check_parquet(file: Path, schema: StructType) -> None:
    import pyarrow.parquet as pq  # noqa: PLC0415 - pyarrow: deferred to keep the module's import light

    with file.open("rb") as fh:
        head = fh.read(4)
        fh.seek(max(0, file.stat().st_size - 4))
        tail = fh.read(4)
    if head != b"PAR1":
        raise InputError(f"{file}: not a Parquet file")
    if tail != b"PAR1":
        raise InputError(f"{file}: truncated Parquet file (no footer at its end)")
    try:
        arrow = pq.read_schema(file)
    except (OSError, ValueError) as exc:
        raise InputError(f"{file}: corrupt Parquet footer ({exc})") from None
    lacking = [f.name for f in schema.fields if not f.nullable and arrow.get_field_index(f.name) < 0]
    if lacking:
        raise InputError(f"{file} lacks column(s) {', '.join(lacking)} of the export's schema (docs/export.md)")
    for field in schema.fields:
        at = arrow.get_field_index(field.name)
        if at >= 0 and str(arrow.field(at).type) not in _ARROW_TYPES.get(type(field.dataType), ()):
            raise InputError(f"{file}: column {field.name} is {arrow.field(at).type}, not {field.dataType.simpleString()} "
                             "as in the export's schema (docs/export.md)")


# A JSON line longer than this is not judged here (left to Spark): a file with no line ends
# (a hostile or binary one) is read this much at a time, never whole.
JSON_LINE_CAP = 16 << 20


def _json_rows(file: Path) -> Iterator[tuple[int, str]]:
    """(line number, line) of the non-blank lines of ``file`` up to :data:`JSON_LINE_CAP` characters."""
    with file.open("r", encoding="utf-8", errors="replace") as fh:
        number = 0
        while line := fh.readline(JSON_LINE_CAP):
            number += 1
            if not line.endswith("\n") and len(line) == JSON_LINE_CAP:  # too long: skipped to its end
                while (rest := fh.readline(JSON_LINE_CAP)) and not rest.endswith("\n"):
                    pass
                continue
            if line.strip():
                yield number, line


def _json_fault(line: str, schema: StructType) -> str | None:
    """What keeps one JSON line from being a row of ``schema`` (None: nothing)."""
    try:
        row = json.loads(line)
    except ValueError as exc:
        return f"not JSON ({exc})"
    if not isinstance(row, dict):
        return "not a JSON object"
    lacking = [f.name for f in schema.fields if not f.nullable and row.get(f.name) is None]
    if lacking:
        return f"lacks column(s) {', '.join(lacking)} of the export's schema (docs/export.md)"
    for field in schema.fields:
        value, kind = row.get(field.name), type(field.dataType)
        if value is None:
            continue
        fits = (isinstance(value, str) if kind is StringType else
                isinstance(value, int) and not isinstance(value, bool) if kind in (LongType, IntegerType) else
                isinstance(value, int | float) and not isinstance(value, bool))
        if not fits:
            return f"column {field.name} is {json.dumps(value)[:40]}, not {field.dataType.simpleString()}"
    return None


def _check_json_head(file: Path, schema: StructType) -> None:
    for number, line in _json_rows(file):
        fault = _json_fault(line, schema)
        if fault:
            raise InputError(f"{file} line {number}: {fault}")
        return


def find_bad_line(paths: Sequence[str], stem: str = "events", schema: StructType = schemas.EVENTS) -> str | None:
    """``FILE line N: what is wrong`` for the first JSON line under the local
    ``paths`` that is not a row of ``schema``; None if there is none here.  One
    pass in Python: for saying where, once Spark has refused an input."""
    for path in paths:
        local = _local(path)
        if local is None or not local.exists():
            continue
        for file in local_files(local, stem):
            if file.suffix.lower() not in _JSON:
                continue
            for number, line in _json_rows(file):
                fault = _json_fault(line, schema)
                if fault:
                    return f"{file} line {number}: {fault}"
    return None


def check_output(path: str) -> None:
    """Raise :class:`OutputError`, before Spark starts, when a local output path
    cannot be a directory of tables: it is a file, or the nearest directory
    that exists on its way cannot be written."""
    local = _local(path)
    if local is None:
        return  # a URI: Hadoop's file system says when it writes
    if local.exists() and not local.is_dir():
        raise OutputError(f"--output {path} is a file; give a directory (the tables and report.html go in it)")
    there = local
    while not there.exists():
        there = there.parent
    if not there.is_dir():
        raise OutputError(f"--output {path}: {there} is a file, not a directory")
    if not os.access(there, os.W_OK | os.X_OK):
        raise OutputError(f"--output {path}: cannot write in {there} (permission denied)")


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
            raise InputError(f"cannot read {path}: {first_line(exc)}") from None
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
    any other URI through Hadoop's file system, as the tables are (on Spark
    Connect, which has no JVM in this process: a directory holding it as one
    part file)."""
    local = _local(path)
    if local is not None:
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(text, encoding="utf-8")
        return
    if type(spark).__module__.startswith("pyspark.sql.connect"):  # Spark Connect: no JVM here, a DataFrame writes it
        spark.createDataFrame([(text,)], "value string").coalesce(1).write.mode("overwrite").text(path)
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
