"""The system picture: the pure computation from hand-written
reports, the RAWS codec, and the picture the simulated mesh agrees on."""

from __future__ import annotations

import itertools
import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle import NodeId
from huddle.errors import DecodeError, LocalProtocolError
from huddle.protocol.events import CutOff
from huddle.protocol.mesh import Timing
from huddle.protocol.picture import Pictures
from huddle.protocol.picture_compute import PictureTiming, compute
from huddle.sim import SimNetwork, SimNode
from huddle.wire import PEER_STATES, CheckedRows, PeerStat, Raws, decode, encode
from huddle.wire.fields import _NODE_IDS, _NODE_IDS_KEPT
from huddle.wire.reports import _peer_stats, _rows_ok

A, B, C, D = (NodeId(bytes([i]) * 16) for i in (1, 2, 3, 4))
NAMES = {A: "a", B: "b", C: "c", D: "d"}


def stat(peer: NodeId, *, heard: float | None = 0.5, rtt: float | None = 0.002, state: str = "alive",
         sent: int = 0, retrans: int = 0, queued: int = 0) -> PeerStat:
    return PeerStat(peer, heard=heard, rtt=rtt, state=state, msgs_in=10, msgs_out=10, bytes_in=1000,
                    bytes_out=1000, sent=sent, retrans=retrans, queued=queued)


def report(origin: NodeId, *peers: PeerStat, seq: int = 1, cut_off: bool = False, node_type: str = "standard") -> Raws:
    return Raws(sender=origin, origin=origin, seq=seq, name=NAMES[origin], node_type=node_type,
                beat=0.5, lost=9, cut_off=cut_off, peers=tuple(peers))


def full_mesh(*ids: NodeId) -> dict[NodeId, Raws]:
    return {n: report(n, *(stat(p) for p in ids if p != n)) for n in ids}


def health(pic: object) -> dict[str, str]:
    return {m["name"]: m["health"] for m in pic.members}  # type: ignore[attr-defined]


def states(pic: object) -> dict[tuple[str, str], str]:
    return {(NAMES[NodeId.from_hex(x["a"])], NAMES[NodeId.from_hex(x["b"])]): x["state"] for x in pic.links}  # type: ignore[attr-defined]


# ------------------------------------------------------------------ compute


def test_a_full_mesh_is_healthy_and_every_link_two_way() -> None:
    pic = compute(full_mesh(A, B, C))
    assert health(pic) == {"a": "ok", "b": "ok", "c": "ok"}
    assert states(pic) == {("a", "b"): "two-way", ("a", "c"): "two-way", ("b", "c"): "two-way"}
    assert [m["type"] for m in pic.members] == ["standard"] * 3
    assert len(pic.digest) == 64


def test_the_digest_does_not_depend_on_order_or_on_the_numbers_beside_the_facts() -> None:
    reports = full_mesh(A, B, C, D)
    digests = {compute(dict(p)).digest for p in itertools.permutations(reports.items())}
    assert len(digests) == 1
    # Other round trips, counters and report numbers: the same facts, the same digest.
    busier = {n: Raws(r.sender, r.origin, r.seq + 7, r.name, r.node_type, r.beat, r.lost, r.cut_off,
                      tuple(stat(p.peer, heard=0.1, rtt=0.004, sent=50, retrans=1) for p in r.peers))
              for n, r in reports.items()}
    assert compute(busier).digest in digests
    # A changed fact changes it.
    cut = dict(reports)
    cut[D] = report(D, cut_off=True)
    assert compute(cut).digest not in digests


def test_a_link_open_one_way_is_reported_as_one_way_with_its_direction() -> None:
    # b's firewall drops what a sends: b never hears a; a still hears b's HELOs.
    reports = {
        A: report(A, stat(B, state="handshake", rtt=None), stat(C)),
        B: report(B, stat(C)),
        C: report(C, stat(A), stat(B)),
    }
    pic = compute(reports)
    (ab,) = [x for x in pic.links if {x["a"], x["b"]} == {str(A), str(B)}]
    assert ab["state"] == "one-way"
    assert ab["from"] == str(B) and ab["to"] == str(A)
    assert health(pic) == {"a": "degraded", "b": "degraded", "c": "ok"}
    assert {m["name"]: m["problems"] for m in pic.members}["a"] == ["one-way"]


