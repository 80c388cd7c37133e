"""RAWS deltas (protocol.md 14.1): the codec, merging a delta into the report it is
based on, the hostile deltas a receiver refuses, and what deltas save in the simulator;
and the report a change of sessions brings forward, put on a heartbeat (14)."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from huddle import NodeId
from huddle.errors import DecodeError, LocalProtocolError
from huddle.protocol.picture import Reports
from huddle.protocol.picture_compute import PictureTiming, compute, merge_report, report_delta, report_facts
from huddle.protocol.service import PeerFacts
from huddle.sim import SimNetwork, SimNode
from huddle.wire import MAX_GONE_ROWS, Helo, PeerStat, Raws, decode, encode

A, B, C, D, E = (NodeId(bytes([i]) * 16) for i in (1, 2, 3, 4, 5))
F = NodeId(bytes([0xAB]) * 16)
TIMING = PictureTiming()


def stat(peer: NodeId, *, heard: float | None = 0.5, state: str = "alive", sent: int = 0, msgs: int = 10) -> PeerStat:
    return PeerStat(peer, heard=heard, rtt=0.002, state=state, msgs_in=msgs, msgs_out=msgs, bytes_in=1000,
                    bytes_out=1000, sent=sent)


def report(origin: NodeId, *peers: PeerStat, seq: int = 10, sender: NodeId | None = None, **kw: Any) -> Raws:
    return Raws(sender=sender or origin, origin=origin, seq=seq, name="n", node_type="standard", beat=0.5, lost=9,
                cut_off=False, peers=tuple(peers), **kw)


def wire(msg: Raws) -> Raws:
    got = decode(encode(msg))
    assert isinstance(got, Raws)
    return got


def rows(r: Raws) -> dict[NodeId, tuple[object, ...]]:
    """A report's rows, every field, by peer (the order of rows means nothing)."""
    return {p.peer: (p.heard, p.rtt, p.state, p.msgs_in, p.sent) for p in r.peers}


# -------------------------------------------------------------------- codec


def test_a_delta_round_trips_and_a_full_report_is_written_as_before() -> None:
    full = report(A, stat(B), stat(C))
    assert b'"base"' not in encode(full)[2] and b'"gone"' not in encode(full)[2]
    delta = report(A, stat(C, sent=3), seq=20, base=10, gone=(B,))
    assert delta.is_delta and not full.is_delta
    assert wire(delta) == delta
    assert wire(report(A, seq=20, base=19)) == report(A, seq=20, base=19)  # nothing changed but, say, cut_off
    # Whom a report shows its origin admitted, as hex (the relay's check), decoded or not.
    mixed = report(A, stat(B), stat(C, state="none"), stat(D, state="suspect"))
    for r in (mixed, wire(mixed)):
        assert r.hex_peers_in({"alive", "suspect"}) == {B.hex(), D.hex()}


def test_hostile_deltas_are_refused_by_the_codec() -> None:
    frames = encode(report(A, stat(C), seq=20, base=10, gone=(F,)))
    body = frames[2]
    gone = b'"gone":["' + F.hex().encode() + b'"]'
    assert gone in body
    too_many = b",".join(b'"%032x"' % i for i in range(MAX_GONE_ROWS + 1))
    for bad in (
        body.replace(b'"base":10', b'"base":20'),  # not older than the report itself
        body.replace(b'"base":10', b'"base":30'),
        body.replace(b'"base":10', b'"base":0'),
        body.replace(b'"base":10', b'"base":-1'),
        body.replace(b'"base":10', b'"base":"10"'),
        body.replace(b'"base":10', b'"base":10.5'),
        body.replace(b'"base":10', b'"base":null'),
        body.replace(b'"base":10,', b''),  # gone without a base
        body.replace(gone, b'"gone":["' + F.hex().upper().encode() + b'"]'),
        body.replace(gone, b'"gone":["' + F.hex()[:31].encode() + b'"]'),
        body.replace(gone, b'"gone":"' + F.hex().encode() + b'"'),
        body.replace(gone, b'"gone":[1]'),
        body.replace(gone, b'"gone":{}'),
        body.replace(gone, b'"gone":["' + F.hex().encode() + b'","' + F.hex().encode() + b'"]'),  # twice
        body.replace(gone, b'"gone":["' + C.hex().encode() + b'"]'),  # gone and changed at once
        body.replace(gone, b'"gone":[' + too_many + b"]"),
    ):
        assert bad != body, bad
        with pytest.raises(DecodeError):
            decode([frames[0], frames[1], bad])
    with pytest.raises(LocalProtocolError):
        report(A, seq=5, gone=(F,))  # gone only in a delta


