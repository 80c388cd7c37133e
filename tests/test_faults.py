"""Fault tests with real processes: a frozen node (SIGSTOP) and a partition
between network namespaces that heals.  See ../shared/TESTING.md."""

from __future__ import annotations

import contextlib
import json
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Cluster, get, http, security_flags, wait_for

sys.path.append(str(Path(__file__).resolve().parent.parent / "bench"))  # after the installed packages: bench/zre.py is no zre
from netns import Namespaces, enter_netns  # bench/ is not a package: its kit is imported by path

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


@pytest.fixture
def netns() -> Iterator[Namespaces]:
    ns = Namespaces(3, prefix="hd", net=99)
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

    def __init__(self, ns: Namespaces, index: int, tmp: Path, beacon_port: int, *extra: str) -> None:
        self.host = ns.hosts[index - 1]
        self.name = f"h{index}"
        self.log = open(tmp / f"{self.name}.log", "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", self.host, sys.executable, "-m", "huddle", "node", "--name", self.name,
             "--group", "ns", "--data-dir", str(tmp / self.name), "--interface", "eth0",
             "--api", "127.0.0.1:0", "--beacon-port", str(beacon_port), "--beacon-interval", "0.25",
             "--heartbeat-interval", "0.25", "--suspect-after", "0.75", "--gone-after", "1.5",
             *extra, *security_flags("ns", extra)],
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

    def alive(self) -> set[str]:
        """The names of the peers this node sees alive."""
        peers = self.cli("peers")
        assert isinstance(peers, list)
        return {p["name"] for p in peers if p["state"] == "alive"}

    def get(self, path: str) -> object:
        """GET ``path`` of the node's API from inside its namespace, in a thread that enters it:
        milliseconds, where a CLI process takes a second or two on a loaded machine (a test
        that times the mesh polls this way)."""
        answer: list[object] = []
        failed: list[BaseException] = []

        def run() -> None:
            try:
                enter_netns(self.host)
                with urllib.request.urlopen(self.api + path, timeout=10) as resp:
                    answer.append(json.loads(resp.read()))
            except BaseException as exc:  # raised again in the caller's thread
                failed.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        thread.join(15)
        if failed:
            raise failed[0]
        assert answer, f"{self.name}: no answer to GET {path}"
        return answer[0]

    def alive_now(self) -> set[str]:
        """:meth:`alive` through :meth:`get`."""
        peers = self.get("/api/v1/peers")
        assert isinstance(peers, list)
        return {p["name"] for p in peers if p["state"] == "alive"}

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()


# Full mesh again this long after the link returns, at the latest (16 heartbeats of these nodes'
# 0.25 s).  What it takes: the link forwarding again (a veth's carrier comes back 0.1-0.9 s after
# `ip link set up`), then a handshake; a dial whose SYN was lost meanwhile is retried by the
# kernel 1 s later, and after a short cut a ROUTER may still hold a connection from before it
# under the dialler's id: the stuck end dials afresh a suspect-after (0.75 s) on (protocol.md 6).
# Measured on two loaded CPUs (a run instrumented, when this rule came): 20 runs with cuts of 2-9 s,
# median 1.2 s, at most 2.3 s, no session ending or SUSPECT meanwhile; before, 28 runs, at most
# 2.5 s, four with the new session SUSPECT, and one ending it and meeting again 1.5 s after the
# logs had merged through h2 (which the snapshot assert made a failure).
HEAL_WITHIN = 4.0


def test_a_partition_between_hosts_heals_and_the_logs_merge(netns: Namespaces, tmp_path: Path) -> None:
    """The mesh is whole again within a few heartbeats of the link's return (timed from it,
    polled through the API, not after the logs merged: they can merge through h2 first), and
    the logs merge."""
    nodes = [NsNode(netns, i, tmp_path, 5670) for i in (1, 2, 3)]
    try:
        wait_for(lambda: all(len(n.alive_now()) == 2 for n in nodes), 30, "the three hosts to mesh", interval=0.2)
        endpoint = nodes[0].cli("info")
        assert isinstance(endpoint, dict) and endpoint["endpoint"].startswith(f"tcp://{netns.subnet}.1:")
        netns.link(3, up=False)  # h3 is cut off
        wait_for(lambda: nodes[0].alive_now() == {"h2"}, 15, "h1 to see h3 gone", interval=0.1)
        for i in range(5):
            nodes[0].cli("emit", "score", json.dumps(i))
            nodes[2].cli("emit", "penalty", json.dumps(i))
        netns.link(3, up=True)  # the network returns
        back = time.monotonic()
        wait_for(lambda: all(len(n.alive_now()) == 2 for n in nodes), HEAL_WITHIN,
                 "every host to see both others alive again", interval=0.05)
        healed = time.monotonic() - back

        def merged() -> bool:
            sums = [n.get("/api/v1/log/summary") for n in nodes]
            return all(isinstance(s, dict) and s["events"] == 10 and not s["gaps"] for s in sums)

        wait_for(merged, 30, "the logs to merge after the partition heals", interval=0.1)
        assert all(len(n.alive_now()) == 2 for n in nodes), f"the mesh came apart again (whole {healed:.2f} s in)"
    finally:
        for n in nodes:
            n.stop()