def test_heard_long_ago_is_not_hearing_and_a_dead_link_is_down() -> None:
    reports = {
        A: report(A, stat(B, state="none", heard=60.0, rtt=None), stat(C)),
        B: report(B, stat(A, state="none", heard=None, rtt=None), stat(C)),
        C: report(C, stat(A), stat(B)),
    }
    pic = compute(reports)
    assert states(pic)[("a", "b")] == "down"
    assert health(pic)["a"] == "degraded" and health(pic)["c"] == "ok"


def test_health_isolated_cut_off_slow_lossy_lagging() -> None:
    lonely = {**full_mesh(A, B), C: report(C)}
    assert health(compute(lonely))["c"] == "isolated"
    assert health(compute({**full_mesh(A, B), C: report(C, cut_off=True)}))["c"] == "cut-off"
    assert health(compute({A: report(A)})) == {"a": "ok"}  # alone and never had peers

    slow = {A: report(A, stat(B, rtt=0.4)), B: report(B, stat(A, rtt=None))}
    assert states(compute(slow))[("a", "b")] == "slow"
    assert health(compute(slow)) == {"a": "slow", "b": "slow"}

    # What a sent to b: 200 frames, 20 sent again (10 % > 5 %): b is lossy.
    lossy = {A: report(A, stat(B, sent=200, retrans=20)), B: report(B, stat(A))}
    assert health(compute(lossy)) == {"a": "ok", "b": "lossy"}
    few = {A: report(A, stat(B, sent=20, retrans=10)), B: report(B, stat(A))}
    assert health(compute(few))["b"] == "ok", "below lossy_min_frames nothing is concluded"

    lagging = {A: report(A, stat(B, queued=5 * 1024 * 1024)), B: report(B, stat(A))}
    assert health(compute(lagging)) == {"a": "ok", "b": "lagging"}


def test_pictures_keep_the_newest_report_expire_silent_origins_and_give_rates() -> None:
    held = Pictures(A, PictureTiming(interval=1.0, expire_after=3.0))
    held.accept(report(A, seq=1000), 100.0)
    assert held.accept(report(B, stat(A), seq=1000), 100.0)
    assert not held.accept(report(B, stat(A), seq=900), 100.5), "an older report is not taken (nor passed on)"
    newer = Raws(B, B, 3000, "b", "standard", 0.5, 9, False,
                 (PeerStat(A, 0.1, 0.002, "alive", 30, 50, 3000, 5000, 0, 0, 0),))
    assert held.accept(newer, 101.0)
    rates = held.rates()
    # From 10 in / 10 out / 1000 / 1000 to 30 / 50 / 3000 / 5000 in 2 s.
    assert rates[B] == {"msgs_in": 10.0, "msgs_out": 20.0, "bytes_in": 1000.0, "bytes_out": 2000.0}
    held.expire(103.5)
    assert set(held.reports()) == {A, B}
    held.expire(104.5)
    assert set(held.reports()) == {A}, "b's report was not renewed within expire_after; a's own is kept"
    described = held.describe(105.0)
    assert [m["name"] for m in described["members"]] == ["a"]


def test_timing_is_checked() -> None:
    with pytest.raises(ValueError, match="twice the report interval"):
        PictureTiming(interval=5.0, expire_after=6.0)
    with pytest.raises(ValueError, match="positive"):
        PictureTiming(slow_rtt=0)


# -------------------------------------------------------------------- codec


def test_raws_round_trips_and_hostile_reports_are_refused() -> None:
    r = report(A, stat(B, heard=None, rtt=None, state="none"), stat(C, sent=5, retrans=1, queued=70), seq=12345)
    assert decode(encode(r)) == r
    with pytest.raises(LocalProtocolError):
        report(A, stat(B), stat(B))  # a peer twice
    with pytest.raises(LocalProtocolError):
        report(A, node_type="Bad Type")
    frames = encode(r)
    for bad in (
        b"{}", b"[1,2]", b"not json",
        frames[2].replace(b'"none"', b'"sleepy"'),
            frames[2].replace(b'null,null', b'-1,null'),
        frames[2].replace(b'"seq":12345', b'"seq":0'),
        frames[2].replace(b'"seq":12345', b'"seq":1.5'),
        frames[2].replace(b'"cut_off":false', b'"cut_off":0'),
        # Every field of every row is still checked on the fast path (protocol.md 14.1).
        frames[2].replace(B.hex().encode(), b"0A" * 16),  # upper case
        frames[2].replace(B.hex().encode(), B.hex()[:31].encode()),
        frames[2].replace(b'"alive",10', b'"alive",true'),
        frames[2].replace(b'"alive",10', b'"alive",10.0'),
        frames[2].replace(b'"alive",10', b'"alive",9223372036854775808'),
        frames[2].replace(b'"alive",10', b'"alive",123456789012345678901234567890'),
        frames[2].replace(b'"alive",10', b'"alive",-1'),
        frames[2].replace(b',70]', b',70,0]'),
        frames[2].replace(b',70]', b']'),
        frames[2].replace(b'"none"', b'null'),
        frames[2].replace(b'null,null', b'"1",null'),
        frames[2].replace(b'null,null', b'NaN,null'),
        frames[2].replace(b'null,null', b'1e400,null'),
        frames[2].replace(b'null,null', b'true,null'),
    ):
        assert bad != frames[2]
        with pytest.raises(DecodeError):
            decode([frames[0], frames[1], bad])


