"""Addressed messages between real node processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import json
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for

pytestmark = pytest.mark.processes


def uuid_of(api: str) -> str:
    return str(get(api, "/api/v1/node")["uuid"])


def test_messages_to_one_peer_and_to_all_arrive_in_order(cluster: Cluster) -> None:
    a, b, c = cluster.start("a", "--mtu", "1000"), cluster.start("b"), cluster.start("c")
    wait_for(lambda: cluster.mesh_complete([a, b, c]), 20, "three nodes to mesh")
    n = 2000
    tail = subprocess.Popen([sys.executable, "-m", "huddle", "tail", "--json", "--api", b.api],
                            stdout=subprocess.PIPE, text=True)
    lines: queue.Queue[str] = queue.Queue()
    assert tail.stdout is not None
    threading.Thread(target=lambda: [lines.put(line) for line in tail.stdout or ()], daemon=True).start()
    try:
        # The tail is subscribed once it shows one of c's pings (sent until one arrives).
        def ping_seen() -> bool:
            http(c.api, "/api/v1/messages", {"to": uuid_of(b.api), "text": "ping"})
            with contextlib.suppress(queue.Empty):
                while True:
                    if '"ping"' in lines.get(timeout=0.2):
                        return True
            return False
        wait_for(ping_seen, 20, "b's event stream to show c's ping")
        status, body = http(a.api, "/api/v1/messages", {"to": uuid_of(b.api), "texts": [f"m{i}" for i in range(n)]})
        assert status == 202 and len(body["sent"]) == n and body["sent"][-1]["seq"] == n
        big = "x" * 50_000  # 50 frames of 1000 octets
        status, body = http(a.api, "/api/v1/messages", {"to": "all", "text": big})
        assert status == 202 and {s["peer"] for s in body["sent"]} == {uuid_of(b.api), uuid_of(c.api)}
        a_id = uuid_of(a.api)
        got: list[str] = []
        while len(got) < n + 1:
            e = json.loads(lines.get(timeout=30))
            if e.get("type") == "message" and e["peer"] == a_id:
                got.append(e["text"])
        assert got == [f"m{i}" for i in range(n)] + [big]
    finally:
        tail.kill()
        tail.wait(10)


def test_bad_messages_get_clear_errors(cluster: Cluster) -> None:
    a = cluster.start("a", "--max-message", "100", beacon=False)
    status, body = http(a.api, "/api/v1/messages", {"to": "ab" * 16, "text": "hi"})
    assert status == 404 and "is not a peer" in body["error"]
    b = cluster.start("b", "--seed", get(a.api, "/api/v1/node")["endpoint"].removeprefix("tcp://"), beacon=False)
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    status, body = http(a.api, "/api/v1/messages", {"to": uuid_of(b.api), "text": "y" * 101})
    assert status == 413 and "larger than the largest allowed, 100" in body["error"]
    for bad, message in (({"to": "all"}, "give the message as"), ({"to": 5, "text": "x"}, "'to' must be"),
                         ({"to": "all", "base64": "!!"}, "not valid base64"), ({"to": "", "text": "x"}, "'to':")):
        status, body = http(a.api, "/api/v1/messages", bad)
        assert status == 400 and message in body["error"], (bad, body)
    status, body = http(a.api, "/api/v1/messages", {"to": "zz", "text": "x"})  # a name no node has
    assert status == 404 and "no node known to this node is named 'zz'" in body["error"], body


def test_exclusion_by_hand_is_permanent_even_across_restarts(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a", data_dir=tmp_path / "a")
    b = cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    b_id = uuid_of(b.api)
    out = subprocess.run([sys.executable, "-m", "huddle", "exclude", b_id, "--reason", "broken scoreboard",
                          "--api", a.api], capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 0 and "excluded" in out.stdout, out.stderr
    wait_for(lambda: "b" not in {p["name"] for p in get(a.api, "/api/v1/peers") if p["state"] == "alive"}
             and "a" not in {p["name"] for p in get(b.api, "/api/v1/peers") if p["state"] == "alive"},
             10, "a and b to part")
    assert get(a.api, "/api/v1/excluded") == [{"uuid": b_id, "reason": "broken scoreboard"}]
    status, body = http(a.api, f"/api/v1/peers/{b_id}/exclude", {"reason": "again"})
    assert status == 409 and "already excluded" in body["error"]
    status, body = http(a.api, f"/api/v1/peers/{uuid_of(a.api)}/exclude", {})
    assert status == 400 and "cannot exclude itself" in body["error"]
    a.signal(15)
    assert a.wait() == 0
    a2 = cluster.start("a2", data_dir=tmp_path / "a")  # b keeps beaconing; a2 must still refuse it
    cluster.start("c")
    wait_for(lambda: {p["name"] for p in get(a2.api, "/api/v1/peers") if p["state"] == "alive"} == {"c"}, 20,
             "a2 to meet c")
    # The list came back from the data directory, and b (beaconing all along) is not among a2's peers.
    assert get(a2.api, "/api/v1/excluded") == [{"uuid": b_id, "reason": "broken scoreboard"}]
    assert "b" not in {p["name"] for p in get(a2.api, "/api/v1/peers")}


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmHWM")


def test_a_frozen_receiver_bounds_the_senders_memory_and_does_not_slow_the_others(cluster: Cluster) -> None:
    a = cluster.start("a", "--send-buffer", "2000000")
    b, c = cluster.start("b"), cluster.start("c")
    wait_for(lambda: cluster.mesh_complete([a, b, c]), 20, "three nodes to mesh")
    b_id, c_id = uuid_of(b.api), uuid_of(c.api)
    b.signal(signal.SIGSTOP)
    try:
        chunk = ["x" * 10_000] * 50  # 500 KB per request
        accepted_b = 0
        for _ in range(20):  # 10 MB to each
            status, body = http(a.api, "/api/v1/messages", {"to": c_id, "texts": chunk, "wait": 20})
            assert status == 202, body
            status, body = http(a.api, "/api/v1/messages", {"to": b_id, "texts": chunk, "wait": 0})
            assert status in (202, 503), body
            accepted_b += len(body["sent"])
        # b's 2 MB buffer filled: the rest was refused at once, not queued without bound.
        assert 150 <= accepted_b <= 250, accepted_b
        wait_for(lambda: get(a.api, "/api/v1/node")["stats"]["delivery"]["messages_sent"] >= 1000 + accepted_b, 5,
                 "a to count its sends")
        # c got all 1000 while b was frozen.
        wait_for(lambda: get(c.api, "/api/v1/node")["stats"]["delivery"]["messages_received"] >= 1000, 30,
                 "c to receive its 1000 messages")
        assert peak_rss_mb(a.proc.pid) < 250
    finally:
        b.signal(signal.SIGCONT)
    # Thawed, b gets exactly what was accepted for it.
    wait_for(lambda: get(b.api, "/api/v1/node")["stats"]["delivery"]["messages_received"] == accepted_b, 60,
             "b to receive what was accepted for it")
