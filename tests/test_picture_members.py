"""Member states in the system picture (docs/protocol.md 14.2, "Member states"): alive, suspect,
failed and left, computed from hand-made reports alone (no processes); the ``departed`` member
of a report (14.1) and its bounds; a node's own departed peers (Reports), kept until they return
or are forgotten; and the ``forget`` event's body."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import replace
from typing import Any

import pytest

from huddle import NodeId
from huddle.errors import DecodeError, LocalProtocolError
from huddle.protocol.picture import Reports
from huddle.protocol.picture_compute import PictureTiming, compute, report_facts
from huddle.protocol.service import PeerFacts, PeerSeen
from huddle.sim import SimNetwork
from huddle.wire import MAX_DEPARTED_ROWS, Departed, PeerStat, Raws, decode, encode
from huddle.wire.reports import decode_raws

A, B, C, D = (NodeId(bytes([i]) * 16) for i in (1, 2, 3, 4))
NAMES = {A: "a", B: "b", C: "c", D: "d"}
T0 = 1_764_000_000_000  # ms: a report's clock


def stat(peer: NodeId, state: str = "alive", heard: float | None = 0.5) -> PeerStat:
    return PeerStat(peer, heard=heard, rtt=0.002, state=state, msgs_in=10, msgs_out=10, bytes_in=1000,
                    bytes_out=1000)


def report(origin: NodeId, *peers: PeerStat, departed: tuple[Departed, ...] = (), seq: int = T0) -> Raws:
    return Raws(sender=origin, origin=origin, seq=seq, name=NAMES[origin], node_type="standard", beat=1.0, lost=4,
                cut_off=False, peers=tuple(peers), departed=departed)


def gone(peer: NodeId, state: str = "failed", since: int = T0 - 5000) -> Departed:
    return Departed(peer, state, since, NAMES[peer], "standard")


def by_name(reports: dict[NodeId, Raws]) -> dict[str, tuple[str, Any]]:
    """Each member's state (as the digest writes it: absent for alive) and ``since``."""
    return {m["name"]: (m.get("state", "alive"), m.get("since")) for m in compute(reports).members}


def three(a_state: str = "alive", *, b: tuple[Departed, ...] = (), c: tuple[Departed, ...] = (),
          b_row: str | None = None, c_row: str | None = None) -> dict[NodeId, Raws]:
    """A, B and C; B's and C's rows for A as given (None: no row), with their departed entries."""
    def rows(own: NodeId, a_row: str | None) -> list[PeerStat]:
        out = [stat(p) for p in (B, C) if p != own]
        return out if a_row is None else [stat(A, a_row), *out]
    return {A: report(A, stat(B), stat(C)), B: report(B, *rows(B, b_row), departed=b),
            C: report(C, *rows(C, c_row), departed=c)}


# ------------------------------------------------------------------ each state


def test_every_member_alive_gives_the_digest_as_before_states_existed() -> None:
    reports = three(b_row="alive", c_row="alive")
    pic = compute(reports)
    assert [m.get("state") for m in pic.members] == [None] * 3  # alive is not written
    members = [{"health": "ok", "name": NAMES[n], "problems": [], "type": "standard", "uuid": str(n)} for n in (A, B, C)]
    links = [{"a": str(x), "b": str(y), "state": "two-way"} for x, y in itertools.combinations((A, B, C), 2)]
    text = json.dumps({"members": members, "links": links}, sort_keys=True, separators=(",", ":"))
    assert pic.digest == hashlib.sha256(text.encode()).hexdigest()


def test_suspect_when_most_of_the_members_that_know_it_suspect_it() -> None:
    assert by_name(three(b_row="suspect", c_row="suspect"))["a"] == ("suspect", None)
    # One of two: not a majority (a single bad link shows as the link's state, not the node's).
    assert by_name(three(b_row="suspect", c_row="alive"))["a"] == ("alive", None)
    # One lost it, the other suspects it: both doubt it.
    assert by_name(three(b_row="suspect", c=(gone(A),)))["a"] == ("suspect", None)
    # One lost it, the other still hears it: one of two.
    assert by_name(three(b_row="alive", c=(gone(A),)))["a"] == ("alive", None)