def test_a_decoded_report_makes_its_rows_only_when_they_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every node receives every member's report, and the mesh reads only each row's peer and state
    # (whom to relay to): at 64 nodes, making a PeerStat of every row cost 10 times the JSON.
    ids = [NodeId(bytes([i]) * 16) for i in range(10, 73)]
    r = Raws(A, A, 7, "a", "standard", 1.0, 4, False,
             tuple(stat(p, heard=0.25, state="suspect" if i % 9 == 0 else "alive")
                   for i, p in enumerate(ids)))
    made = []
    post_init = PeerStat.__post_init__
    monkeypatch.setattr(PeerStat, "__post_init__", lambda self: made.append(1) or post_init(self))
    got = decode(encode(r))
    assert isinstance(got, Raws) and len(got.peers) == 63
    assert got.peers_in({"suspect"}) == {p for i, p in enumerate(ids) if i % 9 == 0}
    assert made == []  # checked, but no PeerStat yet
    assert got == r and list(got.peers) == list(r.peers)
    assert len(made) == 63  # reading them made the decoded rows, once
    assert got.peers_in({"alive", "suspect"}) == set(ids)
    # Still refused at decode, as every row is checked: the same peer twice, a bad row after good ones.
    frames = encode(r)
    twice = frames[2].replace(ids[1].hex().encode(), ids[2].hex().encode())
    at = frames[2].rindex(b'"alive",10')  # the last row's
    late_bad = frames[2][:at] + b'"alive",-10' + frames[2][at + 10:]
    for bad in (twice, late_bad):
        assert bad != frames[2]
        with pytest.raises(DecodeError):
            decode([frames[0], frames[1], bad])


_POOL = [f"{i:02x}" * 16 for i in range(12)]  # few uuids, so that some come twice
_good_row = st.tuples(
    st.sampled_from(_POOL),
    st.one_of(st.none(), st.floats(0, 1e9)),  # a whole number (JSON may write 2.0 as 2) as a spoilt field
    st.one_of(st.none(), st.floats(0, 10)),
    st.sampled_from(PEER_STATES),
    *[st.one_of(st.integers(0, 1000), st.just(2**63 - 1), st.integers(10**17, 2**63 - 1)) for _ in range(7)],
).map(list)
# What a hostile report may hold in any field: what JSON can say (as orjson reads it: integers
# within 64 bits, beyond them floats), and NaN and infinities besides.
_bad_value = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf, -1.0, -0.0, 0, 7, 1e300, True, False, None, -1, 2**63, 2**64 - 1,
                     10**18, "1", "", "0" * 32, "0A" * 16, "0a" * 15 + " 0", "alive", "ALIVE", "sleepy", [], [1], {}]),
    st.integers(-(2**64), 2**64), st.floats(),
    st.text(alphabet="0123456789abcdefABCDEFg \u0660-", min_size=30, max_size=34),
)
@st.composite
def _raws_rows(draw: st.DrawFn) -> list[Any]:
    rows: list[Any] = draw(st.lists(_good_row, max_size=6, unique_by=lambda r: r[0]))
    for _ in range(draw(st.integers(0, 2))):  # spoil a field, seconds, a whole row, or name a peer twice
        how = draw(st.sampled_from(["field", "seconds", "row", "twice"]))
        full = [r for r in rows if type(r) is list and len(r) == 11]
        if how == "row" or not full:
            rows.insert(draw(st.integers(0, len(rows))), draw(st.one_of(
                _good_row.map(lambda r: r[:-1]), _good_row.map(lambda r: [*r, 0]), _good_row.map(tuple),
                _bad_value)))
        elif how == "field":
            draw(st.sampled_from(full))[draw(st.integers(0, 10))] = draw(_bad_value)
        elif how == "seconds":  # NaN and infinity after good seconds: no min or max alone sees them
            draw(st.sampled_from(full))[draw(st.sampled_from([1, 2]))] = draw(st.sampled_from(
                [math.nan, math.inf, -math.inf, -1.0, -1e-300, 0, 3, 10**30, True, False, "1"]))
        else:
            draw(st.sampled_from(full))[0] = draw(st.sampled_from(full))[0]
    return rows


