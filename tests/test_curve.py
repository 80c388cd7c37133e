"""CurveZMQ and ZAP on the mesh (protocol.md 2.1.1, docs/security.md): members with the group secret
form a mesh; an outsider (a node with the group's name and another secret, a raw pyzmq
DEALER with or without CURVE) is refused before its first message, counted, and records
nothing; in allow-list mode a removed key is cut off within one heartbeat interval."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import zmq
from conftest import Cluster, get, http, wait_for

from huddle.procs import NodeProcess
from huddle.protocol.mesh import Timing
from huddle.security import GroupSecret, NodeIdentity

pytestmark = pytest.mark.processes

HEARTBEAT = Timing().heartbeat_interval  # the mesh's heartbeat constant (1 s)


def _group_file(tmp: Path, name: str = "test") -> Path:
    path = tmp / f"{name}-{time.monotonic_ns()}.key"
    GroupSecret.new(name).save(path)
    return path


def _security(api: str) -> dict[str, Any]:
    info = get(api, "/api/v1/node")
    return {**info["security"], "stats": info["stats"]["security"]}


def _sources(api: str) -> set[str]:
    return set(get(api, "/api/v1/log/summary")["version_vector"])


def _endpoint(api: str) -> str:
    return str(get(api, "/api/v1/node")["endpoint"])


def test_members_form_a_secured_mesh_and_an_outsider_with_another_secret_is_refused(cluster: Cluster,
                                                                                   tmp_path: Path) -> None:
    key = _group_file(tmp_path)
    a = cluster.start("a", "--group-key", str(key))
    b = cluster.start("b", "--group-key", str(key))
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to meet")
    sec = _security(a.api)
    assert sec["mode"] == "group" and sec["key_id"] == GroupSecret.from_code("test", _code(key)).key_id
    assert "warning" not in sec
    status, rec = http(a.api, "/api/v1/events", {"kind": "note", "body": {"t": "secured"}})
    assert status == 201, rec
    wait_for(lambda: get(b.api, "/api/v1/log/summary")["version_vector"].get(rec["source"]) == rec["seq"], 10,
             "b to replicate a's event")
    before = _security(a.api)["stats"]["refused_handshakes"]

    # The same group's NAME, another secret: it hears the beacons, and is refused.
    outsider = cluster.start("outsider", "--group-key", str(_group_file(tmp_path)))
    out_uuid = get(outsider.api, "/api/v1/node")["uuid"]
    wait_for(lambda: _security(a.api)["stats"]["refused_handshakes"] > before, 15, "a to count a refusal")
    http(outsider.api, "/api/v1/events", {"kind": "note", "body": {"t": "intrusion"}})
    # Nothing to wait for: that nothing happens is checked over several heartbeats.
    deadline = time.monotonic() + 4 * HEARTBEAT
    while time.monotonic() < deadline:
        for member in (a, b):
            assert "outsider" not in {p["name"] for p in get(member.api, "/api/v1/peers")}
            assert out_uuid not in _sources(member.api)
        assert {p["name"] for p in get(outsider.api, "/api/v1/peers") if p["state"] == "alive"} == set()
        assert _sources(outsider.api) <= {out_uuid}  # it reads nothing: not even a's event
        time.sleep(0.2)
    assert _security(a.api)["stats"]["by_reason"].get("wrong-server-key", 0) >= 1
    assert cluster.mesh_complete([a, b])  # the members are unaffected
    # The refusing member says so in words (transport/zap.py WORDS), not as a code alone.
    wait_for(lambda: "does not know this group's secret" in a.log_path.read_text(), 10, "a's refusal in words")


def _code(path: Path) -> str:
    for line in path.read_text().splitlines():
        if line.startswith("join-code"):
            return line.split('"')[1]
    raise AssertionError("no join code")


def _both_refused(reasons: dict[str, int]) -> bool:
    return bool(reasons.get("wrong-server-key") and (reasons.get("no-curve") or reasons.get("handshake")))


def test_a_raw_dealer_without_curve_or_with_a_wrong_key_gets_nothing_through(cluster: Cluster,
                                                                            tmp_path: Path) -> None:
    key = _group_file(tmp_path)
    a = cluster.start("a", "--group-key", str(key), beacon=False)
    endpoint = _endpoint(a.api)
    ctx = zmq.Context()
    try:
        plain = ctx.socket(zmq.DEALER)
        wrong = ctx.socket(zmq.DEALER)
        server_public, _ = zmq.curve_keypair()  # not the group's
        client_public, client_secret = zmq.curve_keypair()
        wrong.curve_serverkey, wrong.curve_publickey, wrong.curve_secretkey = server_public, client_public, \
            client_secret
        me = b"\x11" * 16
        hello = [b"HELO", b"\x00" * 64]  # what it says does not matter: nothing may reach the codec
        for sock in (plain, wrong):
            sock.linger = 0
            sock.setsockopt(zmq.IDENTITY, me)
            sock.connect(endpoint)
            for _ in range(3):
                sock.send_multipart([me, *hello])
        # The client without CURVE is refused on the mechanism, or (when it sees the server's greeting
        # first and hangs up) as a broken handshake: counted either way.
        wait_for(lambda: _both_refused(_security(a.api)["stats"]["by_reason"]), 10, "both refusals counted")
        assert plain.poll(int(2 * HEARTBEAT * 1000)) == 0, "a reply to a client without CURVE"
        assert wrong.poll(0) == 0, "a reply to a client with a wrong server key"
        info = get(a.api, "/api/v1/node")
        assert info["stats"]["traffic"]["received"]["HELO"] == 0, info["stats"]  # nothing reached the codec
        assert info["stats"]["foreign_by_address"] == {}, info["stats"]
        assert get(a.api, "/api/v1/peers") == []
        assert _sources(a.api) <= {info["uuid"]}, _sources(a.api)
    finally:
        ctx.destroy(linger=0)


def test_open_mode_is_unchanged_and_says_so(cluster: Cluster) -> None:
    a = cluster.start("a", beacon=False, secure=False)  # open (--open): this test is about open mode
    sec = _security(a.api)
    assert sec["mode"] == "open" and "open group" in sec["warning"] and sec["stats"] is None


def _public_key(api: str) -> str:
    return str(get(api, "/api/v1/node")["public_key"])


def test_allow_list_admits_listed_keys_and_removal_cuts_off_within_a_heartbeat(cluster: Cluster,
                                                                              tmp_path: Path) -> None:
    key = _group_file(tmp_path)
    flags = ("--group-key", str(key), "--allow-list")
    nodes = [cluster.start(n, *flags) for n in ("a", "b", "c")]
    a, b, c = nodes
    keys = {n.name: _public_key(n.api) for n in nodes}
    assert _security(a.api)["mode"] == "allow-list"
    # Nobody is trusted yet: refused at the handshake, counted with the source address.
    wait_for(lambda: _security(a.api)["stats"]["by_reason"].get("key-not-admitted", 0) > 0, 15,
             "a to refuse untrusted keys")
    assert "127.0.0.1" in _security(a.api)["stats"]["by_address"]
    assert alive_on(a.api) == set()
    for n in nodes:
        for other in nodes:
            if other is not n:
                status, added = http(n.api, "/api/v1/trust", {"key": keys[other.name], "name": other.name})
                assert status == 200, added
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "the mesh of trusted nodes")
    listed = get(a.api, "/api/v1/trust")["keys"]
    assert {k["name"] for k in listed} == {"b", "c"}
    assert (a.data_dir / "trusted-keys").read_text().count("\n") == 3  # a header line and two keys

    status, first = http(c.api, "/api/v1/events", {"kind": "note", "body": {"t": "while trusted"}})
    assert status == 201, first
    c_uuid = first["source"]
    for member in (a, b):
        wait_for(lambda m=member: get(m.api, "/api/v1/log/summary")["version_vector"].get(c_uuid) == first["seq"],
                 10, "c's event recorded while it is trusted")
    fingerprint = next(k["fingerprint"] for k in listed if k["name"] == "c")
    # The group removes c everywhere: by fingerprint on a, by key on b.
    for member, name in ((a, fingerprint), (b, keys["c"])):
        removed_at = time.monotonic()
        status, removed = http(member.api, f"/api/v1/trust/{name}", method="DELETE")
        assert status == 200 and removed["name"] == "c", removed
        wait_for(lambda m=member: "c" not in alive_on(m.api), HEARTBEAT, "c cut off within one heartbeat interval")
        assert time.monotonic() - removed_at <= HEARTBEAT
    status, rec = http(c.api, "/api/v1/events", {"kind": "note", "body": {"t": "after removal"}})
    assert status == 201, rec
    deadline = time.monotonic() + 4 * HEARTBEAT
    while time.monotonic() < deadline:  # nothing to wait for: that nothing arrives, over several heartbeats
        for member in (a, b):
            assert get(member.api, "/api/v1/log/summary")["version_vector"].get(c_uuid, 0) < rec["seq"]
            assert alive_on(member.api) == {"a", "b"} - {member.name}
        time.sleep(0.2)
    sec = _security(a.api)
    assert sec["trusted_keys"] == 1
    assert keys["c"] not in (a.data_dir / "trusted-keys").read_text()


def alive_on(api: str) -> set[str]:
    return {p["name"] for p in get(api, "/api/v1/peers") if p["state"] in ("alive", "suspect")}


def test_a_node_with_group_flags_starts_and_allow_list_needs_a_secret(tmp_path: Path) -> None:
    node = NodeProcess("lonely", tmp_path / "lonely", "--allow-list", "--no-beacon", group="test")
    try:
        with pytest.raises(RuntimeError):
            node.wait_api(10)
    finally:
        node.signal(9)
        node.wait(10)
    assert "allow-list mode needs a group secret" in node.log_path.read_text()


def _huddle(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", *args], capture_output=True, text=True, timeout=60)


def test_huddle_trust_changes_a_running_node_and_its_file(cluster: Cluster, tmp_path: Path) -> None:
    key = _group_file(tmp_path)
    strict = cluster.start("strict", "--group-key", str(key), "--allow-list", beacon=False)
    plain = cluster.start("plain", "--group-key", str(key), beacon=False)
    member = NodeIdentity.generate()
    added = _huddle("trust", "add", member.public_key.hex(), "--name", "judges", "--api", strict.api)
    assert added.returncode == 0 and f"trusted {member.fingerprint} judges" in added.stdout, added.stderr
    listed = json.loads(_huddle("trust", "list", "--api", strict.api, "--json").stdout)
    assert listed == {"keys": [{"public_key": member.public_key.hex(), "fingerprint": member.fingerprint,
                                "name": "judges"}]}
    assert member.public_key.hex() in (strict.data_dir / "trusted-keys").read_text()
    bad = _huddle("trust", "add", member.fingerprint, "--api", strict.api)
    assert bad.returncode == 1 and "fingerprint names a listed key only" in bad.stderr
    removed = _huddle("trust", "remove", member.fingerprint.lower(), "--api", strict.api)
    assert removed.returncode == 0 and "cut off now" in removed.stdout, removed.stderr
    assert json.loads(_huddle("trust", "list", "--api", strict.api, "--json").stdout) == {"keys": []}
    again = _huddle("trust", "remove", member.fingerprint, "--api", strict.api)
    assert again.returncode == 1 and "no trusted key is named so" in again.stderr
    refused = _huddle("trust", "list", "--api", plain.api)
    assert refused.returncode == 1 and "not in allow-list mode" in refused.stderr
