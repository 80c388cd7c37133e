"""Pairing, across processes (docs/security.md, "Pairing"): a device with the group's name but not
its secret asks a member's door; it is kept out until a member accepts it, then receives the
secret over CurveZMQ (never in clear, never to another key) and joins the mesh.  The door holds
against floods and lies, and a refused request leaves nothing behind."""

from __future__ import annotations

import os
import re
import select
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
from conftest import Cluster, alive_names, get, group_key, http, wait_for

from huddle.pairing.codec import MAX_MESSAGE, Accepted, Pair, Pending, Refused, decode, encode
from huddle.pairing.door import door_keypair
from huddle.procs import NodeProcess
from huddle.security import NodeIdentity, load_group_file

pytestmark = pytest.mark.processes

_FP = re.compile(r"Its fingerprint: ([0-9A-Z]{4}(?:-[0-9A-Z]{4}){3})\.")


def _newcomer(cluster: Cluster, name: str, *extra: str) -> NodeProcess:
    """``huddle node --group test`` with NO secret and not --open: the one place these tests start one
    (Cluster.start would give it the group's key)."""
    node = NodeProcess(name, cluster.tmp / name, "--beacon-port", str(cluster.beacon_port), "--beacon-interval",
                       "0.25", "--pair-listen", "0.5", *extra, group="test")
    cluster.nodes.append(node)
    return node


def _lines_until(node: NodeProcess, pattern: re.Pattern[str], timeout: float) -> re.Match[str]:
    """Read the node's stdout until a line matches ``pattern``."""
    assert node.proc.stdout is not None
    os.set_blocking(node.proc.stdout.fileno(), False)
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        line = node.proc.stdout.readline()
        if line:
            seen.append(line.decode())
            if (m := pattern.search(seen[-1])) is not None:
                return m
        elif node.proc.poll() is not None:
            raise AssertionError(f"{node.name} exited {node.proc.returncode}: {seen} {node.log_path.read_text()}")
        else:
            time.sleep(0.02)
    raise AssertionError(f"{node.name} never printed {pattern.pattern}: {seen}")


def _door(api: str) -> str:
    door = get(api, "/api/v1/pair")["door"]
    assert door is not None and door.startswith("127.0.0.1:")
    assert get(api, "/api/v1/node")["features"]["pairing"]["door"] == door, "the node shows its door"
    return str(door)


def _huddle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", *args], capture_output=True, text=True, timeout=60)


