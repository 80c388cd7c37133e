"""A warm Spark (docs/pipeline.md, "A warm Spark"): ``huddle pipeline serve`` runs a
Spark Connect server, ``huddle pipeline run --remote`` sends the jobs to it.

The end-to-end test starts the server as a user does, on 127.0.0.1, and checks
that a run through it finds what a local run finds, that junk sent to its port
does not bring it down, and that SIGTERM stops it and its JVM.  The rest are
refusals: a bad or unreachable server, a port taken, a bad ``[pipeline]`` table;
each one line and a status, before any JVM starts.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from conftest import needs_java

from huddle.config import load_config
from huddle.pipeline.command import pipeline_config
from huddle.pipeline.remote import DEFAULT_PORT, parse_remote
from huddle.pipeline.serve import CONNECT_SERVER, server_command
from huddle.pipeline.session import SparkSetupError
from huddle.procs import free_port

HUDDLE = [sys.executable, "-m", "huddle"]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pipeline(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*HUDDLE, "pipeline", *args], capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL, check=False)


def _export(tmp: Path) -> Path:
    """A small simulated export, with 7 events of one source taken from one node: something to find."""
    out = tmp / "sim"
    done = subprocess.run([*HUDDLE, "simulate", "--nodes", "3", "--events", "400", "--loss", "0.05", "--seed", "5",
                           "--export", str(out), "--format", "jsonl"], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONHASHSEED": "0"})
    assert done.returncode == 0, done.stderr
    nodes = sorted(p.name for p in out.iterdir())
    victim = out / nodes[2] / "events.jsonl"
    rows = [json.loads(line) for line in victim.read_text().splitlines()]
    victim.write_text("".join(json.dumps(r) + "\n" for r in rows if not (r["source"] == nodes[0] and 20 <= r["seq"] <= 26)))
    return out


def _one_line(proc: subprocess.CompletedProcess[str], status: int, says: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-4000:]
    assert lines[0].startswith("huddle pipeline: " + says), lines[0]
    assert proc.returncode == status, (proc.returncode, lines[0])
    for stack in ("Traceback", "Py4J", "at org.apache", "grpc", "WARNING: Using incubator"):
        assert stack not in proc.stderr
    assert proc.stdout == ""


# ------------------------------------------------------------------ refusals, before any JVM


def _input(tmp: Path) -> Path:
    from huddle.log.export import write_tables

    row = {"node": "a" * 32, "group": "g", "source": "a" * 32, "seq": 1, "timestamp": 1.0, "kind": "k", "body": "{}",
           "hops": 0, "received_at": 1.0, "received_from": None}
    write_tables(tmp / "export", "parquet", iter([[row]]), [])
    return tmp / "export"


REMOTES: dict[str, tuple[str, int, str]] = {
    "nothing listening": (f"sc://127.0.0.1:{_closed_port()}", 6, "cannot reach the Spark Connect server sc://127.0.0.1:"),
    "not an sc:// address": ("bogus://x", 6, "--remote 'bogus://x' is not a Spark Connect address"),
    "a port out of range": ("sc://127.0.0.1:99999", 6, "--remote 'sc://127.0.0.1:99999': port 99999 is not 1..65535"),
    "no host": ("sc://:15002", 6, "--remote 'sc://:15002' is not a Spark Connect address"),
}


@pytest.mark.parametrize("case", list(REMOTES))
def test_a_bad_or_unreachable_remote_is_one_line_and_status_6(case: str, tmp_path: Path) -> None:
    remote, status, says = REMOTES[case]
    proc = _pipeline("run", "--quiet", "--input", str(_input(tmp_path)), "--output", str(tmp_path / "out"),
                     "--remote", remote)
    _one_line(proc, status, says)
    assert not (tmp_path / "out").exists()


def test_the_config_files_pipeline_table_names_the_remote(tmp_path: Path) -> None:
    config = tmp_path / "node.toml"
    port = _closed_port()
    config.write_text(f'name = "scorer"\n[pipeline]\nremote = "sc://127.0.0.1:{port}"\n')
    assert load_config(config).name == "scorer"  # the node's own reader lets [pipeline] be
    proc = _pipeline("run", "--quiet", "--input", str(_input(tmp_path)), "--output", str(tmp_path / "out"),
                     "--config", str(config))
    _one_line(proc, 6, f"cannot reach the Spark Connect server sc://127.0.0.1:{port}")
    # --master on the command line wins over the file's server (and with --remote, is refused).
    both = _pipeline("run", "--quiet", "--input", str(_input(tmp_path)), "--output", str(tmp_path / "out"),
                     "--remote", f"sc://127.0.0.1:{port}", "--master", "local[1]")
    assert both.returncode == 2 and "give one" in both.stderr
    config.write_text('[pipeline]\nremote = "sc://127.0.0.1:1"\nmaster = "bogus://x"\n')
    flag = _pipeline("run", "--quiet", "--input", str(_input(tmp_path)), "--output", str(tmp_path / "out"),
                     "--config", str(config), "--master", "bogus://y")
    _one_line(flag, 6, "--master 'bogus://y' is not a Spark master")


@pytest.mark.parametrize(("text", "says"), [
    ('[pipeline]\nremot = "sc://h:1"\n', "unknown key 'remot' in [pipeline]; known: remote, master, port"),
    ("[pipeline]\nremote = 15002\n", "[pipeline] remote must be a string, got 15002"),
    ('[pipeline]\nport = "15002"\n', "[pipeline] port must be an integer"),
    ('pipeline = "sc://h:1"\n', "pipeline is a table"),
    ("[pipeline\n", "is not valid TOML"),
])
def test_a_bad_pipeline_table_is_refused_naming_the_file_and_key(tmp_path: Path, text: str, says: str) -> None:
    from huddle.errors import ConfigError

    config = tmp_path / "p.toml"
    config.write_text(text)
    with pytest.raises(ConfigError, match=r"p\.toml") as caught:
        pipeline_config(config)
    assert says in str(caught.value)
    proc = _pipeline("run", "--quiet", "--input", str(_input(tmp_path)), "--output", str(tmp_path / "o"),
                     "--config", str(config))
    assert proc.returncode == 2 and says in proc.stderr and "Traceback" not in proc.stderr


def test_the_address_forms_connect_reads() -> None:
    assert parse_remote("sc://127.0.0.1:15003") == ("127.0.0.1", 15003)
    assert parse_remote("sc://spark.example") == ("spark.example", DEFAULT_PORT)
    assert parse_remote("sc://[::1]:15002/;use_ssl=true") == ("::1", 15002)
    for bad in ("http://h:1", "sc://", "sc://h:port", "127.0.0.1:15002", "sc://h:1 junk"):
        with pytest.raises(SparkSetupError):
            parse_remote(bad)


def test_the_server_is_sparks_own_class_with_a_local_runs_settings() -> None:
    argv = server_command("127.0.0.1", 15009, "local[2]", {"spark.driver.memory": "2g"})
    assert argv[0].endswith("/bin/spark-submit") and argv[1:3] == ["--class", CONNECT_SERVER]
    assert argv[argv.index("--master") + 1] == "local[2]"
    conf = dict(a.split("=", 1) for a in argv[4:] if "=" in a)
    assert conf["spark.connect.grpc.binding.address"] == "127.0.0.1"
    assert conf["spark.connect.grpc.binding.port"] == "15009"
    assert conf["spark.driver.memory"] == "2g" and conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"


def test_serve_refuses_a_port_taken_and_a_bad_master_in_one_line() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = _pipeline("serve", "--port", str(port))
    _one_line(proc, 6, f"cannot serve on 127.0.0.1:{port}: ")
    _one_line(_pipeline("serve", "--port", "0"), 6, "--port 0 is not 1..65535")
    _one_line(_pipeline("serve", "--master", "bogus://x"), 6, "--master 'bogus://x' is not a Spark master")


# ------------------------------------------------------------------ the server, end to end


class _Server:
    """``huddle pipeline serve`` in a process of its own; its stdout lines queued as they come."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.proc = subprocess.Popen([*HUDDLE, "pipeline", "serve", "--port", str(port), "--master", "local[2]",
                                      "--conf", "spark.driver.memory=1g"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     stdin=subprocess.DEVNULL)
        self.lines: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        assert self.proc.stdout is not None and self.proc.stderr is not None
        for stream, sink in ((self.proc.stdout, self.lines.put), (self.proc.stderr, self.stderr.append)):
            threading.Thread(target=self._pump, args=(stream, sink), daemon=True).start()

    @staticmethod
    def _pump(stream: IO[str], sink: Any) -> None:
        for line in stream:
            sink(line.rstrip("\n"))

    def children(self) -> list[int]:
        """The processes the server started (its JVM)."""
        path = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(p) for p in path.read_text().split()] if path.exists() else []

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


