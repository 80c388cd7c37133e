"""Fault tests with real processes: a frozen node (SIGSTOP) and a partition
between network namespaces that heals.  See ../shared/TESTING.md."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for

pytestmark = pytest.mark.processes


def held(api: str) -> int:
    return int(get(api, "/api/v1/log/summary")["events"])


def test_a_frozen_node_does_not_slow_the_others_and_catches_up(cluster: Cluster) -> None:
    a, b, c = (cluster.start(n) for n in ("a", "b", "c"))
    wait_for(lambda: cluster.mesh_complete([a, b, c]), 20, "mesh")
    stop = threading.Event()
    sent = [0]

    def writer() -> None:
        while not stop.is_set():
            status, _ = http(a.api, "/api/v1/events", {"kind": "tick", "body": sent[0]})
            assert status == 201
            sent[0] += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        def rate_at_b(seconds: float) -> float:
            start_count, start = held(b.api), time.monotonic()
            wait_for(lambda: time.monotonic() - start >= seconds, seconds + 5, "the window", interval=0.05)
            return (held(b.api) - start_count) / (time.monotonic() - start)

        before = rate_at_b(2.0)
        c.signal(signal.SIGSTOP)
        during = rate_at_b(10.0)  # c stays frozen for 10 s
        c.signal(signal.SIGCONT)
    finally:
        stop.set()
        thread.join(30)
    assert before > 50, before
    assert during >= 0.7 * before, (before, during)
    total = sent[0]
    wait_for(lambda: held(b.api) == total and held(c.api) == total, 30, "c to catch up after SIGCONT")
    assert get(c.api, "/api/v1/log/summary")["gaps"] == {}


# ----------------------------------------------------------------- namespaces


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=20)


class Namespaces:
    """A bridge in its own namespace and one namespace per host (TESTING.md)."""

    def __init__(self, hosts: int) -> None:
        tag = f"hd{os.getpid() % 10000}{random.randrange(100)}"
        self.bridge = f"{tag}br"
        self.hosts = [f"{tag}h{i}" for i in range(1, hosts + 1)]
        self.subnet = f"10.99.{random.randrange(1, 250)}"
        self.ips = [f"{self.subnet}.{i}" for i in range(1, hosts + 1)]
        self.created: list[str] = []

    def up(self) -> None:
        _ip("netns", "add", self.bridge)
        self.created.append(self.bridge)
        _ip("-n", self.bridge, "link", "set", "lo", "up")
        _ip("-n", self.bridge, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.bridge, "link", "set", "br0", "up")
        for i, host in enumerate(self.hosts, 1):
            _ip("netns", "add", host)
            self.created.append(host)
            _ip("-n", host, "link", "set", "lo", "up")
            _ip("-n", host, "link", "add", "eth0", "type", "veth", "peer", "name", f"vb{i}", "netns", self.bridge)
            _ip("-n", self.bridge, "link", "set", f"vb{i}", "master", "br0")
            _ip("-n", self.bridge, "link", "set", f"vb{i}", "up")
            _ip("-n", host, "addr", "add", f"{self.ips[i - 1]}/24", "brd", "+", "dev", "eth0")
            _ip("-n", host, "link", "set", "eth0", "up")

    def link(self, index: int, up: bool) -> None:
        """Connect or cut host ``index`` (1-based) from the bridge."""
        _ip("-n", self.bridge, "link", "set", f"vb{index}", "up" if up else "down")

    def down(self) -> None:
        for name in reversed(self.created):
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=20)


@pytest.fixture
def netns() -> Iterator[Namespaces]:
    ns = Namespaces(3)
    try:
        ns.up()
    except (subprocess.CalledProcessError, FileNotFoundError, PermissionError) as exc:
        ns.down()
        err = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"network namespaces cannot be made here (needs root and iproute2): {err.decode().strip() or exc}")
    try:
        yield ns
    finally:
        ns.down()


class NsNode:
    """A node inside a namespace; the test talks to it with the CLI, run inside too."""

    def __init__(self, ns: Namespaces, index: int, tmp: Path, beacon_port: int) -> None:
        self.host = ns.hosts[index - 1]
        self.name = f"h{index}"
        self.log = open(tmp / f"{self.name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.host, sys.executable, "-m", "huddle", "node", "--name", self.name,
             "--group", "ns", "--data-dir", str(tmp / self.name), "--interface", "eth0",
             "--api", "127.0.0.1:0", "--beacon-port", str(beacon_port), "--beacon-interval", "0.25",
             "--heartbeat-interval", "0.25", "--suspect-after", "0.75", "--gone-after", "1.5"],
            stdout=subprocess.PIPE, stderr=self.log,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().decode().strip()
        assert line.startswith("api "), f"{self.name} did not start: {(tmp / f'{self.name}.log').read_text()}"
        self.api = line[4:]

    def cli(self, *args: str) -> object:
        out = subprocess.run(["ip", "netns", "exec", self.host, sys.executable, "-m", "huddle", *args,
                              "--api", self.api, "--json"], capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


def test_a_partition_between_hosts_heals_and_the_logs_merge(netns: Namespaces, tmp_path: Path) -> None:
    nodes = [NsNode(netns, i, tmp_path, 5670) for i in (1, 2, 3)]
    try:
        def alive(node: NsNode) -> set[str]:
            peers = node.cli("peers")
            assert isinstance(peers, list)
            return {p["name"] for p in peers if p["state"] == "alive"}

        wait_for(lambda: all(len(alive(n)) == 2 for n in nodes), 30, "the three hosts to mesh", interval=0.2)
        endpoint = nodes[0].cli("info")
        assert isinstance(endpoint, dict) and endpoint["endpoint"].startswith(f"tcp://{netns.subnet}.1:")
        netns.link(3, up=False)  # h3 is cut off
        wait_for(lambda: alive(nodes[0]) == {"h2"}, 15, "h1 to see h3 gone", interval=0.2)
        for i in range(5):
            nodes[0].cli("emit", "score", json.dumps(i))
            nodes[2].cli("emit", "penalty", json.dumps(i))
        netns.link(3, up=True)  # the network returns

        def merged() -> bool:
            sums = [n.cli("log", "--summary") for n in nodes]
            return all(isinstance(s, dict) and s["events"] == 10 and not s["gaps"] for s in sums)

        wait_for(merged, 30, "the logs to merge after the partition heals", interval=0.3)
        assert all(len(alive(n)) == 2 for n in nodes)
    finally:
        for n in nodes:
            n.stop()
