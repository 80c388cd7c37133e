"""A peer's key bound to its node id (protocol.md 4.1, "Identity"): HELO carries the sender's Ed25519
key and a signature, and the mesh admits it only if the key gives the id it claims
(or, in open mode, the id is a legacy one), the signature verifies, it is meant for
this node and recent.  On the sans-I/O Mesh and the simulator: no sockets."""

from __future__ import annotations

import dataclasses

import pytest

from huddle import NodeId
from huddle.errors import DecodeError
from huddle.protocol import Connect, Mesh, Send
from huddle.security import NodeIdentity, verify
from huddle.sim import SimNetwork
from huddle.wire import Group, Helo, decode, encode, helo_signed

ME = NodeIdentity.from_seed(b"\x01" * 32)
HOME = "10.0.0.2"
EVIL = "10.0.0.66"
NOW = 1_000_000.0


def node(*, secure: bool = False) -> Mesh:
    return Mesh(ME.node_id, name="alice", group="g", endpoint="tcp://10.0.0.1:5000", incarnation="11" * 8,
                now=NOW, identity=ME, secure=secure)


def signed(who: NodeIdentity, *, uuid: NodeId | None = None, source: str = HOME, at: float = NOW,
           to: NodeId | None = ME.node_id, incarnation: str = "22" * 8, reply: bool = False) -> Helo:
    helo = Helo(uuid or who.node_id, endpoint=f"tcp://{source}:6000", name="bob", incarnation=incarnation,
                reply=reply, key=who.public_key, sig=bytes(64), at=round(at * 1000), to=to)
    return dataclasses.replace(helo, sig=who.sign(helo_signed(helo)))


def say(mesh: Mesh, helo: Helo, source: str = HOME, now: float = NOW) -> bool:
    """The HELO and its BOUT, as they come on the wire."""
    ok = mesh.receive(encode(helo), now, source)
    mesh.receive(encode(Group(helo.sender, group="g")), now, source)
    return ok


def untouched(mesh: Mesh) -> bool:
    """No session, no dial, nothing sent, nothing seen: the HELO left no state."""
    return mesh.take_actions() == [] and mesh.peers(NOW) == [] and mesh.seen(NOW, 60.0) == []


# ------------------------------------------------------------------ the codec


def test_a_signed_helo_round_trips_and_its_signature_covers_every_member() -> None:
    bob = NodeIdentity.generate()
    helo = signed(bob)
    assert decode(encode(helo)) == helo
    assert verify(bob.public_key, helo_signed(decode(encode(helo))), helo.sig)  # type: ignore[arg-type]
    for change in ({"endpoint": "tcp://10.0.0.9:6000"}, {"name": "eve"}, {"incarnation": "33" * 8},
                   {"reply": True}, {"peers": 3}, {"at": helo.at + 1}, {"to": None}, {"guests": 1030},
                   {"sender": NodeIdentity.generate().node_id}):
        assert helo_signed(dataclasses.replace(helo, **change)) != helo_signed(helo), change  # type: ignore[arg-type]
    # An unsigned HELO (an older node) still decodes, as before.
    plain = Helo(NodeId.random(), endpoint="tcp://10.0.0.2:6000", name="old", incarnation="44" * 8)
    assert decode(encode(plain)) == plain and b"key" not in encode(plain)[2]


@pytest.mark.parametrize("body", [
    b'"key":"00"',  # too short
    b'"key":"' + b"G" * 64 + b'"',  # not hex
    b'"key":"' + b"ab" * 32 + b'","sig":"00","at":1',  # short signature
    b'"key":"' + b"ab" * 32 + b'","at":1',  # a key without its signature
    b'"key":"' + b"ab" * 32 + b'","sig":"' + b"cd" * 64 + b'","at":-1',  # negative time
])
def test_a_malformed_identity_is_a_decode_error(body: bytes) -> None:
    frames = [bytes(16), b"HELO", b'{"version":1,"endpoint":"tcp://10.0.0.2:1","name":"x","incarnation":"'
              + b"0" * 16 + b'",' + body + b"}"]
    with pytest.raises(DecodeError):
        decode(frames)


