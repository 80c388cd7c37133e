"""Apps supervised by a real node (docs/control.md): small Python scripts as apps, in tmp.

Dependency order at start and reverse at stop, the environment, a crash loop backed off then
given up, an app that ignores SIGTERM killed with its children and grandchildren, ``kill -9``
of the node leaving nothing behind, a node restarted on its data directory running one copy,
logs captured and rotated, the commands, and hostile requests refused and counted."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, get, http, wait_for

from huddle.control.machine import AppState
from huddle.control.section import AppSpec
from huddle.control.supervisor import Supervisor
from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes

# An app's prelude: it appends "EVENT NAME" lines to the file in $EVENTS.
PRELUDE = """\
import json, os, signal, sys, time
NAME = os.environ["HUDDLE_APP"]
def say(what):
    with open(os.environ["EVENTS"], "a") as fh:
        fh.write(f"{what} {NAME} {os.getpid()}\\n")
"""


def script(tmp: Path, name: str, body: str) -> str:
    path = tmp / f"{name}.py"
    path.write_text(PRELUDE + textwrap.dedent(body))
    return str(path)


def app_toml(name: str, path: str, **keys: Any) -> str:
    """An [[apps]] table running ``path`` with this interpreter."""
    lines = ["[[apps]]", f"name = {json.dumps(name)}", f"command = {json.dumps([sys.executable, path])}"]
    lines += [f"{k.replace('_', '-')} = {json.dumps(v)}" for k, v in keys.items()]
    return "\n".join(lines) + "\n"


def start_node(cluster: Cluster, name: str, tmp: Path, toml: str, events: Path, beacon: bool = False) -> NodeProcess:
    """The one place a test node with apps is started: its config file holds the apps, and the
    apps find $EVENTS in the node's environment."""
    config = tmp / f"{name}.toml"
    config.write_text(toml)
    os.environ["EVENTS"] = str(events)
    try:
        return cluster.start(name, "--config", str(config), beacon=beacon)
    finally:
        del os.environ["EVENTS"]


def events(path: Path) -> list[tuple[str, str, int]]:
    if not path.exists():
        return []
    return [(w[0], w[1], int(w[2])) for line in path.read_text().splitlines() if len(w := line.split()) == 3]


