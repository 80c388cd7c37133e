"""Networks that come and go, with real processes: a host's link down for 30 s, a
host's address changed (DHCP), an interface that comes only after the node starts
(network namespaces, TESTING.md; skipped where they cannot be made), and every
node of a group killed and restarted at once (loopback)."""

from __future__ import annotations

import json
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Cluster, free_port, get, group_key, http, room_key, wait_for
from test_faults import Namespaces, NsNode, netns

sys.path.append(str(Path(__file__).resolve().parent.parent / "bench"))  # after the installed packages: bench/zre.py is no zre
from netns import ip  # bench/ is not a package: its kit is imported by path

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
        ip("-n", netns.hosts[1], "addr", "del", f"{netns.ips[1]}/24", "dev", "eth0")  # a DHCP renewal
        ip("-n", netns.hosts[1], "addr", "add", f"{new_ip}/24", "brd", "+", "dev", "eth0")
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
             "--beacon-port", "5677", "--group-key", str(group_key("ns"))], stdout=subprocess.PIPE, stderr=log)
        try:
            wait_for(lambda: b"waiting for it" in log_path.read_bytes(), 20, "the node to say it waits")
            assert proc.poll() is None
            assert log_path.read_bytes().count(b"waiting for it") == 1
            ip("-n", host, "link", "add", "wlan9", "type", "veth", "peer", "name", "wlan9p")  # no dummy module here
            ip("-n", host, "addr", "add", "10.98.7.1/24", "dev", "wlan9")
            ip("-n", host, "link", "set", "wlan9p", "up")
            ip("-n", host, "link", "set", "wlan9", "up")
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


GUEST = """
import asyncio, sys
from huddle.guest_client import Guest

async def main() -> None:
    name, broadcast, port, listen, key = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
    g = Guest(name, "ns", hears=["score"], marco_address=broadcast, marco_port=port, marco_interval=0.2,
              listen=listen, heartbeat=10.0, room_key=key)  # the host does not fire it for silence during the test
    await g.start(30)
    assert g.host is not None
    print(g.host[0], g.host[1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)  # until the test closes stdin
    await g.close()

asyncio.run(main())
"""


def start_guest(netns: Namespaces, index: int, name: str, marco_port: int, script: Path) -> subprocess.Popen[bytes]:
    """A Python guest in host ``index``'s namespace, marcoing on its subnet's broadcast address;
    it prints the host's address and TCP port once registered and connected back to."""
    return subprocess.Popen(["ip", "netns", "exec", netns.hosts[index - 1], sys.executable, str(script), name,
                             f"{netns.subnet}.255", str(marco_port), netns.ips[index - 1], room_key("ns")],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


def line_within(proc: subprocess.Popen[bytes], timeout: float, what: str) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"{what}: nothing within {timeout} s"
    return proc.stdout.readline().decode().strip()


def test_a_guest_finds_and_registers_with_its_host_after_the_hosts_address_changed(
        netns: Namespaces, tmp_path: Path) -> None:
    """The guest servers follow the node's address: TCP and WebSocket listen on the new address,
    the guests connected to the old one are closed, the node says where its guest doors are now,
    and a guest's marco finds the host and registers with it there."""
    marco_port = 1031
    script = tmp_path / "guest.py"
    script.write_text(GUEST)
    host = NsNode(netns, 2, tmp_path, 5678, "--guests", "--guest-port", "0", "--guest-ws-port", "0",
                  "--guest-marco-port", str(marco_port))
    guests: list[subprocess.Popen[bytes]] = []
    try:
        before = start_guest(netns, 1, "before", marco_port, script)
        guests.append(before)
        old_ip, tcp = line_within(before, 30, "the guest registering before the change").split()
        assert old_ip == netns.ips[1]
        info = host.cli("info")
        assert isinstance(info, dict) and info["guests"]["host"] == old_ip and info["guests"]["tcp_port"] == int(tcp)
        ws = info["guests"]["ws_port"]

        new_ip = f"{netns.subnet}.22"
        ip("-n", netns.hosts[1], "addr", "del", f"{netns.ips[1]}/24", "dev", "eth0")  # a DHCP renewal
        ip("-n", netns.hosts[1], "addr", "add", f"{new_ip}/24", "brd", "+", "dev", "eth0")

        def moved() -> bool:
            guests_info = host.cli("guests")
            assert isinstance(guests_info, dict)
            return guests_info["host"] == new_ip and not guests_info["guests"]

        wait_for(moved, 15, "the guest doors to move to the new address, the old guest closed", interval=0.3)
        info = host.cli("info")
        assert isinstance(info, dict)
        assert info["guests"] == {"host": new_ip, "marco_port": marco_port, "tcp_port": int(tcp), "ws_port": ws,
                                  "keyless": False}  # a room key is asked of every guest (docs/guests.md)
        assert info["stats"]["driver"]["address_changes"] == 1
        stats = host.cli("guests")["stats"]  # type: ignore[index]
        assert stats["closed_address_changed"] >= 1

        after = start_guest(netns, 1, "after", marco_port, script)
        guests.append(after)
        assert line_within(after, 30, "a guest registering after the change").split() == [new_ip, tcp]
        wait_for(lambda: "after" in [g["name"] for g in host.cli("guests")["guests"]], 10,  # type: ignore[index]
                 "the host to list the new guest", interval=0.3)
        # The WebSocket door listens on the new address too (a plain HTTP request gets its 400).
        probe = subprocess.run(["ip", "netns", "exec", netns.hosts[0], sys.executable, "-c",
                                "import socket,sys; s=socket.create_connection((sys.argv[1], int(sys.argv[2])), 5);"
                                "s.sendall(b'GET / HTTP/1.0\\r\\n\\r\\n'); print(s.recv(100).split()[1].decode())",
                                new_ip, str(ws)], capture_output=True, text=True, timeout=30)
        assert probe.stdout.strip() == "400", probe.stderr
    finally:
        for g in guests:
            g.kill()
            g.wait(10)
        host.stop()
