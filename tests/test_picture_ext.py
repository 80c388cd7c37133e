"""The system picture's extension map (protocol.md 14.1 ``ext``): the features' facts that a
RAWS report carries, bounded and checked at decode; kept whole through deltas; in every
member of the picture and its digest (14.2); filled from the node's features' facts; and
shown generically (a table per feature) by ``huddle system``."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from huddle import NodeId
from huddle.errors import DecodeError, LocalProtocolError
from huddle.protocol.picture import Reports
from huddle.protocol.picture_compute import PictureTiming, compute, merge_report, report_delta, report_facts
from huddle.render import system_text
from huddle.sim import SimNetwork
from huddle.wire import MAX_EXTENSION_OCTETS, MAX_EXTENSIONS, PeerStat, Raws, decode, encode, extension_problem

A, B, C = (NodeId(bytes([i]) * 16) for i in (1, 2, 3))
TIMING = PictureTiming()
POSTS = {"posts": {"posts": 3, "octets": 10240}}


def stat(peer: NodeId, state: str = "alive") -> PeerStat:
    return PeerStat(peer, heard=0.5, rtt=0.002, state=state, msgs_in=10, msgs_out=10, bytes_in=1000, bytes_out=1000)


def report(origin: NodeId, *peers: PeerStat, seq: int = 10, **kw: Any) -> Raws:
    return Raws(sender=origin, origin=origin, seq=seq, name=origin.hex()[:2], node_type="standard", beat=0.5,
                lost=9, cut_off=False, peers=tuple(peers), **kw)


def wire(msg: Raws) -> Raws:
    got = decode(encode(msg))
    assert isinstance(got, Raws)
    return got


def body_with(ext: str) -> bytes:
    """A RAWS body whose ``ext`` member is the JSON text ``ext``."""
    return encode(report(A, stat(B)))[2][:-1] + b',"ext":' + ext.encode() + b"}"


# -------------------------------------------------------------------- codec


def test_a_report_carries_its_features_facts_and_one_without_is_written_as_before() -> None:
    r = report(A, stat(B), ext=POSTS | {"trust": {"keys": 2, "mode": "allow-list", "on": True, "x": None}})
    assert wire(r) == r and wire(r).ext == r.ext
    assert b'"ext":{"posts":{"posts":3,"octets":10240},"trust":' in encode(r)[2]
    plain = report(A, stat(B))
    assert b'"ext"' not in encode(plain)[2] and wire(plain).ext == {}
    # An empty map reads as none (a sender that writes it anyway).
    got = decode([bytes(A), b"RAWS", body_with("{}")])
    assert isinstance(got, Raws) and got.ext == {}


def test_a_member_the_decoder_does_not_know_is_ignored() -> None:
    # What makes ext need no new version (protocol.md 14.1): a decoder that predates a member
    # ignores it, as this one ignores a member of a later version.
    later = decode([bytes(A), b"RAWS", encode(report(A, stat(B)))[2][:-1] + b',"later":{"x":[1]}}'])
    assert later == report(A, stat(B))


@pytest.mark.parametrize("ext", [
    '[]', '"posts"', 'null', '3',  # not an object
    '{"posts":3}', '{"posts":[1,2]}', '{"posts":"many"}', '{"posts":null}',  # a feature's facts not an object
    '{"posts":{"n":{"deep":1}}}', '{"posts":{"n":[1]}}',  # a fact not a scalar
    '{"Posts":{"n":1}}', '{"":{"n":1}}', '{"1posts":{"n":1}}', '{"po sts":{"n":1}}', '{"' + "p" * 33 + '":{"n":1}}',
    '{"posts":{"N":1}}', '{"posts":{"":1}}', '{"posts":{"' + "n" * 33 + '":1}}',  # bad fact names
    '{"posts":{"n":9223372036854775808}}', '{"posts":{"n":18446744073709551615}}',  # past 64 bits
    json.dumps({f"f{i}": {"n": i} for i in range(MAX_EXTENSIONS + 1)}),  # too many features
    json.dumps({"posts": {"text": "x" * MAX_EXTENSION_OCTETS}}),  # too big
])
def test_a_hostile_extension_map_is_refused_at_decode(ext: str) -> None:
    with pytest.raises(DecodeError):
        decode([bytes(A), b"RAWS", body_with(ext)])


def test_the_bounds_are_exact() -> None:
    at_most = {f"f{i}": {"n": i} for i in range(MAX_EXTENSIONS)}
    assert extension_problem(at_most) is None
    filler = MAX_EXTENSION_OCTETS - len(b'{"posts":{"text":""}}')
    assert extension_problem({"posts": {"text": "x" * filler}}) is None
    assert extension_problem({"posts": {"text": "x" * (filler + 1)}}) is not None
    assert extension_problem({"posts": {"text": "é" * (filler // 2 + 1)}}) is not None  # octets, not characters
    assert extension_problem({"posts": {"n": float("nan")}}) is not None
    assert extension_problem({"posts": {"n": "\ud800"}}) is not None  # a lone surrogate is no text
    assert extension_problem({"posts": {"n": 2**63 - 1, "m": -(2**63), "f": 1.5, "b": False}}) is None
    with pytest.raises(LocalProtocolError):
        report(A, ext={"Bad": {"n": 1}})


def test_a_hostile_extension_map_is_refused_nothing_recorded_and_counted() -> None:
    net = SimNetwork(seed=3)
    a, b = net.add("a"), net.add("b")
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    assert net.settle(10.0, lambda: len(a.mesh.alive_peers()) == 1 and len(a.pictures.reports()) == 2)
    held = a.pictures.reports()[b.mesh.uuid]
    errors = a.mesh.stats.decode_errors
    hostile = report(b.mesh.uuid, stat(a.mesh.uuid), seq=held.seq + 1000)
    body = encode(hostile)[2][:-1] + b',"ext":{"posts":{"n":{"deep":1}}}}'
    assert a.mesh.receive([bytes(b.mesh.uuid), b"RAWS", body], net.now) is False
    assert a.mesh.stats.decode_errors == errors + 1
    assert a.pictures.reports()[b.mesh.uuid].seq < hostile.seq, "nothing recorded"


# ------------------------------------------------------------ deltas, facts


def test_a_delta_carries_the_extension_map_whole_and_merging_keeps_it() -> None:
    base = wire(report(A, stat(B), stat(C), seq=10, ext=POSTS))
    same_rows = report(A, stat(B), stat(C), seq=20, ext={"posts": {"posts": 4, "octets": 20480}})
    delta = report_delta(base, same_rows, TIMING)
    assert delta is not None and delta.peers == () and delta.ext == same_rows.ext
    merged = merge_report(base, wire(delta))
    assert merged.ext == same_rows.ext and merged.seq == 20
    # Rows changed, the facts did not: the merged report keeps the map the delta carries.
    moved = report(A, stat(B, state="suspect"), stat(C), seq=30, ext=same_rows.ext)
    delta = report_delta(merged, moved, TIMING)
    assert delta is not None and len(delta.peers) == 1
    assert merge_report(merged, wire(delta)).ext == same_rows.ext
    # A delta without the map: the origin has no facts now.
    delta = report_delta(merged, report(A, stat(B), stat(C), seq=40), TIMING)
    assert delta is not None and merge_report(merged, wire(delta)).ext == {}


def test_the_features_facts_are_among_a_reports_facts() -> None:
    before = report(A, stat(B), ext=POSTS)
    assert report_facts(before, TIMING) == report_facts(report(A, stat(B), seq=11, ext=POSTS), TIMING)
    assert report_facts(before, TIMING) != report_facts(report(A, stat(B), ext={"posts": {"posts": 4}}), TIMING)
    assert report_facts(before, TIMING) != report_facts(report(A, stat(B)), TIMING)


# ------------------------------------------------------------ picture, digest


def test_every_member_carries_its_extension_map_and_the_digest_covers_it() -> None:
    reports = {A: report(A, stat(B), ext=POSTS), B: report(B, stat(A))}
    pic = compute(reports)
    members = {m["uuid"]: m for m in pic.members}
    assert members[str(A)]["ext"] == POSTS and "ext" not in members[str(B)]
    # A report without a map gives the digest it gave before maps existed (protocol.md 14.2).
    plain = compute({A: report(A, stat(B)), B: report(B, stat(A))})
    expected = [{"uuid": str(n), "name": n.hex()[:2], "type": "standard", "health": "ok", "problems": []}
                for n in (A, B)]
    assert list(plain.members) == expected
    # The exact JSON the digest is of: keys sorted at every level.
    written = json.dumps({"members": list(pic.members), "links": list(pic.links)}, sort_keys=True,
                         separators=(",", ":"))
    assert '{"ext":{"posts":{"octets":10240,"posts":3}},"health":"ok"' in written
    assert pic.digest == hashlib.sha256(written.encode()).hexdigest()
    # Any change of a fact changes the digest; the order a map was written in does not.
    changed = compute({A: report(A, stat(B), ext={"posts": {"posts": 4, "octets": 10240}}), B: reports[B]})
    assert changed.digest != pic.digest != plain.digest
    reordered = {"posts": {"octets": 10240, "posts": 3}}
    assert compute({A: wire(report(A, stat(B), ext=reordered)), B: reports[B]}).digest == pic.digest


class _View:
    """The little of a mesh that Reports reads to make a report."""

    name, node_type, beat, lost, cut_off = "a", "standard", 1.0, 5, False
    excluded: dict[NodeId, str] = {}  # noqa: RUF012
    tags: dict[str, str] = {}  # noqa: RUF012

    phase_changes = dialled_afresh = 0  # no session went suspect, none dialled us afresh

    def departure(self, peer: NodeId) -> str | None:
        return None

    def heartbeat_after(self, when: float) -> float:
        return when

    def seen(self, now: float, window: float) -> list[object]:
        return []


def test_the_report_carries_the_features_facts_that_fit_and_a_change_makes_a_report() -> None:
    facts: dict[str, object] = {"posts": {"posts": 0, "octets": 0}, "guests": None, "trust": {"keys": 1}}
    r = Reports(A, now=0.0, features=lambda: facts)
    r.attach(_View())  # type: ignore[arg-type]
    assert r.report(1.0).ext == {"posts": {"posts": 0, "octets": 0}, "trust": {"keys": 1}}  # None: nothing to say
    # Facts of a form the map does not take, or past its size, are left out, counted; the rest go.
    facts["bad"] = {"n": [1, 2]}
    facts["big"] = {"text": "x" * MAX_EXTENSION_OCTETS}
    facts["Upper"] = {"n": 1}
    assert set(r.report(2.0).ext) == {"posts", "trust"} and r.stats.facts_left_out == 3
    # A regular report whose facts are unchanged is not sent; one whose features' facts changed is.
    del facts["bad"], facts["big"], facts["Upper"]
    r.tick(10.0)
    unchanged = r.stats.reports_unchanged
    r.tick(r.next_deadline(10.0))
    assert r.stats.reports_unchanged == unchanged + 1
    facts["posts"] = {"posts": 1, "octets": 512}
    r.tick(r.next_deadline(20.0))
    assert r.stats.reports_unchanged == unchanged + 1
    held = r.pictures.reports()[A]
    assert held.ext["posts"] == {"posts": 1, "octets": 512}


def test_three_simulated_nodes_hold_each_others_facts_and_agree_on_the_digest() -> None:
    net = SimNetwork(seed=5)
    counts = {"a": 0, "b": 0, "c": 0}
    nodes = [net.add(n, facts=lambda n=n: {"posts": {"posts": counts[n]}}) for n in counts]  # type: ignore[misc]
    for node in nodes[1:]:
        node.mesh.add_seed(nodes[0].mesh.endpoint, net.now)

    def agreed(posts: dict[str, int]) -> bool:
        pics = [x.pictures.picture() for x in nodes]
        return len({p.digest for p in pics}) == 1 and all(
            {m["name"]: m.get("ext", {}).get("posts", {}).get("posts") for m in p.members} == posts for p in pics)

    assert net.settle(15.0, lambda: agreed({"a": 0, "b": 0, "c": 0}))
    counts["b"] = 2
    assert net.settle(10.0, lambda: agreed({"a": 0, "b": 2, "c": 0}))


# ------------------------------------------------------------------ rendering


def test_huddle_system_prints_a_table_per_feature() -> None:
    members: list[dict[str, Any]] = [
        {"uuid": str(A), "name": "a", "type": "standard", "health": "ok", "problems": [],
         "ext": {"posts": {"posts": 3, "octets": 10240}, "trust": {"keys": 2}}},
        {"uuid": str(B), "name": "b", "type": "standard", "health": "ok", "problems": [],
         "ext": {"posts": {"posts": 1, "octets": 20, "sealed": True}}},
        {"uuid": str(C), "name": "c", "type": "standard", "health": "ok", "problems": [], "ext": {}},
    ]
    text = system_text({"digest": "d" * 64, "members": members, "links": []})
    lines = text.splitlines()
    posts = lines.index("posts")
    assert lines[posts + 1].split() == ["NAME", "POSTS", "OCTETS", "SEALED"]
    assert lines[posts + 2].split() == ["a", "3", "10240", "-"]
    assert lines[posts + 3].split() == ["b", "1", "20", "true"]
    trust = lines.index("trust")
    assert lines[trust + 1].split() == ["NAME", "KEYS"] and lines[trust + 2].split() == ["a", "2"]
    assert not any(line.startswith("c ") for line in lines[posts:]), "a member without facts has no row"
    assert lines[-1] == "digest " + "d" * 64