class Proxy:
    """A userspace TCP proxy on 127.0.0.1 in front of ``target``; every octet both ways kept in ``seen``."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.seen = bytearray()
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        self.listener.settimeout(0.2)
        while not self._stop:
            try:
                client, _ = self.listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            upstream = socket.create_connection(self.target)
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        with a, b:
            while not self._stop:
                ready, _, _ = select.select([a, b], [], [], 0.2)
                for s in ready:
                    data = s.recv(65536)
                    if not data:
                        return
                    self.seen += data
                    (b if s is a else a).sendall(data)

    def close(self) -> None:
        self._stop = True
        self.listener.close()


def test_a_device_without_the_secret_is_kept_out_until_accepted_then_joins(cluster: Cluster) -> None:
    alice = cluster.start("alice")
    door = _door(alice.api)
    proxy = Proxy(door)
    try:
        bob = _newcomer(cluster, "bob", "--pair-with", f"127.0.0.1:{proxy.port}")
        fp = _lines_until(bob, _FP, 20).group(1)
        # The member lists it, with the fingerprint the device shows (API and CLI).
        pending = wait_for(lambda: get(alice.api, "/api/v1/pair")["pending"], 10, "bob's request")
        assert [(p["fingerprint"], p["name"], p["address"]) for p in pending] == [(fp, "bob", "127.0.0.1")]
        assert door in _huddle("info", "--api", alice.api).stdout, "huddle info shows the door"
        listed = _huddle("pair", "--api", alice.api)
        assert listed.returncode == 0 and fp in listed.stdout and "bob" in listed.stdout, listed
        # Kept out meanwhile: no secret, no mesh.
        assert not (bob.data_dir / "group.key").exists()
        assert "bob" not in alive_names(alice.api)
        # A prefix is refused (grinding a key to match it is cheap); the whole one, in lower case, accepted.
        prefix = _huddle("pair", "accept", fp[:9], "--api", alice.api)
        assert prefix.returncode != 0 and "whole" in prefix.stderr, prefix
        accepted = _huddle("pair", "accept", fp.lower(), "--api", alice.api)
        assert accepted.returncode == 0, accepted
        bob.wait_api(20)
        wait_for(lambda: "bob" in alive_names(alice.api) and "alice" in alive_names(bob.api), 20, "bob in the mesh")
    finally:
        proxy.close()
    # The secret it saved is the group's, private.
    key = bob.data_dir / "group.key"
    assert load_group_file(key).key_id == load_group_file(group_key("test")).key_id
    assert key.stat().st_mode & 0o777 == 0o600
    # Recorded by the member that let it in: who let whom in.
    records = get(alice.api, "/api/v1/log?source=" + get(alice.api, "/api/v1/node")["uuid"] + "&limit=1000")
    pairs = [r for r in records["events"] if r["kind"] == "pair-accepted"]
    assert len(pairs) == 1 and pairs[0]["body"]["fingerprint"] == fp and pairs[0]["body"]["name"] == "bob", pairs
    assert get(alice.api, "/api/v1/pair")["pending"] == []
    # Never in clear: nothing of the secret crossed the wire readable.
    secret = load_group_file(group_key("test"))
    wire = bytes(proxy.seen)
    assert len(wire) > 300, "the proxy saw the exchange"
    for needle in (secret.secret, secret.secret.hex().encode(), secret.code.encode(), secret.code.replace("-", "").encode(),
                   secret.room_key(), secret.room_key_text().encode(), b"join-code", b"secret ="):
        assert needle not in wire, needle


def test_a_device_finds_the_door_in_a_members_beacons(cluster: Cluster) -> None:
    alice = cluster.start("alice")
    bob = _newcomer(cluster, "bob")  # no --pair-with: the beacons name alice's door
    fp = _lines_until(bob, _FP, 20).group(1)
    wait_for(lambda: get(alice.api, "/api/v1/pair")["pending"], 10, "bob's request")
    assert _accept(alice.api, fp)[0] == 200
    bob.wait_api(20)
    wait_for(lambda: "bob" in alive_names(alice.api), 20, "bob in the mesh")


def test_an_acceptance_by_one_member_clears_the_request_on_the_others(cluster: Cluster) -> None:
    alice, carol = cluster.start("alice"), cluster.start("carol")
    wait_for(lambda: cluster.mesh_complete([alice, carol]), 20, "alice and carol meshed")
    bob = _newcomer(cluster, "bob")  # its beacons name both doors: it asks both
    fp = _lines_until(bob, _FP, 20).group(1)
    for member in (alice, carol):
        wait_for(lambda m=member: [p["fingerprint"] for p in get(m.api, "/api/v1/pair")["pending"]] == [fp], 10,
                 f"bob pending on {member.name}")
    assert _accept(carol.api, fp)[0] == 200
    wait_for(lambda: get(alice.api, "/api/v1/pair")["pending"] == [], 10, "alice dropped bob's request")
    bob.wait_api(20)
    wait_for(lambda: {"alice", "carol"} <= alive_names(bob.api), 20, "bob in the mesh")
    assert get(alice.api, "/api/v1/pair")["pending"] == [], "not listed again"
    assert _accept(alice.api, fp)[0] == 404


def _client(ctx: zmq.Context[zmq.Socket[bytes]], door: str, identity: NodeIdentity,
            session: NodeIdentity | None = None) -> zmq.Socket[bytes]:
    """A DEALER to ``door`` over CurveZMQ with ``session``'s key (default: ``identity``'s)."""
    keys = (session or identity).curve()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.CURVE_SERVERKEY, door_keypair("test").public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
    sock.setsockopt(zmq.RCVTIMEO, 5000)
    sock.connect(f"tcp://{door}")
    return sock


def _admitted(ctx: zmq.Context[zmq.Socket[bytes]], door: str, identity: NodeIdentity,
              name: str = "dev") -> tuple[zmq.Socket[bytes], Pending | Refused | Accepted]:
    """A session the door admitted (its handshake rate per address may refuse one: libzmq does not
    dial again after a refusal, so a new socket is made until one is answered) and its answer to a PAIR."""
    request = encode(Pair(identity.public_key, name, identity.node_id.hex(), "test"))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        sock = _client(ctx, door, identity)
        sock.send(request)
        if sock.poll(1500):
            answer = decode(sock.recv())
            assert isinstance(answer, Pending | Refused | Accepted)
            return sock, answer
        sock.close(linger=0)
    raise AssertionError("the door admitted no session in 20 s")


def _ask(sock: zmq.Socket[bytes], identity: NodeIdentity, name: str = "dev") -> Pending | Refused | Accepted:
    sock.send(encode(Pair(identity.public_key, name, identity.node_id.hex(), "test")))
    answer = decode(sock.recv())
    assert isinstance(answer, Pending | Refused | Accepted)
    return answer


def _accept(api: str, fp: str, action: str = "accept") -> tuple[int, object]:
    return http(api, f"/api/v1/pair/{action}", {"fingerprint": fp})


def test_the_secret_goes_only_to_the_accepted_key(cluster: Cluster, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    alice = cluster.start("alice", beacon=False)
    door = _door(alice.api)
    a, b = NodeIdentity.generate(), NodeIdentity.generate()
    sock_a, sock_b = _client(ctx, door, a), _client(ctx, door, b)
    assert _ask(sock_a, a) == Pending(a.fingerprint)
    # A session with b's key naming a's Ed25519 key: refused, counted, not listed.
    liar = _client(ctx, door, a, session=b)
    assert isinstance(_ask(liar, a), Refused)
    assert get(alice.api, "/api/v1/pair")["stats"]["malformed"] == 1
    # A node id its key does not give: refused too.
    liar.send(encode(Pair(b.public_key, "b", a.node_id.hex(), "test")))
    assert isinstance(decode(liar.recv()), Refused)
    assert _accept(alice.api, a.fingerprint)[0] == 200
    assert _accept(alice.api, a.fingerprint)[0] == 404, "answered once"
    answer = _ask(sock_a, a)
    assert isinstance(answer, Accepted) and "join-code" in answer.group_file
    # After a's acceptance: b, or a liar presenting a's key over its own session, still get nothing secret.
    assert _ask(sock_b, b) == Pending(b.fingerprint)
    assert isinstance(_ask(liar, a), Refused)
    assert [p["fingerprint"] for p in get(alice.api, "/api/v1/pair")["pending"]] == [b.fingerprint]
    status, body = _accept(alice.api, NodeIdentity.generate().fingerprint)
    assert status == 404 and "no device" in str(body)
    assert _accept(alice.api, b.fingerprint[:9])[0] == 400


def test_a_refused_request_leaves_nothing_behind(cluster: Cluster, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    alice = cluster.start("alice", beacon=False)
    door = _door(alice.api)
    d = NodeIdentity.generate()
    sock = _client(ctx, door, d)
    assert _ask(sock, d) == Pending(d.fingerprint)
    refused = _huddle("pair", "refuse", d.fingerprint, "--api", alice.api)
    assert refused.returncode == 0, refused
    assert get(alice.api, "/api/v1/pair")["pending"] == []
    assert isinstance(_ask(sock, d), Refused), "asking again, refused at once"
    assert get(alice.api, "/api/v1/pair")["pending"] == []
    records = get(alice.api, "/api/v1/log?limit=1000")["events"]
    assert not [r for r in records if r["kind"] == "pair-accepted"]
    assert _accept(alice.api, d.fingerprint)[0] == 404, "nothing left to accept"


def test_a_device_every_member_refuses_exits_without_a_secret(cluster: Cluster) -> None:
    alice = cluster.start("alice", beacon=False)
    bob = _newcomer(cluster, "bob", "--no-beacon", "--pair-with", _door(alice.api))
    fp = _lines_until(bob, _FP, 20).group(1)
    wait_for(lambda: get(alice.api, "/api/v1/pair")["pending"], 10, "bob's request")
    assert _accept(alice.api, fp, "refuse")[0] == 200
    assert bob.wait(20) != 0
    assert "refused this device" in bob.log_path.read_text()
    assert not (bob.data_dir / "group.key").exists()


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_flood_is_bounded_counted_and_a_pending_request_still_works(
        cluster: Cluster, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    alice = cluster.start("alice", beacon=False)
    door = _door(alice.api)
    host, _, port = door.rpartition(":")
    legit = NodeIdentity.generate()
    legit_sock = _client(ctx, door, legit)
    assert _ask(legit_sock, legit, "legit") == Pending(legit.fingerprint)
    fds_before = _fds(alice.proc.pid)

    def stats() -> dict[str, Any]:
        found: dict[str, Any] = get(alice.api, "/api/v1/pair")["stats"]
        return found

    # Many keys from one address: one more listed (the per-address cap), the rest counted, not kept.
    floods = []
    for i in range(12):
        ident = NodeIdentity.generate()
        floods.append(_client(ctx, door, ident))
        floods[-1].send(encode(Pair(ident.public_key, f"flood{i}", ident.node_id.hex(), "test")))
    wait_for(lambda: stats()["rate_limited"] >= 1, 20, "new requests past the caps counted")
    assert stats()["pending"] == 2 and stats()["door"]["refused_handshakes"] >= 1, stats()
    for sock in floods:
        sock.close(linger=0)
    # Malformed, oversized and foreign frames on an admitted session.
    junk, _ = _admitted(ctx, door, NodeIdentity.generate())
    for frame in (b"garbage", b"HPR\x01Pnot json", encode(Refused("x")), b"HPR\x01P" + b"{" * (MAX_MESSAGE + 100)):
        junk.send(frame)
    wait_for(lambda: stats()["malformed"] >= 3, 20, "malformed frames counted")
    junk.close(linger=0)
    # Plain ZeroMQ (no CURVE): refused at the handshake, counted.
    refused = stats()["door"]["refused_handshakes"]
    plain = ctx.socket(zmq.DEALER)
    plain.connect(f"tcp://{door}")
    plain.send(b"hello")
    wait_for(lambda: stats()["door"]["refused_handshakes"] > refused, 20, "a NULL handshake refused")
    plain.close(linger=0)
    # Many raw connections (no handshake): closed past the caps, counted.
    raws = [socket.create_connection((host, int(port))) for _ in range(150)]
    wait_for(lambda: stats()["door"]["refused_connections"] >= 100, 20, "connections past the caps closed")
    # 150 connections held open from one address: the door keeps 8 of them (libzmq closes the ones shut
    # at its next turn, so the count is read until it settles).
    wait_for(lambda: _fds(alice.proc.pid) <= fds_before + 8 + 8, 10, "descriptors bounded while 150 are held open")
    assert get(alice.api, "/api/v1/node")["name"] == "alice", "the node is up"
    for r in raws:
        r.close()
    # The request made before the flood still works.
    assert next(p["fingerprint"] for p in get(alice.api, "/api/v1/pair")["pending"]) == legit.fingerprint
    assert _accept(alice.api, legit.fingerprint)[0] == 200
    legit_sock.close(linger=0)
    assert isinstance(_admitted(ctx, door, legit, "legit")[1], Accepted)


def test_a_lone_device_founds_the_group_and_one_with_seeds_asks_for_a_door(tmp_path: Path) -> None:
    data = tmp_path / "solo"
    proc = subprocess.Popen([sys.executable, "-m", "huddle", "node", "--name", "solo", "--group", "derby",
                             "--data-dir", str(data), "--interface", "lo", "--api", "127.0.0.1:0", "--no-beacon"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("api "):
                break
        out = "".join(lines)
    finally:
        proc.kill()
        proc.wait(10)
    secret = load_group_file(data / "group.key")
    assert "founded group derby" in out and secret.code in out and secret.group == "derby"
    assert (data / "group.key").stat().st_mode & 0o777 == 0o600
    seeded = _huddle("node", "--name", "late", "--group", "derby2", "--data-dir", str(tmp_path / "late"),
                     "--interface", "lo", "--api", "127.0.0.1:0", "--no-beacon", "--seed", "127.0.0.1:9")
    assert seeded.returncode != 0 and "--pair-with" in seeded.stderr and "--join" in seeded.stderr, seeded
    assert not (tmp_path / "late" / "group.key").exists()


def test_on_a_phone_a_member_accepts_from_the_status_page(cluster: Cluster, browser: Any,
                                                         ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    """The "asks to join" panel: the device's name, fingerprint and address inside a phone's width,
    and Accept (confirmed) lets it in."""
    from playwright.sync_api import expect

    alice = cluster.start("alice", beacon=False)
    device = NodeIdentity.generate()
    sock, answer = _admitted(ctx, _door(alice.api), device, "scoreboard-" + "x" * 40)
    assert answer == Pending(device.fingerprint)
    page = browser.new_page(viewport={"width": 390, "height": 844})
    page.goto(alice.api + "/")
    expect(page.locator("#pair")).to_be_visible(timeout=10_000)
    expect(page.locator("#pair-list li")).to_contain_text(device.fingerprint)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
    for part in ("#pair-list code", "#pair-list button"):
        box = page.locator(part).first.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 390, (part, box)
    page.on("dialog", lambda dialog: dialog.accept())
    page.locator("#pair-list button", has_text="Accept").click()
    expect(page.locator("#pair")).to_be_hidden(timeout=10_000)
    sock.send(encode(Pair(device.public_key, "scoreboard", device.node_id.hex(), "test")))
    assert isinstance(decode(sock.recv()), Accepted)


def test_mdns_names_the_door(cluster: Cluster) -> None:
    """With --mdns a member's TXT record carries its door, pair=PORT (docs/protocol.md 9.1)."""
    from zeroconf import IPVersion, Zeroconf

    alice = cluster.start("alice", "--mdns", beacon=False)
    door = _door(alice.api)
    uuid = get(alice.api, "/api/v1/node")["uuid"]
    zc = Zeroconf(interfaces=["127.0.0.1"], ip_version=IPVersion.V4Only)
    try:
        name = f"alice-{uuid[:8]}._huddle._tcp.local."

        def txt() -> dict[bytes, bytes | None] | None:
            info = zc.get_service_info("_huddle._tcp.local.", name, timeout=1000)
            return None if info is None else info.properties

        properties = wait_for(txt, 20, "alice's mDNS record")
        assert properties[b"pair"] == door.rpartition(":")[2].encode()
    finally:
        zc.close()
