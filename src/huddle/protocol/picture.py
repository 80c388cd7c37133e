"""The system picture: the same view of the whole group on every node.

Every node measures each peer (``PeerStat``: when it last heard from it, the
round trip, messages and octets each way, addressed frames sent and sent
again, octets queued) and publishes that as a RAWS report every
``interval`` seconds.  Reports are flooded: a node keeps the newest report
of every origin and passes a newer one on to its other peers, so a report
crosses the mesh even where a link is open one way only.

:func:`~huddle.protocol.picture_compute.compute` turns a set of reports into the
picture, the same on every node that holds the same reports (protocol/picture_compute.py).
:class:`Pictures` holds this node's reports and describes the picture with the numbers
beside it (round trips, rates: not in the digest).

:class:`Reports` is the peer service (protocol/service.py) that makes this
node's reports from what the mesh measured, publishes them, and keeps and
relays the others'.

Pure: time is passed in, nothing here does I/O.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, cast

import orjson

from ..errors import LocalProtocolError
from ..ids import NodeId
from ..security import key_derived, node_id_for, verify
from ..wire import (
    DEPARTED_STATES,
    MAX_DEPARTED_ROWS,
    MAX_FORGED_ROWS,
    Departed,
    Extensions,
    Message,
    PeerStat,
    Raws,
    extension_problem,
    raws_signed,
    sign_raws,
)
from .events import Counters, Send
from .logchain import LogSigner
from .picture_compute import (
    ADMITTED,
    Picture,
    PictureTiming,
    compute,
    hears,
    link_rtt,
    merge_report,
    report_delta,
    report_facts,
)
from .service import DETACHED, MeshView, PeerFacts, PeerSeen, group_scale

__all__ = ["FORGET_KIND", "REPORT_QUIET", "FeatureFacts", "Pictures", "ReportStats", "Reports", "forgotten_in"]

REPORT_QUIET: Final = 0.2  # seconds without a change of our sessions before a report says so
# The log's event that makes the group forget a failed or left member (protocol.md 14.2):
# body {"node": its uuid in hex, "state": what it was}; its source is the node that asked.
FORGET_KIND: Final = "forget"
# This node's features' facts now, by feature name (huddle/ports.py ``Feature.facts``; None: nothing to say).
FeatureFacts = Callable[[], Mapping[str, object]]


@dataclass(slots=True)
class _Held:
    report: Raws  # full, or merged of the full one and the deltas since
    received: float  # local time
    previous: Raws | None = None  # the full report before ``full`` (rates: counters of one moment)
    full: Raws | None = None  # the last full report received (None: ``report`` is)
    direct: bool = False  # a report of this origin came from the origin itself (not only relayed)
    since: float = 0.0  # local time since which this node holds the origin's reports without a gap


@dataclass(slots=True)
class Pictures:
    """The reports one node holds: its own and the newest of every other origin."""

    uuid: NodeId
    timing: PictureTiming = field(default_factory=PictureTiming)
    _held: dict[NodeId, _Held] = field(default_factory=dict)
    # The last report of each origin whose report expired: what a failed or left member is shown
    # with beside the picture (its ext, timing), until it returns or is forgotten; bounded.
    _lasts: dict[NodeId, Raws] = field(default_factory=dict)
    next_seq: int = 1
    next_report: float = 0.0  # when our next report is due: the earlier of the two below
    _regular: float = 0.0  # the interval's next report
    _changed: float | None = None  # the first change of our sessions not yet reported
    _ended: bool = False  # ... and whether a session ended since the last report
    _last: float = -math.inf  # when we last reported
    members: int = 1  # this node and its admitted peers (the group as our sessions show it)

    def first_report(self, now: float) -> None:
        """Report at ``now`` (a node's first report, when it starts)."""
        self.next_report = self._regular = now

    def quiet(self) -> float:
        """How long our sessions must not have changed before a report says so
        (REPORT_QUIET, scaled as the interval)."""
        return REPORT_QUIET * self.scale()

    def soon_window(self) -> float:
        """The longest a change of our sessions waits to be reported, and the
        shortest time between two reports it brings forward: half an interval,
        scaled as the interval (every member of a group whose sessions keep
        changing reports this often to every other, so this too must grow
        with the group)."""
        return max(REPORT_QUIET, self.timing.interval / 2) * self.scale()

    def sessions_changed(self, now: float, ended: bool = True, slack: float = 0.0) -> None:
        """Our admitted sessions changed (a peer admitted or ended): bring the
        next report forward, within :meth:`soon_window` of the first change not
        yet reported and no sooner than that window after the last report.  A
        session ended since the last report (``ended``) is reported once the
        sessions have not changed for :meth:`quiet` seconds; admissions alone
        wait for the window, less ``slack`` (room for the heartbeat moment it
        then waits for): a newcomer's arrival can wait, a departure is what the
        picture's health is about, and a crowd joining is the commonest burst of
        changes.  A burst makes one report, not one each, and no report waits
        more than the window after the change it shows."""
        window = self.soon_window()
        if self._changed is None:
            self._changed = now
        self._ended = self._ended or ended
        soon = (min(now + self.quiet(), self._changed + window) if self._ended
                else max(now, self._changed + window - slack))
        self.next_report = min(self._regular, max(soon, self._last + window))

    @property
    def last(self) -> float:
        """When we last reported (-inf: never)."""
        return self._last

    def regular_not_before(self, moment: float) -> None:
        """The interval's own next report no sooner than ``moment`` (the group grew since it
        was set: the interval is scaled by the group's size).  Call before
        :meth:`sessions_changed`, which brings the next report forward from it."""
        self._regular = max(self._regular, moment)

    def put_off_to(self, moment: float) -> None:
        """Report at ``moment`` instead (a heartbeat moment, whose BEATs the report then
        replaces) if that is still within the soon window of the first change not yet
        reported and not after the interval's own report: what the window promises holds."""
        if self._changed is not None and self.next_report <= moment <= min(self._regular,
                                                                           self._changed + self.soon_window()):
            self.next_report = moment

    def published(self, now: float, regular: float | None = None) -> None:
        """We reported at ``now``: the next is due at ``regular`` (default: an interval
        later, scaled)."""
        self._last = now
        self._changed = None
        self._ended = False
        self.next_report = self._regular = now + self.timing.interval * self.scale() if regular is None else regular

    def accept(self, report: Raws, now: float, direct: bool = True) -> bool:
        """Keep ``report`` if it is newer than what is held of its origin.
        True if it was (then it should be passed on).  ``direct``: it came from its
        origin (not relayed), as every report of the origin held so far did or not."""
        held = self._held.get(report.origin)
        if held is not None and held.report.seq >= report.seq:
            return False
        previous = None if held is None else held.full or held.report
        self._held[report.origin] = _Held(report, now, previous, None, direct or (held is not None and held.direct),
                                          now if held is None else held.since)
        if held is None:
            self._lasts.pop(report.origin, None)
        return True

    def merge(self, delta: Raws, now: float, direct: bool = True) -> Raws | None:
        """Merge ``delta`` into the report held of its origin, if that is its base, and keep
        the result (returned).  None: the base is not held (nothing kept).  Raises
        LocalProtocolError if the delta does not fit its base."""
        held = self._held.get(delta.origin)
        if held is None or held.report.seq != delta.base:
            return None
        merged = merge_report(held.report, delta)
        self._held[delta.origin] = _Held(merged, now, held.previous, held.full or held.report, direct or held.direct,
                                         held.since)
        return merged

    def received(self, origin: NodeId) -> float:
        """When the report held of ``origin`` was received (-inf: none is held)."""
        held = self._held.get(origin)
        return -math.inf if held is None else held.received

    def holds_newer(self, report: Raws) -> bool:
        """Whether the report held of ``report``'s origin is as new as it or newer."""
        held = self._held.get(report.origin)
        return held is not None and held.report.seq >= report.seq

    def scale(self) -> float:
        """How much longer than ``interval`` reports are apart in a group of
        this size: every node receives every report, so the report traffic
        would grow with the square of the group; past 10 nodes the interval
        grows with it (as RTCP does), and so do the time to expire and the
        soon window.  The size is the larger of the reports held and our
        admitted peers plus one: a node that just joined a large group holds
        few reports yet.  Reports only ever relayed count only while they are
        no more than those that came first-hand: a member that makes up hundreds
        of nodes' reports must not slow every report of the group down (nor keep
        its made-up nodes until a report expires, scaled by their number)."""
        held = self._held
        size = len(held)
        if size > self.members:
            direct = sum(1 for h in held.values() if h.direct)
            size = min(size, 2 * direct)
        return group_scale(size if size > self.members else self.members)

    def expire(self, now: float) -> None:
        limit = self.timing.expire_after * self.scale()
        last = self._lasts
        for origin in [o for o, h in self._held.items() if o != self.uuid and now - h.received > limit]:
            last.pop(origin, None)  # (the newest last: the oldest is the first dropped past the bound)
            last[origin] = self._held.pop(origin).report
            if len(last) > MAX_DEPARTED_ROWS:
                del last[next(iter(last))]

    def unvouched(self) -> list[NodeId]:
        """The origins whose reports only ever came relayed and that no member still vouches
        for (protocol.md 14): a node is vouched for by ours (our admitted peers, as our own
        report lists them) and by the report of every node vouched for, each for the peers
        its report lists with an admitted session.  A report relayed to us speaks of a node we
        cannot check: it is kept only while some node we can reach says it has a session with
        it, so the members a departed node made up leave the picture with it.  A node we had a
        session with is kept until its report expires, as before: it is shown gone, not
        forgotten."""
        held = self._held
        if all(h.direct for h in held.values()):
            return []  # the commonest case by far: a full mesh relays nothing
        own = held.get(self.uuid)
        if own is None:
            return []
        reached = {self.uuid.hex()}
        todo = [own.report]
        by_hex = {o.hex(): h.report for o, h in held.items()}
        while todo:
            for text in todo.pop().hex_peers_in(ADMITTED):
                if text not in reached:
                    reached.add(text)
                    report = by_hex.get(text)
                    if report is not None:
                        todo.append(report)
        return [o for o, h in held.items() if not h.direct and o.hex() not in reached]

    def forget(self, origin: NodeId) -> None:
        self._held.pop(origin, None)
        self._lasts.pop(origin, None)

    def reports(self) -> dict[NodeId, Raws]:
        return {o: h.report for o, h in self._held.items()}

    def picture(self) -> Picture:
        return compute(self.reports(), self.timing)

    def rates(self) -> dict[NodeId, dict[str, float]]:
        """Messages and octets per second in and out of each node, from its
        last two reports (not part of the digest)."""
        out: dict[NodeId, dict[str, float]] = {}
        for origin, h in self._held.items():
            prev, last = h.previous, h.full or h.report  # a delta's rows that did not change keep old counters
            span = (last.seq - prev.seq) / 1000 if prev is not None else 0.0  # seq: the report's time in ms
            totals = _totals(last.peers)
            if prev is None or span <= 0:
                out[origin] = dict.fromkeys(totals, 0.0)
                continue
            before = _totals(prev.peers)
            out[origin] = {k: max(0.0, (v - before[k]) / span) for k, v in totals.items()}
        return out

    def describe(self, now: float) -> dict[str, Any]:
        """The picture, its digest, and the numbers beside it, for the API."""
        pic = self.picture()
        reports = self.reports()
        rates = self.rates()
        members = []
        for m in pic.members:
            n = NodeId.from_hex(m["uuid"])
            held = self._held.get(n)
            r = reports.get(n) or self._lasts.get(n)
            state = m.get("state", "alive")
            beside = {"state": state, "since": self._since(m, reports, held)}
            if r is None:  # named departed by the members, no report of it ever held here
                members.append(m | beside | {"seq": None, "age": None, "beat": None, "lost": None, "cut_off": False,
                                             "hears": [], "rtt_ms": None, "rates": {}, "ext": {}})
                continue
            rtts = [p.rtt for p in r.peers if p.rtt is not None and p.state in ADMITTED and held is not None]
            members.append(m | beside | {
                "seq": r.seq,
                "age": None if held is None else round(now - held.received, 3),
                "beat": r.beat,
                "lost": r.lost,
                "cut_off": r.cut_off,
                "hears": [] if held is None else sorted(str(p.peer) for p in r.peers
                                                         if hears(r, p.peer, self.timing.hear_window)),
                "rtt_ms": round(statistics.median(rtts) * 1000, 3) if rtts else None,
                "rates": {k: round(v, 1) for k, v in rates.get(n, {}).items()},
                "ext": r.ext,  # its features' facts ({}: none), as in the digest when it has any
                "tags": r.tags,  # its tags ({}: none), likewise
            })
        links = []
        for link in pic.links:
            a, b = (NodeId.from_hex(link[k]) for k in ("a", "b"))
            rtt = link_rtt(reports, a, b)
            links.append(link | {"rtt_ms": None if rtt is None else round(rtt * 1000, 3)})
        return {"digest": pic.digest, "members": members, "links": links}

    def _since(self, member: Mapping[str, Any], reports: Mapping[NodeId, Raws], held: _Held | None) -> float | None:
        """Since when ``member`` is in its state (protocol.md 14.2 "Member states"), in seconds
        of the clocks reports' ``seq`` use.  Failed or left: the last time a member heard it, as
        the picture gives it (the same on every node holding the same reports).  Suspect: the
        last time a member that suspects it heard it, by those members' reports.  Alive: since
        this node holds its reports without a gap (its own clock)."""
        if "since" in member:
            return round(int(member["since"]) / 1000, 3)
        if member.get("state") == "suspect":
            uuid = NodeId.from_hex(member["uuid"])
            heard = [r.seq / 1000 - p.heard for r in reports.values() for p in r.peers
                     if p.peer == uuid and p.state == "suspect" and p.heard is not None]
            if heard:
                return round(max(heard), 3)
        return None if held is None else round(held.since, 3)


def _totals(peers: Iterable[Any]) -> dict[str, int]:
    t = {"msgs_in": 0, "msgs_out": 0, "bytes_in": 0, "bytes_out": 0}
    for p in peers:
        t["msgs_in"] += p.msgs_in
        t["msgs_out"] += p.msgs_out
        t["bytes_in"] += p.bytes_in
        t["bytes_out"] += p.bytes_out
    return t


@dataclass(slots=True)
class ReportStats(Counters):
    reports_sent: int = 0  # our own reports, one per admitted peer (the mesh's `sent` counts only its own messages)
    reports_received: int = 0
    reports_relayed: int = 0
    reports_not_relayed: int = 0  # reports not passed on to a peer admitted less than a report interval ago
    reports_unchanged: int = 0  # regular reports not sent: their facts were those of the last one sent (14)
    reports_deltas: int = 0  # of reports_sent, deltas on our previous report (14.1)
    reports_merged: int = 0  # deltas received and merged into the report held of their origin
    reports_unbased: int = 0  # deltas refused: the report held of their origin is not their base
    reports_bad_delta: int = 0  # deltas refused: unsigned and relayed (not from their origin), or not fitting their base
    reports_unsigned: int = 0  # unsigned reports of a key-bound origin (any, with a group secret) refused: relayed (14.1)
    reports_bad_signature: int = 0  # signed reports refused: a key that does not give the origin, or a bad signature
    reports_unvouched: int = 0  # reports dropped: only ever relayed, of a node no member vouches for any more (14)
    facts_left_out: int = 0  # a feature's facts left out of one of our reports: not of the form 14.1 takes, or too big
    forgets: int = 0  # forget events seen in the log (14.2): the node no longer named in our reports
    forgets_refused: int = 0  # forget events whose body names no node: ignored


def forgotten_in(body: str) -> NodeId | None:
    """The node a ``forget`` event's body names (``{"node": uuid-hex, ...}``), or None: it
    names none (any other body, however made, is ignored)."""
    try:
        obj = orjson.loads(body)
        text = obj.get("node") if isinstance(obj, dict) else None
        return NodeId.from_hex(text) if isinstance(text, str) and len(text) == 32 else None
    except ValueError:  # not JSON (orjson bounds the depth too), or not hex
        return None


def _departed_as(reason: str | None) -> str:
    """How a peer whose session ended for ``reason`` is named departed: ``left`` on its GBYE
    (``left``, ``left: why``), ``failed`` otherwise (silence, a cut incarnation, not known)."""
    return "left" if reason is not None and reason.startswith("left") else "failed"


def _no_conn_counters(conn: int) -> tuple[int, int]:
    return 0, 0


def _no_delivery_counters(peer: NodeId) -> tuple[int, int, int]:
    return 0, 0, 0


class Reports:
    """The system picture's peer service: RAWS out every interval (sooner when our
    sessions change), RAWS in kept (:class:`Pictures`) and relayed where needed.

    ``conn_counters`` is the driver's (messages, octets) sent on a connection, and
    ``delivery_counters`` the addressed-delivery service's (frames sent, sent again,
    octets queued) for a peer: what the report says beside what the mesh measured.
    ``features`` gives this node's features' facts, which each report carries in ``ext``
    (protocol.md 14.1): a change of them makes a report (they are among its facts, 14)."""

    handles: tuple[type[Message], ...] = (Raws,)

    def __init__(
        self,
        uuid: NodeId,
        *,
        now: float,
        timing: PictureTiming | None = None,
        conn_counters: Callable[[int], tuple[int, int]] | None = None,
        delivery_counters: Callable[[NodeId], tuple[int, int, int]] | None = None,
        forgeries: Callable[[], Mapping[NodeId, int]] | None = None,
        signer: LogSigner | None = None,
        secure: bool = False,
        features: FeatureFacts | None = None,
    ) -> None:
        self.uuid: Final = uuid
        self._features: Final = features
        self._secure: Final = secure  # a group secret is set: every member's id is key-bound
        # Our reports are signed when our key gives our id (protocol.md 14.1): a key that does
        # not (a legacy id) could prove nothing to a node that is not our peer.
        self._signer: Final = signer if signer is not None and node_id_for(signer.public_key) == uuid else None
        self.pictures: Final = Pictures(uuid, timing or PictureTiming())
        self.pictures.first_report(now)
        self.stats = ReportStats()
        self._conn_counters: Final = conn_counters or _no_conn_counters
        self._delivery_counters: Final = delivery_counters or _no_delivery_counters
        self._forgeries: Final = forgeries
        self._mesh: MeshView = DETACHED
        self._links: dict[NodeId, tuple[int, float]] = {}  # admitted peer -> (conn, when admitted)
        self._hex: dict[NodeId, str] = {}  # admitted peer -> its uuid in hex, as reports' rows give it
        self._actions: list[Send] = []
        self._rng = random.Random(bytes(uuid))  # the spread of report times (deterministic per node)
        self._spread = 1.0  # the last regular report's interval, as a fraction of the scaled interval
        self._scaled_for = 1.0  # ... and the scale it was last set for
        self._facts: tuple[object, ...] | None = None  # of the last report sent
        self._refresh_at = -math.inf  # when a full report goes to every peer, its facts changed or not
        self._sent: Raws | None = None  # the last report we sent (full): the base of the next delta
        self._sent_to: set[NodeId] = set()  # the admitted peers it went to
        self._deltas: set[NodeId] = set()  # admitted peers whose HELO says they understand deltas
        # The peers we lost (protocol.md 14.1 ``departed``): those whose admitted session ended,
        # until our next report says how (local time it ended), then named in every report until
        # they return or are forgotten (bounded: the oldest loss dropped first).
        self._ended: dict[NodeId, float] = {}
        self._departed: dict[NodeId, Departed] = {}
        self._known: dict[NodeId, tuple[str, str]] = {}  # admitted or departed peer -> its HELO's name and type
        self._phases = 0  # the mesh's count of sessions gone suspect or heard again, when last looked at
        self._afresh = 0  # ... and of admitted peers that dialled us afresh

    @property
    def timing(self) -> PictureTiming:
        return self.pictures.timing

    # ------------------------------------------------------------ the service

    def attach(self, mesh: MeshView) -> None:
        self._mesh = mesh

    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts) -> None:
        self._links[peer] = (conn, now)
        self._known[peer] = (facts.name, facts.node_type)
        # Returned (forgotten or not): a member again, and said as soon as a departure is (a
        # member shown failed is what the picture's health is about), not at a newcomer's pace.
        # Still named departed until its own report is held here (:meth:`_lost`): until then the
        # picture, holding no report of it, shows it as it went, rather than not at all.
        returned = peer in self._departed
        returned = self._ended.pop(peer, None) is not None or returned
        self._hex[peer] = peer.hex()
        self._sent_to.discard(peer)  # it holds none of our reports: the next one it gets is full
        if facts.deltas:
            self._deltas.add(peer)
        else:
            self._deltas.discard(peer)
        self.pictures.members = len(self._links) + 1
        self._facts = None  # the next report goes out whatever it says: the newcomer holds none of ours
        self._sessions_changed(now, ended=returned)

    def peer_down(self, peer: NodeId, now: float) -> None:
        self._sent_to.discard(peer)
        if self._links.pop(peer, None) is not None:
            self._ended[peer] = now
            del self._hex[peer]
            self._deltas.discard(peer)
            self.pictures.members = len(self._links) + 1
            self._sessions_changed(now)

    def _sessions_changed(self, now: float, ended: bool = True) -> None:
        # The report a change brings forward goes on the heartbeat moment after it falls due, as a
        # regular report does (protocol.md 14), when that is still within the soon window.
        pictures = self.pictures
        # The group grew: so does the interval of the next regular report (a node's first report,
        # made alone, would otherwise come an unscaled interval later, amid the crowd joining).
        scale = pictures.scale()
        if scale > self._scaled_for and pictures.last > -math.inf:
            self._scaled_for = scale
            span = pictures.timing.interval * scale * self._spread
            pictures.regular_not_before(self._mesh.heartbeat_after(pictures.last + span))
        pictures.sessions_changed(now, ended, self._mesh.beat)
        pictures.put_off_to(self._mesh.heartbeat_after(pictures.next_report))

    def forget(self, peer: NodeId) -> None:
        self.pictures.forget(peer)

    def departed_state(self, peer: NodeId) -> str | None:
        """``failed`` or ``left`` if the picture shows ``peer`` so (None: it does not: a member
        alive or suspect, or none): what may be forgotten (:meth:`forget_member`)."""
        for m in self.pictures.picture().members:
            if m["uuid"] == str(peer):
                state = m.get("state")
                return state if state in DEPARTED_STATES else None
        return None

    def lost_peers(self) -> dict[NodeId, Departed]:
        """The peers we lost and still name (our ``departed``), those whose session ended since
        our last report included (since: when it ended, until that report says when we last
        heard it): this node's own view, for its peer list."""
        out = {d.peer: d for d in self._departed.values() if d.peer not in self._links}
        for peer, ended in self._ended.items():
            name, node_type = self._known.get(peer, ("", ""))
            out[peer] = Departed(peer, _departed_as(self._mesh.departure(peer)), max(1, int(ended * 1000)),
                                 name, node_type)
        return out

    def forget_event(self, body: str, now: float) -> bool:
        """A ``forget`` event's body (:data:`FORGET_KIND`), from the log: the node it names
        forgotten here (:meth:`forget_member`), counted; a body that names none, counted refused."""
        peer = forgotten_in(body)
        if peer is None or peer == self.uuid:
            self.stats.forgets_refused += 1
            return False
        self.stats.forgets += 1
        return self.forget_member(peer, now)

    def forget_member(self, peer: NodeId, now: float) -> bool:
        """The group forgot ``peer`` (a ``forget`` event in its log, protocol.md 14.2): our
        reports name it no more, and its last report is dropped, until it returns.  True if we
        named it (our next report is brought forward: the others see it go within the window)."""
        named = self._departed.pop(peer, None) is not None or self._ended.pop(peer, None) is not None
        if peer not in self._links:
            self._known.pop(peer, None)
            self.pictures.forget(peer)
        if named:
            self._sessions_changed(now)
        return named

    def receive(self, peer: NodeId, msg: Message, now: float) -> None:
        assert isinstance(msg, Raws)
        self.stats.reports_received += 1
        mesh = self._mesh
        if msg.origin == self.uuid or msg.origin in mesh.excluded or self.pictures.holds_newer(msg):
            return  # (one not newer than the one held: nothing to check, nothing recorded)
        first_hand = peer == msg.origin
        if not first_hand and not self._authentic(msg):
            return
        kept = (self._merge(msg, now, first_hand) if msg.base is not None
                else msg if self.pictures.accept(msg, now, first_hand) else None)
        # An unsigned report of a key-bound origin (an older node's) is good only first-hand: not passed on.
        if kept is not None and (msg.sig or not key_derived(msg.origin)):
            # Pass it on only to peers that the report says its origin has no
            # session with: in a full mesh nobody relays; across a link open
            # one way, or a partial partition, the report still arrives.  Not to
            # a peer admitted less than an interval (scaled) ago: the report most
            # likely predates it, and its origin meets it and reports within the
            # soon window (half that); relayed by every member, a crowd joining
            # cost N^3 rows.
            direct = kept.hex_peers_in(ADMITTED)  # as text: no NodeId made of every row of every report
            settled = now - self.pictures.timing.interval * self.pictures.scale()
            relayed: Raws | None = None
            for uuid, text in self._hex.items():
                if text not in direct and uuid not in (peer, msg.origin):
                    conn, joined = self._links[uuid]
                    if joined > settled:
                        self.stats.reports_not_relayed += 1
                        continue
                    if relayed is None and first_hand and msg.sig and not self._authentic(msg):
                        return  # taken on its session's word, but passed on only as it can be checked
                    # Signed: as received, full or delta, the origin's octets and signature (a delta's
                    # receiver holds its base as we do, or refuses it until the next full report).
                    # Unsigned (a legacy id's, open mode): full, a delta merged, as before.
                    relayed = relayed or replace(msg if msg.sig else kept, sender=self.uuid)
                    self.stats.reports_relayed += 1
                    self._actions.append(Send(conn, relayed))

    def _authentic(self, msg: Raws) -> bool:
        """Whether ``msg``, relayed, speaks for its origin (protocol.md 14.1): signed by the key
        that gives the origin's id; or, in open mode, an unsigned full report of a legacy id
        (which no key gives: as its log records, 12.5, it cannot be checked, and travels as
        before).  Counted otherwise.  (From the origin's own session a report is taken on the
        session's word, as everything else it says, signed or not: checked only to be passed on.)"""
        origin = msg.origin
        if not msg.sig:
            if self._secure or key_derived(origin):
                self.stats.reports_unsigned += 1
            elif msg.base is None:
                return True
            else:  # relays send an unsigned report full: a delta passed on is nobody's to make
                self.stats.reports_bad_delta += 1
            return False
        if not key_derived(origin) or node_id_for(msg.key) != origin or not verify(msg.key, raws_signed(msg), msg.sig):
            self.stats.reports_bad_signature += 1
            return False
        return True

    def _merge(self, delta: Raws, now: float, direct: bool) -> Raws | None:
        """A delta received (protocol.md 14.1): merged into the report held of its origin if that
        is its base; refused, nothing kept, and counted otherwise."""
        pictures = self.pictures
        try:
            merged = pictures.merge(delta, now, direct)
        except LocalProtocolError:  # a gone peer the base has no row for
            self.stats.reports_bad_delta += 1
            return None
        if merged is None:
            self.stats.reports_unbased += 1
            return None
        self.stats.reports_merged += 1
        return merged

    def tick(self, now: float) -> None:
        pictures = self.pictures
        phases = self._mesh.phase_changes
        if phases != self._phases:  # a session went suspect or was heard again: a row's state changed
            self._phases = phases
            self._sessions_changed(now)
        afresh = self._mesh.dialled_afresh
        if afresh != self._afresh:
            # A peer lost our session (we were frozen, or cut off from it) and dialled us afresh: it
            # holds none of our reports, nor, most likely, do the others (ours expired there).  The
            # next report goes full, to every peer, and soon, as a departure's does: which peer it
            # was is the mesh's to know, and this is rare.
            self._afresh = afresh
            self._sent_to.clear()
            self._facts = None
            self._sessions_changed(now)
        if now < pictures.next_report:
            return
        # The next regular report: an interval (scaled) from now, give or take a tenth at random, so
        # the group's reports spread over time instead of coming in step; then put off to the next
        # heartbeat, which it replaces (protocol.md 14): it costs the peers no wake-up of its own.
        timing, scale = pictures.timing, pictures.scale()
        self._spread, self._scaled_for = 0.9 + 0.2 * self._rng.random(), scale
        span = timing.interval * scale * self._spread
        pictures.published(now, self._mesh.heartbeat_after(now + span))
        pictures.expire(now)
        report = self.report(now)
        pictures.accept(report, now)  # ours, sent or not: its numbers are the freshest beside the picture
        for origin in pictures.unvouched():  # after ours: it lists our sessions as they are now
            pictures.forget(origin)
            self.stats.reports_unvouched += 1
        facts = report_facts(report, timing)
        full = now >= self._refresh_at
        if facts == self._facts and not full:
            # Nothing the picture is computed from changed: the peers' copy of our last report
            # gives them the same picture.  Only the numbers beside it would be newer.
            self.stats.reports_unchanged += 1
            return
        self._facts = facts
        # A peer that got our last report gets only what changed since (if it understands deltas);
        # a newcomer, and every peer every refresh (scaled), the full report (protocol.md 14.1).
        base, sent_to, deltas, links = self._sent, self._sent_to, self._deltas, self._links
        delta = None if full or base is None else report_delta(base, report, timing)
        signer = self._signer
        if delta is not None and signer is not None:
            delta = sign_raws(delta, signer.public_key, signer.sign)
        fulls = []
        if delta is None:
            self._refresh_at = now + timing.refresh * scale
            fulls = list(links.values())
        else:
            for uuid, link in links.items():
                if uuid in sent_to and uuid in deltas:
                    self._actions.append(Send(link[0], delta))  # one after the other: encoded once
                    self.stats.reports_deltas += 1
                else:
                    fulls.append(link)
        if fulls and signer is not None:
            report = sign_raws(report, signer.public_key, signer.sign)
        for conn, _ in fulls:
            self._actions.append(Send(conn, report))
        self.stats.reports_sent += len(links)
        self._sent, self._sent_to = report, set(links)

    def next_deadline(self, now: float) -> float:
        return self.pictures.next_report

    def take_actions(self) -> Sequence[Send]:
        if not self._actions:
            return ()  # asked after every message the node handles: nothing allocated when idle
        actions, self._actions = self._actions, []
        return actions

    # ------------------------------------------------------------ the report

    def report(self, now: float) -> Raws:
        """This node's raw statistics now, as a RAWS report."""
        mesh = self._mesh
        rows = []
        seen = mesh.seen(now, 2 * self.pictures.timing.hear_window)
        if self._ended or self._departed:
            self._lost(now, seen)
        for p in seen:
            msgs_out, bytes_out = (0, 0) if p.conn is None else self._conn_counters(p.conn)
            sent, resent, queued = self._delivery_counters(p.uuid)
            rows.append(PeerStat(
                p.uuid,
                heard=None if p.heard is None else round(max(0.0, now - p.heard), 3),
                rtt=p.rtt, state=p.state,
                msgs_in=p.msgs_in, msgs_out=msgs_out, bytes_in=p.bytes_in, bytes_out=bytes_out,
                sent=sent, retrans=resent, queued=queued,
            ))
        seq = max(self.pictures.next_seq, int(now * 1000))  # ms of the local clock: still rising after a restart
        self.pictures.next_seq = seq + 1
        forged = () if self._forgeries is None else tuple(sorted(self._forgeries().items()))[:MAX_FORGED_ROWS]
        return Raws(
            sender=self.uuid, origin=self.uuid, seq=seq, name=mesh.name, node_type=mesh.node_type,
            beat=float(mesh.beat), lost=mesh.lost, cut_off=mesh.cut_off, peers=tuple(rows), forged=forged,
            ext=self._extensions(), tags=dict(mesh.tags), departed=self._named_departed(mesh.excluded),
        )

    def _lost(self, now: float, seen: Sequence[PeerSeen]) -> None:
        """The peers whose sessions ended since our last report, named departed from now on:
        ``left`` if the session ended on its GBYE, else ``failed``; since we last heard it."""
        departed = self._departed
        for peer in [p for p in departed if p in self._links]:  # returned: named no more once its report is here
            if self.pictures.received(peer) >= self._links[peer][1]:
                del departed[peer]
        if not self._ended:
            return
        heard = {p.uuid: p.heard for p in seen if p.heard is not None}
        for peer, ended in self._ended.items():
            reason = self._mesh.departure(peer)
            name, node_type = self._known.get(peer, ("", ""))
            last = heard.get(peer, ended)
            departed.pop(peer, None)  # (the newest last: the oldest is the first dropped past the bound)
            departed[peer] = Departed(peer, _departed_as(reason), max(1, int(last * 1000)), name, node_type)
        self._ended.clear()
        while len(departed) > MAX_DEPARTED_ROWS:
            self._known.pop(next(iter(departed)), None)
            del departed[next(iter(departed))]

    def _named_departed(self, excluded: Container[NodeId]) -> tuple[Departed, ...]:
        """The departed our report names: the excluded left out (as from its rows)."""
        return tuple(d for d in self._departed.values() if d.peer not in excluded)

    def _extensions(self) -> Extensions:
        """Our features' facts for our report (protocol.md 14.1 ``ext``), by feature name: each
        feature's whose facts are of the form every receiver takes, as long as the whole stays
        within its bounds; one that is not, or does not fit, is left out (``facts_left_out``),
        the others still go.  A node's report must never be one its peers refuse."""
        if self._features is None:
            return {}
        ext: Extensions = {}
        for name, facts in sorted(self._features().items()):
            if facts is None:
                continue
            wider: dict[str, object] = {**ext, name: dict(facts) if isinstance(facts, Mapping) else facts}
            if extension_problem(wider) is None:
                ext = cast(Extensions, wider)  # checked: of the form it names
            else:
                self.stats.facts_left_out += 1
        return ext