# ------------------------------------------------------------------ admission


def test_a_helo_signed_by_the_key_that_gives_its_id_is_admitted_and_verified() -> None:
    mesh, bob = node(), NodeIdentity.generate()
    assert say(mesh, signed(bob))
    [peer] = mesh.peers(NOW)
    assert peer.uuid == bob.node_id and peer.verified and peer.key == bob.fingerprint
    assert mesh.stats.refused_identity == 0
    # Our answer is signed too, and meant for bob.
    [answer] = [a.message for a in mesh.take_actions() if isinstance(a, Send) and isinstance(a.message, Helo)]
    assert answer.to == bob.node_id and answer.key == ME.public_key
    assert verify(ME.public_key, helo_signed(answer), answer.sig)


def test_identity_theft_another_key_for_a_members_id_is_refused_and_counted() -> None:
    mesh, bob, eve = node(), NodeIdentity.generate(), NodeIdentity.generate()
    forged = signed(eve, uuid=bob.node_id, source=EVIL)  # eve's own key, bob's id
    assert not say(mesh, forged, EVIL)
    assert mesh.stats.refused_identity == 1 and untouched(mesh)
    # bob himself is admitted afterwards, and eve's later try does not touch his session.
    assert say(mesh, signed(bob))
    mesh.take_actions()
    # While bob is ALIVE, frames under his id from elsewhere are blamed on their address (protocol.md 8.6);
    # once he is SUSPECT a HELO from a new address is heard (he may have moved): the key decides.
    mesh.tick(NOW + 3.0)
    assert not say(mesh, signed(eve, uuid=bob.node_id, source=EVIL, at=NOW + 3), EVIL, now=NOW + 3)
    assert mesh.stats.refused_identity == 2 and mesh.stats.endpoints_followed == 0
    assert [(p.uuid, p.state, p.key, p.endpoint) for p in mesh.peers(NOW + 3)] == [
        (bob.node_id, "suspect", bob.fingerprint, f"tcp://{HOME}:6000")]
    assert not any(isinstance(a, Connect) for a in mesh.take_actions())


@pytest.mark.parametrize("tamper", ["signature", "field", "key-derived id unsigned", "stale", "future"])
def test_a_bad_or_tampered_helo_is_refused_before_any_session_exists(tamper: str) -> None:
    mesh, bob = node(), NodeIdentity.generate()
    helo = signed(bob)
    if tamper == "signature":
        helo = dataclasses.replace(helo, sig=bytes([helo.sig[0] ^ 1]) + helo.sig[1:])
    elif tamper == "field":
        helo = dataclasses.replace(helo, endpoint="tcp://10.0.0.66:6000")  # signed for another endpoint
    elif tamper == "key-derived id unsigned":
        helo = Helo(bob.node_id, endpoint=helo.endpoint, name="bob", incarnation=helo.incarnation)
    elif tamper == "stale":
        helo = signed(bob, at=NOW - 301)
    else:
        helo = signed(bob, at=NOW + 301)
    assert not say(mesh, helo)
    assert mesh.stats.refused_identity == 1 and untouched(mesh)


def test_a_helo_meant_for_another_node_is_refused_as_misaddressed() -> None:
    mesh, bob = node(), NodeIdentity.generate()
    assert not say(mesh, signed(bob, to=NodeIdentity.generate().node_id))
    assert mesh.stats.helos_misaddressed == 1 and mesh.stats.refused_identity == 0 and untouched(mesh)
    assert say(mesh, signed(bob, to=None))  # a seed's HELO: the sender did not know whom it dialled


