"""Networks that come and go, with real processes: a host's link down for 30 s, a
host's address changed (DHCP), an interface that comes only after the node starts
(network namespaces, TESTING.md; skipped where they cannot be made), and every
node of a group killed and restarted at once (loopback)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Cluster, free_port, get, http, wait_for
from test_faults import Namespaces, NsNode, _ip, netns

pytestmark = pytest.mark.processes

__all__ = ["netns"]  # the fixture, shared with test_faults


def holds(node: NsNode, n: int) -> bool:
    s = node.cli("log", "--summary")
    return isinstance(s, dict) and s["events"] == n and not s["gaps"]


def test_a_host_whose_link_drops_for_30_s_comes_back_with_nothing_lost(netns: Namespaces, tmp_path: Path) -> None:
    nodes = [NsNode(netns, i, tmp_path, 5675) for i in (1, 2, 3)]
    try:
        wait_for(lambda: all(len(n.alive()) == 2 for n in nodes), 30, "the three hosts to mesh", interval=0.2)
        netns.link(2, up=False)  # h2's Wi-Fi drops: its own eth0 stays up, the network is gone
        cut_at = time.monotonic()
        wait_for(lambda: nodes[0].alive() == {"h3"}, 15, "h1 to see h2 gone", interval=0.2)
        for i in range(10):
            nodes[0].cli("emit", "score", json.dumps(i))
            nodes[1].cli("emit", "penalty", json.dumps(i))
        wait_for(lambda: time.monotonic() - cut_at >= 30, 40, "30 s of the link down", interval=0.5)
        netns.link(2, up=True)
        wait_for(lambda: all(len(n.alive()) == 2 for n in nodes) and all(holds(n, 20) for n in nodes), 30,
                 "the full mesh and every event everywhere after the link returns", interval=0.3)
    finally:
        for n in nodes:
            n.stop()


def test_a_host_whose_address_changes_is_followed_by_the_group(netns: Namespaces, tmp_path: Path) -> None:
    nodes = [NsNode(netns, i, tmp_path, 5676) for i in (1, 2, 3)]
    try:
        wait_for(lambda: all(len(n.alive()) == 2 for n in nodes), 30, "the three hosts to mesh", interval=0.2)
        for i in range(5):
            nodes[1].cli("emit", "score", json.dumps(i))
        new_ip = f"{netns.subnet}.22"
        _ip("-n", netns.hosts[1], "addr", "del", f"{netns.ips[1]}/24", "dev", "eth0")  # a DHCP renewal
        _ip("-n", netns.hosts[1], "addr", "add", f"{new_ip}/24", "brd", "+", "dev", "eth0")
        for i in range(5, 10):
            nodes[1].cli("emit", "score", json.dumps(i))
            nodes[0].cli("emit", "penalty", json.dumps(i))

        def endpoint_of_h2(node: NsNode) -> str | None:
            peers = node.cli("peers")
            assert isinstance(peers, list)
            return next((p["endpoint"] for p in peers if p["name"] == "h2" and p["state"] == "alive"), None)

        wait_for(lambda: nodes[1].cli("info")["endpoint"].startswith(f"tcp://{new_ip}:"), 10,  # type: ignore[index]
                 "h2 to notice its new address", interval=0.2)
        wait_for(lambda: all((endpoint_of_h2(n) or "").startswith(f"tcp://{new_ip}:") for n in (nodes[0], nodes[2]))
                 and all(len(n.alive()) == 2 for n in nodes) and all(holds(n, 15) for n in nodes), 30,
                 "h1 and h3 to follow h2 to its new address, every event everywhere", interval=0.3)
        info = nodes[1].cli("info")
        assert isinstance(info, dict) and info["stats"]["driver"]["address_changes"] == 1
    finally:
        for n in nodes:
            n.stop()


def test_an_interface_that_is_not_there_yet_is_waited_for(netns: Namespaces, tmp_path: Path) -> None:
    host = netns.hosts[0]
    log_path = tmp_path / "late.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            ["ip", "netns", "exec", host, sys.executable, "-m", "huddle", "node", "--name", "late", "--group", "ns",
             "--data-dir", str(tmp_path / "late"), "--interface", "wlan9", "--api", "127.0.0.1:0",
             "--beacon-port", "5677"], stdout=subprocess.PIPE, stderr=log)
        try:
            wait_for(lambda: b"waiting for it" in log_path.read_bytes(), 20, "the node to say it waits")
            assert proc.poll() is None
            assert log_path.read_bytes().count(b"waiting for it") == 1
            _ip("-n", host, "link", "add", "wlan9", "type", "veth", "peer", "name", "wlan9p")  # no dummy module here
            _ip("-n", host, "addr", "add", "10.98.7.1/24", "dev", "wlan9")
            _ip("-n", host, "link", "set", "wlan9p", "up")
            _ip("-n", host, "link", "set", "wlan9", "up")
            assert proc.stdout is not None
            line = proc.stdout.readline().decode().strip()  # the node prints its API once it runs
            assert line.startswith("api "), log_path.read_text()
            out = subprocess.run(["ip", "netns", "exec", host, sys.executable, "-m", "huddle", "info",
                                  "--api", line[4:], "--json"], capture_output=True, text=True, timeout=30)
            assert json.loads(out.stdout)["endpoint"].startswith("tcp://10.98.7.1:")
        finally:
            proc.terminate()
            proc.wait(10)


def test_every_node_killed_and_restarted_at_once_meshes_again_with_nothing_lost(cluster: Cluster) -> None:
    ports = [free_port() for _ in range(4)]
    names = ["a", "b", "c", "d"]

    def start_all() -> list:  # type: ignore[type-arg]
        started = [cluster.start(n, "--port", str(ports[i]),
                                 *(["--seed", f"127.0.0.1:{ports[i - 1]}"] if i else []),
                                 beacon=False, wait=False) for i, n in enumerate(names)]
        for n in started:
            n.wait_api()
        return started

    nodes = start_all()
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "the four nodes to mesh")
    for n in nodes:
        for k in range(5):
            status, _ = http(n.api, "/api/v1/events", {"kind": "tick", "body": f"{n.name}{k}"})
            assert status == 201
    wait_for(lambda: all(get(n.api, "/api/v1/log/summary")["events"] == 20 for n in nodes), 20, "the events to spread")
    for n in nodes:
        n.signal(signal.SIGKILL)
    for n in nodes:
        n.wait(10)
    cluster.nodes.clear()
    nodes = start_all()  # all at once, on their data directories and ports
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "the four restarted nodes to mesh again")
    for n in nodes:
        status, _ = http(n.api, "/api/v1/events", {"kind": "tick", "body": f"{n.name}-after"})
        assert status == 201

    def whole() -> bool:
        sums = [get(n.api, "/api/v1/log/summary") for n in nodes]
        return all(s["events"] == 24 and not s["gaps"] for s in sums)

    wait_for(whole, 30, "every event, before and after, held by every node")
