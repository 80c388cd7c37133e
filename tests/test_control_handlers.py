"""Event handlers (docs/control.md, "Handlers"): ``[[handlers]]`` read and refused, what an
occurrence fires, the admission bound (exhaustively, against a model), and the runner with
real processes: environment and input, never in the node's way, killed (its group) at its
timeout, bounded, failures counted; then on a real node, fired by a record, a peer and an app."""

from __future__ import annotations

import asyncio
import itertools
import json
import sys
import textwrap
import time
from collections import deque
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, get, http, wait_for, wait_for_async
from test_control_processes import alive

from huddle.config import load_config
from huddle.control.handler_runner import HandlerRunner
from huddle.control.handlers import Admission, HandlerSpec, parse_handlers, triggers
from huddle.errors import ConfigError

# ------------------------------------------------------------------ the section


def test_handlers_are_read_from_the_config(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[[handlers]]\non = "peer-up"\ncommand = ["notify", "up"]\n'
                    '[[handlers]]\non = "event:score"\ncommand = ["x"]\ntimeout = 2\nenv = { A = "b" }\n'
                    '[[handlers]]\non = "app:*:failed"\ncommand = ["page"]\n'
                    '[limits.handlers]\nrunning = 2\nqueued = 5\n')
    cfg = load_config(path)
    assert cfg.handlers == (HandlerSpec("peer-up", ("notify", "up")), HandlerSpec("event:score", ("x",), 2.0, (("A", "b"),)),
                            HandlerSpec("app:*:failed", ("page",)))
    assert (cfg.limits.handlers.running, cfg.limits.handlers.queued) == (2, 5)
    assert cfg.node_handlers() == cfg.handlers  # a node of a type with no handlers: its own alone


