"""The system picture computed from reports (docs/protocol.md 14.2), and a report's facts.

:func:`compute` turns a set of reports into a :class:`Picture` using nothing but their
contents, so two nodes holding the same reports compute the same picture, byte for byte,
and the same digest.  Reports change every few seconds, so the picture keeps only
discrete facts (who is a member, each node's health, each link's state, the facts its
features report in ``ext``); numbers such as round trips and rates are given beside it
(protocol/picture.py ``Pictures.describe``) and left out of the digest.

:func:`report_facts` is what the picture reads of one report (a report whose facts did
not change is not sent again, protocol.md 14); :func:`report_delta` and
:func:`merge_report` make a delta of a report and merge one back (14.1).

Pure: time is passed in, nothing here does I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from operator import attrgetter, itemgetter
from typing import Any, Final, TypeVar

from ..errors import LocalProtocolError
from ..ids import NodeId
from ..wire import MAX_GONE_ROWS, CheckedRows, Departed, PeerStat, Raws

__all__ = [
    "ADMITTED", "MEMBER_STATES", "SESSION", "Picture", "PictureTiming", "compute", "hears", "link_rtt",
    "merge_report", "report_delta", "report_facts",
]

ADMITTED: Final = frozenset({"alive", "suspect"})
# A row that shows its origin has a session with the peer (``handshake``: admitted at its end only, 6).
SESSION: Final = frozenset({"alive", "suspect", "handshake"})
MEMBER_STATES: Final = ("alive", "suspect", "failed", "left")  # a member's state in the picture (14.2)
PRESENT: Final = frozenset({"alive", "suspect"})  # ... of a member whose report is held and counted


@dataclass(frozen=True, slots=True)
class PictureTiming:
    interval: float = 2.0  # seconds between a node's own reports
    expire_after: float = 10.0  # a report not renewed for this long is dropped: its node is gone
    hear_window: float = 20.0  # heard within this many seconds counts as "hears", session or not
    slow_rtt: float = 0.25  # seconds: a link with a longer round trip is slow
    lossy_ratio: float = 0.05  # addressed frames sent again per frame sent, above which a peer is lossy
    lossy_min_frames: int = 100  # ... counted only once this many frames were sent
    queue_limit: int = 4 * 1024 * 1024  # octets queued for a node, above which it is lagging

    @property
    def refresh(self) -> float:
        """A report whose facts (what the digest depends on) did not change since the last one
        sent goes out again only this often (scaled as the interval): 0.4 x expire_after, so
        one report lost still leaves the next in time."""
        return max(self.interval, 0.4 * self.expire_after)

    def __post_init__(self) -> None:
        if min(self.interval, self.expire_after, self.hear_window, self.slow_rtt) <= 0:
            raise ValueError("picture intervals must be positive")
        if self.expire_after < 2 * self.interval:
            raise ValueError("expire_after must be at least twice the report interval")


@dataclass(frozen=True, slots=True)
class Picture:
    members: tuple[dict[str, Any], ...]
    links: tuple[dict[str, Any], ...]
    digest: str

    def as_dict(self) -> dict[str, Any]:
        return {"digest": self.digest, "members": list(self.members), "links": list(self.links)}


def hears(report: Raws, peer: NodeId, window: float) -> bool:
    """Whether ``report``'s node hears ``peer``: an admitted session, or any
    message from it within the window (a link open one way keeps sessions
    from forming, but its messages still arrive)."""
    for p in report.peers:
        if p.peer == peer:
            return p.state in ADMITTED or (p.heard is not None and p.heard <= window)
    return False


def link_rtt(reports: Mapping[NodeId, Raws], a: NodeId, b: NodeId) -> float | None:
    """The smaller round trip that either end measured (None: neither did)."""
    rtts = [p.rtt for x, y in ((a, b), (b, a)) for p in reports[x].peers if p.peer == y and p.rtt is not None]
    return min(rtts) if rtts else None


def _member_states(reports: Mapping[NodeId, Raws]) -> dict[NodeId, tuple[str, Departed | None]]:
    """Every member's state (protocol.md 14.2 "Member states"), from the reports alone: the
    origins of the reports, and the peers some report names ``departed``; with the entry a
    failed or left member's name and ``since`` are read from (None: no entry holds)."""
    with_session: dict[NodeId, list[str]] = {}  # member -> the states of the rows that show a session with it
    departed: dict[NodeId, list[tuple[int, str, NodeId, Departed]]] = {}
    for origin, r in reports.items():
        for p in r.peers:
            if p.state in SESSION and p.peer != origin:
                with_session.setdefault(p.peer, []).append(p.state)
        for d in r.departed:
            if d.peer != origin:
                departed.setdefault(d.peer, []).append((d.since, d.state, origin, d))
    out: dict[NodeId, tuple[str, Departed | None]] = {}
    for n in set(reports) | set(departed):
        rows, lost = with_session.get(n, []), departed.get(n, [])
        if lost and (not rows or n not in reports):
            # Nobody has a session with it, or its report is not held (expired, or it is back and
            # its first report is still on its way): the latest loss says how it went.
            last = max(lost, key=lambda e: e[:3])
            out[n] = (last[1], last[3])
        elif n in reports:  # suspect when most of the members that know it suspect or lost it
            doubt = sum(1 for s in rows if s == "suspect") + len(lost)
            out[n] = ("suspect" if 2 * doubt > len(rows) + len(lost) else "alive", None)
    return out