def alive(pid: int) -> bool:
    """A process that exists and is not a zombie (PID 1 in a container may never reap one)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def apps_of(node: NodeProcess) -> dict[str, dict[str, Any]]:
    return {a["name"]: a for a in get(node.api, "/api/v1/apps")["apps"]}


def cli(node: NodeProcess, *args: str) -> Any:
    """``huddle ARGS --api NODE`` (its JSON answer)."""
    out = subprocess.run([sys.executable, "-m", "huddle", *args, "--api", node.api], capture_output=True, text=True,
                         timeout=30, check=True)
    return json.loads(out.stdout)


def state(node: NodeProcess, app: str) -> str:
    return str(apps_of(node)[app]["state"])


def test_dependency_order_environment_facts_logs_and_reverse_stop(cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    body = """\
        say("start")
        env = {k: v for k, v in os.environ.items() if k.startswith("HUDDLE_")}
        with open(os.environ["EVENTS"] + "." + NAME + ".env", "w") as fh:
            json.dump(env, fh)
        print(f"hello from {NAME}", flush=True)
        print(f"an error from {NAME}", file=sys.stderr, flush=True)
        def stop(signum, frame):
            say("stop")
            sys.exit(0)
        signal.signal(signal.SIGTERM, stop)
        while True:
            time.sleep(1)
        """
    path = script(tmp_path, "app", body)
    # Written in the reverse of their order: c needs b, b needs a.
    toml = (app_toml("c", path, depends_on=["b"], startsecs=0.3) + app_toml("b", path, depends_on=["a"], startsecs=0.3)
            + app_toml("a", path, startsecs=0.3))
    node = start_node(cluster, "n1", tmp_path, toml, ev)
    wait_for(lambda: all(a["state"] == "running" for a in apps_of(node).values()), 20, "every app running")
    starts = [(w, n) for w, n, _ in events(ev)]
    assert starts == [("start", "a"), ("start", "b"), ("start", "c")]  # each after the one it depends on
    env = json.loads((tmp_path / "events.c.env").read_text())
    info = get(node.api, "/api/v1/node")
    assert env == {"HUDDLE_API": node.api, "HUDDLE_NODE_ID": info["uuid"], "HUDDLE_NODE_NAME": "n1",
                   "HUDDLE_GROUP": "test", "HUDDLE_NODE_TYPE": "standard", "HUDDLE_APP": "c"}
    assert info["features"]["apps"] == {"c": "running", "b": "running", "a": "running"}  # the picture's facts
    listed = apps_of(node)
    assert all(isinstance(a["pid"], int) and a["restarts"] == 0 and a["uptime"] >= 0.3 for a in listed.values())
    logs = wait_for(lambda: (out := get(node.api, "/api/v1/apps/b/logs"))["text"].count("from b") == 2 and out,
                    10, "b's output in its log")
    assert "hello from b\n" in logs["text"] and "an error from b\n" in logs["text"]
    assert (cluster.tmp / "n1" / "apps" / "b.log").read_text() == logs["text"]
    pids = [a["pid"] for a in listed.values()]
    began = time.monotonic()
    node.signal(signal.SIGTERM)
    assert node.wait(10) == 0
    assert time.monotonic() - began < 5.0  # apps that exit on their signal keep the node's stop fast
    stops = [(w, n) for w, n, _ in events(ev) if w == "stop"]
    assert stops == [("stop", "c"), ("stop", "b"), ("stop", "a")]  # the reverse order
    assert not any(alive(p) for p in pids)
    assert not list((cluster.tmp / "n1" / "apps").glob("*.pid"))  # stopped cleanly: no pid file left


def test_every_node_shows_each_change_of_another_nodes_apps(cluster: Cluster, tmp_path: Path) -> None:
    """The states travel in the picture's facts (docs/protocol.md 14.1): node b shows a's."""
    ev = tmp_path / "events"
    path = script(tmp_path, "idle", 'say("start")\nwhile True:\n    time.sleep(1)\n')
    a = start_node(cluster, "a", tmp_path, app_toml("board", path, startsecs=0.2), ev, beacon=True)
    b = start_node(cluster, "b", tmp_path, "", ev, beacon=True)
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "two nodes to mesh")

    def on_b() -> dict[str, Any] | None:
        members = {m["name"]: m for m in get(b.api, "/api/v1/system")["members"]}
        return members["a"]["ext"].get("apps") if "a" in members else None

    wait_for(lambda: on_b() == {"board": "running"}, 20, "b showing a's app running")
    # Its details too (the apps-info facts): the pid a gives, and a start time in the group's time.
    pid = apps_of(a)["board"]["pid"]
    system = get(b.api, "/api/v1/system")
    info = {m["name"]: m for m in system["members"]}["a"]["ext"]["apps-info"]["board"]
    words = dict(w.split("=") for w in info.split())
    assert words["pid"] == str(pid) and "restarts" not in words and "exit" not in words, info
    assert 0 <= system["time"] - float(words["since"]) < 30, (system["time"], info)
    listed = cli(b, "apps", "--json")["nodes"]["a"]["board"]  # `huddle apps` on b: a's app with its details
    assert (listed["state"], listed["pid"], listed["restarts"], listed["last_exit"]) == ("running", pid, 0, None)
    assert 0 <= listed["uptime"] < 30
    wait_for(lambda: get(a.api, "/api/v1/system")["digest"] == get(b.api, "/api/v1/system")["digest"], 20,
             "the digest agreeing on both nodes, details and all")
    assert http(a.api, "/api/v1/apps/board/stop", method="POST")[0] == 200
    wait_for(lambda: on_b() == {"board": "stopped"}, 20, "b showing a's app stopped")
    members = {m["name"]: m for m in get(b.api, "/api/v1/system")["members"]}
    assert members["a"]["ext"]["apps-info"] == {"board": f"exit={apps_of(a)['board']['last_exit']}"}  # no pid now
    assert apps_of(a)["board"]["last_exit"] == -signal.SIGTERM
    assert "apps" not in members["b"]["ext"] and "apps-info" not in members["b"]["ext"]  # b runs no app


def test_a_crash_loop_is_restarted_with_growing_back_off_then_failed(cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    path = script(tmp_path, "crash", 'say("start")\nsys.exit(3)\n')
    node = start_node(cluster, "n1", tmp_path, app_toml("crash", path, retries=3, backoff=0.2, backoff_max=10.0,
                                                         startsecs=1.0), ev)
    wait_for(lambda: state(node, "crash") == "failed", 20, "the crash loop given up")
    app = apps_of(node)["crash"]
    assert (app["restarts"], app["failures"], app["last_exit"], app["pid"]) == (3, 4, 3, None)
    assert get(node.api, "/api/v1/node")["features"]["apps"] == {"crash": "failed"}
    starts = [e for e in events(ev) if e[0] == "start"]
    assert len(starts) == 4  # the first start and 3 retries
    assert len({p for *_, p in starts}) == 4  # four processes
    # Ordered again by hand, it starts again with a fresh count.
    status, answer = http(node.api, "/api/v1/apps/crash/start", method="POST")
    assert status == 200 and answer["state"] in ("waiting", "starting", "backoff")
    wait_for(lambda: len(events(ev)) >= 5, 10, "a fifth start")


def test_back_off_grows_between_starts(cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    path = script(tmp_path, "crash", 'with open(os.environ["EVENTS"], "a") as fh:\n'
                  '    fh.write(f"start {NAME} {time.monotonic_ns()}\\n")\nsys.exit(1)\n')
    node = start_node(cluster, "n1", tmp_path, app_toml("crash", path, retries=3, backoff=0.6, backoff_max=10.0), ev)
    wait_for(lambda: state(node, "crash") == "failed", 30, "the crash loop given up")
    t = [p / 1e9 for *_, p in events(ev)]
    gaps = [b - a for a, b in itertools.pairwise(t)]
    assert len(gaps) == 3
    # 0.6, 1.2, 2.4 s, each jittered to 0.75 .. 1 of itself, plus a process's start-up
    assert 0.45 <= gaps[0] < gaps[1] < gaps[2] - 0.3, gaps
    assert gaps[2] >= 1.8, gaps


def test_an_app_ignoring_sigterm_is_killed_with_its_children_at_the_stop_timeout(
        cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    body = """\
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        say("start")
        if os.fork() == 0:  # a child ...
            if os.fork() == 0:  # ... that forks a grandchild; both ignore SIGTERM too
                say("grandchild")
            else:
                say("child")
            while True:
                time.sleep(1)
        while True:
            time.sleep(1)
        """
    path = script(tmp_path, "stubborn", body)
    node = start_node(cluster, "n1", tmp_path, app_toml("stubborn", path, stop_timeout=1.5, startsecs=0.2), ev)
    wait_for(lambda: len(events(ev)) == 3, 20, "the app, its child and its grandchild")
    wait_for(lambda: state(node, "stubborn") == "running", 10, "the app running")
    pids = [p for *_, p in events(ev)]
    began = time.monotonic()
    status, answer = http(node.api, "/api/v1/apps/stubborn/stop", method="POST")
    assert status == 200 and answer["state"] == "stopping"
    assert all(alive(p) for p in pids)  # SIGTERM ignored by all three
    wait_for(lambda: state(node, "stubborn") == "stopped", 10, "the app stopped")
    took = time.monotonic() - began
    assert 1.3 <= took < 5, took  # killed at the stop-timeout, not before
    wait_for(lambda: not any(alive(p) for p in pids), 5, "the app, its child and grandchild gone")
    app = apps_of(node)["stubborn"]
    assert app["last_exit"] == -signal.SIGKILL and app["pid"] is None
    assert get(node.api, "/api/v1/node")["features"]["apps"] == {"stubborn": "stopped"}


def test_the_node_stops_independent_apps_together(cluster: Cluster, tmp_path: Path) -> None:
    """Two stubborn apps that depend on nothing: the node's stop waits one stop-timeout, not two."""
    ev = tmp_path / "events"
    path = script(tmp_path, "stubborn", 'signal.signal(signal.SIGTERM, signal.SIG_IGN)\nsay("start")\n'
                  'while True:\n    time.sleep(1)\n')
    node = start_node(cluster, "n1", tmp_path, app_toml("one", path, stop_timeout=2.0) +
                      app_toml("two", path, stop_timeout=2.0), ev)
    wait_for(lambda: len(events(ev)) == 2, 20, "both apps")
    began = time.monotonic()
    node.signal(signal.SIGTERM)
    assert node.wait(20) == 0
    took = time.monotonic() - began
    assert 2.0 <= took < 3.6, took  # together: one stop-timeout (two in a row would be 4 s)
    assert not any(alive(p) for *_, p in events(ev))


