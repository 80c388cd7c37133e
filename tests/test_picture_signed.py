"""Signed RAWS reports (protocol.md 14.1): a member cannot speak for
another in the system picture, relays pass the origin's words on as they were signed,
and the members a departed node made up leave the picture with it (14)."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle import NodeId
from huddle.errors import DecodeError
from huddle.protocol.events import Send
from huddle.protocol.picture import Reports
from huddle.protocol.picture_compute import PictureTiming, report_delta
from huddle.protocol.service import PeerFacts, PeerSeen
from huddle.security import NodeIdentity, key_derived, verify
from huddle.sim import SimNetwork
from huddle.wire import PeerStat, Raws, decode, encode, raws_signed, sign_raws

TIMING = PictureTiming()


def key(n: int) -> NodeIdentity:
    return NodeIdentity.from_seed(hashlib.blake2b(n.to_bytes(4), digest_size=32).digest())


KA, KB, KC, KM = key(1), key(2), key(3), key(4)
A, B, C, M = KA.node_id, KB.node_id, KC.node_id, KM.node_id


def stat(peer: NodeId, state: str = "alive") -> PeerStat:
    return PeerStat(peer, heard=0.5, rtt=0.002, state=state, msgs_in=10, msgs_out=10, bytes_in=1000, bytes_out=1000)


def report(origin: NodeId, *peers: PeerStat, seq: int = 10, cut_off: bool = False, **kw: Any) -> Raws:
    return Raws(sender=origin, origin=origin, seq=seq, name="n", node_type="standard", beat=0.5, lost=9,
                cut_off=cut_off, peers=tuple(peers), **kw)


def signed(who: NodeIdentity, msg: Raws) -> Raws:
    return sign_raws(msg, who.public_key, who.sign)


def wire(msg: Raws, sender: NodeId | None = None) -> Raws:
    """``msg`` as a receiver decodes it, from ``sender`` (default: its own)."""
    got = decode(encode(msg if sender is None else replace(msg, sender=sender)))
    assert isinstance(got, Raws)
    return got


class _View:
    """The little of a mesh that Reports reads: our admitted peers and their states."""

    def __init__(self) -> None:
        self.excluded: dict[NodeId, str] = {}
        self.beat, self.lost, self.cut_off, self.name, self.node_type = 1.0, 4, False, "a", "standard"
        self.tags: dict[str, str] = {}
        self.states: dict[NodeId, str] = {}

    phase_changes = dialled_afresh = 0  # no session went suspect, none dialled us afresh

    def departure(self, peer: NodeId) -> str | None:
        return None

    def heartbeat_after(self, when: float) -> float:
        return when

    def seen(self, now: float, keep: float) -> list[PeerSeen]:
        return [PeerSeen(p, now, 0.001, s, 10, 1000, i) for i, (p, s) in enumerate(sorted(self.states.items()))]


def _receiver(*admitted: NodeId, secure: bool = False) -> tuple[Reports, _View]:
    r = Reports(A, now=0.0, signer=KA, secure=secure)
    view = _View()
    r.attach(view)  # type: ignore[arg-type]
    for i, peer in enumerate(admitted):
        r.peer_up(peer, i, 0.0, PeerFacts(deltas=True))
        view.states[peer] = "alive"
    return r, view


def _members(r: Reports) -> set[str]:
    return {m["uuid"] for m in r.pictures.picture().members}


# -------------------------------------------------------------------- codec


def test_a_signed_report_round_trips_and_its_signature_is_the_body_s_last_member() -> None:
    msg = signed(KB, report(B, stat(A), stat(C)))
    body = encode(msg)[2]
    assert body.endswith(b'","sig":"' + msg.sig.hex().encode() + b'"}') and f'"key":"{KB.public_key.hex()}"'.encode() in body
    got = wire(msg)
    assert got == msg and got.signed == msg.signed and raws_signed(got) == b"huddle RAWS 1\n" + msg.signed
    # A delta is signed as it is sent; an unsigned report is written as before (no key, no sig).
    delta = signed(KB, report(B, stat(C, "suspect"), seq=20, base=10, gone=(A,)))
    assert wire(delta) == delta
    assert b'"sig"' not in encode(report(B, stat(A)))[2]
    for bad in (
        body[:-3] + b'"}',  # a signature one digit short
        body.replace(b',"sig":"', b',"sig" :"'),  # not written as the last member is
        body.replace(b',"key":"', b',"kex":"'),  # a signature without a key
        body[:-1] + b',"x":1}',  # a member after the signature
        encode(report(B))[2][:-1] + b',"key":"' + b"00" * 32 + b'"}',  # a key without a signature
    ):
        with pytest.raises(DecodeError):
            decode([bytes(B), b"RAWS", bad])


@settings(max_examples=60, deadline=None)
@given(st.text(min_size=1, max_size=40).filter(lambda t: len(t.encode()) <= 255 and "\x00" not in t),
       st.lists(st.tuples(st.integers(0, 2**32 - 1), st.sampled_from(["alive", "none", "suspect"]),
                          st.none() | st.floats(0, 1e6), st.integers(0, 2**63 - 1)), max_size=20),
       st.integers(2, 2**63 - 1), st.booleans())
def test_any_signed_report_decodes_to_itself_and_verifies(name: str, peers: list[tuple[int, str, float | None, int]],
                                                          seq: int, delta: bool) -> None:
    rows = {n: PeerStat(key(n).node_id, heard=h, rtt=None, state=s, msgs_in=c) for n, s, h, c in peers}.values()
    msg = signed(KB, replace(report(B, *rows, seq=seq, base=seq - 1 if delta else None), name=name))
    got = wire(msg)
    assert got == msg and verify(KB.public_key, raws_signed(got), got.sig)


# -------------------------------------------------------------------- the receiver


def test_a_report_forged_in_another_member_s_name_is_refused_and_counted() -> None:
    r, _ = _receiver(B, C, M)
    honest = wire(signed(KB, report(B, stat(A), stat(C), stat(M), seq=1000)))
    r.receive(B, honest, 1.0)
    held = lambda: r.pictures.reports()[B]  # noqa: E731
    assert held() == honest
    lie = report(B, stat(A, "none"), stat(C, "none"), seq=2000, cut_off=True, forged=((C, 5),))
    # Unsigned, passed on by a member: with reports unsigned, every node took it (b cut off).
    r.receive(M, wire(lie, M), 1.1)
    assert held() == honest, "a member spoke for another"
    assert r.stats.reports_unsigned == 1
    # Signed with the forger's own key, or with a key made up for it: no key but b's gives b's id.
    r.receive(M, wire(signed(KM, lie), M), 1.2)
    r.receive(M, wire(replace(signed(key(9), lie), origin=B), M), 1.3)
    # B's own signed report, its octets changed on the way (cut_off: false -> true).
    real = signed(KB, replace(lie, cut_off=False))
    tampered = replace(real, signed=real.signed.replace(b'"cut_off":false', b'"cut_off":true '))
    assert decode(encode(tampered)).cut_off is True  # type: ignore[union-attr]
    r.receive(M, wire(tampered, M), 1.4)
    assert held() == honest
    assert r.stats.reports_bad_signature == 3 and r.stats.reports_unsigned == 1
    health = {m["uuid"]: m["health"] for m in r.pictures.picture().members}
    assert health[str(B)] == "ok"
    # An older node's unsigned report is still good from its own session (it speaks for itself).
    r.receive(C, wire(report(C, stat(A), stat(B), seq=1000)), 1.6)
    assert C in r.pictures.reports()


def test_a_signed_report_relayed_verifies_its_deltas_merge_and_it_is_passed_on_as_signed() -> None:
    r, _ = _receiver(C, M)  # no session with b: b's reports come relayed
    r._links[M] = (1, -100.0)  # admitted long ago: relayed to
    full = signed(KB, report(B, stat(C), seq=1000))
    r.receive(C, wire(full, C), 1.0)
    assert r.pictures.reports()[B] == replace(full, sender=C)
    # Passed on to m (b has no session with it), as b signed it.
    sent = [a for a in r.take_actions() if isinstance(a, Send)]
    assert [a.conn for a in sent] == [1] and encode(sent[0].message)[1:] == encode(full)[1:]
    assert sent[0].message.sender == A
    # A delta on it, relayed: merged (relays used to send full reports, deltas refused).
    now = report(B, stat(C, "suspect"), stat(A, "none"), seq=2000)
    delta = signed(KB, report_delta(full, now, TIMING))  # type: ignore[arg-type]
    assert delta.is_delta
    r.receive(C, wire(delta, C), 1.5)
    held = r.pictures.reports()[B]
    assert held.seq == 2000 and {p.peer: p.state for p in held.peers} == {C: "suspect", A: "none"}
    assert r.stats.reports_merged == 1 and r.stats.reports_bad_delta == r.stats.reports_bad_signature == 0
    # ... and passed on as the delta it is (m holds its base: it got the full report from us).
    sent = [a for a in r.take_actions() if isinstance(a, Send)]
    assert len(sent) == 1 and encode(sent[0].message)[1:] == encode(delta)[1:]


def test_a_report_from_its_origin_s_own_session_is_checked_only_to_be_passed_on() -> None:
    # The session speaks for its node in everything it sends (as an older node's unsigned report):
    # a full mesh relays nothing and checks no signature; what is passed on is checked first.
    r, _ = _receiver(B, M)
    r._links[M] = (1, -100.0)
    good = signed(KB, report(B, stat(A), seq=1000))
    bad = replace(good, seq=2000, signed=good.signed.replace(b'"seq":1000', b'"seq":2000'))
    r.receive(B, wire(bad), 1.0)
    assert r.pictures.reports()[B].seq == 2000 and not r.take_actions()
    assert r.stats.reports_bad_signature == 1 and r.stats.reports_relayed == 0
    good = signed(KB, report(B, stat(A), seq=3000))
    r.receive(B, wire(good), 1.1)
    sent = [a for a in r.take_actions() if isinstance(a, Send)]
    assert len(sent) == 1 and encode(sent[0].message)[1:] == encode(good)[1:] and r.stats.reports_relayed == 1


def test_an_unsigned_relayed_report_of_a_key_bound_node_or_with_a_group_secret_is_refused() -> None:
    legacy = NodeId(bytes([7]) * 16)
    assert key_derived(B) and not key_derived(legacy)
    r, _ = _receiver(C)
    r.receive(C, wire(report(B, stat(C)), C), 1.0)
    r.receive(C, wire(report(legacy, stat(C)), C), 1.0)  # open mode: a legacy id's travels unsigned, as before
    assert set(r.pictures.reports()) == {legacy} and r.stats.reports_unsigned == 1
    s, _ = _receiver(C, secure=True)
    s.receive(C, wire(report(legacy, stat(C)), C), 1.0)
    assert not s.pictures.reports() and s.stats.reports_unsigned == 1


def test_made_up_members_leave_the_picture_when_the_member_that_claimed_them_leaves() -> None:
    # A member (its own id, its own report) claims sessions with 300 nodes it made up and passes on
    # their reports, each signed with a key made for it.  Before: they stayed until their reports
    # expired, expire_after scaled by the 300 (10 s x 30.2: five minutes), and slowed every report
    # of the group down as much.
    r, view = _receiver(B, M)
    ghosts = [key(100 + i) for i in range(300)]
    t = 1.0
    r.receive(B, wire(signed(KB, report(B, stat(A), stat(M), seq=1000))), t)
    r.receive(M, wire(signed(KM, report(M, stat(A), stat(B), *(stat(g.node_id) for g in ghosts), seq=1000))), t)
    for g in ghosts:
        r.receive(M, wire(signed(g, report(g.node_id, stat(M), seq=1000)), M), t)
    r.tick(t)
    assert len(_members(r)) == 303
    assert r.pictures.scale() == 1.0, "made-up nodes' reports scale the group's timing"
    assert r.stats.reports_unvouched == 0
    # The member leaves: our session with it ends, and b's next report says so.
    t = 2.0
    r.peer_down(M, t)
    del view.states[M]
    r.receive(B, wire(signed(KB, report(B, stat(A), stat(M, "none"), seq=2000))), t)
    t = r.next_deadline(t)
    assert t <= 3.5  # a session ended: reported within the soon window
    r.tick(t)
    assert _members(r) == {str(A), str(B), str(M)}, "m itself is shown gone until its report expires"
    assert r.stats.reports_unvouched == 300
    # Reports that only came relayed, of nodes no member claims, never stay beyond our next report.
    r.receive(B, wire(signed(key(50), report(key(50).node_id, seq=3000)), B), t + 0.1)
    assert len(_members(r)) == 4
    r.tick(r.next_deadline(t + 0.1))
    assert len(_members(r)) == 3 and r.stats.reports_unvouched == 301


# -------------------------------------------------------------------- the simulator


def test_signed_reports_cross_a_link_open_one_way_and_every_node_computes_the_same_picture() -> None:
    net = SimNetwork(seed=8)
    nodes = [net.add(f"n{i}", "g", picture=PictureTiming(interval=0.5, expire_after=5.0)) for i in range(4)]
    assert all(key_derived(n.mesh.uuid) for n in nodes)
    for node in nodes[1:]:
        node.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    assert net.settle(10.0, lambda: all(len(x.mesh.alive_peers()) == 3 for x in nodes))
    net.block(nodes[0], nodes[1])  # what n0 sends n1 is dropped: n0's reports reach n1 relayed

    def same() -> bool:
        pics = [n.pictures.picture() for n in nodes]
        return len({p.digest for p in pics}) == 1 and any(x["state"] == "one-way" for x in pics[0].links)

    assert net.settle(30.0, same)
    stats = [n.reports.stats for n in nodes]
    assert sum(s.reports_relayed for s in stats) > 0
    assert sum(s.reports_bad_signature + s.reports_unsigned + s.reports_unvouched for s in stats) == 0

