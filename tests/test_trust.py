"""The allow-list file (security/trust.py) and the ZAP handler's judgement (transport/zap.py),
without a network: what is admitted, what is refused and counted, what a removal revokes."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
import zmq

from huddle.errors import ConfigError
from huddle.security import GroupSecret, NodeIdentity, TrustList
from huddle.security.trust import TRUST_FILE, curve_public
from huddle.transport.zap import AllowList, CurveGuard, MeshSecurity


def test_the_trust_file_keeps_keys_and_names_privately(tmp_path: Path) -> None:
    one, two = NodeIdentity.generate(), NodeIdentity.generate()
    trust = TrustList.load(tmp_path)
    assert trust.entries() == []
    trust.add(one.public_key, "judge table")
    trust.add(two.public_key)
    path = tmp_path / TRUST_FILE
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = TrustList.load(tmp_path)
    assert [(k.public_key, k.name) for k in again.entries()] == [(one.public_key, "judge table"), (two.public_key, "")]
    assert again.find(one.fingerprint) == again.find(one.public_key.hex().upper()) == again.entries()[0]
    assert again.remove(one.public_key) and not again.remove(one.public_key)
    assert [k.public_key for k in TrustList.load(tmp_path).entries()] == [two.public_key]


def test_bad_keys_and_damaged_files_are_refused(tmp_path: Path) -> None:
    allow = AllowList(TrustList.load(tmp_path), NodeIdentity.generate())
    with pytest.raises(ConfigError, match="64 hex digits"):
        allow.add("abcd")
    with pytest.raises(ConfigError, match="fingerprint names a listed key only"):
        allow.add(NodeIdentity.generate().fingerprint)
    (tmp_path / TRUST_FILE).write_text("zz\n")
    os.chmod(tmp_path / TRUST_FILE, 0o600)
    with pytest.raises(ConfigError, match="line 1"):
        TrustList.load(tmp_path)
    os.chmod(tmp_path / TRUST_FILE, 0o644)
    with pytest.raises(ConfigError, match="other users"):
        TrustList.load(tmp_path)


def _request(key: bytes, mechanism: bytes = b"CURVE", address: bytes = b"127.0.0.9") -> list[bytes]:
    return [b"1.0", b"7", b"huddle", address, b"", mechanism, key]


def test_zap_admits_the_group_client_key_only_and_counts_refusals_by_address(tmp_path: Path) -> None:
    secret = GroupSecret.new("derby")
    security = MeshSecurity(secret, NodeIdentity.generate(), allow_list=None)
    assert security.setup is not None
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    try:
        guard = CurveGuard(ctx, security.setup, max_addresses=2)
        admitted = guard._judge(_request(secret.curve_client().public))
        assert admitted[2] == b"200" and admitted[4] == f"group:{secret.key_id}".encode()
        other = GroupSecret.new("derby").curve_client().public
        for address in (b"10.0.0.1", b"10.0.0.2", b"10.0.0.3", b"10.0.0.3"):
            assert guard._judge(_request(other, address=address))[2] == b"400"
        assert guard._judge(_request(b"", mechanism=b"NULL"))[2] == b"400"
        assert guard._judge([b"0.9", b"1"])[2] == b"500"
        stats = guard.stats.as_dict()
        assert stats["refused_handshakes"] == 5 and stats["by_reason"] == {"key-not-admitted": 5}
        assert stats["by_address"] == {"10.0.0.3": 2, "127.0.0.9": 1}  # bounded: the newest addresses kept
        guard.close()
    finally:
        ctx.destroy(linger=0)


def test_allow_list_removal_revokes_the_key_and_cuts_the_node(tmp_path: Path) -> None:
    me, member = NodeIdentity.generate(), NodeIdentity.generate()
    security = MeshSecurity(GroupSecret.new("derby"), me, allow_list=TrustList.load(tmp_path))
    assert security.setup is not None and security.allow is not None
    assert security.setup.client.public == me.curve().public  # dials with its own key
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    cut: list[bytes] = []
    try:
        guard = CurveGuard(ctx, security.setup, max_addresses=8)
        security.attach(guard, cut.append)
        member_curve = curve_public(member.public_key)
        assert guard._judge(_request(member_curve))[2] == b"400"
        security.allow.add(member.public_key.hex(), "b")
        assert guard._judge(_request(member_curve))[4] == member.public_key.hex().encode()
        assert guard._judge(_request(me.curve().public))[2] == b"200"  # its own key: always trusted
        assert security.allow.remove(member.fingerprint) is not None
        assert cut == [member.public_key] and guard.revoked == {member.public_key.hex()}
        assert guard._judge(_request(member_curve))[2] == b"400"
        assert security.allow.remove(member.fingerprint) is None
        security.allow.add(member.public_key.hex())  # trusted again: no longer revoked
        assert guard.revoked == set()
        said = security.describe()
        assert said["mode"] == "allow-list" and said["trusted_keys"] == 1 and said["refused_handshakes"] == 2
        guard.close()
    finally:
        ctx.destroy(linger=0)