@settings(max_examples=600)
@given(_raws_rows())
def test_the_quick_check_of_report_rows_takes_exactly_what_peerstat_takes(rows: list[Any]) -> None:
    # _rows_ok checks a decoded report's rows a column at a time; PeerStat and _peer_stats check them
    # one by one (the path that says what is wrong): both take and refuse the same rows.  A bool is
    # no count nor seconds; NaN, infinities, negatives, beyond 2^63-1, upper-case hex are refused.
    try:
        stats = _peer_stats(rows)
        one_by_one = len({p.peer for p in stats}) == len(stats)
    except DecodeError:
        one_by_one = False
    assert _rows_ok(rows) == one_by_one
    if one_by_one:
        checked = CheckedRows([list(r) for r in rows])
        assert checked.peers_in(("alive", "suspect")) == {p.peer for p in stats if p.state in ("alive", "suspect")}
        assert tuple(checked) == stats


def test_the_node_ids_of_report_rows_are_made_once_and_kept_within_bounds() -> None:
    # A report's admitted peers are NodeIds made once per text (every report names the same peers);
    # rows naming peers by the thousand (made up) empty the store instead of growing it.
    rows = [[f"{i:032x}", 0.5, 0.002, "alive", 1, 1, 1, 1, 0, 0, 0] for i in range(3 * _NODE_IDS_KEPT)]
    first = CheckedRows(rows[:10]).peers_in({"alive"})
    again = CheckedRows([list(r) for r in rows[:10]]).peers_in({"alive"})
    assert first == again and {id(p) for p in first} == {id(p) for p in again}
    assert CheckedRows(rows).peers_in({"alive"}) == {NodeId(bytes.fromhex(r[0])) for r in rows}
    assert len(_NODE_IDS) <= _NODE_IDS_KEPT


# ---------------------------------------------------------------- simulator


FAST = PictureTiming(interval=0.5, expire_after=2.0)


def mesh_of(net: SimNetwork, n: int) -> list[SimNode]:
    nodes = [net.add(f"n{i}", "g", uuid=NodeId(bytes([i + 1]) * 16), picture=FAST) for i in range(n)]
    for prev, node in itertools.pairwise(nodes):
        node.mesh.add_seed(prev.mesh.endpoint, net.now)
    return nodes


def digests(nodes: list[SimNode]) -> set[str]:
    return {n.pictures.picture().digest for n in nodes}


def test_six_simulated_nodes_compute_the_same_picture() -> None:
    net = SimNetwork(seed=6)
    nodes = mesh_of(net, 6)
    assert net.settle(10.0, lambda: len(digests(nodes)) == 1 and len(nodes[0].pictures.picture().members) == 6)
    pic = nodes[0].pictures.picture()
    assert {m["health"] for m in pic.members} == {"ok"}
    assert {x["state"] for x in pic.links} == {"two-way"} and len(pic.links) == 15
    # In a full mesh nobody needs to relay a report.
    assert sum(n.reports.stats.reports_relayed for n in nodes) == 0
    # A node leaves (GBYE): everyone agrees again, on five members and the one that left, listed
    # `left` (protocol.md 14.2, member states) after its report expired too.
    net.stop(nodes[5])
    rest = nodes[:5]

    def left_shown() -> bool:
        members = rest[0].pictures.picture().members
        return (len(digests(rest)) == 1 and len(rest[0].pictures.reports()) == 5
                and [m.get("state", "alive") for m in members] == ["alive"] * 5 + ["left"])

    assert net.settle(10.0, left_shown)