def test_helo_says_whether_its_sender_understands_deltas() -> None:
    helo = Helo(sender=A, endpoint="tcp://127.0.0.1:5000", name="a", incarnation="0123456789abcdef", deltas=True)
    assert decode(encode(helo)) == helo
    old = Helo(sender=A, endpoint="tcp://127.0.0.1:5000", name="a", incarnation="0123456789abcdef")
    assert b"deltas" not in encode(old)[2] and decode(encode(old)) == old
    frames = encode(helo)
    for bad in (b'"deltas":1', b'"deltas":"yes"', b'"deltas":null'):
        with pytest.raises(DecodeError):
            decode([frames[0], frames[1], frames[2].replace(b'"deltas":true', bad)])


# -------------------------------------------------------------------- merging


def test_a_delta_merged_into_its_base_gives_the_origins_report() -> None:
    base = report(A, stat(B), stat(C), stat(D), seq=10)
    now = report(A, stat(B), stat(C, state="suspect"), stat(E), seq=20)  # D gone, C changed, E new
    delta = report_delta(base, now, TIMING)
    assert delta is not None and delta.base == 10 and delta.gone == (D,)
    assert [p.peer for p in delta.peers] == [C, E]
    for held, d in ((base, delta), (wire(base), wire(delta))):  # PeerStats, and decoded rows as they came
        merged = merge_report(held, d)
        assert merged.base is None and merged.seq == 20 and rows(merged) == rows(now)
    # Only the rows whose facts changed travel: a counter beside the picture stays as the base had it.
    ticking = report(A, stat(B, msgs=99), stat(C), stat(D), seq=30)
    quiet = report_delta(base, ticking, TIMING)
    assert quiet is not None and quiet.peers == () and quiet.gone == ()
    merged = merge_report(base, quiet)
    assert report_facts(merged, TIMING) == report_facts(ticking, TIMING) and rows(merged)[B][3] == 10
    with pytest.raises(LocalProtocolError):
        merge_report(base, report(A, seq=20, base=9))  # another base
    with pytest.raises(LocalProtocolError):
        merge_report(wire(base), wire(report(A, seq=20, base=10, gone=(E,))))  # E has no row in the base


def _random_report(rng: random.Random, peers: list[NodeId], seq: int) -> Raws:
    chosen = [p for p in peers if rng.random() < 0.7]
    rng.shuffle(chosen)
    return report(A, *(stat(p, heard=rng.choice([None, 0.25, 30.0]), state=rng.choice(["alive", "suspect", "none"]),
                            sent=rng.choice([0, 0, 5]), msgs=rng.randrange(1000)) for p in chosen), seq=seq)


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 2**32), st.integers(1, 12), st.integers(1, 5))
def test_a_stream_of_deltas_and_full_reports_holds_what_the_origin_reported(seed: int, steps: int,
                                                                           full_every: int) -> None:
    # The property: whatever the origin's reports were, the receiver that merges the deltas
    # (and takes the full reports) in order holds the origin's facts, and so the picture.
    rng = random.Random(seed)
    peers = [NodeId(bytes([i]) * 16) for i in range(2, 14)]
    others = {p: report(p, stat(A), seq=1) for p in peers}
    sent = _random_report(rng, peers, 100)
    held = wire(sent)
    for step in range(1, steps + 1):
        now = _random_report(rng, peers, 100 + step)
        delta = None if step % full_every == 0 else report_delta(sent, now, TIMING)
        held = wire(now) if delta is None else merge_report(held, wire(delta))
        sent = now
        assert sorted(map(repr, report_facts(held, TIMING)[4])) == sorted(map(repr, report_facts(now, TIMING)[4]))
        assert report_facts(held, TIMING)[:4] == report_facts(now, TIMING)[:4]
        assert compute(others | {A: held}).digest == compute(others | {A: now}).digest


# -------------------------------------------------------------- the service


class _View:
    """The little of a mesh that Reports reads when it receives."""

    def __init__(self) -> None:
        self.excluded: dict[NodeId, str] = {}
        self.beat = 1.0

    phase_changes = dialled_afresh = 0  # no session went suspect, none dialled us afresh

    def departure(self, peer: NodeId) -> str | None:
        return None

    def heartbeat_after(self, when: float) -> float:
        return when


