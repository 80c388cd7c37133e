"""A node without the ``pipeline`` extra (PySpark, pandas, pyarrow): it runs, and
the commands that need the extra say how to install it.

A fresh interpreter blocks the extra's modules on its import path (a finder
first on ``sys.meta_path`` that refuses them, as if they were not installed),
starts a node in-process, records an event through the node's API, stops it,
exports its log and asks for the pipeline.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import group_key

SRC = Path(__file__).resolve().parent.parent / "src"

_WITHOUT_THE_EXTRA = """
import asyncio, io, json, sys, urllib.request
from contextlib import redirect_stderr
from pathlib import Path

BLOCKED = {"pyspark", "pandas", "pyarrow", "py4j", "plotly"}

class NotInstalled:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NotInstalled())

import huddle.cli
from huddle.config import NodeConfig
from huddle.node import Node
from huddle.security import load_group_file

key, data = Path(sys.argv[1]), Path(sys.argv[2])
result = {}

def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.status

async def node_runs():
    config = NodeConfig().with_overrides(name="light", group="light", data_dir=data, api="127.0.0.1:0", beacon=False,
                                         interface="lo", log_level="warning", group_secret=load_group_file(key))
    node = Node(config)
    task = asyncio.create_task(node.run())
    await asyncio.wait_for(node.wait_ready(), 60)
    result["posted"] = await asyncio.to_thread(post, node.api_url + "/api/v1/events", {"kind": "score", "body": {"n": 1}})
    node.stop()
    await asyncio.wait_for(task, 30)

asyncio.run(node_runs())

def cli(*argv):
    err = io.StringIO()
    with redirect_stderr(err):
        status = huddle.cli.main(list(argv))
    return status, err.getvalue()

result["jsonl"] = cli("export", "--data-dir", str(data), "--out", str(data.parent / "jsonl"), "--format", "jsonl")
result["parquet"] = cli("export", "--data-dir", str(data), "--out", str(data.parent / "pq"), "--format", "parquet")
result["pipeline"] = cli("pipeline", "run", "--input", str(data.parent / "jsonl"), "--output", str(data.parent / "out"))
result["loaded"] = sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED)
print(json.dumps(result))
"""


@pytest.mark.timeout(120)
def test_a_node_runs_without_the_pipeline_extra_and_the_pipeline_says_how_to_install_it(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, "-c", _WITHOUT_THE_EXTRA, str(group_key("light")), str(tmp_path / "node")],
                          capture_output=True, text=True, env=env, timeout=100, stdin=subprocess.DEVNULL, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["posted"] == 201  # the node ran and recorded an event
    assert got["loaded"] == []  # nothing of the extra was even found
    assert got["jsonl"][0] == 0 and (tmp_path / "jsonl" / "events.jsonl").read_text().count('"kind":"score"') == 1
    status, err = got["parquet"]
    assert status == 1 and "Parquet export needs pyarrow: pip install 'huddle[pipeline]'" in err and "Traceback" not in err
    status, err = got["pipeline"]
    assert status == 6
    assert err.strip().splitlines() == [
        "huddle pipeline: the pipeline needs the 'pipeline' extra, not installed here (no pyspark, pandas, pyarrow): "
        "pip install 'huddle[pipeline]' (PySpark, pandas, pyarrow; Spark also needs Java 17+)"]


def test_the_extra_holds_the_pipelines_dependencies_and_make_installs_it() -> None:
    import tomllib

    root = SRC.parent
    project = tomllib.loads((root / "pyproject.toml").read_text())["project"]
    # Spark Connect's Python client too (huddle pipeline run --remote): pyspark[connect]'s additions.
    heavy = ("pyspark", "pandas", "pyarrow", "plotly", "grpcio", "grpcio-status", "googleapis-common-protos",
             "zstandard")
    assert not [d for d in project["dependencies"] if d.startswith(heavy)], "a node must not need them"
    assert sorted(d.split(">")[0].split("=")[0] for d in project["optional-dependencies"]["pipeline"]) == sorted(heavy)
    assert "-e '.[pipeline,test]'" in (root / "Makefile").read_text()  # make demo and make test install everything