@pytest.fixture
def server() -> Iterator[_Server]:
    needs_java()
    running = _Server(free_port())
    try:
        yield running
    finally:
        for pid in running.children():  # the JVM, were the server killed before it could stop it
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        running.close()


def _findings(proc: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    assert proc.returncode in (0, 3), proc.stderr[-4000:]
    found: dict[str, Any] = json.loads(proc.stdout)
    found.pop("output")
    return found


@pytest.mark.spark
@pytest.mark.processes
@pytest.mark.timeout(900)  # four runs and a JVM's start: a few minutes on a loaded 2-core machine
def test_serve_then_run_remote_finds_what_a_local_run_finds(server: _Server, tmp_path: Path) -> None:
    sim = _export(tmp_path)
    first = server.lines.get(timeout=240)  # the JVM's start, under a loaded machine
    remote = f"sc://127.0.0.1:{server.port}"
    assert first == f"serving {remote}", (first, server.stderr)
    assert not any("incubator" in line or line.lstrip().startswith("at ") for line in server.stderr), server.stderr
    jobs = "--jobs", "consolidate,convergence,propagation,replay,system"
    through = _pipeline("run", "--input", str(sim), "--output", str(tmp_path / "remote"), "--json", "--remote", remote,
                        *jobs, timeout=300)
    progress = through.stderr.strip().splitlines()
    assert progress[0] == f"spark {remote} connecting …" and progress[1].startswith(f"spark {remote} connected in ")
    assert progress[-1].startswith("job 5/5 system done in "), progress
    # Junk on the server's port (not gRPC, not HTTP/2): the server stays up and serves the next run.
    for junk in (os.urandom(65536), b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\xff" * 9000):
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as s:
            try:
                s.sendall(junk)
                s.settimeout(5)
                s.recv(4096)
            except OSError:
                pass  # the server may close on it: that is a refusal
    again = _pipeline("run", "--quiet", "--input", str(sim), "--output", str(tmp_path / "again"), "--json",
                      "--remote", remote, "--jobs", "convergence", timeout=300)
    local = _pipeline("run", "--quiet", "--input", str(sim), "--output", str(tmp_path / "local"), "--json",
                      "--master", "local[1]", "--conf", "spark.driver.memory=1g", *jobs, timeout=300)
    # A setting only a start can change is refused (it belongs to serve --conf); the server stays up.
    start_only = _pipeline("run", "--quiet", "--input", str(sim), "--output", str(tmp_path / "o"), "--remote", remote,
                           "--conf", "spark.driver.memory=2g")
    assert start_only.returncode == 2, start_only.stderr
    assert start_only.stderr.strip().splitlines() == [
        f"huddle pipeline: --conf spark.driver.memory: the server at {remote} cannot change it now ([CANNOT_MODIFY_CONFIG] "
        'Cannot modify the value of the Spark config: "spark.driver.memory".); give it to huddle pipeline serve --conf']
    want = _findings(local)
    assert (want["missing_ranges"], want["missing_events"]) == (1, 7)
    assert _findings(through) == want
    assert {k: v for k, v in _findings(again).items() if k in ("rows", "missing_ranges", "missing_events", "details")} \
        == {"rows": want["rows"], "missing_ranges": 1, "missing_events": 7,
            "details": {k: v for k, v in want["details"].items() if k in ("missing", "missing_by_node")}}
    for table in ("consolidated", "missing", "delays", "replay", "node_health", "summary"):
        assert (tmp_path / "remote" / table).is_dir(), table
    assert (tmp_path / "remote" / "report.html").read_text().count("missing:") >= 1
    assert server.proc.poll() is None
    jvm = server.children()
    assert jvm, "the server runs Spark in a JVM of its own"
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(60) == 0, server.stderr
    for pid in jvm:  # reaped by the server: gone, not a zombie left behind
        assert not Path(f"/proc/{pid}").exists() or "zombie" in Path(f"/proc/{pid}/status").read_text()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", server.port), timeout=2).close()


@pytest.mark.spark
@pytest.mark.processes
@pytest.mark.timeout(600)
def test_the_same_jobs_run_through_spark_submit(tmp_path: Path) -> None:
    """The third way the jobs run (README, "On a cluster"): spark-submit with submit.py, here on local[1]."""
    needs_java()
    from huddle.pipeline import submit
    from huddle.pipeline.serve import spark_submit

    sim = _export(tmp_path)
    env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
    done = subprocess.run([str(spark_submit()), "--master", "local[1]", "--conf", "spark.driver.memory=1g",
                           "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.bindAddress=127.0.0.1",
                           str(submit.__file__), "--quiet", "--json", "--input", str(sim),
                           "--output", str(tmp_path / "submitted")],
                          capture_output=True, text=True, timeout=420, env=env, stdin=subprocess.DEVNULL, check=False)
    found = _findings(done)
    assert (found["nodes"], found["events"], found["missing_ranges"], found["missing_events"]) == (3, 400, 1, 7)
    assert (tmp_path / "submitted" / "report.html").is_file()


def test_the_docs_control_app_and_pipeline_table_parse(tmp_path: Path) -> None:
    """docs/pipeline.md's snippets, as a server node's config reads them: the app runs serve."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "pipeline.md").read_text()
    section = text.split("## A warm Spark", 1)[1].split("\n## ", 1)[0]
    blocks = [b.split("```", 1)[0] for b in section.split("```toml\n")[1:]]
    assert len(blocks) == 2
    config = tmp_path / "server.toml"
    config.write_text('type = "server"\nopen = true\n' + "\n".join(blocks))
    apps = load_config(config).node_apps()
    assert [(a.name, list(a.command)[:3]) for a in apps] == [("spark", ["huddle", "pipeline", "serve"])]
    assert pipeline_config(config) == {"remote": "sc://127.0.0.1:15002", "master": "local[*]", "port": 15002}