def _receiver(*admitted: NodeId) -> Reports:
    r = Reports(A, now=0.0)
    r.attach(_View())  # type: ignore[arg-type]
    for i, peer in enumerate(admitted):
        r.peer_up(peer, i, 0.0, PeerFacts(deltas=True))
    return r


def test_hostile_deltas_are_refused_by_the_receiver_and_counted() -> None:
    r = _receiver(B, C)
    held = lambda: r.pictures.reports().get(B)  # noqa: E731
    # A delta of an origin never seen: nothing to merge it into.
    r.receive(B, wire(report(B, stat(A), seq=20, base=10)), 1.0)
    assert held() is None and r.stats.reports_unbased == 1
    base = wire(report(B, stat(A), stat(D), seq=10))
    r.receive(B, base, 1.0)
    assert held() == base
    for bad in (
        report(B, stat(A, state="suspect"), seq=20, base=9),  # a base older than held
        report(B, stat(A, state="suspect"), seq=20, base=11),  # newer than held (one we missed)
    ):
        r.receive(B, wire(bad), 1.1)
        assert held() == base
    assert r.stats.reports_unbased == 3
    # A gone peer that the base has no row for.
    r.receive(B, wire(report(B, seq=20, base=10, gone=(E,))), 1.2)
    assert held() == base and r.stats.reports_bad_delta == 1
    # A delta relayed by a third node: relays send full reports; refused even when it fits.
    r.receive(C, wire(report(B, stat(A, state="suspect"), seq=20, base=10, sender=C)), 1.3)
    assert held() == base and r.stats.reports_bad_delta == 2
    # A delta of an excluded origin.
    r._mesh.excluded[B] = "test"  # type: ignore[attr-defined]
    r.receive(B, wire(report(B, stat(A, state="suspect"), seq=20, base=10)), 1.4)
    assert held() == base and r.stats.reports_merged == 0
    del r._mesh.excluded[B]  # type: ignore[attr-defined]
    # The one that fits is merged, once; the same again is old news.
    good = wire(report(B, stat(A, state="suspect"), seq=20, base=10, gone=(D,)))
    r.receive(B, good, 1.5)
    r.receive(B, good, 1.6)
    kept = held()
    assert kept is not None and kept.seq == 20 and kept.base is None and rows(kept) == rows(report(B, stat(A, state="suspect")))
    assert r.stats.reports_merged == 1 and r.stats.reports_unbased == 3 and r.stats.reports_bad_delta == 2
    # A full report still replaces what is held, as before.
    r.receive(C, wire(report(B, stat(A), seq=30, sender=C)), 2.0)
    kept = held()
    assert kept is not None and kept.seq == 30


# ---------------------------------------------------------------- simulator


def _group(net: SimNetwork, n: int, picture: PictureTiming | None = None) -> list[SimNode]:
    """``n`` nodes on one host that start at once with the first as their seed, meshed."""
    nodes = [net.add(f"n{i:02d}", endpoint=f"tcp://127.0.0.1:{40000 + i}", picture=picture) for i in range(n)]
    for node in nodes[1:]:
        node.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    assert net.settle(15.0, lambda: all(len(x.mesh.alive_peers()) == n - 1 for x in nodes))
    return nodes


def _digests(nodes: list[SimNode]) -> set[str]:
    return {x.pictures.picture().digest for x in nodes}