FORKER = """\
    say("start")
    if os.fork() == 0:
        say("child")
    while True:
        time.sleep(1)
    """


def test_kill_9_of_the_node_leaves_no_app_or_child_running(cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    path = script(tmp_path, "forker", FORKER)
    node = start_node(cluster, "n1", tmp_path, app_toml("one", path) + app_toml("two", path), ev)
    wait_for(lambda: len(events(ev)) == 4, 20, "two apps and their children")
    pids = [p for *_, p in events(ev)]
    node.signal(signal.SIGKILL)
    node.wait(10)
    wait_for(lambda: not any(alive(p) for p in pids), 10, "every app and child gone after kill -9 of the node")


def _watchdog_of(node_pid: int) -> int:
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == node_pid and b"watchdog.py" in cmdline:
                return int(entry.name)
    raise AssertionError("no watchdog process under the node")


def test_a_node_restarted_on_its_data_directory_runs_one_copy(cluster: Cluster, tmp_path: Path) -> None:
    """The watchdog and the node both killed: the app's child outlives them (the parent-death
    signal reaches the app alone).  The next node on the data directory kills that group, from
    its pid file, before it starts the app: one copy runs."""
    ev = tmp_path / "events"
    path = script(tmp_path, "forker", FORKER)
    toml = app_toml("forker", path)
    node = start_node(cluster, "n1", tmp_path, toml, ev)
    wait_for(lambda: len(events(ev)) == 2, 20, "the app and its child")
    first = [p for *_, p in events(ev)]
    pid_file = cluster.tmp / "n1" / "apps" / "forker.pid"
    assert json.loads(pid_file.read_text())["pgid"] == first[0]
    os.kill(_watchdog_of(node.proc.pid), signal.SIGKILL)
    node.signal(signal.SIGKILL)
    node.wait(10)
    wait_for(lambda: not alive(first[0]), 10, "the app killed by its parent-death signal")
    assert alive(first[1])  # its child is left: only the pid file names its group now
    again = start_node(cluster, "n1", tmp_path, toml, ev)
    wait_for(lambda: len(events(ev)) == 4, 20, "the app started again, with its child")
    second = [p for *_, p in events(ev)][2:]
    wait_for(lambda: not alive(first[1]), 5, "the stale group killed")
    assert all(alive(p) for p in second)
    assert [p for p in first + second if alive(p)] == second  # one copy
    assert state(again, "forker") in ("starting", "running")


def test_logs_are_rotated_and_read_through_the_commands(cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    body = """\
        for i in range(400):
            print(f"line {i:04d} " + "x" * 90, flush=True)
        say("done")
        while True:
            time.sleep(1)
        """
    path = script(tmp_path, "chatty", body)
    node = start_node(cluster, "n1", tmp_path, app_toml("chatty", path, log_size=8192, log_keep=2), ev)
    wait_for(lambda: events(ev), 20, "the app done writing")
    folder = cluster.tmp / "n1" / "apps"
    def newest() -> str:
        try:
            return (folder / "chatty.log").read_text()
        except FileNotFoundError:  # between a rotation's rename and the next write
            return ""

    wait_for(lambda: "line 0399" in newest(), 10, "the last line in the log")
    assert (folder / "chatty.log.1").exists() and (folder / "chatty.log.2").exists()
    assert not (folder / "chatty.log.3").exists()  # log-keep: 2
    kept = "".join((folder / n).read_text() for n in ("chatty.log.2", "chatty.log.1", "chatty.log"))
    assert kept.endswith("line 0399 " + "x" * 90 + "\n") and kept in "".join(
        f"line {i:04d} " + "x" * 90 + "\n" for i in range(400))  # the newest lines, in order, none lost
    sizes = [(folder / n).stat().st_size for n in ("chatty.log.2", "chatty.log.1", "chatty.log")]
    assert all(0 < size <= 8192 for size in sizes), sizes  # log-size, whatever the pipe's reads were
    assert all((folder / n).read_text().endswith("\n") for n in ("chatty.log.2", "chatty.log.1"))  # whole lines
    wait_for(lambda: state(node, "chatty") == "running", 10, "the app running")
    cli = [sys.executable, "-m", "huddle"]
    out = subprocess.run([*cli, "apps", "--api", node.api], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.splitlines()[0].split() == ["NAME", "STATE", "PID", "RESTARTS", "UPTIME"]
    assert out.stdout.splitlines()[1].split()[:2] == ["chatty", "running"]
    out = subprocess.run([*cli, "app", "logs", "chatty", "--api", node.api], capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.rstrip("\n").endswith("line 0399 " + "x" * 90)
    out = subprocess.run([*cli, "app", "stop", "chatty", "--api", node.api], capture_output=True, text=True,
                         timeout=30, check=True)
    assert out.stdout.startswith("stop: chatty")
    wait_for(lambda: state(node, "chatty") == "stopped", 15, "stopped by the command")
    out = subprocess.run([*cli, "app", "stop", "nosuch", "--api", node.api], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 1 and "404 no app 'nosuch' on this node (apps: chatty)" in out.stderr


def test_logs_follow_reads_what_comes_after_an_offset(cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    body = """\
        for i in range(1000):
            print(f"tick {i}", flush=True)
            time.sleep(0.05)
        """
    path = script(tmp_path, "ticker", body)
    node = start_node(cluster, "n1", tmp_path, app_toml("ticker", path), ev)
    first = wait_for(lambda: (o := get(node.api, "/api/v1/apps/ticker/logs"))["next"] > 0 and o, 20, "output")
    later = wait_for(lambda: (o := get(node.api, f"/api/v1/apps/ticker/logs?after={first['next']}"))["text"] and o,
                     10, "more output")
    assert not later["lost"] and later["next"] > first["next"]
    whole = (first["text"] + later["text"]).split("\n")[:-1]  # the lines complete so far
    assert whole == [f"tick {i}" for i in range(len(whole))]  # the two reads join: nothing lost or doubled
    follow = subprocess.Popen([sys.executable, "-m", "huddle", "app", "logs", "ticker", "--follow", "--api", node.api],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert follow.stdout is not None
        seen = [follow.stdout.readline() for _ in range(30)]
        numbers = [int(line.split()[1]) for line in seen if line.startswith("tick ")]
        assert numbers == list(range(numbers[0], numbers[0] + len(numbers)))  # in order, none twice, none lost
    finally:
        follow.terminate()
        follow.wait(10)


def test_hostile_requests_are_refused_counted_and_start_nothing(cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    path = script(tmp_path, "idle", 'say("start")\nwhile True:\n    time.sleep(1)\n')
    node = start_node(cluster, "n1", tmp_path, app_toml("idle", path, autostart=False, start_limit=3,
                                                         start_interval=120.0, startsecs=0.1), ev)
    assert state(node, "idle") == "stopped"
    cases: list[tuple[str, bytes | None, int]] = [
        ("/api/v1/apps/nosuch/start", None, 404),
        ("/api/v1/apps/Not.A.Name/start", None, 400),
        ("/api/v1/apps/" + "a" * 40 + "/start", None, 400),
        ("/api/v1/apps/%ff%fe/stop", None, 400),
        ("/api/v1/apps/idle/explode", None, 400),
        ("/api/v1/apps/idle/start", b"x" * 5000, 413),
        ("/api/v1/apps/idle/start", b'{"command": ["rm", "-rf", "/"]}', 400),
    ]
    for route, raw, expected in cases:
        status, answer = http(node.api, route, method="POST", raw=raw)
        assert status == expected, (route, status, answer)
        assert isinstance(answer, dict) and answer.get("error"), (route, answer)
    for query, expected in (("?after=-1", 400), ("?after=x", 400), ("?after=" + "9" * 40, 400)):
        assert http(node.api, f"/api/v1/apps/idle/logs{query}")[0] == expected
    assert http(node.api, "/api/v1/apps/nosuch/logs")[0] == 404
    stats = get(node.api, "/api/v1/apps")["stats"]
    assert stats == {"unknown_app": 2, "bad_name": 3, "bad_order": 4, "bad_body": 2}
    assert state(node, "idle") == "stopped" and events(ev) == []  # nothing started
    flood = [http(node.api, "/api/v1/apps/nosuch/restart", method="POST")[0] for _ in range(200)]
    assert set(flood) == {404}
    assert get(node.api, "/api/v1/apps")["stats"]["unknown_app"] == 202  # the node stays up, and counts
    status, answer = http(node.api, "/api/v1/apps/idle/start", method="POST")  # a good order still works
    assert status == 200
    wait_for(lambda: events(ev), 10, "the app started by a good order")
    for _ in range(6):  # restarts ordered over and over: the start-rate limit holds the spawns to 3
        wait_for(lambda: state(node, "idle") == "backoff" or (state(node, "idle") == "running" and events(ev)), 10,
                 "the app up (it wrote its line), or held back")
        before = len(events(ev))
        assert http(node.api, "/api/v1/apps/idle/restart", method="POST")[0] == 200
        wait_for(lambda: state(node, "idle") == "backoff" or len(events(ev)) > before, 10,  # noqa: B023
                 "the restart carried out")
    app = apps_of(node)["idle"]
    assert app["state"] == "backoff" and app["retry_in"] > 60 and len(events(ev)) == 3


def test_a_stale_pid_file_kills_the_apps_processes_and_nothing_else(tmp_path: Path) -> None:
    """A group id the kernel gave to another program since is left alone: only the processes of
    the group whose environment names the app are killed; a pid file of another boot is dropped."""
    boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    ours = subprocess.Popen(sleeper, start_new_session=True, env={**os.environ, "HUDDLE_APP": "board"})
    other = subprocess.Popen(sleeper, start_new_session=True, env={**os.environ, "HUDDLE_APP": "someone-else"})
    try:
        folder = tmp_path / "apps"
        folder.mkdir()
        (folder / "board.pid").write_text(json.dumps({"pgid": ours.pid, "boot": boot}))
        (folder / "clock.pid").write_text(json.dumps({"pgid": other.pid, "boot": boot}))  # not clock's
        (folder / "old.pid").write_text(json.dumps({"pgid": other.pid, "boot": "another boot"}))
        (folder / "junk.pid").write_text("not json")
        wait_for(lambda: b"HUDDLE_APP=board" in Path(f"/proc/{ours.pid}/environ").read_bytes(), 10, "the app's env")
        supervisor = Supervisor([], folder, lambda spec: {}, time.monotonic)
        supervisor.open()
        asyncio.run(supervisor.close())
        assert ours.wait(10) == -signal.SIGKILL
        assert other.poll() is None and supervisor.stale_killed == 1
        assert not list(folder.glob("*.pid"))
    finally:
        for proc in (ours, other):
            proc.kill()
            proc.wait(10)


def test_without_a_pidfd_a_thread_waits_for_each_app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """On a kernel before pidfds, the supervisor learns of an exit all the same."""
    def no_pidfd(pid: int) -> int:
        raise OSError(38, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    spec = AppSpec(name="brief", command=(sys.executable, "-c", "print('bye'); raise SystemExit(4)"),
                   restart="never", startsecs=0.0)

    async def run() -> dict[str, Any]:
        supervisor = Supervisor([spec], tmp_path / "apps", lambda s: {"HUDDLE_APP": s.name}, time.monotonic)
        supervisor.open()
        task = asyncio.create_task(supervisor.run())
        try:
            async with asyncio.timeout(20):
                while supervisor.apps["brief"].machine.state is not AppState.EXITED:
                    await asyncio.sleep(0.02)
        finally:
            task.cancel()
            await supervisor.close()
        return supervisor.statuses()[0] | {"log": supervisor.output("brief", None)["text"]}

    status = asyncio.run(run())
    assert (status["state"], status["last_exit"], status["log"]) == ("exited", 4, "bye\n")