def test_legacy_ids_are_admitted_unverified_in_open_mode_and_refused_in_secure_mode() -> None:
    legacy = NodeId.random()  # version 4: an older data directory's id
    old_key = NodeIdentity.generate()
    unsigned = Helo(legacy, endpoint=f"tcp://{HOME}:6000", name="old", incarnation="22" * 8)
    for helo in (unsigned, signed(old_key, uuid=legacy)):
        mesh = node()
        assert say(mesh, helo)
        [peer] = mesh.peers(NOW)
        assert not peer.verified and peer.key == ("" if helo is unsigned else old_key.fingerprint)
        strict = node(secure=True)
        assert not say(strict, helo)
        assert strict.stats.refused_identity == 1 and untouched(strict)
    # In secure mode, a key-derived id with its key is admitted.
    strict, bob = node(secure=True), NodeIdentity.generate()
    assert say(strict, signed(bob))
    assert [p.verified for p in strict.peers(NOW)] == [True]


def test_a_legacy_ids_session_keeps_its_key() -> None:
    mesh, legacy, key, other = node(), NodeId.random(), NodeIdentity.generate(), NodeIdentity.generate()
    assert say(mesh, signed(key, uuid=legacy))
    mesh.take_actions()
    # Another key, or none, for that id while its session lives: refused (a new incarnation too).
    assert not say(mesh, signed(other, uuid=legacy, incarnation="33" * 8, at=NOW + 1), now=NOW + 1)
    plain = Helo(legacy, endpoint=f"tcp://{HOME}:6000", name="bob", incarnation="33" * 8)
    assert not say(mesh, plain, now=NOW + 1)
    assert mesh.stats.refused_identity == 2 and mesh.stats.restarts_followed == 0
    assert [p.key for p in mesh.peers(NOW + 1)] == [key.fingerprint]


def test_a_restart_with_the_same_key_is_followed() -> None:
    mesh, bob = node(), NodeIdentity.generate()
    assert say(mesh, signed(bob))
    assert say(mesh, signed(bob, incarnation="33" * 8, at=NOW + 2), now=NOW + 2)
    assert mesh.stats.restarts_followed == 1 and mesh.stats.refused_identity == 0


def test_a_copy_of_the_last_helo_cannot_move_a_suspect_session_to_another_address() -> None:
    mesh, bob = node(), NodeIdentity.generate()
    helo = signed(bob)
    assert say(mesh, helo)
    mesh.tick(NOW + 3.0)  # silent: SUSPECT
    assert [p.state for p in mesh.peers(NOW + 3.0)] == ["suspect"]
    mesh.take_actions()
    assert not mesh.receive(encode(helo), NOW + 3.0, EVIL)  # the same HELO, replayed from elsewhere
    assert mesh.stats.refused_identity == 1
    # bob himself, moved, with a newer HELO: followed.
    assert mesh.receive(encode(signed(bob, source="10.0.0.3", at=NOW + 3.0)), NOW + 3.0, "10.0.0.3")
    assert mesh.stats.endpoints_followed == 1
    assert any(isinstance(a, Connect) and a.endpoint == "tcp://10.0.0.3:6000" for a in mesh.take_actions())


def test_simulated_nodes_have_keys_and_verify_each_other() -> None:
    net = SimNetwork(seed=5)
    nodes = [net.add(f"n{i}", "g") for i in range(4)]
    for n in nodes[1:]:
        n.mesh.discovered(nodes[0].mesh.uuid, nodes[0].mesh.endpoint, net.now)
    assert net.settle(5.0, lambda: all(len(n.mesh.alive_peers()) == 3 for n in nodes))
    for n in nodes:
        assert n.mesh.uuid == n.mesh.identity.node_id
        assert all(p.verified and p.key for p in n.mesh.peers(net.local(n)))
        assert n.mesh.stats.refused_identity == 0 and n.mesh.stats.helos_misaddressed == 0


def test_helos_that_cross_on_two_connections_from_the_sessions_address_are_both_taken() -> None:
    mesh, bob = node(), NodeIdentity.generate()
    newer, older = signed(bob, at=NOW + 0.5), signed(bob, at=NOW + 0.2, reply=True)  # sent on a probe's connection
    assert say(mesh, newer)
    assert mesh.receive(encode(older), NOW + 0.6, HOME)
    assert mesh.stats.refused_identity == 0