def test_a_one_way_link_is_seen_as_one_by_every_node() -> None:
    net = SimNetwork(seed=7)
    a, b, c = mesh_of(net, 3)
    assert net.settle(5.0, lambda: len(digests([a, b, c])) == 1 and len(a.pictures.picture().links) == 3)
    net.block(a, b)  # what a sends to b is dropped; b still reaches a

    def one_way() -> bool:
        pics = [n.pictures.picture() for n in (a, b, c)]
        if len({p.digest for p in pics}) != 1:
            return False
        return any(x["state"] == "one-way" for x in pics[0].links)

    assert net.settle(30.0, one_way)
    (link,) = [x for x in a.pictures.picture().links if x["state"] != "two-way"]
    assert (link["from"], link["to"]) == (str(b.mesh.uuid), str(a.mesh.uuid))
    # a's and b's reports crossed through c.
    assert c.reports.stats.reports_relayed > 0
    net.heal()
    assert net.settle(30.0, lambda: len(digests([a, b, c])) == 1 and
                      {x["state"] for x in a.pictures.picture().links} == {"two-way"})


def test_a_node_that_loses_every_peer_is_cut_off_until_one_comes_back() -> None:
    net = SimNetwork(seed=8)
    a, b, c = mesh_of(net, 3)
    assert net.settle(5.0, lambda: len(a.pictures.picture().links) == 3)
    net.partition(a, b)
    net.partition(a, c)
    assert net.settle(20.0, lambda: a.mesh.cut_off)
    assert [e.cut_off for e in a.events if isinstance(e, CutOff)] == [True]
    assert not b.mesh.cut_off and not c.mesh.cut_off
    assert net.settle(10.0, lambda: a.pictures.picture().members[0]["health"] == "cut-off")
    net.heal()
    assert net.settle(30.0, lambda: not a.mesh.cut_off)
    assert [e.cut_off for e in a.events if isinstance(e, CutOff)] == [True, False]


def test_a_node_types_heartbeat_decides_how_soon_its_peers_count_it_gone() -> None:
    net = SimNetwork(seed=9)
    quick = Timing(heartbeat_interval=0.1, suspect_after=0.15, gone_after=0.3)
    a = net.add("a", "g", timing=quick, node_type="console")
    b = net.add("b", "g")  # default timing: gone after 5 s
    a.mesh.discovered(b.mesh.uuid, b.mesh.endpoint, net.now)
    assert net.settle(2.0, lambda: any(p.state == "alive" for p in b.mesh.peers(net.now)))
    assert a.mesh.lost == 2  # 0.3 s / 0.1 s beat: two beats may be lost
    net.crash(a)
    start = net.now
    assert net.settle(10.0, lambda: not b.mesh.peers(net.now) or b.mesh.peers(net.now)[0].state == "gone")
    assert net.now - start < 1.0, "b used a's announced beat x (lost + 1), not its own 5 s"


def test_a_burst_of_session_changes_brings_one_report_forward() -> None:
    held = Pictures(A, PictureTiming(interval=2.0, expire_after=10.0))
    held.first_report(100.0)
    assert held.next_report == 100.0
    held.published(100.0)
    assert held.next_report == 102.0 and held.soon_window() == 1.0
    held.sessions_changed(100.05)  # no sooner than the window after the last report
    assert held.next_report == 101.0
    held.published(101.0)
    held.sessions_changed(102.1)
    assert held.next_report == pytest.approx(102.3), "alone, a change is reported after REPORT_QUIET"
    held.sessions_changed(102.2)
    assert held.next_report == pytest.approx(102.4), "another change puts it off"
    held.sessions_changed(102.95)
    assert held.next_report == 103.0, "never later than the interval's own report"
    # 20 reports held: the interval doubles (4 s), and so do the quiet time and the window.
    for i in range(20, 40):
        origin = NodeId(bytes([i]) * 16)
        held.accept(Raws(origin, origin, 1, "x", "standard", 1.0, 3, False, ()), 103.0)
    held.published(103.0)
    assert held.next_report == 107.0
    assert held.soon_window() == 2.0 and held.quiet() == pytest.approx(0.4)
    for k in range(20):  # a change every 0.1 s from 105.5 keeps pushing it back ...
        held.sessions_changed(105.5 + k * 0.1)
    assert held.next_report == pytest.approx(107.0), "... to the interval's own report at the latest"
    held.published(107.0)
    for k in range(30):
        held.sessions_changed(109.5 + k * 0.1)
    assert held.next_report == pytest.approx(111.0), "... and no later than the window after the first"