def compute(reports: Mapping[NodeId, Raws], timing: PictureTiming = PictureTiming()) -> Picture:
    """The picture of the nodes whose reports are given, and of those they name departed
    (the members: protocol.md 14.2)."""
    states = _member_states(reports)
    ids = sorted(n for n, (state, _) in states.items() if state in PRESENT)  # the members links are drawn between
    window = timing.hear_window
    links: list[dict[str, Any]] = []
    problems: dict[NodeId, set[str]] = {n: set() for n in ids}
    up: dict[NodeId, int] = dict.fromkeys(ids, 0)  # links of each node that work at least one way
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            ab = hears(reports[b], a, window)  # a -> b works when b hears a
            ba = hears(reports[a], b, window)
            rtt = link_rtt(reports, a, b)
            link: dict[str, Any] = {"a": str(a), "b": str(b)}
            if ab and ba:
                link["state"] = "slow" if rtt is not None and rtt > timing.slow_rtt else "two-way"
            elif ab or ba:
                src, dst = (a, b) if ab else (b, a)
                link |= {"state": "one-way", "from": str(src), "to": str(dst)}
                problems[src].add("one-way")
                problems[dst].add("one-way")
            else:
                link["state"] = "down"
                problems[a].add("unreachable")
                problems[b].add("unreachable")
            if link["state"] != "down":
                up[a] += 1
                up[b] += 1
            if link["state"] == "slow":
                problems[a].add("slow")
                problems[b].add("slow")
            links.append(link)
    # What the others measured sending to a node: retransmissions and queues.
    for n in ids:
        sent = resent = 0
        for other in ids:
            for p in reports[other].peers:
                if p.peer == n and other != n:
                    sent += p.sent
                    resent += p.retrans
                    if p.queued > timing.queue_limit:
                        problems[n].add("lagging")
        if sent + resent >= timing.lossy_min_frames and resent > timing.lossy_ratio * (sent + resent):
            problems[n].add("lossy")
    # Forged log records some member received from a node (protocol.md 12.5).
    for n in ids:
        for peer, count in reports[n].forged:
            if peer in problems and peer != n and count:
                problems[peer].add("forging")
    members = []
    for n in sorted(states):
        state, entry = states[n]
        r = reports.get(n)
        if state not in PRESENT:  # failed or left: that for health, and when a member last heard it (ms)
            assert entry is not None  # a member without a session is failed or left only by an entry
            members.append({"uuid": str(n), "name": entry.name if r is None else r.name,
                            "type": entry.node_type if r is None else r.node_type, "health": state, "problems": [],
                            "state": state, "since": entry.since})
            continue
        assert r is not None
        issues = problems[n]
        if r.cut_off:
            health = "cut-off"
        elif "forging" in issues:
            health = "forging"
        elif len(ids) > 1 and not up[n]:
            health = "isolated"
        elif issues & {"one-way", "unreachable"}:
            health = "degraded"
        elif issues & {"lossy", "lagging", "slow"}:
            health = "slow" if issues == {"slow"} else "lossy" if "lossy" in issues else "lagging"
        else:
            health = "ok"
        member: dict[str, Any] = {"uuid": str(n), "name": r.name, "type": r.node_type, "health": health,
                                  "problems": sorted(issues)}
        if r.ext:  # its features' facts, as its report gives them (a report without: the member as before)
            member["ext"] = r.ext
        if r.tags:  # its tags, likewise
            member["tags"] = r.tags
        if state != "alive":  # (every member alive: the digest as before member states existed)
            member["state"] = state
        members.append(member)
    digest = hashlib.sha256(
        json.dumps({"members": members, "links": links}, sort_keys=True, separators=(",", ":")).encode()
    ).hexdigest()
    return Picture(tuple(members), tuple(links), digest)


