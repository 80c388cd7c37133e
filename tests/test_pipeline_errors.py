"""``huddle pipeline run`` on bad input and bad settings: one line on stderr
naming the file or setting, an exit status by kind (docs/pipeline.md, "Errors
and exit statuses"), and no Python, Py4J or Java stack.

Each case runs the command in a process of its own, as a user does, with
``--quiet`` (no progress lines): its stderr must be that one line.  Most are
refused before Spark starts; the cases marked ``jvm`` start one.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import needs_java

from huddle.log.export import write_tables

A = "a" * 32
ROW = {"node": A, "group": "g", "source": A, "seq": 1, "timestamp": 1.0, "kind": "k", "body": "{}", "hops": 0,
       "received_at": 1.0, "received_from": None}


def _rows(n: int) -> list[dict[str, object]]:
    return [{**ROW, "seq": q, "timestamp": float(q), "received_at": float(q)} for q in range(1, n + 1)]


def _parquet(tmp: Path) -> Path:
    write_tables(tmp / "export", "parquet", iter([_rows(50)]), [])
    return tmp / "export" / "events.parquet"


def _jsonl(tmp: Path, *lines: str) -> Path:
    path = tmp / "export" / "events.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines))
    return path


def _truncated(tmp: Path) -> Path:
    path = _parquet(tmp)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _not_parquet(tmp: Path) -> Path:
    path = tmp / "export" / "events.parquet"
    path.parent.mkdir(parents=True)
    path.write_text("node,group,source\n")
    return path


def _few_columns(tmp: Path) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp / "export" / "events.parquet"
    path.parent.mkdir(parents=True)
    pq.write_table(pa.table({"node": [A], "group": ["g"]}), path)
    return path


def _binary() -> bytes:
    """A MiB of bytes with no line end: no line of JSON, and no line to read whole."""
    return b"\x00\xff" + os.urandom(1 << 20).replace(b"\n", b"").replace(b"\r", b"")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


GOOD = json.dumps(ROW)
Setup = Callable[[Path], list[str]]

# name: (the arguments after `huddle pipeline run --quiet`, the status, what the one line says, starts a JVM)
CASES: dict[str, tuple[Setup, int, str, bool]] = {
    "no such input": (lambda t: ["--input", str(t / "nope"), "--output", str(t / "out")],
                      4, "input {t}/nope does not exist", False),
    "empty input directory": (lambda t: (t / "empty").mkdir() or ["--input", str(t / "empty"), "--output", str(t / "o")],
                              4, "no events.parquet or events.jsonl under {t}/empty", False),
    "not parquet": (lambda t: ["--input", str(_not_parquet(t)), "--output", str(t / "out")],
                    4, "{t}/export/events.parquet: not a Parquet file", False),
    "truncated parquet": (lambda t: ["--input", str(_truncated(t).parent), "--output", str(t / "out")],
                          4, "{t}/export/events.parquet: truncated Parquet file", False),
    "parquet lacking columns": (lambda t: ["--input", str(_few_columns(t)), "--output", str(t / "out")],
                                4, "{t}/export/events.parquet lacks column(s) source, seq, timestamp", False),
    "another kind of file": (lambda t: (t / "notes.txt").write_text("hi") and
                             ["--input", str(t / "notes.txt"), "--output", str(t / "out")],
                             4, "{t}/notes.txt: not an exported table", False),
    "json first line corrupt": (lambda t: ["--input", str(_jsonl(t, "{not json", GOOD)), "--output", str(t / "out")],
                                4, "{t}/export/events.jsonl line 1: not JSON", False),
    "json lacking columns": (lambda t: ["--input", str(_jsonl(t, '{"node": "x"}')), "--output", str(t / "out")],
                             4, "{t}/export/events.jsonl line 1: lacks column(s) group, source, seq", False),
    "json line 3 corrupt": (lambda t: ["--input", str(_jsonl(t, GOOD, GOOD, '{"node": "trunc')), "--output", str(t / "o"),
                                       "--master", "local[1]", "--conf", "spark.driver.memory=1g"],
                            4, "an input file does not match the export's schema (docs/export.md): "
                               "{t}/export/events.jsonl line 3: not JSON", True),
    "empty parquet file": (lambda t: (t / "events.parquet").touch() or
                           ["--input", str(t / "events.parquet"), "--output", str(t / "out")],
                           4, "{t}/events.parquet: not a Parquet file", False),
    "binary json lines": (lambda t: (t / "events.jsonl").write_bytes(_binary()) and
                          ["--input", str(t / "events.jsonl"), "--output", str(t / "out")],
                          4, "{t}/events.jsonl line 1: not JSON", False),
    "output is a file": (lambda t: (t / "out").write_text("x") and ["--input", str(_parquet(t)), "--output", str(t / "out")],
                         5, "--output {t}/out is a file", False),
    "bad master": (lambda t: ["--input", str(_parquet(t)), "--output", str(t / "out"), "--master", "bogus://x"],
                   6, "--master 'bogus://x' is not a Spark master", False),
    "master not there": (lambda t: ["--input", str(_parquet(t)), "--output", str(t / "out"),
                                    "--master", f"spark://127.0.0.1:{_closed_port()}"],
                         6, "cannot reach the Spark master spark://127.0.0.1:", False),
    "jvm does not start": (lambda t: ["--input", str(_parquet(t)), "--output", str(t / "out"),
                                      "--conf", "spark.driver.memory=lots"],
                           6, "Spark did not start: ", True),
    "unknown job": (lambda t: ["--input", str(_parquet(t)), "--output", str(t / "out"), "--jobs", "converge"],
                    2, "unknown job(s) converge in --jobs", False),
    "bad window": (lambda t: ["--input", str(_parquet(t)), "--output", str(t / "out"), "--window", "0"],
                   2, "--window must be positive, got 0.0", False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_bad_input_or_setting_is_one_line_and_a_status_by_kind(case: str, tmp_path: Path) -> None:
    setup, status, says, jvm = CASES[case]
    if jvm:
        needs_java()
    args = setup(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "huddle", "pipeline", "run", "--quiet", *args], capture_output=True,
                          text=True, timeout=240, stdin=subprocess.DEVNULL, check=False, env={**os.environ})
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-4000:]
    assert lines[0].startswith("huddle pipeline: " + says.format(t=tmp_path)), lines[0]
    assert proc.returncode == status, (proc.returncode, lines[0])
    for stack in ("Traceback", "Py4J", "at org.apache", "WARNING: Using incubator"):
        assert stack not in proc.stderr
    assert proc.stdout == ""
    assert (not (tmp_path / "out").is_dir() and not (tmp_path / "o").exists()) or case == "json line 3 corrupt"


def test_debug_adds_the_stacks(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "huddle", "pipeline", "run", "--debug", "--input", str(_not_parquet(tmp_path)),
                           "--output", str(tmp_path / "out")], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 4 and "Traceback" in proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == f"huddle pipeline: {tmp_path}/export/events.parquet: not a Parquet file"
