"""The group secret rotated while the group runs (docs/security.md "Rotating the group
secret"): 4 members under a stream of events install a new secret, switch to it in a staggered
order and retire the old one; nothing is lost, nobody restarts, the mesh stays whole, and a fifth
node left on the old secret, admitted before the rotation, is cut off, refused and counted after it."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, free_port, get, http, wait_for

from huddle.procs import NodeProcess
from huddle.protocol.mesh import Timing
from huddle.security import GroupSecret, load_group_file

pytestmark = pytest.mark.processes

HEARTBEAT = Timing().heartbeat_interval


def _alive(api: str) -> set[str]:
    return {p["name"] for p in get(api, "/api/v1/peers") if p["state"] == "alive"}


def _meet(nodes: list[NodeProcess]) -> bool:
    """Every one of ``nodes`` sees every other alive (others may be there too)."""
    names = {n.name for n in nodes}
    return all(names - {n.name} <= _alive(n.api) for n in nodes)


def _has(api: str, events: list[tuple[str, int]]) -> bool:
    summary = get(api, "/api/v1/log/summary")
    vv, gaps = summary["version_vector"], summary["gaps"]
    return all(vv.get(source, 0) >= seq and not gaps.get(source) for source, seq in events)


def _refused(api: str) -> int:
    return int(get(api, "/api/v1/node")["stats"]["security"]["refused_handshakes"])


class Stream:
    """A few events a second from each node, in a thread, until stopped; what each emit returned."""

    def __init__(self, nodes: list[NodeProcess], period: float = 0.2) -> None:
        self.nodes, self.period = nodes, period
        self.sent: list[tuple[str, int]] = []
        self.errors: list[Any] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        i = 0
        while not self._stop.wait(self.period / len(self.nodes)):
            node = self.nodes[i % len(self.nodes)]
            i += 1
            status, rec = http(node.api, "/api/v1/events", {"kind": "note", "body": {"i": i}})
            if status == 201:
                self.sent.append((rec["source"], rec["seq"]))
            else:
                self.errors.append((node.name, status, rec))

    def __enter__(self) -> Stream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


def _huddle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", *args], capture_output=True, text=True, timeout=60,
                          env=os.environ)


def test_live_rotation_on_4_nodes_under_a_stream_of_events(cluster: Cluster, tmp_path: Path) -> None:
    old_file, new_file = tmp_path / "old.key", tmp_path / "new.key"
    GroupSecret.new("test").save(old_file)
    r = _huddle("group", "new", "test", "--out", str(new_file))  # a second secret of the same group
    assert r.returncode == 0, r.stderr
    old, new = load_group_file(old_file), load_group_file(new_file)
    assert old.group == new.group and old.key_id != new.key_id

    members = [cluster.start(name, "--group-key", str(old_file)) for name in "abcd"]
    wait_for(lambda: _meet(members), 30, "the 4 members to meet")
    left = cluster.start("left", "--group-key", str(old_file))  # never given the new secret
    wait_for(lambda: _meet([*members, left]), 30, "the fifth node to be admitted")
    started = {n.name: (n.proc.pid, get(n.api, "/api/v1/node")["started_at"]) for n in [*members, left]}

    with Stream(members) as stream:
        wait_for(lambda: len(stream.sent) >= 10, 10, "the stream to run")
        # 1. install, with the CLI, on every member in turn.
        nodes = [arg for n in members for arg in ("--node", n.api)]
        r = _huddle("group", "install", str(new_file), *nodes)
        assert r.returncode == 0, r.stderr
        for n in members:
            keys = get(n.api, "/api/v1/group/keys")
            assert keys["key_id"] == old.key_id
            assert [(k["key_id"], k["state"]) for k in keys["keys"]] == [(old.key_id, "in-use"),
                                                                          (new.key_id, "installed")]
        assert _meet([*members, left])  # nothing changed yet for anyone
        # 2. switch, one member at a time, in another order; the mesh stays whole.
        for n in (members[2], members[0], members[3], members[1]):
            status, keys = http(n.api, "/api/v1/group/switch", {"key_id": new.key_id})
            assert status == 200 and keys["key_id"] == new.key_id, keys
            endpoint = get(n.api, "/api/v1/node")["endpoint"]
            assert endpoint.endswith(f":{keys['keys'][0]['port']}")  # the new secret's port
            wait_for(lambda n=n, e=endpoint: all(p["endpoint"] == e for m in members if m is not n
                                                 for p in get(m.api, "/api/v1/peers") if p["name"] == n.name),
                     20, f"the members to follow {n.name} to its new port")
            wait_for(lambda: _meet(members), 20, f"the members to stay together after {n.name} switched")
            # Between two steps the group works both ways: what each member recorded reaches every member.
            sent = list(stream.sent)
            wait_for(lambda sent=sent: all(_has(m.api, sent) for m in members), 15,
                     f"every member to hold every event after {n.name} switched")
        # 3. retire the old secret on every member.
        refused_before = sum(_refused(n.api) for n in members)
        for n in members:
            status, keys = http(n.api, "/api/v1/group/retire", {"key_id": old.key_id})
            assert status == 200 and [k["key_id"] for k in keys["keys"]] == [new.key_id], keys
        retired_at = len(stream.sent)
        wait_for(lambda: len(stream.sent) >= retired_at + 10, 10, "the stream to run on after the retirement")
    assert not stream.errors, stream.errors[:5]

    # Nothing lost: every event reached every member.
    for n in members:
        wait_for(lambda n=n: _has(n.api, stream.sent), 30, f"{n.name} to hold all {len(stream.sent)} events")
    for n in [*members, left]:  # nobody restarted
        assert (n.proc.pid, get(n.api, "/api/v1/node")["started_at"]) == started[n.name]
        assert n.proc.poll() is None
    for n in members:
        assert get(n.api, "/api/v1/node")["security"]["key_id"] == new.key_id
    wait_for(lambda: _meet(members), 20, "the members' mesh to be whole")

    # The node left on the old secret is cut off: not alive for anyone, its dials refused and counted.
    wait_for(lambda: all(left.name not in _alive(n.api) for n in members), 20, "the members to drop it")
    wait_for(lambda: sum(_refused(n.api) for n in members) > refused_before, 20, "its handshakes to be refused")
    status, rec = http(left.api, "/api/v1/events", {"kind": "note", "body": {"t": "after retirement"}})
    assert status == 201
    status, late = http(members[0].api, "/api/v1/events", {"kind": "note", "body": {"t": "members only"}})
    assert status == 201
    wait_for(lambda: all(_has(n.api, [(late["source"], late["seq"])]) for n in members), 10, "the members' event")
    wait_for(lambda: not _alive(left.api) & {n.name for n in members}, 20, "it to lose every member")
    deadline = time.monotonic() + 4 * HEARTBEAT  # that nothing crosses is checked over several heartbeats
    while time.monotonic() < deadline:
        assert not any(_has(n.api, [(rec["source"], rec["seq"])]) for n in members)
        assert not _has(left.api, [(late["source"], late["seq"])])
        time.sleep(0.2)
    assert _meet(members), {n.name: [(p["name"], p["state"]) for p in get(n.api, "/api/v1/peers")] for n in members}
    assert not _alive(left.api) & {n.name for n in members}


def test_rotation_steps_out_of_order_are_refused_with_clear_errors(cluster: Cluster, tmp_path: Path) -> None:
    old_file, other_group = tmp_path / "old.key", tmp_path / "other.key"
    GroupSecret.new("test").save(old_file)
    GroupSecret.new("another").save(other_group)
    new = GroupSecret.new("test")
    n = cluster.start("solo", "--group-key", str(old_file), beacon=False)
    old_id = get(n.api, "/api/v1/group/keys")["key_id"]

    def step(path: str, body: dict[str, str]) -> tuple[int, str]:
        status, answer = http(n.api, path, body)
        return status, str(answer.get("error", "")) if isinstance(answer, dict) else str(answer)

    assert step("/api/v1/group/keys", {"file": "not a group file"})[0] == 400
    status, error = step("/api/v1/group/keys", {"file": other_group.read_text()})
    assert status == 400 and "another" in error
    status, error = step("/api/v1/group/switch", {"key_id": new.key_id})
    assert status == 404 and "install it first" in error
    status, error = step("/api/v1/group/retire", {"key_id": old_id})
    assert status == 409 and "in use" in error
    assert step("/api/v1/group/switch", {"id": new.key_id})[0] == 400
    assert step("/api/v1/group/keys", {"file": new.file_text()})[0] == 200
    assert step("/api/v1/group/keys", {"file": GroupSecret.new("test").file_text()})[0] == 409  # a third key
    assert get(n.api, "/api/v1/join")["key_id"] == old_id  # installed, not in use yet
    assert step("/api/v1/group/switch", {"key_id": new.key_id})[0] == 200
    join = get(n.api, "/api/v1/join")  # the join panel and the guests' room key follow the switch
    assert join["key_id"] == new.key_id and join["room_key"] == new.room_key_text()
    assert step("/api/v1/group/retire", {"key_id": old_id})[0] == 200
    status, error = step("/api/v1/group/keys", {"file": old_file.read_text()})
    assert status == 409 and "retired" in error
    keys = get(n.api, "/api/v1/group/keys")
    assert keys["retired"] == [old_id] and [k["key_id"] for k in keys["keys"]] == [new.key_id]
    assert keys["stats"]["installed"] == 1 and keys["stats"]["switched"] == 1 and keys["stats"]["retired"] == 1
    # The data directory keeps the keyring: restarted with its old --group-key, it runs with the new secret.
    n.signal(15)
    n.wait(20)
    again = cluster.start("solo", "--group-key", str(old_file), beacon=False)
    assert get(again.api, "/api/v1/node")["security"]["key_id"] == new.key_id
    assert get(again.api, "/api/v1/group/keys")["retired"] == [old_id]


def test_allow_list_mode_rotates_the_server_key_only(cluster: Cluster, tmp_path: Path) -> None:
    old_file, new_file = tmp_path / "old.key", tmp_path / "new.key"
    GroupSecret.new("test").save(old_file)
    GroupSecret.new("test").save(new_file)
    new = load_group_file(new_file)
    a, b = (cluster.start(n, "--group-key", str(old_file), "--allow-list") for n in "ab")
    for n, other in ((a, b), (b, a)):
        status, added = http(n.api, "/api/v1/trust", {"key": get(other.api, "/api/v1/node")["public_key"]})
        assert status == 200, added
    wait_for(lambda: _meet([a, b]), 30, "the trusted nodes to meet")
    old_id = get(a.api, "/api/v1/group/keys")["key_id"]
    for path, body in (("/api/v1/group/keys", {"file": new_file.read_text()}),
                       ("/api/v1/group/switch", {"key_id": new.key_id})):
        for n in (a, b):
            assert http(n.api, path, body)[0] == 200
    wait_for(lambda: all(p["endpoint"] == get(n.api, "/api/v1/node")["endpoint"]
                         for m, n in ((a, b), (b, a)) for p in get(m.api, "/api/v1/peers")), 20, "the new ports")
    for n in (a, b):
        assert http(n.api, "/api/v1/group/retire", {"key_id": old_id})[0] == 200
    status, rec = http(a.api, "/api/v1/events", {"kind": "note", "body": {"t": "after the rotation"}})
    assert status == 201
    wait_for(lambda: _has(b.api, [(rec["source"], rec["seq"])]), 15, "b to hold a's event")
    assert _meet([a, b]) and len(get(a.api, "/api/v1/trust")["keys"]) == 1  # the trusted keys stay
    assert get(b.api, "/api/v1/node")["security"] == get(b.api, "/api/v1/node")["security"] | {
        "mode": "allow-list", "key_id": new.key_id}


def test_the_guests_room_key_follows_the_switch(cluster: Cluster, tmp_path: Path) -> None:
    from huddle.guest_client import Guest, GuestError  # the guest client, as test_guest_room_key does

    old_file = tmp_path / "old.key"
    GroupSecret.new("test").save(old_file)
    old, new = load_group_file(old_file), GroupSecret.new("test")
    n = cluster.start("host", "--group-key", str(old_file), "--guests", "--guest-port", "0", "--guest-ws-port", "0",
                      "--guest-marco-port", str(free_port(socket.SOCK_DGRAM)), beacon=False)
    for path, body in (("/api/v1/group/keys", {"file": new.file_text()}), ("/api/v1/group/switch",
                                                                           {"key_id": new.key_id})):
        assert http(n.api, path, body)[0] == 200
    port = get(n.api, "/api/v1/node")["guests"]["tcp_port"]

    async def run() -> None:
        common: dict[str, Any] = {"host": ("127.0.0.1", port), "listen": "127.0.0.1", "reconnect": False}
        stale = Guest("stale", "test", speaks=["score"], room_key=old.room_key_text(), **common)
        fresh = Guest("fresh", "test", speaks=["score"], room_key=new.room_key_text(), **common)
        try:
            with pytest.raises(GuestError, match="room key"):
                await stale.start(timeout=20)
            await fresh.start(timeout=20)
        finally:
            for g in (stale, fresh):
                await g.close()

    asyncio.run(run())
    assert get(n.api, "/api/v1/guests")["stats"]["room_key_refused"] == 1