def _row_facts(p: PeerStat, timing: PictureTiming) -> tuple[object, ...]:
    return (p.peer, p.state, p.heard is not None and p.heard <= timing.hear_window,
            p.rtt is not None and p.rtt > timing.slow_rtt, p.sent, p.retrans, p.queued > timing.queue_limit)


def report_delta(base: Raws, report: Raws, timing: PictureTiming) -> Raws | None:
    """``report`` as a delta on ``base`` (the origin's previous report, full): the rows whose
    facts (:func:`report_facts`) changed or that are new, and the peers whose rows were
    dropped (protocol.md 14.1).  None when too many were dropped for one delta."""
    before = {p.peer: _row_facts(p, timing) for p in base.peers}
    changed = []
    for p in report.peers:
        if before.pop(p.peer, None) != _row_facts(p, timing):
            changed.append(p)
    if len(before) > MAX_GONE_ROWS:
        return None
    return replace(report, peers=tuple(changed), base=base.seq, gone=tuple(before))


def merge_report(held: Raws, delta: Raws) -> Raws:
    """The full report that ``delta`` makes of ``held``, the origin's report ``delta.base``
    (protocol.md 14.1), the inverse of :func:`report_delta`: ``held``'s rows, less those
    ``gone``, with the delta's rows in place of (or, new peers, after) the held ones; name,
    type, timing, ``cut_off``, ``forged``, ``ext`` and ``tags`` the delta's; unsigned (no origin signed the
    merged whole: a relay passes on the delta).  Raises LocalProtocolError when the delta
    does not fit ``held`` (another base or origin, a gone peer ``held`` has no row for).
    Decoded rows are merged as the JSON arrays they came in (``CheckedRows.raw``): no
    PeerStat is made of the rows that did not change."""
    if not (delta.base is not None and held.base is None and held.origin == delta.origin
            and held.seq == delta.base):
        raise LocalProtocolError("a delta applies only to the full report it is based on")
    hp, dp = held.peers, delta.peers
    held_rows = hp.raw if type(hp) is CheckedRows else None
    changed_rows = dp.raw if type(dp) is CheckedRows else None
    if held_rows is not None and changed_rows is not None:
        rows = _merged_rows(held_rows, changed_rows, {g.hex() for g in delta.gone}, _ROW_PEER)
        return replace(delta, peers=CheckedRows(rows), base=None, gone=(), key=b"", sig=b"", signed=b"")
    stats = _merged_rows(hp, dp, set(delta.gone), _PEER)
    return replace(delta, peers=tuple(stats), base=None, gone=(), key=b"", sig=b"", signed=b"")


_ROW_PEER: Final = itemgetter(0)  # a decoded row's peer, as hex
_PEER: Final = attrgetter("peer")
_R = TypeVar("_R")


def _merged_rows(held: Iterable[_R], changed: Iterable[_R], gone: set[Any], key: Callable[[_R], Any]) -> list[_R]:
    """``held``'s rows in order, less the ``gone`` keys, each replaced by the ``changed`` row
    of its key if any; then the changed rows of new keys.  Raises LocalProtocolError if a
    gone key has no held row (``gone`` is used up)."""
    by_key = {key(row): row for row in changed}
    out = []
    for row in held:
        k = key(row)
        if k in gone:
            gone.discard(k)
        else:
            out.append(by_key.pop(k, row))
    if gone:
        raise LocalProtocolError("a gone peer has no row in the report the delta is based on")
    out.extend(by_key.values())
    return out


def report_facts(report: Raws, timing: PictureTiming) -> tuple[object, ...]:
    """What :func:`compute` reads of ``report`` (its facts): two reports of one origin with
    the same facts give every node the same picture and digest.  The counters, round trips
    and times beside them are left out but for what crosses a threshold (heard within the
    hear window, a round trip above slow_rtt, a queue above queue_limit) and the addressed
    frames sent and sent again (lossy); the features' facts (``ext``) and the tags, whole; and the
    peers it names departed (a change of one's state is a change of facts: reported at the next heartbeat)."""
    window, slow, limit = timing.hear_window, timing.slow_rtt, timing.queue_limit
    return (
        report.name, report.node_type, report.cut_off, report.forged,
        tuple((p.peer, p.state, p.heard is not None and p.heard <= window, p.rtt is not None and p.rtt > slow,
               p.sent, p.retrans, p.queued > limit) for p in report.peers),
        report.ext, report.tags, report.departed,
    )