def test_a_type_gives_its_nodes_handlers_before_their_own(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('[types.display]\nbase = "standard"\n'
                    '[[types.display.handlers]]\non = "peer-gone"\ncommand = ["announce"]\n'
                    '[[handlers]]\non = "peer-up"\ncommand = ["mine"]\n')
    cfg = load_config(path)
    assert cfg.with_overrides(node_type="display").node_handlers() == (HandlerSpec("peer-gone", ("announce",)),
                                                                      HandlerSpec("peer-up", ("mine",)))
    assert cfg.node_handlers() == (HandlerSpec("peer-up", ("mine",)),)  # a standard node: not the display's
    bad = tmp_path / "bad.toml"
    bad.write_text('[types.display]\n[[types.display.handlers]]\non = "peer-sad"\ncommand = ["x"]\n')
    with pytest.raises(ConfigError, match=r"\[\[types.display.handlers\]\] #1: .*expected peer-up"):
        load_config(bad)
    many = tmp_path / "many.toml"
    one = '{on = "peer-up", command = ["x"]}'
    many.write_text(f'handlers = [{", ".join([one] * 40)}]\n[types.display]\nhandlers = [{", ".join([one] * 40)}]\n')
    assert len(load_config(many).node_handlers()) == 40
    with pytest.raises(ConfigError, match="at most 64 handlers, this one would run 80"):
        load_config(many).with_overrides(node_type="display").node_handlers()


@pytest.mark.parametrize(("table", "message"), [
    ({"on": "peer-down", "command": ["x"]}, "expected peer-up, peer-suspect, peer-gone"),
    ({"on": "event:", "command": ["x"]}, "expected peer-up"),
    ({"on": "event:a b", "command": ["x"]}, "expected peer-up"),
    ({"on": "app:board:asleep", "command": ["x"]}, "expected peer-up"),
    ({"on": "app:Board:running", "command": ["x"]}, "expected peer-up"),
    ({"on": "app:board", "command": ["x"]}, "expected peer-up"),
    ({"on": "peer-up", "command": []}, "command must be a non-empty list"),
    ({"on": "peer-up", "command": "x"}, "a handler needs command = [...]"),
    ({"command": ["x"]}, "a handler needs on"),
    ({"on": "peer-up", "command": ["x"], "timeout": 0}, "timeout must be above 0"),
    ({"on": "peer-up", "command": ["x"], "timeout": True}, "timeout must be a number"),
    ({"on": "peer-up", "command": ["x"], "env": {"A": 1}}, "env must be a table of strings"),
    ({"on": "peer-up", "command": ["x"], "shell": True}, "unknown key 'shell'"),
])
def test_mistakes_are_refused_clearly(table: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match="handlers") as info:
        parse_handlers([table], "[[handlers]]")
    assert message in str(info.value)


def test_not_an_array_and_too_many_are_refused() -> None:
    with pytest.raises(ConfigError, match="array of tables"):
        parse_handlers({"on": "peer-up"}, "[[handlers]]")
    with pytest.raises(ConfigError, match="at most 64 handlers"):
        parse_handlers([{"on": "peer-up", "command": ["x"]}] * 65, "[[handlers]]")


def test_what_an_occurrence_fires() -> None:
    assert triggers("peer-up") == ("peer-up",)
    assert triggers("event", "score") == ("event:score", "event:*")
    assert triggers("app", "board", "failed") == ("app:board:failed", "app:board:*", "app:*:failed", "app:*:*")


# ------------------------------------------------------------------ admission


def test_admission_against_a_model_exhaustively() -> None:
    """Every sequence of 8 offers and ends, for each small bound: what runs never passes the
    limit, what waits never passes the bound, jobs run in the order offered, and a job is
    dropped exactly when both are full."""
    for limit, bound in itertools.product((1, 2), (0, 1, 2)):
        for steps in itertools.product("od", repeat=8):
            a: Admission[int] = Admission(limit, bound)
            running: list[int] = []
            waiting: deque[int] = deque()
            for n, step in enumerate(steps):
                if step == "o":
                    got = a.offer(n)
                    want = "run" if len(running) < limit else "queued" if len(waiting) < bound else "dropped"
                    assert got == want
                    if got == "run":
                        running.append(n)
                    elif got == "queued":
                        waiting.append(n)
                elif running:
                    running.pop(0)
                    following = a.done()
                    assert following == (waiting.popleft() if waiting else None)
                    if following is not None:
                        running.append(following)
                else:
                    with pytest.raises(ValueError, match="no job runs"):
                        a.done()
                assert (a.running, list(a.waiting)) == (len(running), list(waiting))
                assert a.running <= limit and len(a.waiting) <= bound


# ------------------------------------------------------------------ the runner

RECORDER = """\
import json, os, sys, time
out = os.environ["OUT"]
data = sys.stdin.read()
env = {k: v for k, v in os.environ.items() if k.startswith("HUDDLE_") or k == "EXTRA"}
tmp = f"{out}.{os.getpid()}"  # runs of one handler may overlap: each writes its own, then moves it in
with open(tmp, "w") as fh:
    json.dump({"env": env, "stdin": data}, fh)
os.replace(tmp, out)
print("recorded", os.environ["HUDDLE_HANDLER"])
"""


def handler(tmp: Path, name: str, body: str) -> str:
    path = tmp / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return str(path)


until = wait_for_async  # within the event loop: the runner's tasks run between polls


def runner(tmp: Path, specs: list[HandlerSpec], running: int = 4, queued: int = 8) -> HandlerRunner:
    return HandlerRunner(specs, tmp / "apps", lambda: {"HUDDLE_NODE_NAME": "n1", "HUDDLE_API": "http://127.0.0.1:1"},
                         running=running, queued=queued)


def test_a_handler_gets_its_environment_and_the_occurrence_on_stdin(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    spec = HandlerSpec("peer-up", (sys.executable, handler(tmp_path, "rec", RECORDER)),
                       env=(("OUT", str(out)), ("EXTRA", "yes")))

    async def run() -> HandlerRunner:
        r = runner(tmp_path, [spec])
        r.fire(("peer-up",), {"HUDDLE_EVENT": "peer-up", "HUDDLE_PEER_NAME": "b", "HUDDLE_PEER_ID": "ab" * 16},
               {"type": "peer_joined", "name": "b"})
        r.fire(("peer-gone",), {}, {})  # no handler on it: nothing runs
        await until(lambda: r.counters.succeeded == 1, 20, "the handler done")
        await r.close()
        return r

    r = asyncio.run(run())
    got = json.loads(out.read_text())
    assert got["env"] == {"HUDDLE_EVENT": "peer-up", "HUDDLE_PEER_NAME": "b", "HUDDLE_PEER_ID": "ab" * 16,
                          "HUDDLE_NODE_NAME": "n1", "HUDDLE_API": "http://127.0.0.1:1", "HUDDLE_HANDLER": "peer-up",
                          "EXTRA": "yes"}
    assert json.loads(got["stdin"]) == {"type": "peer_joined", "name": "b"}
    assert r.counters.as_dict() == {"started": 1, "succeeded": 1, "failed": 0, "timed_out": 0, "dropped": 0,
                                    "spawn_failed": 0}
    assert r.status()["recent"][0]["exit"] == 0


def test_a_hanging_handler_never_blocks_and_is_killed_with_its_child_at_its_timeout(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hang = handler(tmp_path, "hang", f"""\
        import os, time
        child = os.fork()
        with open({str(pids)!r}, "a") as fh:
            fh.write(f"{{os.getpid()}}\\n")
        time.sleep(60)
        """)
    out = tmp_path / "out.json"
    specs = [HandlerSpec("event:score", (sys.executable, hang), timeout=1.0),
             HandlerSpec("event:score", (sys.executable, handler(tmp_path, "rec", RECORDER)), env=(("OUT", str(out)),))]

    async def run() -> tuple[float, float, HandlerRunner]:
        r = runner(tmp_path, specs)
        began = time.monotonic()
        r.fire(("event:score", "event:*"), {"HUDDLE_EVENT": "event"}, {"kind": "score"})
        fired = time.monotonic() - began
        await until(out.exists, 20, "the quick handler done while the other hangs")
        quick = time.monotonic() - began
        await until(lambda: r.counters.timed_out == 1, 20, "the hanging one killed")
        await r.close()
        return fired, quick, r

    fired, quick, r = asyncio.run(run())
    assert fired < 0.05  # fire() only hands the job over
    assert quick < 1.0  # not behind the hanging one
    assert (r.counters.timed_out, r.counters.failed, r.counters.succeeded) == (1, 1, 1)
    both = [int(p) for p in pids.read_text().split()]
    assert len(both) == 2
    wait_for(lambda: not any(alive(p) for p in both), 10, "the handler and its child gone")


def test_at_most_running_at_once_the_queue_bounded_the_rest_dropped(tmp_path: Path) -> None:
    nap = handler(tmp_path, "nap", "import time\ntime.sleep(0.5)\n")
    spec = HandlerSpec("peer-suspect", (sys.executable, nap))

    async def run() -> tuple[dict[str, Any], HandlerRunner]:
        r = runner(tmp_path, [spec], running=2, queued=3)
        for _ in range(10):
            r.fire(("peer-suspect",), {}, {})
        now = r.status()
        await until(lambda: r.counters.succeeded == 5, 30, "the admitted ones done")
        await r.close()
        return now, r

    now, r = asyncio.run(run())
    assert (now["running"], now["queued"], now["stats"]["dropped"]) == (2, 3, 5)
    assert (r.counters.started, r.counters.succeeded, r.counters.dropped) == (5, 5, 5)
    assert r.status()["running"] == 0


def test_failures_are_counted(tmp_path: Path) -> None:
    specs = [HandlerSpec("peer-gone", (sys.executable, "-c", "raise SystemExit(3)")),
             HandlerSpec("peer-gone", (str(tmp_path / "no-such-program"),))]

    async def run() -> HandlerRunner:
        r = runner(tmp_path, specs)
        r.fire(("peer-gone",), {}, {})
        await until(lambda: r.counters.failed == 2, 20, "both failed")
        await r.close()
        return r

    r = asyncio.run(run())
    assert r.counters.as_dict() == {"started": 1, "succeeded": 0, "failed": 2, "timed_out": 0, "dropped": 0,
                                    "spawn_failed": 1}
    assert sorted(str(x["exit"]) for x in r.status()["recent"]) == ["3", "None"]
    assert "cannot start" in (tmp_path / "apps" / "handlers.log").read_text()


def test_closing_kills_what_runs_and_runs_nothing_queued(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    hang = handler(tmp_path, "hang", f"""\
        import os, time
        with open({str(pids)!r}, "a") as fh:
            fh.write(f"{{os.getpid()}}\\n")
        time.sleep(60)
        """)

    async def run() -> HandlerRunner:
        r = runner(tmp_path, [HandlerSpec("peer-up", (sys.executable, hang))], running=1, queued=4)
        for _ in range(3):
            r.fire(("peer-up",), {}, {})
        await until(lambda: pids.exists() and pids.read_text().endswith("\n"), 20, "the first running")
        await r.close()
        return r

    r = asyncio.run(run())
    (pid,) = (int(p) for p in pids.read_text().split())
    wait_for(lambda: not alive(pid), 10, "the running handler killed")
    assert r.counters.started == 1


# ------------------------------------------------------------------ on a node


@pytest.mark.processes
def test_a_node_runs_its_handlers_on_records_peers_and_apps_without_waiting(cluster: Cluster, tmp_path: Path) -> None:
    rec = handler(tmp_path, "rec", RECORDER)
    sleeper = handler(tmp_path, "sleeper", "import time\ntime.sleep(60)\n")
    idle = handler(tmp_path, "idle", "import time\nwhile True:\n    time.sleep(1)\n")

    def on(trigger: str, name: str, command: list[str] | None = None, table: str = "handlers") -> str:
        cmd = command or [sys.executable, rec]
        return (f'[[{table}]]\non = {json.dumps(trigger)}\ncommand = {json.dumps(cmd)}\n'
                f'env = {{ OUT = {json.dumps(str(tmp_path / name))} }}\n')

    config = tmp_path / "a.toml"
    config.write_text(on("event:score", "score.json") + on("event:score", "-", [sys.executable, sleeper])
                      + on("app:board:running", "app.json")
                      + f'[[apps]]\nname = "board"\ncommand = {json.dumps([sys.executable, idle])}\nstartsecs = 0.2\n'
                      + '[types.desk]\n' + on("peer-up", "up.json", table="types.desk.handlers"))  # its type's
    a = cluster.start("a", "--config", str(config), "--type", "desk")
    wait_for((tmp_path / "app.json").exists, 20, "the handler on the board running")
    app = json.loads((tmp_path / "app.json").read_text())
    assert app["env"]["HUDDLE_EVENT"] == "app" and app["env"]["HUDDLE_APP"] == "board"
    assert app["env"]["HUDDLE_APP_STATE"] == "running" and app["env"]["HUDDLE_API"] == a.api
    assert json.loads(app["stdin"])["state"] == "running"
    for i in range(3):  # a handler that sleeps 60 s holds nothing up: the API answers at once
        began = time.monotonic()
        status, _ = http(a.api, "/api/v1/events", {"kind": "score", "body": {"goal": i}})
        assert status == 201 and time.monotonic() - began < 1.0
    wait_for((tmp_path / "score.json").exists, 20, "the handler on the record")
    score = json.loads((tmp_path / "score.json").read_text())
    info = get(a.api, "/api/v1/node")
    assert score["env"]["HUDDLE_EVENT"] == "event" and score["env"]["HUDDLE_EVENT_KIND"] == "score"
    assert score["env"]["HUDDLE_PEER_ID"] == info["uuid"]
    assert json.loads(score["stdin"])["body"] in ({"goal": 0}, {"goal": 1}, {"goal": 2})
    b = cluster.start("b")
    wait_for((tmp_path / "up.json").exists, 30, "the handler on the peer up")
    up = json.loads((tmp_path / "up.json").read_text())
    assert up["env"]["HUDDLE_EVENT"] == "peer-up" and up["env"]["HUDDLE_PEER_NAME"] == "b"
    assert up["env"]["HUDDLE_PEER_ID"] == get(b.api, "/api/v1/node")["uuid"]
    shown = get(a.api, "/api/v1/handlers")
    assert shown["running"] >= 1 and shown["stats"]["failed"] == 0 and len(shown["handlers"]) == 4
    assert "recorded event:score\n" in (cluster.tmp / "a" / "apps" / "handlers.log").read_text()  # its output


@pytest.mark.processes
def test_a_flood_of_records_starts_no_more_handlers_than_the_bound_and_counts_the_rest(
        cluster: Cluster, tmp_path: Path) -> None:
    """A peer (or the node itself) writing records as fast as it can: one handler process runs, two
    runs wait, every other run is dropped and counted, and the node answers all along."""
    sleeper = handler(tmp_path, "sleeper", "import time\ntime.sleep(60)\n")
    config = tmp_path / "a.toml"
    config.write_text(f'[[handlers]]\non = "event:flood"\ncommand = {json.dumps([sys.executable, sleeper])}\n'
                      'timeout = 60\n[limits.handlers]\nrunning = 1\nqueued = 2\n')
    a = cluster.start("a", "--config", str(config))
    for i in range(50):
        status, _ = http(a.api, "/api/v1/events", {"kind": "flood", "body": i})
        assert status == 201
    shown = wait_for(lambda: (s := get(a.api, "/api/v1/handlers"))["stats"]["dropped"] == 47 and s, 20,
                     "the flood counted")
    assert (shown["running"], shown["queued"], shown["stats"]["started"]) == (1, 2, 1)
    assert get(a.api, "/api/v1/log/summary")["events"] >= 50