def test_a_join_into_a_settled_64_costs_the_group_deltas_not_64_full_reports_each() -> None:
    # One node joins a settled group of 63: every member's sessions change, so every member
    # reports to every other within the soon window.  Full reports made that 4 032 reports of
    # 63 or 64 rows (254 016 rows, 23.2 MB of JSON, decoded and checked); a member now sends its
    # old peers only the row that changed (the newcomer's), and the newcomer its full report:
    # 11 844 rows, 1.7 MB.
    # A refresh longer than the test keeps the regular refreshes, the same before and after,
    # out of the count.
    n = 64
    net = SimNetwork(latency=0.005, seed=5)
    timing = PictureTiming(interval=2.0, expire_after=100.0)  # refresh: 40 s, scaled
    nodes = _group(net, n - 1, timing)
    window = nodes[0].pictures.soon_window()
    assert window == pytest.approx(6.3)
    net.run(2 * window)  # every change of the formation reported
    net.trace = []
    newcomer = net.add("late", endpoint=f"tcp://127.0.0.1:{40000 + n}", picture=timing)
    newcomer.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    joined, group = net.now, [*nodes, newcomer]
    assert net.settle(5.0, lambda: all(len(x.mesh.alive_peers()) == n - 1 for x in group))
    # Every node holds the same reports again within the window: the same picture, of 64
    # (64 pictures of 64 members take seconds to compute: looked at once).
    net.run(joined + window + 0.5 - net.now)
    assert len(_digests(group)) == 1 and len(newcomer.pictures.picture().members) == n
    reports = [m for _, _, m in net.trace if isinstance(m, Raws)]
    deltas = [m for m in reports if m.is_delta]
    rows = sum(len(m.peers) for m in reports)
    # 63 x 62 deltas of one row, 2 x 63 full reports to and from the newcomer (8 000 rows).
    assert len(deltas) >= 0.9 * (n - 1) * (n - 2), len(deltas)
    assert {len(m.peers) for m in deltas} == {1}
    assert rows <= 15_000, rows
    stats = [x.reports.stats for x in group]
    assert sum(s.reports_merged for s in stats) == len(deltas)
    assert sum(s.reports_unbased + s.reports_bad_delta for s in stats) == 0


def test_a_node_whose_helo_does_not_say_deltas_gets_only_full_reports() -> None:
    # A node of an older version would take a delta for a full report: it is sent none.
    net = SimNetwork(latency=0.005, seed=6)
    fast = PictureTiming(interval=0.5, expire_after=10.0)
    nodes = [net.add(f"m{i}", endpoint=f"tcp://127.0.0.1:{41000 + i}", picture=fast) for i in range(5)]
    old = nodes[3]
    old.mesh.deltas = False
    net.trace = []
    for node in nodes[1:]:
        node.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    assert net.settle(10.0, lambda: len(_digests(nodes)) == 1 and len(nodes[0].pictures.picture().members) == 5)
    newcomer = net.add("m5", endpoint="tcp://127.0.0.1:41005", picture=fast)
    newcomer.mesh.add_seed(nodes[0].mesh.endpoint, net.now)
    group = [*nodes, newcomer]
    assert net.settle(10.0, lambda: len(_digests(group)) == 1 and len(old.pictures.picture().members) == 6)
    got = [(to, m) for _, to, m in net.trace if isinstance(m, Raws)]
    assert any(m.is_delta for to, m in got if to != old.mesh.name)
    assert not [m for to, m in got if to == old.mesh.name and m.is_delta]
    assert old.reports.stats.reports_deltas > 0  # it still sends deltas to the others


# ------------------------------------------------- reports brought forward


class _Beats(_View):
    def heartbeat_after(self, when: float) -> float:
        return float(math.ceil(when - 1e-9))  # a heartbeat every whole second


def test_a_report_brought_forward_goes_on_the_next_heartbeat_when_the_window_allows() -> None:
    # A change of our sessions brings the next report forward: a departure after the quiet time
    # Q, admissions alone at the soon window W less a heartbeat.  It then waits for the heartbeat
    # moment after, whose BEATs it replaces, as a regular report does, but only if that is still
    # within W of the change and not after the interval's own report: every change is still
    # reported within W.
    r = Reports(A, now=0.0, timing=PictureTiming(interval=2.0, expire_after=10.0))  # W 1 s, Q 0.2 s
    r.attach(_Beats())  # type: ignore[arg-type]
    pictures = r.pictures
    pictures.published(100.0, regular=105.0)
    r.peer_up(B, 1, 101.3, PeerFacts())
    assert pictures.next_report == 102.0, "due at 101.3 (W less a beat), on the heartbeat at 102 (within W: 102.3)"
    r.peer_up(C, 2, 101.5, PeerFacts())
    assert pictures.next_report == 102.0, "another admission: still the first change's window"
    pictures.published(102.0, regular=110.0)
    r.peer_down(C, 103.9)
    assert pictures.next_report == pytest.approx(104.1), "a departure: after Q; the heartbeat at 105 is after W (104.9)"
    pictures.published(105.0, regular=106.5)
    r.peer_down(B, 106.1)
    assert pictures.next_report == pytest.approx(106.3), "the heartbeat at 107 is after the interval's report"
