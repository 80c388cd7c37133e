"""The HTTP API, the CLI clients and configuration, against real node processes."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import Cluster, free_port, get, group_key, http, wait_for

from huddle.cli import main
from huddle.config import NodeConfig, load_config
from huddle.errors import ConfigError
from huddle.security import load_group_file


def huddle(*args: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def trio(cluster: Cluster) -> Cluster:
    nodes = [cluster.start(n) for n in ("alice", "bob", "carol")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    return cluster


@pytest.mark.processes
def test_node_endpoint_reports_identity_and_time(trio: Cluster) -> None:
    alice = trio.nodes[0]
    before = time.time()
    info = get(alice.api, "/api/v1/node")
    assert set(info) >= {"uuid", "name", "group", "endpoint", "time", "clock_offset"}
    assert len(info["uuid"]) == 32 and int(info["uuid"], 16) >= 0
    assert (info["name"], info["group"]) == ("alice", "test")
    assert info["endpoint"].startswith("tcp://127.0.0.1:")
    assert abs(info["time"] - before) < 5  # same machine: mesh time is close to wall time
    assert info["stats"]["decode_errors"] == 0


@pytest.mark.processes
def test_peers_list_has_the_documented_fields(trio: Cluster) -> None:
    peers = get(trio.nodes[0].api, "/api/v1/peers")
    assert sorted(p["name"] for p in peers) == ["bob", "carol"]
    for p in peers:
        assert set(p) == {"uuid", "name", "endpoint", "group", "state", "last_seen", "rtt_ms", "joined_local",
                          "key", "verified", "tags"}
        assert p["tags"] == {}  # none given
        assert p["state"] == "alive"
        # New data directories: each peer's uuid is the one its key gives, and its key is the one it shows.
        assert p["verified"] is True and p["key"] == get(next(n.api for n in trio.nodes if n.name == p["name"]),
                                                         "/api/v1/node")["key"]
    wait_for(lambda: all(p["rtt_ms"] is not None for p in get(trio.nodes[0].api, "/api/v1/peers")), 10, "rtt")


@pytest.mark.processes
def test_chat_through_the_cli_reaches_tail_on_the_others(trio: Cluster) -> None:
    alice, bob, carol = trio.nodes
    tails = [
        subprocess.Popen([sys.executable, "-m", "huddle", "tail", "--api", n.api, "--json", "--count", "1"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for n in (bob, carol)
    ]
    # tail subscribes over WebSocket; send until each has seen a chat (no fixed sleep).
    deadline = time.monotonic() + 20
    while any(t.poll() is None for t in tails) and time.monotonic() < deadline:
        out = huddle("chat", "jam 1 starts", "--api", alice.api, "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout) == {"sent_to": 2}
        try:
            tails[0].wait(0.3)
            tails[1].wait(0.3)
        except subprocess.TimeoutExpired:
            pass
    for t in tails:
        stdout, stderr = t.communicate(timeout=10)
        assert t.returncode == 0, stderr
        event = json.loads(stdout.strip().splitlines()[-1])
        assert event["type"] == "chat" and event["text"] == "jam 1 starts" and event["name"] == "alice"


@pytest.mark.processes
def test_chat_to_one_peer(trio: Cluster) -> None:
    alice, bob, _ = trio.nodes
    bob_uuid = get(bob.api, "/api/v1/node")["uuid"]
    status, body = http(alice.api, "/api/v1/chat", {"text": "psst", "to": bob_uuid})
    assert (status, body) == (202, {"sent_to": 1})


@pytest.mark.processes
def test_cli_peers_text_and_json(trio: Cluster) -> None:
    alice = trio.nodes[0]
    text = huddle("peers", "--api", alice.api)
    assert text.returncode == 0
    me, *lines = text.stdout.splitlines()
    assert me.startswith("this node: alice ") and " key " in me  # the local node and its key fingerprint
    assert lines[0].split() == ["NAME", "STATE", "LAST", "HEARD", "ENDPOINT", "RTT", "ms", "KEY", "TAGS"]
    assert sorted(line.split()[0] for line in lines[1:]) == ["bob", "carol"]
    bob_key = get(trio.nodes[1].api, "/api/v1/node")["key"]
    assert any(line.split()[0] == "bob" and line.split()[-2:] == [bob_key, "-"] for line in lines[1:]), lines
    as_json = json.loads(huddle("peers", "--api", alice.api, "--json").stdout)
    assert sorted(p["name"] for p in as_json) == ["bob", "carol"]
    info = huddle("info", "--api", alice.api)
    assert ["name", "alice"] in [line.split() for line in info.stdout.splitlines()]  # aligned text


@pytest.mark.processes
@pytest.mark.parametrize(
    ("method", "path", "raw", "status", "complaint"),
    [
        ("POST", "/api/v1/chat", b"{not json", 400, "not valid JSON"),
        ("POST", "/api/v1/chat", b"[1]", 400, "JSON object"),
        ("POST", "/api/v1/chat", b'{"text": 5}', 400, "'text' must be a string"),
        ("POST", "/api/v1/chat", b'{"text": "x", "too": 1}', 400, "unknown field"),
        # a name or id prefix known to no node here (api/resolve.py); empty names nothing
        ("POST", "/api/v1/chat", b'{"text": "x", "to": "nope"}', 404, "no node known to this node is named 'nope'"),
        ("POST", "/api/v1/chat", b'{"text": "x", "to": ""}', 400, "give a node's name or id"),
        ("POST", "/api/v1/chat", b'{"text": "x", "to": "' + b"ab" * 16 + b'"}', 404, "no alive peer"),
        ("POST", "/api/v1/chat", b'{"text": "' + b"x" * (1024 * 1024 + 1) + b'"}', 413, "longer than"),
        ("GET", "/api/v1/nothing", None, 404, "no such endpoint"),
        ("DELETE", "/api/v1/peers", None, 405, "not allowed"),
        ("GET", "/api/v1/events", None, 400, "WebSocket"),
    ],
)
def test_bad_requests_get_a_4xx_with_a_reason(
    trio: Cluster, method: str, path: str, raw: bytes | None, status: int, complaint: str
) -> None:
    got, body = http(trio.nodes[0].api, path, method=method, raw=raw)
    assert got == status
    assert isinstance(body, dict) and complaint in body["error"]
    assert get(trio.nodes[0].api, "/api/v1/node")["name"] == "alice"  # still serving


def test_client_without_a_node_says_so() -> None:
    port = free_port()
    out = huddle("peers", "--api", f"http://127.0.0.1:{port}")
    assert out.returncode == 1
    assert "no huddle node answers at" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["node", "--port", "x"], "invalid int value"),
        (["node", "--port-range", "9-"], "LOW-HIGH"),
        (["node", "--beacon", "--no-beacon"], "not allowed with"),
        (["node", "--gone-after", "-1"], "must be positive"),
        (["frobnicate"], "invalid choice"),
    ],
)
def test_wrong_flags_exit_2_with_a_message(args: list[str], complaint: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(args)
    assert exc.value.code == 2
    assert complaint in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--api", "nohost"], "api must be HOST:PORT"),
        (["--seed", "1.2.3.4"], "seed must be HOST:PORT"),
        (["--suspect-after", "9"], "suspect_after"),
        (["--port-range", "9000-10"], "port range"),
        (["--interface", "192.0.2.1"], "no IPv4 interface '192.0.2.1'"),  # a name would be waited for
    ],
)
def test_invalid_settings_are_refused_before_starting(tmp_path: Path, args: list[str], complaint: str) -> None:
    out = huddle("node", "--data-dir", str(tmp_path / "d"), "--no-beacon", "--group-key", str(group_key()), *args)
    assert out.returncode == 2
    assert complaint in out.stderr and "Traceback" not in out.stderr


def test_help_teaches_by_example() -> None:
    out = huddle("node", "--help")
    assert out.returncode == 0
    for needle in ("--seed HOST:PORT", "--interface lo", "--config node.toml", "api http://HOST:PORT"):
        assert needle in out.stdout


def test_config_file_and_flags(tmp_path: Path) -> None:
    path = tmp_path / "node.toml"
    path.write_text('name = "judge"\ngroup = "bout-7"\nseeds = ["127.0.0.1:50000"]\n'
                    'beacon-port = 6000\ngone_after = 9\nport-range = "50000-50100"\n')
    cfg = load_config(path)
    assert (cfg.name, cfg.group, cfg.discovery.seeds, cfg.discovery.beacon_port, cfg.timing.gone_after) == (
        "judge", "bout-7", ("127.0.0.1:50000",), 6000, 9.0)
    assert cfg.mesh.port_range == (50000, 50100)
    assert cfg.with_overrides(name="other", group=None).name == "other"
    path.write_text('beacon = false\nmdns = true\nmdns-type = "_nsode_derbyos_com._tcp"\n'
                    'naming = ["tcp://10.0.0.5:5680", "tcp://10.0.0.6:5680"]\nnaming-interval = 0\n'
                    'naming-timeout = 2.5\n')
    cfg = load_config(path)
    d = cfg.discovery
    assert (d.beacon, d.mdns, d.mdns_type, d.naming, d.naming_interval, d.naming_timeout) == (
        False, True, "_nsode_derbyos_com._tcp", ("tcp://10.0.0.5:5680", "tcp://10.0.0.6:5680"), 0.0, 2.5)
    assert NodeConfig().api.address == "127.0.0.1:8090"


@pytest.mark.parametrize(
    ("text", "complaint"),
    [
        ("nmae = 'x'", "unknown config key 'nmae'"),
        ("port = 'x'", "wrong type"),
        ("seeds = '1.2.3.4:5'", "wrong type"),
        ("beacon = 1", "wrong type"),
        ("name = ", "not valid TOML"),
        ("naming = ['10.0.0.5:5680']", "a naming broker is tcp://HOST:PORT"),
        ("naming = ['tcp://*:5680']", "needs a host and a port to connect to"),
        ("mdns-type = 'huddle'", "must look like _name._tcp"),
        ("naming-timeout = 0", "naming timeout must be positive"),
    ],
)
def test_broken_config_files_are_explained(tmp_path: Path, text: str, complaint: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=complaint):
        load_config(path)


def test_missing_config_file() -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(Path("/nonexistent/huddle.toml"))


@pytest.mark.processes
def test_config_file_drives_a_node(tmp_path: Path, cluster: Cluster) -> None:
    path = tmp_path / "node.toml"
    path.write_text(f'name = "from-file"\ngroup = "g"\ninterface = "lo"\nbeacon = false\n'
                    f'data-dir = "{tmp_path / "cfg"}"\napi = "127.0.0.1:0"\n')
    proc = subprocess.Popen([sys.executable, "-m", "huddle", "node", "--config", str(path), "--group", "override",
                             "--join", load_group_file(group_key("override")).code],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().strip()
        assert line.startswith("api http://127.0.0.1:")
        with urllib.request.urlopen(line[4:] + "/api/v1/node", timeout=10) as resp:
            info = json.loads(resp.read())
        assert (info["name"], info["group"]) == ("from-file", "override")
    finally:
        proc.terminate()
        proc.wait(10)