def test_two_hosts_cut_from_each_other_still_get_each_others_events_through_the_third(
    netns: Namespaces, tmp_path: Path,
) -> None:
    """One pair cut (nft, TESTING.md): h1 and h3 cannot reach each other but both reach h2,
    which holds and forwards both sides' events; when the cut is mended the mesh is whole again."""
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (make test installs it as root: scripts/system-deps)")
    nodes = [NsNode(netns, i, tmp_path, 5671) for i in (1, 2, 3)]
    try:
        wait_for(lambda: all(len(n.alive()) == 2 for n in nodes), 30, "the three hosts to mesh", interval=0.2)
        netns.partition([1], [3])
        wait_for(lambda: nodes[0].alive() == {"h2"} and nodes[2].alive() == {"h2"}, 15,
                 "h1 and h3 to lose each other", interval=0.2)
        assert nodes[1].alive() == {"h1", "h3"}
        for i in range(20):
            nodes[0].cli("emit", "score", json.dumps(i))
            nodes[2].cli("emit", "penalty", json.dumps(i))

        def holds(node: NsNode, n: int) -> bool:
            s = node.cli("log", "--summary")
            return isinstance(s, dict) and s["events"] == n and not s["gaps"]

        wait_for(lambda: all(holds(n, 40) for n in nodes), 30, "h1's and h3's events to cross through h2",
                 interval=0.3)
        log = nodes[2].cli("log", "--limit", "100")
        assert isinstance(log, list)
        from_h1 = [e for e in log if e["kind"] == "score"]
        assert len(from_h1) == 20 and all(e["hops"] == 2 for e in from_h1), from_h1[:2]
        netns.heal()
        wait_for(lambda: all(len(n.alive()) == 2 for n in nodes), 30, "the mesh to be whole again", interval=0.3)
    finally:
        for n in nodes:
            n.stop()


def _tail(receiver: NsNode, sender: NsNode) -> tuple[subprocess.Popen[str], queue.Queue[str]]:
    """``huddle tail --json`` on ``receiver``, its lines in a queue, once the stream is live
    (it shows a chat line from ``sender``)."""
    tail = subprocess.Popen(["ip", "netns", "exec", receiver.host, sys.executable, "-m", "huddle", "tail", "--json",
                             "--api", receiver.api], stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(x) for x in tail.stdout or ()], daemon=True).start()
    time_to_subscribe = time.monotonic() + 10
    while time.monotonic() < time_to_subscribe:
        sender.cli("chat", "hello")
        with contextlib.suppress(queue.Empty):
            if '"chat"' in lines.get(timeout=0.3):
                break
    return tail, lines


SENDER = """
import json, sys, urllib.request
api, to, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
for start in range(0, n, 20000):
    body = json.dumps({"to": to, "texts": [f"m{i}" for i in range(start, min(n, start + 20000))], "wait": 120})
    req = urllib.request.Request(api + "/api/v1/messages", data=body.encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=300) as resp:
        assert resp.status == 202
print("sent", n)
"""


@pytest.mark.timeout(600)
def test_addressed_messages_survive_ten_percent_random_loss(netns: Namespaces, tmp_path: Path) -> None:
    """100 000 addressed messages from h1 to h2 while the bridge drops 10 % of all frames at random:
    every one arrives, once, in order."""
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (make test installs it as root: scripts/system-deps)")
    h1, h2 = NsNode(netns, 1, tmp_path, 5672), NsNode(netns, 2, tmp_path, 5672)
    tail = None
    try:
        wait_for(lambda: h1.alive() == {"h2"} and h2.alive() == {"h1"}, 30, "h1 and h2 to mesh", interval=0.2)
        h2_info = h2.cli("info")
        assert isinstance(h2_info, dict)
        tail, lines = _tail(h2, h1)
        netns.lose(10)
        n = 100_000
        subprocess.run(["ip", "netns", "exec", h1.host, sys.executable, "-c", SENDER, h1.api, h2_info["uuid"], str(n)],
                       check=True, timeout=600, capture_output=True)
        got: list[str] = []
        h1_id = h1.cli("info")["uuid"]  # type: ignore[index]
        while len(got) < n:
            e = json.loads(lines.get(timeout=120))
            if e.get("type") == "message" and e["peer"] == h1_id:
                got.append(e["text"])
        info = h1.cli("info")
        assert isinstance(info, dict)
        assert got == [f"m{i}" for i in range(n)], info["stats"]["delivery"]
        assert info["stats"]["delivery"]["messages_sent"] == n
    finally:
        if tail is not None:
            tail.kill()
            tail.wait(10)
        for node in (h1, h2):
            node.stop()


def _port(endpoint: str) -> int:
    return int(endpoint.rsplit(":", 1)[1])


