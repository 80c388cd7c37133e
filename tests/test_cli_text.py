"""What the ``huddle`` command prints for a person (aligned text, times local and ISO, no
Python reprs) and for a script (``--json``: the data, whole)."""

from __future__ import annotations

import json
import re
from datetime import datetime
from pathlib import Path

import pytest
from test_log_integrity import flip, make_dir

from huddle import render
from huddle.cli import main

_ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d\d:\d\d")
_INFO = {
    "uuid": "47e11a544e5f8bf891c30213a2d8952f", "name": "alice", "key": "WDXK-XE1F-WZHA-STG0",
    "security": {"mode": "open", "warning": "open group"}, "time": 1795860870.1917238, "clock_offset": 0.0,
    "clock_source": None, "started_at": 1795860865.7229688, "cut_off": False, "read_only": True,
    "features": {"posts": {"posts": 0, "octets": 12}}, "stats": {"api": {"bad_range": 3}},
}


def _no_reprs(text: str) -> None:
    for repr_only in ("{'", "None", "True", "False", "1795860870.19"):
        assert repr_only not in text, (repr_only, text)


def test_info_is_aligned_text_with_local_iso_times() -> None:
    text = render.info_text(_INFO)
    _no_reprs(text)
    lines = text.splitlines()
    assert lines[0] == "uuid          47e11a544e5f8bf891c30213a2d8952f"
    columns = {m.start(2) for m in (re.match(r"(\S.*?)  +(\S)", line) for line in lines) if m}
    assert columns == {14}  # one column for every top-level value
    assert "  mode     open" in lines and "    octets  12" in lines  # a block per object, aligned within it
    assert f"time          {datetime.fromtimestamp(_INFO['time']).astimezone().isoformat(timespec='milliseconds')}" \
        in lines
    assert _ISO.search(text.split("started at")[1])
    assert "clock source  -" in lines and "cut off       no" in lines and "read only     yes" in lines
    assert "bad_range" not in text  # the counters are --json's


def test_log_has_a_time_column() -> None:
    events = [{"source": "47e11a544e5f8bf891c30213a2d8952f", "seq": 1, "timestamp": 1795860869.8219123,
               "kind": "score", "body": {"a": 1}}]
    line = render.log_text(events)
    assert line.startswith(render.local_time(1795860869.8219123) + "  47e11a54#1 ")
    assert _ISO.match(line) and line.endswith('{"a": 1}')


def test_simulate_prints_aligned_text_or_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--nodes", "3", "--events", "20", "--seed", "1"]) == 0
    text = capsys.readouterr().out
    _no_reprs(text)
    assert "seed 1: converged: 3 nodes, 20 events" in text
    assert re.search(r"^  originated +20$", text, re.M), text
    assert main(["simulate", "--nodes", "3", "--events", "20", "--seed", "1", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)  # nothing but the JSON: no progress lines
    (run,) = got["runs"]
    assert got["failed"] == 0 and run["seed"] == 1 and run["converged"] is True and run["nodes"] == 3
    assert run["stats"]["originated"] == 20 and "gsip_empty" in run["stats"]  # every counter, zero or not


def test_group_export_and_repair_speak_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    key = tmp_path / "derby.key"
    assert main(["group", "new", "derby", "--out", str(key), "--json"]) == 0
    made = json.loads(capsys.readouterr().out)
    assert made["group"] == "derby" and made["file"] == str(key) and len(made["key_id"]) == 8
    assert main(["group", "show", str(key), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert {k: shown[k] for k in made} == made and shown["room_key"]
    data_dir, me = make_dir(tmp_path)
    flip(data_dir / "log.sqlite", b"mine 0017")
    assert main(["repair", "--data-dir", str(data_dir), "--json"]) == 0
    repaired = json.loads(capsys.readouterr().out)
    assert (repaired["repaired"], repaired["kept"], repaired["dropped"], repaired["old_id"]) == (True, 49, 1, str(me))
    assert repaired["new_id"] == (data_dir / "node-id").read_text().strip() and len(repaired["problems"]) == 1
    assert Path(repaired["aside"]).exists()
    assert main(["repair", "--data-dir", str(data_dir), "--json"]) == 0  # a whole log now: nothing done
    assert json.loads(capsys.readouterr().out)["repaired"] is False
    out = tmp_path / "e.jsonl"
    assert main(["export", "--data-dir", str(data_dir), "--out", str(out), "--format", "jsonl", "--json"]) == 0
    exported = json.loads(capsys.readouterr().out)
    assert exported == {"events": 49, "out": str(out), "format": "jsonl"}
    assert len((out / "events.jsonl").read_text().splitlines()) == 49


def test_pipeline_run_speaks_json(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    from huddle.pipeline import jobs  # PySpark: only this test of the file loads it

    ran: list[object] = []

    def run_session(inputs: object, output: object, **kw: object) -> jobs.Summary:
        ran.append((inputs, output))
        return jobs.Summary(rows=300, nodes=3, groups=1, events=300, missing_ranges=1, missing_events=7,
                            conflicts=0, gap_events=0, divergent=[], tables=["missing", "summary"])

    monkeypatch.setattr(jobs, "run_session", run_session)  # the session's work is test_pipeline.py's
    out = str(tmp_path / "audit")
    assert main(["pipeline", "run", "--input", str(tmp_path), "--output", out, "--json"]) == 3
    got = json.loads(capsys.readouterr().out)
    assert ran == [([str(tmp_path)], out)]
    assert (got["nodes"], got["missing_events"], got["converged"], got["output"]) == (3, 7, False, out)
    assert got["tables"] == ["missing", "summary"] and got["worst_p99"] is None