def test_failed_when_no_member_has_a_session_and_one_lost_it_since_the_last_heard() -> None:
    reports = three(b=(gone(A, since=T0 - 5000),), c=(gone(A, since=T0 - 4000),))
    pic = compute(reports)
    a = next(m for m in pic.members if m["name"] == "a")
    assert (a["state"], a["health"], a["since"], a["problems"]) == ("failed", "failed", T0 - 4000, [])
    assert "ext" not in a
    # No links are drawn to it: the others' health is theirs alone.
    assert {(x["a"], x["b"]) for x in pic.links} == {(str(B), str(C))}
    assert {m["name"]: m["health"] for m in pic.members} == {"a": "failed", "b": "ok", "c": "ok"}
    # Its own report expired: still listed, its name and type from the entry, the same digest.
    del reports[A]
    assert compute(reports).digest == pic.digest


def test_left_when_the_latest_loss_is_a_goodbye() -> None:
    reports = three(b=(gone(A, "left", T0 - 1000),), c=(gone(A, "failed", T0 - 3000),))
    assert by_name(reports)["a"] == ("left", T0 - 1000)
    reports = three(b=(gone(A, "left", T0 - 3000),), c=(gone(A, "failed", T0 - 1000),))
    assert by_name(reports)["a"] == ("failed", T0 - 1000)


def test_a_member_named_only_departed_is_listed_and_one_nobody_names_is_forgotten() -> None:
    reports = {B: report(B, stat(C), departed=(gone(D, "left"),)), C: report(C, stat(B))}
    assert by_name(reports) == {"b": ("alive", None), "c": ("alive", None), "d": ("left", T0 - 5000)}
    # Forgotten: no report names it any more; it is gone from the picture.
    reports[B] = report(B, stat(C))
    assert set(by_name(reports)) == {"b", "c"}


def test_a_returned_member_is_alive_again_once_its_report_is_held() -> None:
    # B admitted it again, C still names it failed: alive, its report held.
    reports = three(b_row="alive", c=(gone(A),))
    assert by_name(reports)["a"] == ("alive", None)
    # Its report not held yet (expired while it was away): shown as it went, not dropped.
    del reports[A]
    assert by_name(reports)["a"] == ("failed", T0 - 5000)
    assert by_name(three(b_row="alive", c_row="alive"))["a"] == ("alive", None)


def test_the_digest_is_the_same_for_the_same_reports_in_any_order() -> None:
    reports = three(b_row="suspect", c=(gone(A),))
    reports[B] = report(B, stat(A, "suspect"), stat(C), departed=(gone(D, "left", T0 - 100),))
    digests = {compute(dict(order)).digest for order in itertools.permutations(reports.items())}
    assert len(digests) == 1
    # Through the wire too: decoded, the same picture.
    wired = {n: decode(encode(r)) for n, r in reports.items()}
    assert {compute(wired).digest} == digests  # type: ignore[arg-type]


def test_departed_entries_are_among_a_reports_facts() -> None:
    before = report(B, stat(C))
    after = report(B, stat(C), departed=(gone(A),))
    assert report_facts(before, PictureTiming()) != report_facts(after, PictureTiming())


# ------------------------------------------------------------------ the wire


def test_an_old_format_report_is_still_accepted_and_a_report_without_departed_is_written_as_before() -> None:
    body = (f'{{"origin":"{A.hex()}","seq":5,"name":"a","type":"standard","beat":1.0,"lost":4,"cut_off":false,'
            f'"peers":[["{B.hex()}",0.5,0.002,"alive",1,2,3,4,0,0,0]]}}')
    assert b"departed" not in encode(report(A, stat(B), seq=5))
    old = decode_raws(A, body)
    assert old.departed == () and compute({A: old}).members[0]["health"] == "ok"


def test_departed_round_trips_and_is_bounded() -> None:
    msg = report(B, stat(C), departed=(gone(A, "left"), gone(D)))
    assert decode(encode(msg)) == msg
    many = {f"{i:032x}": ["failed", 1, "x", "standard"] for i in range(10_000)}
    body = json.dumps({"origin": B.hex(), "seq": 5, "name": "b", "type": "standard", "beat": 1.0, "lost": 4,
                       "cut_off": False, "peers": [], "departed": many})
    with pytest.raises(DecodeError, match="departed"):
        decode_raws(B, body)
    with pytest.raises(LocalProtocolError):
        report(B, departed=tuple(Departed(NodeId(i.to_bytes(16, "big")), "failed", 1) for i in range(1, 300)))