def test_a_link_open_one_way_is_reported_as_one_way_by_every_node(netns: Namespaces, tmp_path: Path) -> None:
    """h2's firewall drops TCP from h1 to h2's ROUTER port: h1 still hears h2 (h2's connection to h1
    works), h2 never hears h1.  All three nodes compute the same picture, naming the link one-way
    from h2 to h1, and equal digests; when the rule goes the link is two-way again."""
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (make test installs it as root: scripts/system-deps)")
    nodes = [NsNode(netns, i, tmp_path, 5673) for i in (1, 2, 3)]
    try:
        wait_for(lambda: all(len(n.alive()) == 2 for n in nodes), 30, "the three hosts to mesh", interval=0.2)
        infos = [n.cli("info") for n in nodes]
        uuids = [i["uuid"] for i in infos]  # type: ignore[index]
        h2_port = _port(infos[1]["endpoint"])  # type: ignore[index]
        netns.host_nft(2, "add table inet huddle_oneway\n"
                          "add chain inet huddle_oneway in { type filter hook input priority 0; policy accept; }\n"
                          f"add rule inet huddle_oneway in ip saddr {netns.ips[0]} tcp dport {h2_port} drop\n")

        def one_way() -> dict | None:  # type: ignore[type-arg]
            pics = [n.cli("system") for n in nodes]
            digests = {p["digest"] for p in pics}  # type: ignore[index]
            if len(digests) != 1:
                return None
            odd = [x for x in pics[0]["links"] if x["state"] != "two-way"]  # type: ignore[index]
            return odd[0] if len(odd) == 1 and odd[0]["state"] == "one-way" else None

        link = wait_for(one_way, 60, "every node to see the h1-h2 link one-way", interval=0.5)
        assert (link["from"], link["to"]) == (uuids[1], uuids[0]), "h2 reaches h1, h1 does not reach h2"
        pic = nodes[2].cli("system")
        assert isinstance(pic, dict)
        health = {m["name"]: m["health"] for m in pic["members"]}
        assert health == {"h1": "degraded", "h2": "degraded", "h3": "ok"}
        netns.host_nft_delete(2, "inet", "huddle_oneway")

        def whole() -> bool:
            pics = [n.cli("system") for n in nodes]
            return (len({p["digest"] for p in pics}) == 1  # type: ignore[index]
                    and {x["state"] for x in pics[0]["links"]} == {"two-way"})  # type: ignore[index]

        wait_for(whole, 60, "the link to be two-way again", interval=0.5)
    finally:
        for n in nodes:
            n.stop()


def test_addressed_messages_survive_connections_reset_mid_stream(netns: Namespaces, tmp_path: Path) -> None:
    """While h1 streams 20 000 addressed messages to h2, h2's firewall answers h1's segments with
    TCP resets three times (each for half a second): the connection is killed mid-stream, ZeroMQ
    reconnects, and every message still arrives once, in order; unacknowledged frames were sent again."""
    if shutil.which("nft") is None:
        pytest.skip("nft is not installed (make test installs it as root: scripts/system-deps)")
    h1, h2 = NsNode(netns, 1, tmp_path, 5674), NsNode(netns, 2, tmp_path, 5674)
    tail = None
    try:
        wait_for(lambda: h1.alive() == {"h2"} and h2.alive() == {"h1"}, 30, "h1 and h2 to mesh", interval=0.2)
        h2_info = h2.cli("info")
        h1_id = h1.cli("info")["uuid"]  # type: ignore[index]
        assert isinstance(h2_info, dict)
        tail, lines = _tail(h2, h1)
        n = 20_000
        sender = subprocess.Popen(["ip", "netns", "exec", h1.host, sys.executable, "-c", SENDER, h1.api,
                                   h2_info["uuid"], str(n)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        got: list[str] = []
        resets = 0
        rule = ("add table inet huddle_rst\n"
                "add chain inet huddle_rst in { type filter hook input priority 0; policy accept; }\n"
                f"add rule inet huddle_rst in ip saddr {netns.ips[0]} tcp dport {_port(h2_info['endpoint'])} "
                "reject with tcp reset\n")
        while len(got) < n:
            e = json.loads(lines.get(timeout=120))
            if e.get("type") == "message" and e["peer"] == h1_id:
                got.append(e["text"])
                if len(got) in (2000, 8000, 14000):  # mid-stream: messages are flowing
                    netns.host_nft(2, rule)
                    resets += 1
                    time.sleep(0.5)  # the reset lasts this long (not a wait for a condition)
                    netns.host_nft_delete(2, "inet", "huddle_rst")
        assert sender.wait(120) == 0, sender.stderr.read() if sender.stderr else ""
        assert resets == 3
        assert got == [f"m{i}" for i in range(n)]
        info = h1.cli("info")
        assert isinstance(info, dict)
        assert info["stats"]["delivery"]["messages_sent"] == n
        assert info["stats"]["delivery"]["frames_resent"] > 0, "the reset lost frames in flight, sent again"
    finally:
        if tail is not None:
            tail.kill()
            tail.wait(10)
        for node in (h1, h2):
            node.stop()
