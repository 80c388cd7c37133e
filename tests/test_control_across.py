"""Apps across nodes, with real nodes (docs/control.md, "Across nodes"): an app held back until
another node's app runs, and a ``one-of-type`` app that runs on one node of its type, moves
when that node dies, and is left running once after a partition between namespaces heals."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for
from test_control_processes import alive, app_toml, events, script, start_node
from test_faults import Namespaces, NsNode, netns

__all__ = ["netns"]  # the fixture, shared with test_faults
pytestmark = pytest.mark.processes

# A server node with fast liveness, so a node killed is failed in the picture within a couple of seconds.
SERVER = 'type = "server"\n[timing]\nheartbeat-interval = 0.25\nsuspect-after = 0.75\ngone-after = 1.5\n'
UP = ("starting", "running", "stopping")  # the labels of an instance whose process may be alive


def labels(api: str, app: str) -> dict[str, str]:
    """Each present member's label of ``app``, by name, in the picture ``api``'s node computes."""
    out = {}
    for m in get(api, "/api/v1/system")["members"]:
        label = (m.get("ext") or {}).get("apps", {}).get(app)
        if m["state"] in ("alive", "suspect") and label is not None:
            out[m["name"]] = label
    return out


def test_an_app_waits_for_another_nodes_app_of_a_type_and_starts_once_it_runs(
        cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    path = script(tmp_path, "idle", 'say("start")\nwhile True:\n    time.sleep(1)\n')
    server = start_node(cluster, "srv", tmp_path, SERVER + app_toml(
        "clock", path, autostart=False, startsecs=0.2), ev, beacon=True)
    display = start_node(cluster, "disp", tmp_path, 'type = "display"\n' + app_toml(
        "board", path, depends_on=["clock@server"], startsecs=0.2), ev, beacon=True)
    wait_for(lambda: cluster.mesh_complete([server, display]), 20, "two nodes to mesh")
    wait_for(lambda: labels(display.api, "clock") == {"srv": "stopped"}, 20, "the display seeing the clock stopped")
    # The display holds the server's report, and its board still waits.
    assert get(display.api, "/api/v1/apps")["apps"][0]["state"] == "waiting"
    assert [n for _, n, _ in events(ev)] == []
    assert http(server.api, "/api/v1/apps/clock/start", method="POST")[0] == 200
    wait_for(lambda: get(display.api, "/api/v1/apps")["apps"][0]["state"] == "running", 20,
             "the board started once the server's clock runs")
    assert [n for _, n, _ in events(ev)] == ["clock", "board"]


def test_one_of_type_runs_once_and_a_survivor_starts_it_when_its_node_dies(
        cluster: Cluster, tmp_path: Path) -> None:
    ev = tmp_path / "events"
    path = script(tmp_path, "idle", 'say("start")\nwhile True:\n    time.sleep(1)\n')
    toml = SERVER + app_toml("rec", path, placement="one-of-type", startsecs=0.2)
    nodes = [start_node(cluster, n, tmp_path, toml, ev, beacon=True) for n in ("s1", "s2", "s3")]
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "three nodes to mesh")
    by_name = {n.name: n for n in nodes}

    def running_pids() -> list[int]:
        return sorted({p for w, _, p in events(ev) if w == "start" and alive(p)})

    seen: list[int] = []  # the most app processes alive at once, sampled while the test runs
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            seen.append(len(running_pids()))
            time.sleep(0.02)

    wait_for(lambda: len(running_pids()) == 1 and sorted(labels(nodes[0].api, "rec").values()) == [
        "running", "waiting", "waiting"], 30, "one instance, the others standing by")
    thread = threading.Thread(target=sample)
    thread.start()
    try:
        for _ in range(10):  # the group whole: never two in the picture either
            assert sum(v in UP for v in labels(nodes[1].api, "rec").values()) == 1
            time.sleep(0.2)
        holder = next(name for name, v in labels(nodes[0].api, "rec").items() if v == "running")
        victim = by_name[holder]
        first = running_pids()
        victim.signal(signal.SIGKILL)
        victim.wait(10)
        survivors = [n for n in nodes if n is not victim]
        began = time.monotonic()
        wait_for(lambda: len(running_pids()) == 1 and running_pids() != first, 20, "a survivor starting it")
        took = time.monotonic() - began
        wait_for(lambda: sorted(labels(survivors[0].api, "rec").values()) == ["running", "waiting"], 20,
                 "the picture showing the survivor's instance")
    finally:
        stop.set()
        thread.join(10)
    assert max(seen) == 1, "two instances at once"
    assert took < 10, took  # a few heartbeats: the node failed (1.5 s), its report, then a start


# ----------------------------------------------------------------- namespaces


def ns_labels(node: NsNode, app: str) -> dict[str, str]:
    out = {}
    system = node.get("/api/v1/system")
    assert isinstance(system, dict)
    for m in system["members"]:
        label = (m.get("ext") or {}).get("apps", {}).get(app)
        if m["state"] in ("alive", "suspect") and label is not None:
            out[m["name"]] = label
    return out


def test_after_a_partition_heals_exactly_one_instance_remains(netns: Namespaces, tmp_path: Path) -> None:
    """Cut off, the holder keeps its instance and the other side starts its own; once the link
    is back, the one on the node with the lowest id of the two stays and the other stops."""
    idle = tmp_path / "idle.py"
    idle.write_text("import time\nwhile True:\n    time.sleep(1)\n")
    config = tmp_path / "server.toml"
    config.write_text('type = "server"\n' + app_toml("rec", str(idle), placement="one-of-type", startsecs=0.2))
    nodes = [NsNode(netns, i, tmp_path, 5672, "--config", str(config)) for i in (1, 2, 3)]
    try:
        wait_for(lambda: all(len(n.alive_now()) == 2 for n in nodes), 30, "the three hosts to mesh", interval=0.2)

        def holders(node: NsNode) -> list[str]:
            return sorted(name for name, v in ns_labels(node, "rec").items() if v in UP)

        wait_for(lambda: all(holders(n) == holders(nodes[0]) and len(holders(n)) == 1 for n in nodes), 30,
                 "one instance, every node agreeing", interval=0.2)
        first = holders(nodes[0])[0]
        index = int(first[1:])
        netns.link(index, up=False)  # the holder's host is cut off
        others = [n for n in nodes if n.name != first]
        wait_for(lambda: len(holders(others[0])) == 1 and holders(others[0]) != [first], 30,
                 "the other side running its own", interval=0.2)
        second = holders(others[0])[0]
        assert holders(nodes[index - 1]) == [first]  # the cut-off holder kept its own
        ids = {m["name"]: m["uuid"] for m in others[0].get("/api/v1/system")["members"]}  # type: ignore[index]
        netns.link(index, up=True)
        began = time.monotonic()
        wait_for(lambda: all(holders(n) == holders(nodes[0]) and len(holders(n)) == 1 for n in nodes), 40,
                 "exactly one instance after the heal", interval=0.2)
        took = time.monotonic() - began
        winner = holders(nodes[0])[0]
        assert winner == min((first, second), key=lambda name: ids[name])  # the lowest id of those running it
        for _ in range(10):  # and it stays one
            assert all(len(holders(n)) == 1 for n in nodes)
            time.sleep(0.2)
        assert took < 20, took
    finally:
        for n in nodes:
            with contextlib.suppress(Exception):
                n.stop()
