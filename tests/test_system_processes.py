"""The system picture and node types between real node processes on 127.0.0.1: six nodes
agree on one picture, a cut-off console turns read-only and a cut-off display empty, and
node types come from the config file with clear errors."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes


def system(api: str) -> dict:  # type: ignore[type-arg]
    return get(api, "/api/v1/system")  # type: ignore[no-any-return]


def agreed(nodes: list[NodeProcess], members: int, left: int = 0) -> str | None:
    """The digest, if every node computes the same picture of ``members`` healthy nodes, and
    ``left`` more listed as left (a picture agreed on while reports are still catching up with a
    join may show a stale link)."""
    pics = [system(n.api) for n in nodes]
    there = [m for m in pics[0]["members"] if m["state"] != "left"]
    if (len({p["digest"] for p in pics}) == 1 and all(len(p["members"]) == members + left for p in pics)
            and len(there) == members and all(m["health"] == "ok" for m in there)):
        return str(pics[0]["digest"])
    return None


def test_six_nodes_agree_on_the_system_picture_and_the_cli_prints_it(cluster: Cluster) -> None:
    nodes = [cluster.start(f"n{i}") for i in range(6)]
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "six nodes to mesh")
    digest = wait_for(lambda: agreed(nodes, 6), 30, "six equal digests")
    # A link's round trip shows once either end has probed it (protocol.md 7) and a full report
    # has carried it (a round trip is no fact of the digest: deltas leave it out, and full reports
    # go every refresh, 4 s): it may come after the pictures agree, so it is waited for, not read
    # at once (that failed about 1 run in 5 under load).
    def with_rtts() -> dict | None:  # type: ignore[type-arg]
        pic = system(nodes[2].api)
        return pic if all(x["rtt_ms"] is not None for x in pic["links"]) else None

    pic = wait_for(with_rtts, 15, "every link's round trip in the picture")
    assert {m["name"] for m in pic["members"]} == {f"n{i}" for i in range(6)}
    assert {m["health"] for m in pic["members"]} == {"ok"}
    assert {m["type"] for m in pic["members"]} == {"standard"}
    assert len(pic["links"]) == 15 and {x["state"] for x in pic["links"]} == {"two-way"}
    assert all(x["rtt_ms"] is not None for x in pic["links"])
    # Each member's key fingerprint, as its HELO proved it (docs/security.md), beside the picture.
    keys = {get(n.api, "/api/v1/node")["name"]: get(n.api, "/api/v1/node")["key"] for n in nodes}
    assert {m["name"]: m["key"] for m in pic["members"]} == keys
    assert all(m["verified"] for m in pic["members"])
    # Traffic shows in the rates beside the picture (messages per second out of n0).
    for i in range(50):
        assert http(nodes[0].api, "/api/v1/events", {"kind": "tick", "body": i})[0] == 201
    wait_for(lambda: next(m for m in system(nodes[3].api)["members"] if m["name"] == "n0")["rates"]["msgs_out"] > 0,
             20, "n0's outgoing rate in n3's picture")

    out = subprocess.run([sys.executable, "-m", "huddle", "system", "--api", nodes[0].api],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].split()[:7] == ["NAME", "UUID", "KEY", "TYPE", "STATE", "SINCE", "HEALTH"]
    assert sorted(line.split()[0] for line in lines[1:7]) == [f"n{i}" for i in range(6)]
    assert sum("two-way" in line for line in lines) == 15
    assert lines[-1].startswith("digest ") and len(lines[-1].split()[1]) == 64

    # One node stops: the other five agree on five, and on it listed left (docs/protocol.md 14.2).
    nodes[5].signal(signal.SIGTERM)
    nodes[5].wait(10)
    new = wait_for(lambda: agreed(nodes[:5], 5, left=1), 40, "five equal digests after n5 left")
    assert new != digest


def uuid_of(api: str) -> str:
    return str(get(api, "/api/v1/node")["uuid"])


def held(api: str) -> int:
    return int(get(api, "/api/v1/log/summary")["events"])


def test_a_console_cut_off_is_read_only_until_a_peer_is_back(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a", "--type", "console")
    b = cluster.start("b", "--type", "console")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    assert get(a.api, "/api/v1/node")["type"] == "console"
    assert http(b.api, "/api/v1/events", {"kind": "note", "body": "from b"})[0] == 201
    wait_for(lambda: held(a.api) == 1, 10, "b's event at a")
    b.signal(signal.SIGKILL)
    b.wait(10)
    # b announced a console's 0.25 s beat and 3 lost beats: a counts it gone within about 1 s.
    wait_for(lambda: get(a.api, "/api/v1/node")["cut_off"], 5, "a to be cut off")
    assert get(a.api, "/api/v1/node")["read_only"] is True
    status, body = http(a.api, "/api/v1/events", {"kind": "note", "body": "from a"})
    assert status == 409 and "read-only" in body["error"]
    status, body = http(a.api, "/api/v1/doc/ops", {"op": "set", "to": {"path": "bout/venue"}, "text": "Hall 7"})
    assert status == 409
    status, body = http(a.api, "/api/v1/posts?subject=photo", raw=b"\x89PNG not really")
    assert status == 409 and "no post was added" in body["error"]
    assert get(a.api, "/api/v1/posts") == [], "nothing was stored"
    out = subprocess.run([sys.executable, "-m", "huddle", "emit", "note", '"x"', "--api", a.api],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 1 and "cut off" in out.stderr
    assert held(a.api) == 1, "the others' state is kept, and nothing was recorded"
    b2 = cluster.start("b", "--type", "console", data_dir=tmp_path / "b")
    wait_for(lambda: cluster.mesh_complete([a, b2]), 20, "b back")
    wait_for(lambda: not get(a.api, "/api/v1/node")["read_only"], 10, "a writable again")
    assert http(a.api, "/api/v1/events", {"kind": "note", "body": "from a"})[0] == 201
    wait_for(lambda: held(b2.api) == 2, 10, "a's event at b")


def test_a_display_cut_off_becomes_empty_and_receives_everything_again(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a", "--type", "display")
    b = cluster.start("b", "--type", "console")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    for i in range(20):
        assert http(b.api, "/api/v1/events", {"kind": "note", "body": i})[0] == 201
    assert http(a.api, "/api/v1/events", {"kind": "mine", "body": "kept"})[0] == 201
    ops = {"op": "set", "to": {"path": "bout/venue"}, "text": "Hall 7"}
    assert http(b.api, "/api/v1/doc/ops", ops)[0] == 201
    wait_for(lambda: held(a.api) == 22, 10, "b's events at a")
    assert "Hall 7" in json.dumps(get(a.api, "/api/v1/doc?format=json"))
    b.signal(signal.SIGKILL)
    b.wait(10)
    wait_for(lambda: held(a.api) == 1, 10, "a to drop b's events when cut off")
    events = get(a.api, "/api/v1/log")["events"]
    assert [e["kind"] for e in events] == ["mine"], "its own events stay"
    assert "Hall 7" not in json.dumps(get(a.api, "/api/v1/doc?format=json")), "the document is empty of b's edits"
    # Still writable (a display is not read-only), and b gets everything again on reconnect.
    b2 = cluster.start("b", "--type", "console", data_dir=tmp_path / "b")
    wait_for(lambda: held(a.api) == 22 and held(b2.api) == 22, 20, "everything again on reconnect")
    wait_for(lambda: "Hall 7" in json.dumps(get(a.api, "/api/v1/doc?format=json")), 10, "b's edit back in a's document")
    assert get(a.api, "/api/v1/log/summary")["gaps"] == {}


def test_node_types_from_the_config_and_clear_errors(cluster: Cluster, tmp_path: Path) -> None:
    cfg = tmp_path / "node.toml"
    cfg.write_text('[types.kiosk]\nbase = "display"\nheartbeat-interval = 0.2\nlost-heartbeats = 2\n'
                   'send-rate = 65536\n')
    out = subprocess.run([sys.executable, "-m", "huddle", "node-types", "--config", str(cfg), "--json"],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    kiosk = next(t for t in json.loads(out.stdout) if t["name"] == "kiosk")
    assert kiosk == {"name": "kiosk", "heartbeat_interval": 0.2, "lost_heartbeats": 2, "send_rate": 65536,
                     "on_cut_off": "empty", "about": "defined in node.toml, based on display", "gone_after": 0.6}
    a = cluster.start("a", "--config", str(cfg), "--type", "kiosk")
    b = cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    info = get(a.api, "/api/v1/node")
    assert (info["type"], info["on_cut_off"]) == ("kiosk", "empty")
    wait_for(lambda: any(m["type"] == "kiosk" for m in system(b.api)["members"]), 10, "the kiosk in b's picture")
    a.signal(signal.SIGKILL)
    a.wait(10)
    # b follows the kiosk's announced 0.2 s x (2 + 1), not its own 5 s.
    wait_for(lambda: not [p for p in get(b.api, "/api/v1/peers") if p["state"] in ("alive", "suspect")], 3,
             "b to count the kiosk gone")

    for args, complaint in (
        (["--type", "nosuch"], "unknown node type 'nosuch'"),
        (["--config", str(cfg), "--type", "Bad!"], "unknown node type"),
    ):
        out = subprocess.run([sys.executable, "-m", "huddle", "node", "--data-dir", str(tmp_path / "x"),
                              "--no-beacon", *args], capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and complaint in out.stderr and "Traceback" not in out.stderr
    for text, complaint in (
        ('[types.k]\nlost-heartbeats = 0\n', "lost-heartbeats must be 1..100"),
        ('[types.k]\non-cut-off = "vanish"\n', "on-cut-off must be one of continue, read-only, empty"),
        ('[types.k]\nbeat = 1\n', "unknown key(s) beat"),
        ('[types.k]\nbase = "k2"\n', "base must be a built-in type"),
        ('[types.k]\nheartbeat-interval = "fast"\n', "heartbeat-interval has the wrong type"),
        ('types = 3\n', "node types are tables"),
    ):
        cfg.write_text(text)
        out = subprocess.run([sys.executable, "-m", "huddle", "node-types", "--config", str(cfg)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 2 and complaint in out.stderr and "Traceback" not in out.stderr, (text, out.stderr)