@pytest.mark.parametrize("entry", [
    ["bogus", 1, "x", "standard"], ["failed", 0, "x", "standard"], ["failed", 1.5, "x", "standard"],
    ["failed", 1, "x" * 300, "standard"], ["failed", 1, "x", "Not A Type"], ["left", 1, "x"], "failed", None,
])
def test_a_malformed_departed_entry_refuses_the_report(entry: object) -> None:
    body = json.dumps({"origin": B.hex(), "seq": 5, "name": "b", "type": "standard", "beat": 1.0, "lost": 4,
                       "cut_off": False, "peers": [], "departed": {A.hex(): entry}})
    with pytest.raises(DecodeError):
        decode_raws(B, body)


# ------------------------------------------------------------------ a node's own departed peers


class _View:
    """The little of a mesh that Reports reads: our sessions' states, why each ended."""

    name, node_type, beat, lost, cut_off = "a", "standard", 1.0, 4, False

    def __init__(self) -> None:
        self.excluded: dict[NodeId, str] = {}
        self.rows: dict[NodeId, tuple[str, float]] = {}  # peer -> (state, last heard)
        self.reasons: dict[NodeId, str] = {}
        self.phase_changes = self.dialled_afresh = 0
        self.tags: dict[str, str] = {}

    def heartbeat_after(self, when: float) -> float:
        return when

    def seen(self, now: float, keep: float) -> list[PeerSeen]:
        return [PeerSeen(p, h, None, s, 1, 1, None) for p, (s, h) in sorted(self.rows.items())]

    def departure(self, peer: NodeId) -> str | None:
        return self.reasons.get(peer)


def _reports() -> tuple[Reports, _View]:
    r, view = Reports(A, now=1000.0), _View()
    r.attach(view)  # type: ignore[arg-type]
    return r, view


def test_a_lost_peer_is_named_failed_or_left_since_last_heard_until_it_returns() -> None:
    r, view = _reports()
    for i, (peer, name) in enumerate(((B, "bob"), (C, "carol"))):
        r.peer_up(peer, i, 1000.0, PeerFacts(name=name, node_type="standard"))
    r.peer_down(B, 1010.0)
    view.reasons[B], view.rows[B] = "timeout", ("none", 1005.0)
    r.peer_down(C, 1010.0)
    view.reasons[C], view.rows[C] = "left: stopping", ("none", 1009.5)
    # Before the report says how, the node's own list already has them (since: when the session ended).
    assert {p: d.state for p, d in r.lost_peers().items()} == {B: "failed", C: "left"}
    first = r.report(1011.0)
    assert first.departed == (Departed(B, "failed", 1_005_000, "bob", "standard"),
                              Departed(C, "left", 1_009_500, "carol", "standard"))
    # Long after the mesh forgot having heard them: still named, the same entries.
    view.rows.clear()
    assert r.report(5000.0).departed == first.departed
    # B returns: a member again (not in our own list), but named departed until its own report is
    # held here (the picture, holding none of it, shows it as it went rather than not at all).
    r.peer_up(B, 3, 5001.0, PeerFacts(name="bob"))
    assert set(r.lost_peers()) == {C}
    assert [d.peer for d in r.report(5002.0).departed] == [B, C]
    r.pictures.accept(report(B, stat(A), seq=5_002_500), 5002.5)
    assert [d.peer for d in r.report(5003.0).departed] == [C]


def test_the_departed_are_bounded_the_oldest_dropped_first() -> None:
    r, _ = _reports()
    peers = [NodeId(i.to_bytes(16, "big")) for i in range(1, MAX_DEPARTED_ROWS + 41)]
    for i, p in enumerate(peers):
        r.peer_up(p, i, 1000.0, PeerFacts(name=f"n{i}"))
    for p in peers:
        r.peer_down(p, 1001.0)
        r.report(1001.0)  # each one said in turn
    named = [d.peer for d in r.report(1002.0).departed]
    assert named == peers[40:]
    assert decode(encode(r.report(1003.0))).departed == r.report(1003.0).departed  # type: ignore[attr-defined]