def test_admissions_alone_are_reported_at_the_window_and_a_departure_after_the_quiet_time() -> None:
    # A crowd joining is the commonest burst of changes, and a newcomer's arrival can wait:
    # admissions alone bring the report forward to the soon window W after the first of them
    # (less the slack given: room for the heartbeat it then waits for), where a departure, which
    # the picture's health is about, still goes once the sessions were quiet for Q.
    held = Pictures(A, PictureTiming(interval=2.0, expire_after=10.0))
    held.members = 32  # S = 3.2: W = 3.2 s, Q = 0.64 s, the interval 6.4 s
    held.published(100.0)
    assert held.next_report == pytest.approx(106.4)
    held.sessions_changed(104.0, ended=False, slack=1.0)
    assert held.next_report == pytest.approx(106.2), "the window after the first admission, less the slack"
    held.sessions_changed(104.5, ended=False, slack=1.0)
    assert held.next_report == pytest.approx(106.2), "more admissions: the same window"
    held.sessions_changed(105.0, ended=True, slack=1.0)
    assert held.next_report == pytest.approx(105.64), "a departure: once quiet for Q"
    held.published(105.64)
    held.sessions_changed(106.0, ended=False, slack=1.0)
    assert held.next_report == pytest.approx(108.84), "no sooner than W after the last report"
    held.published(108.84)
    held.sessions_changed(115.0, ended=False, slack=5.0)
    assert held.next_report == 115.0, "never before the change itself"


def test_the_group_size_reports_are_scaled_by_counts_admitted_peers_before_their_reports_come() -> None:
    held = Pictures(A, PictureTiming(interval=2.0, expire_after=10.0))
    held.first_report(100.0)
    held.members = 64  # a newcomer just admitted by 63 members holds few reports yet
    assert held.scale() == pytest.approx(6.4)
    assert held.soon_window() == pytest.approx(6.4) and held.quiet() == pytest.approx(1.28)
    held.published(100.0)
    assert held.next_report == pytest.approx(112.8)
    held.sessions_changed(101.0)
    assert held.next_report == pytest.approx(106.4), "no sooner than the window after the last report"


def test_a_newcomer_behind_a_one_way_link_still_gets_the_report_relayed() -> None:
    # Relays skip a peer admitted less than an interval ago; once it has settled,
    # the next report of the origin that cannot reach it is relayed to it.
    net = SimNetwork(seed=9)
    a, b = mesh_of(net, 2)
    assert net.settle(5.0, lambda: len(digests([a, b])) == 1 and len(a.pictures.picture().members) == 2)
    c = net.add("n2", "g", uuid=NodeId(bytes([3]) * 16), picture=FAST)
    net.block(a, c)  # what a sends to c is dropped; c still reaches a
    c.mesh.add_seed(b.mesh.endpoint, net.now)
    # a's half-open session with c lists c as admitted until it times out (5.3 s
    # here, before and after the relay rule changed); then b relays a's report.
    assert net.settle(10.0, lambda: a.mesh.uuid in c.pictures.reports())
    assert b.reports.stats.reports_relayed > 0 and b.reports.stats.reports_not_relayed > 0
    assert net.settle(10.0, lambda: len(digests([a, b, c])) == 1 and len(c.pictures.picture().members) == 3)


def test_a_quiet_group_repeats_an_unchanged_report_only_to_refresh_it_and_a_newcomer_gets_one_at_once() -> None:
    net = SimNetwork(seed=21)
    nodes = [net.add(f"q{i}", "g") for i in range(6)]  # the default timing: interval 2 s, refresh 4 s
    for node in nodes[1:]:
        node.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    assert net.settle(15.0, lambda: len(digests(nodes)) == 1 and len(nodes[0].pictures.picture().members) == 6)
    net.run(10.0)
    sent = [n.reports.stats.reports_sent for n in nodes]
    window = 40.0
    for _ in range(8):
        net.run(window / 8)
        assert len(digests(nodes)) == 1  # the numbers beside the facts age; the picture does not change
    refresh = PictureTiming().refresh
    for node, before in zip(nodes, sent, strict=True):
        reports = (node.reports.stats.reports_sent - before) / 5  # to each of 5 peers
        # Every refresh (4 s, give or take a tenth, on a heartbeat), not every interval (2 s: 20).
        assert window / (1.1 * refresh + 1) - 1 <= reports <= window / (0.9 * refresh) + 1, reports
        assert node.reports.stats.reports_unchanged >= reports - 2
    newcomer = net.add("q6", "g")
    newcomer.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    joined = net.now
    group = [*nodes, newcomer]
    assert net.settle(5.0, lambda: len(digests(group)) == 1 and len(newcomer.pictures.picture().members) == 7)
    # Within the soon window (1 s) of the admissions, not a refresh later.
    assert net.now - joined <= 1.5
