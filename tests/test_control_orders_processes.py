"""Orders from any node, on three real nodes (docs/control.md, "Orders from any node").

From A, an app on C is stopped and started: B's system picture shows each change; C's app list
is read from A; an unknown app, an unknown node, malformed orders and a shutdown C has no
command for are refused with clear errors; ``huddle control stop --node C`` stops C's app and
C (exit status 0); then an order for C (gone) is refused; every order and result is in the log
of every node."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, get, http, wait_for

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes

TICKER = "import time\nprint('tick from c', flush=True)\nwhile True:\n    time.sleep(1)\n"


def _with_app(cluster: Cluster, name: str, tmp: Path) -> NodeProcess:
    config = tmp / f"{name}.toml"
    config.write_text(f'[[apps]]\nname = "ticker"\ncommand = {json.dumps([sys.executable, "-c", TICKER])}\n'
                      "startsecs = 0.2\n")
    return cluster.start(name, "--config", str(config))


def _state_seen(api: str, node: str, app: str) -> str | None:
    """``app``'s state on ``node`` as the picture of the node at ``api`` shows it."""
    for m in get(api, "/api/v1/system")["members"]:
        if m.get("name") == node:
            return (m.get("ext") or {}).get("apps", {}).get(app)  # type: ignore[no-any-return]
    return None


def _audit(api: str) -> list[dict[str, Any]]:
    """The control events in the log of the node at ``api``: (kind, body) of each."""
    events = get(api, "/api/v1/log?limit=10000")["events"]
    return [e for e in events if e["kind"] in ("control.order", "control.result")]


def _pid_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_orders_from_any_node(cluster: Cluster, tmp_path: Path) -> None:
    a, b = cluster.start("a"), cluster.start("b")
    c = _with_app(cluster, "c", tmp_path)
    wait_for(lambda: cluster.mesh_complete([a, b, c]), 30, "the three nodes to mesh")
    wait_for(lambda: _state_seen(b.api, "c", "ticker") == "running", 30, "B to see C's ticker running")

    # From A: stop C's ticker; B's picture shows it stopped, then running again once started.
    status, out = http(a.api, "/api/v1/apps/ticker/stop?node=c", {})
    assert status == 200 and (out["node_name"], out["name"]) == ("c", "ticker"), out
    assert out["state"] in ("stopping", "stopped"), out
    wait_for(lambda: _state_seen(b.api, "c", "ticker") == "stopped", 15, "B to see C's ticker stopped")
    status, out = http(a.api, "/api/v1/apps/ticker/start?node=c", {})
    assert status == 200 and out["state"] in ("waiting", "starting", "running"), out
    wait_for(lambda: _state_seen(b.api, "c", "ticker") == "running", 15, "B to see C's ticker running again")

    # C's own list, with its details, read from A; every node's apps from the picture (the CLI).
    listed = get(a.api, "/api/v1/apps?node=c")["apps"]
    assert [x["name"] for x in listed] == ["ticker"] and listed[0]["pid"] is not None
    pid = listed[0]["pid"]
    shown = subprocess.run([sys.executable, "-m", "huddle", "apps", "--api", b.api], capture_output=True, text=True,
                           timeout=30)
    assert shown.returncode == 0 and "ticker" in shown.stdout and "running" in shown.stdout, shown

    # C's ticker's output, read from A (a read: not in the log); --follow's next read starts at "next".
    out = get(a.api, "/api/v1/apps/ticker/logs?node=c")
    assert "tick from c" in out["text"] and out["node_name"] == "c" and out["more"] is False, out
    assert get(a.api, f"/api/v1/apps/ticker/logs?node=c&after={out['next']}")["text"] == ""
    assert "tick from c" in get(a.api, "/api/v1/apps/ticker/logs?node=c&after=0")["text"]
    shown = subprocess.run([sys.executable, "-m", "huddle", "app", "logs", "ticker", "--node", "c", "--api", b.api],
                           capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and "tick from c" in shown.stdout, shown
    status, out = http(a.api, "/api/v1/apps/nope/logs?node=c")
    assert status == 404 and "no app 'nope' on c" in out["error"], out
    assert http(a.api, "/api/v1/apps/ticker/logs?node=c&after=-1")[0] == 400
    assert http(a.api, "/api/v1/apps/ticker/logs?node=c&after=x")[0] == 400

    # Refused, clearly: an app C does not run, a node nobody knows, malformed orders, a shutdown
    # without a command (C has none configured).
    status, out = http(a.api, "/api/v1/apps/nope/start?node=c", {})
    assert status == 404 and "no app 'nope' on c" in out["error"], out
    status, out = http(a.api, "/api/v1/apps/ticker/start?node=nobody", {})
    assert status == 404, out
    assert http(a.api, "/api/v1/apps/ticker/explode?node=c", {})[0] == 400
    assert http(a.api, "/api/v1/apps/Bad!/start?node=c", {})[0] in (400, 404)
    assert http(a.api, "/api/v1/control/explode", {"node": "c"})[0] == 400
    assert http(a.api, "/api/v1/control/stop", {"node": "c", "all": True})[0] == 400
    assert http(a.api, "/api/v1/control/stop", {"node": 7})[0] == 400
    status, out = http(a.api, "/api/v1/control/shutdown", {"node": "c"})
    assert status == 409 and "shutdown-command" in out["error"], out
    assert _pid_alive(pid), "a refused order changed nothing"

    # Every order and its result, on every node: A recorded the orders, C the results.
    def audited(api: str) -> bool:
        rows = _audit(api)
        orders = [(r["body"]["action"], r["body"]["app"]) for r in rows if r["kind"] == "control.order"]
        results = [(r["body"]["action"], r["body"]["status"]) for r in rows if r["kind"] == "control.result"]
        return (("stop", "ticker") in orders and ("start", "ticker") in orders and ("start", "nope") in orders
                and ("stop", 200) in results and ("start", 404) in results and ("shutdown", 409) in results
                and all(r["body"]["action"] != "logs" for r in rows))  # reads are not audit data

    for node in (a, b, c):
        wait_for(lambda node=node: audited(node.api), 15, f"every order and result in {node.name}'s log")
    first = next(r for r in _audit(b.api) if r["kind"] == "control.order")
    assert first["body"]["by_name"] == "a" and first["body"]["node_name"] == "c"
    assert first["source"] == get(a.api, "/api/v1/node")["uuid"]

    # `huddle control stop --node c`: C stops its app, then itself, and exits 0.
    shown = subprocess.run([sys.executable, "-m", "huddle", "control", "stop", "--node", "c", "--api", a.api],
                           capture_output=True, text=True, timeout=30)
    assert shown.returncode == 0 and "c: stop accepted" in shown.stdout, shown
    assert c.wait(20) == 0
    wait_for(lambda: not _pid_alive(pid), 10, "C's app to be gone with C")
    wait_for(lambda: http(a.api, "/api/v1/apps/ticker/start?node=c", {})[0] == 410, 20, "an order for C: gone")
    status, out = http(a.api, "/api/v1/control/stop", {"node": "c"})
    assert status == 410 and "gone" in out["error"], out
    wait_for(lambda: any(r["kind"] == "control.result" and r["body"]["action"] == "stop" and not r["body"]["app"]
                         for r in _audit(b.api)), 15, "C's result of the stop order in B's log")