def test_forget_events_drop_a_node_and_garbage_is_counted() -> None:
    r, _ = _reports()
    r.peer_up(B, 1, 1000.0, PeerFacts(name="bob"))
    r.peer_down(B, 1005.0)
    r.report(1006.0)
    for body in ["", "null", "[]", '{"node": 5}', '{"node": "zz"}', '{"node": "' + "0" * 31 + '"}', "{" * 5000,
                 '{"node": "' + A.hex() + '"}']:  # the last: this node itself
        assert not r.forget_event(body, 1007.0)
    assert r.stats.forgets_refused == 8 and r.stats.forgets == 0
    assert [d.peer for d in r.report(1008.0).departed] == [B]
    assert r.forget_event(json.dumps({"node": B.hex(), "state": "failed"}), 1009.0)
    assert r.stats.forgets == 1
    assert r.report(1010.0).departed == ()


def test_a_session_gone_suspect_brings_the_next_report_forward() -> None:
    r, view = _reports()
    r.tick(1000.0)  # the first report
    regular = r.next_deadline(1000.0)
    assert regular >= 1001.8  # the interval's own report: 2 s, give or take a tenth
    r.tick(1001.1)
    assert r.next_deadline(1001.1) == regular  # nothing changed: nothing brought forward
    view.phase_changes += 1  # a session went suspect (or was heard again)
    r.tick(1001.1)
    assert r.next_deadline(1001.1) <= 1001.1 + 0.2 + 1e-9  # within the quiet time (then the next heartbeat)


@pytest.mark.parametrize("count", [MAX_DEPARTED_ROWS + 1, 10_000])
def test_a_report_naming_too_many_departed_peers_is_refused_and_counted_and_the_node_stays_up(count: int) -> None:
    net = SimNetwork(seed=3)
    a, b = net.add("a"), net.add("b")
    b.mesh.discovered(a.mesh.uuid, a.mesh.endpoint, net.now)
    assert net.settle(10.0, lambda: len(a.mesh.alive_peers()) == 1 and len(a.pictures.reports()) == 2)
    held = a.pictures.reports()[b.mesh.uuid]
    errors = a.mesh.stats.decode_errors
    hostile = report(B, seq=held.seq + 1000)
    many = ",".join(f'"{i:032x}":["failed",{i + 1},"x","standard"]' for i in range(count))
    body = encode(replace(hostile, sender=b.mesh.uuid, origin=b.mesh.uuid))[2][:-1] + f',"departed":{{{many}}}}}'.encode()
    assert a.mesh.receive([bytes(b.mesh.uuid), b"RAWS", body], net.now) is False
    assert a.mesh.stats.decode_errors == errors + 1
    assert a.pictures.reports()[b.mesh.uuid].seq < hostile.seq, "nothing recorded"
    # Still up and in one picture with b.
    assert net.settle(10.0, lambda: len(a.pictures.reports()) == 2 and len(a.mesh.alive_peers()) == 1)


def test_describe_and_huddle_system_show_a_member_whose_report_expired() -> None:
    from huddle.protocol.picture import Pictures
    from huddle.render import peers_text, system_text

    pictures = Pictures(B)
    pictures.accept(report(A, stat(B), stat(C), seq=T0 - 9000), T0 / 1000 - 9)
    pictures.accept(report(B, stat(C), departed=(gone(A, "left", T0 - 5000),)), T0 / 1000)
    pictures.accept(report(C, stat(B), departed=(gone(A, "left", T0 - 5500),)), T0 / 1000)
    pictures.expire(T0 / 1000 + 2)  # A's report expired (10 s), kept beside the picture
    described = pictures.describe(T0 / 1000 + 2)
    a = next(m for m in described["members"] if m["name"] == "a")
    assert (a["state"], a["since"], a["age"], a["hears"], a["seq"]) == ("left", (T0 - 5000) / 1000, None, [], T0 - 9000)
    b = next(m for m in described["members"] if m["name"] == "b")
    assert (b["state"], b["since"]) == ("alive", T0 / 1000)
    rows = [line.split() for line in system_text(described).splitlines()]
    assert rows[0][:7] == ["NAME", "UUID", "KEY", "TYPE", "STATE", "SINCE", "HEALTH"]
    assert [r[4] for r in rows[1:4]] == ["left", "alive", "alive"] and rows[1][-2:] == ["-", "-"]  # no age, no tags
    lost = [{"uuid": str(A), "name": "a", "state": "left", "since": (T0 - 5000) / 1000, "endpoint": None,
             "rtt_ms": None, "key": None, "verified": False}]
    line = peers_text(lost).splitlines()[1].split()
    assert line[:4] == ["a", f"({str(A)[:8]})", "left", "since"] and len(line[4]) == 8 and line[4].count(":") == 2
