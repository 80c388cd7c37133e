"""A simulated bout, planned: every write five officials' devices make during a roller-derby
bout, from a seeded random generator (docs/demo.md, "The simulated bout").

Pure: no I/O, no clock.  :func:`plan_bout` returns the writes in the order they are made,
each with its time (seconds from the bout's start), the device that makes it, the role it
writes as (``?role=ROLE``) and its document operations (docs/document.md); :mod:`.play`
sends them to real nodes.  The same seed gives the same bout, operation for operation.

The bout follows the WFTDA's shape and the document's rules, so every operation of a plan
is accepted (the tests apply a whole bout and count no refusal):

- the head NSO sets up the bout: teams (names, leagues, colours), two 14-skater rosters,
  the officials' roster;
- per period, jams until the period clock (1800 s, stopped in timeouts) runs out during a
  jam, or a given number of jams; a lineup of 30 s before each jam; each jam up to 120 s,
  called off by the lead jammer's team (its length then 20 to 120 s);
- per jam and team: a lineup of five (jammer, pivot, three blockers) from the roster, the
  lead (or none), trips of 0 to 4 points after the initial one, now and then a star pass
  to the pivot or a lost lead;
- penalties with WFTDA codes on skaters of the jam's lineup, each with its box entry (in,
  then 30 s later out);
- team timeouts, an official timeout, an official review, between jams;
- corrections: a scorekeeper fixes a trip's points after the jam (and, every period, in
  its last jam, at least once), the head NSO fixes a penalty's code;
- each period's start and end, the halftime, and the head NSO's sign-off and final.

The document's times (a jam's ``start``, a penalty's ``time``, a box's ``in`` and
``out``) are ``t0`` plus the bout's own seconds: a bout played faster than life (the
driver's speed) still records jams of realistic length.
"""

from __future__ import annotations

import math
import random
import uuid
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "DEVICES", "HALFTIME", "JAM_SECONDS", "LINEUP_SECONDS", "PERIOD_SECONDS", "Device", "Write", "plan_bout",
]

PERIOD_SECONDS: Final = 1800.0  # a period's clock: 30 minutes
JAM_SECONDS: Final = 120.0  # a jam's longest
LINEUP_SECONDS: Final = 30.0  # between jams
TIMEOUT_SECONDS: Final = 60.0  # a team or official timeout, an official review
HALFTIME: Final = 900.0  # the document's default halftime
BOX_SECONDS: Final = 30.0  # a penalty's time in the box
ROSTER: Final = 14  # skaters per team
# The chance of a trip's points, 0 to 4 (most trips pass most blockers).
_TRIP_WEIGHTS: Final = (22, 16, 20, 20, 22)
# Penalty codes as often as leagues see them (multiplayer and misconduct rarely).
_CODES: Final = {"B": 10, "C": 8, "D": 3, "E": 2, "F": 5, "G": 1, "H": 3, "I": 6, "L": 4, "M": 2, "N": 3, "P": 6,
                 "X": 8, "A": 2}
_TEAMS: Final = {
    "home": ("Rainy City Rollers", "Rainy City Roller Derby", "green"),
    "away": ("Steel Valley Vixens", "Steel Valley Roller Derby", "orange"),
}
_NAMES: Final = ("Ada Blockwell", "Bea Bruiser", "Cat Astrophe", "Dee Stroyer", "Eve Ilution", "Fay Tality",
                 "Gin Tonic", "Hel Cat", "Ivy Poison", "Jo Kerr", "Kit Kaboom", "Lu Natic", "Mo Mentum", "Nell Gun",
                 "Ola Vator", "Pip Squeak", "Quinn Tessential", "Roxy Riot", "Sal Vo", "Tess Tosterone")


@dataclass(frozen=True)
class Device:
    """An official's device: its name and the roles it writes as (the first is its own)."""

    name: str
    roles: tuple[str, ...]


# Five devices, as a small crew runs a bout: the jam timer's device is the head NSO's too (setup,
# reviews, the sign-off); the penalty tracker times the box as well; one lineup tracker does both teams.
DEVICES: Final = (
    Device("jam-timer", ("jam-timer", "head-nso")),
    Device("scorekeeper-home", ("scorekeeper-home",)),
    Device("scorekeeper-away", ("scorekeeper-away",)),
    Device("penalty-tracker", ("penalty-tracker", "penalty-box-timer")),
    Device("lineup-tracker", ("lineup-tracker-home", "lineup-tracker-away")),
)
_DEVICE_OF: Final = {role: d.name for d in DEVICES for role in d.roles}
# The officials' roster the setup writes (the head NSO's name signs the result).
HEAD_NSO: Final = "Nia Soh"
_OFFICIALS: Final = ((HEAD_NSO, "head-nso"), ("Ref Erie", "head-referee"), ("Tim Keeper", "jam-timer"),
                     ("Sam Score", "scorekeeper"), ("Sue Score", "scorekeeper"), ("Pen Tracy", "penalty-tracker"),
                     ("Box Bonnie", "penalty-box-timer"), ("Lin Tracker", "lineup-tracker"))


@dataclass(frozen=True)
class Write:
    """One request of one device: ``POST /api/v1/doc/ops?role=ROLE`` with ``ops``, made ``at``
    seconds after the bout's start.  ``settle``: the driver waits, after it, until every
    node holds the same bout (the setup before play, the sign-off at the end)."""

    at: float
    device: str
    role: str
    ops: tuple[dict[str, Any], ...]
    what: str
    settle: bool = False


@dataclass
class _Jam:
    period: int
    number: int
    start: float
    duration: float
    lineups: dict[str, list[str]] = field(default_factory=dict)  # team -> jammer, pivot, blockers


class _Planner:
    """Builds the writes in time order (sorted at the end: writes within a jam interleave)."""

    def __init__(self, seed: int, t0: float) -> None:
        self.rng = random.Random(seed)
        self.t0 = t0
        self.writes: list[tuple[float, int, Write]] = []
        self.rosters: dict[str, list[str]] = {}
        self.timeouts = dict.fromkeys(_TEAMS, 0)
        self.penalties: list[tuple[str, str]] = []  # eid, code
        self.trips_of: dict[tuple[int, int, str], list[tuple[str, int]]] = {}  # (period, jam, team) -> eid, points

    def eid(self) -> str:
        return str(uuid.UUID(int=self.rng.getrandbits(128), version=4))

    def stamp(self, at: float) -> str:
        """A document time: the mesh time ``at`` bout seconds after ``t0``."""
        return f"{self.t0 + at:.3f}"

    def write(self, at: float, role: str, what: str, *ops: dict[str, Any], settle: bool = False) -> None:
        self.writes.append((at, len(self.writes), Write(round(at, 3), _DEVICE_OF[role], role, ops, what, settle)))

    def setup(self) -> None:
        ops: list[dict[str, Any]] = [
            _set({"path": "bout"}, "name", "Rainy City vs Steel Valley"),
            _set({"path": "bout"}, "date", "2026-11-28"),
            _set({"path": "venue"}, "name", "The Rink"), _set({"path": "venue"}, "city", "Manchester"),
        ]
        for team, (name, league, color) in _TEAMS.items():
            for attr, value in (("name", name), ("league", league), ("color", color)):
                ops.append(_set({"team": team}, attr, value))
            numbers = sorted(self.rng.sample(range(1, 1000), ROSTER), key=str)
            self.rosters[team] = [str(n) for n in numbers]
            names = self.rng.sample(_NAMES, ROSTER)
            people = [{"tag": "person", "attrs": {"number": n, "name": who,
                                                  "role": "captain" if i == 0 else "skater"}}
                      for i, (n, who) in enumerate(zip(self.rosters[team], names, strict=True))]
            ops.append({"op": "add", "to": {"team": team}, "children": people})
        ops.append({"op": "add", "to": {"team": "official"},
                    "children": [{"tag": "person", "attrs": {"name": n, "role": r}} for n, r in _OFFICIALS]})
        self.write(0.0, "head-nso", "teams, rosters and officials", *ops, settle=True)

    def period(self, number: int, start: float, jams: int | None) -> float:
        """Plan a period from ``start``; returns when its last jam ends."""
        self.write(start, "jam-timer", f"period {number} starts",
                   _set({"period": number}, "start", self.stamp(start)))
        clock = 0.0  # the period clock: runs in lineups and jams, not in timeouts
        now, end, j = start, start, 0
        while True:
            j += 1
            remaining = PERIOD_SECONDS - clock
            lineup = LINEUP_SECONDS if jams is not None else min(LINEUP_SECONDS, remaining / 2)
            jam = _Jam(number, j, now + lineup, 0.0)
            self.lineups(jam, now)
            called = self.rng.random() < 0.75
            jam.duration = round(self.rng.triangular(15.0, JAM_SECONDS, 45.0), 1) if called else JAM_SECONDS
            clock += lineup
            last = (j == jams) if jams is not None else clock + jam.duration >= PERIOD_SECONDS
            if last:  # the period clock runs out during this jam (docs/document.md, "What jam are we on?")
                end = jam.start + (jam.duration / 2 if jams is not None else PERIOD_SECONDS - clock)
            self.jam(jam, called)
            clock += jam.duration
            now = jam.start + jam.duration
            if last:
                break
            now = self.between(jam, now)
        self.correct_last_trip(number, j, now)
        self.write(now + 1.0, "jam-timer", f"period {number} ends",
                   _set({"period": number}, "duration", f"{end - start:.3f}"))
        return now + 1.0

    def lineups(self, jam: _Jam, now: float) -> None:
        for team in _TEAMS:
            five = self.rng.sample(self.rosters[team], 5)
            jam.lineups[team] = five
            at = now + self.rng.uniform(2.0, 8.0)
            for position, n in zip(("jammer", "pivot", "blocker", "blocker", "blocker"), five, strict=True):
                at += self.rng.uniform(0.5, 3.0)  # a skater at a time, as the lineup page records them
                self.write(at, f"lineup-tracker-{team}", f"{team} {position} {n}, period {jam.period} jam {jam.number}",
                           {"op": "add", "to": _jam(jam),
                            "children": [{"tag": "lineup", "attrs": {"team": team, "position": position, "number": n}}]})

    def jam(self, jam: _Jam, called: bool) -> None:
        to, start, end = _jam(jam), jam.start, jam.start + jam.duration
        self.write(start, "jam-timer", f"period {jam.period} jam {jam.number} starts",
                   _set(to, "start", self.stamp(start)))
        lead = self.rng.choice(("home", "away")) if self.rng.random() < 0.92 else None
        lost = lead is not None and self.rng.random() < 0.08
        if lead is not None:
            self.write(start + self.rng.uniform(4.0, 12.0), f"scorekeeper-{lead}", f"{lead} lead jammer",
                       _set(to, "lead", lead))
            if lost:
                self.write(start + self.rng.uniform(14.0, 20.0), f"scorekeeper-{lead}", f"{lead} lost lead",
                           _set(to, "lost", lead))
        for team in _TEAMS:
            self.trips(jam, team, start + self.rng.uniform(10.0, 16.0), end)
        self.write(end, "jam-timer", f"period {jam.period} jam {jam.number} ends",
                   _set(to, "duration", f"{jam.duration:.3f}"))
        if called and lead is not None and not lost:
            self.write(end + 1.0, f"scorekeeper-{lead}", f"{lead} called the jam off", _set(to, "called", lead))
        for _ in range(self._poisson(1.1)):
            self.penalty(jam, self.rng.uniform(start, end))

    def trips(self, jam: _Jam, team: str, first: float, end: float) -> None:
        """The team's scoring trips: one every 14 to 24 s after the initial trip (which scores nothing)."""
        jammer, pivot = jam.lineups[team][0], jam.lineups[team][1]
        scorer = jammer
        star = self.rng.random() < 0.05
        at, trip, eids = first, 1, []
        while True:
            at += self.rng.uniform(14.0, 24.0)
            if at >= end:
                break
            trip += 1
            if star and scorer == jammer and self.rng.random() < 0.5:
                scorer = pivot
                self.write(at - 3.0, f"scorekeeper-{team}", f"{team} star pass to the pivot",
                           {"op": "add", "to": _jam(jam),
                            "children": [{"tag": "starpass", "attrs": {"team": team, "trip": str(trip),
                                                                        "number": pivot}}]})
            points = self.rng.choices(range(5), _TRIP_WEIGHTS)[0]
            eid = self.eid()
            eids.append((eid, points))
            self.write(at, f"scorekeeper-{team}", f"{team} trip {trip}: {points}",
                       {"op": "add", "to": _jam(jam), "children": [{"tag": "points", "eid": eid, "attrs": {
                           "team": team, "pass": str(trip), "points": str(points), "number": scorer}}]})
        if eids and self.rng.random() < 0.06:  # a trip fixed after the jam, by the team's scorekeeper
            eid, points = self.rng.choice(eids)
            self._fix(eid, points, team, end + 3.0)
        self.trips_of[(jam.period, jam.number, team)] = eids

    def _fix(self, eid: str, points: int, team: str, at: float) -> None:
        fixed = (points + self.rng.randint(1, 4)) % 5
        self.write(at, f"scorekeeper-{team}", f"{team} fixes a trip: {points} -> {fixed}",
                   _set({"eid": eid}, "points", str(fixed)))

    def correct_last_trip(self, period: int, jam: int, at: float) -> None:
        """Every period, the scorekeeper of the team with the most trips in the last jam that had
        any fixes the last of them (so even a short bout has a correction)."""
        for j in range(jam, 0, -1):
            trips = {team: self.trips_of.get((period, j, team), []) for team in _TEAMS}
            team = max(_TEAMS, key=lambda t: (len(trips[t]), t == "home"))
            if trips[team]:
                eid, points = trips[team][-1]
                self._fix(eid, points, team, at + 0.5)
                return

    def penalty(self, jam: _Jam, at: float) -> None:
        team = self.rng.choice(("home", "away"))
        skater = self.rng.choice(jam.lineups[team])
        code = self.rng.choices(list(_CODES), list(_CODES.values()))[0]
        eid = self.eid()
        self.write(at, "penalty-tracker", f"{team} {skater} penalty {code}",
                   {"op": "add", "to": _jam(jam), "children": [{"tag": "penalty", "eid": eid, "attrs": {
                       "team": team, "number": skater, "code": code, "time": self.stamp(at)}}]})
        self.penalties.append((eid, code))
        box, seated = self.eid(), at + self.rng.uniform(3.0, 8.0)
        self.write(seated, "penalty-box-timer", f"{team} {skater} in the box",
                   {"op": "add", "to": _jam(jam), "children": [{"tag": "box", "eid": box, "attrs": {
                       "team": team, "number": skater, "in": self.stamp(seated)}}]})
        self.write(seated + BOX_SECONDS, "penalty-box-timer", f"{team} {skater} out of the box",
                   _set({"eid": box}, "out", self.stamp(seated + BOX_SECONDS)))

    def between(self, jam: _Jam, now: float) -> float:
        """Timeouts after a jam: the first jam of period 1 a home team timeout, of period 2 an
        official review by the away team; after the second jam of period 1 an official timeout;
        now and then a team timeout more (three per team at most).  Returns when the next lineup starts."""
        taken: list[tuple[str, str | None]] = []
        if jam.number == 1:
            taken.append(("team", "home") if jam.period == 1 else ("review", "away"))
        if jam.period == 1 and jam.number == 2:
            taken.append(("official", None))
        elif jam.number > 2 and self.rng.random() < 0.06:
            taken.append(("team", self.rng.choice(("home", "away"))))
        for kind, team in taken:
            if kind == "team" and team is not None:
                if self.timeouts[team] >= 3:
                    continue
                self.timeouts[team] += 1
            attrs = {"kind": kind, "time": self.stamp(now + 2.0)} | ({} if team is None else {"team": team})
            role = "jam-timer"
            if kind == "review":
                attrs["result"] = self.rng.choice(("retained", "lost"))
                role = "head-nso"
            self.write(now + 2.0, role, f"{kind} timeout" + (f" ({team})" if team else ""),
                       {"op": "add", "to": {"period": jam.period}, "children": [{"tag": "timeout", "attrs": attrs}]})
            now += TIMEOUT_SECONDS
        return now

    def fix_penalty(self, at: float) -> None:
        """The head NSO fixes the code of a penalty the penalty tracker recorded."""
        if self.penalties:
            eid, code = self.rng.choice(self.penalties)
            fixed = self.rng.choice(sorted(set(_CODES) - {code}))
            self.write(at, "head-nso", f"a penalty's code fixed: {code} -> {fixed}", _set({"eid": eid}, "code", fixed))

    def sign(self, at: float) -> None:
        self.write(at, "head-nso", "the head NSO signs the result: final",
                   _set({"path": "bout"}, "signed", HEAD_NSO), _set({"path": "bout"}, "status", "final"), settle=True)

    def _poisson(self, mean: float) -> int:
        n, p, limit = 0, 1.0, math.exp(-mean)  # Knuth's: multiply uniforms until below e^-mean
        while True:
            p *= self.rng.random()
            if p < limit:
                return n
            n += 1

    def done(self) -> list[Write]:
        return [w for _, _, w in sorted(self.writes, key=lambda t: (t[0], t[1]))]


def _set(to: dict[str, Any], attribute: str, value: str) -> dict[str, Any]:
    return {"op": "set", "to": to, "attribute": attribute, "value": value}


def _jam(jam: _Jam) -> dict[str, int]:
    return {"period": jam.period, "jam": jam.number}


def plan_bout(seed: int, *, jams: int | None = None, t0: float = 0.0) -> list[Write]:
    """The bout's writes in time order.  ``jams``: jams per period (None: as many as the
    period clock allows, a full bout of about 5000 operations); ``t0``: the mesh time the
    bout starts at (the document's times count from it)."""
    if jams is not None and jams < 1:
        raise ValueError(f"a period has at least one jam, not {jams}")
    p = _Planner(seed, t0)
    p.setup()
    first = 60.0  # the teams line up a minute after the setup
    halfway = p.period(1, first, jams)
    end = p.period(2, halfway + HALFTIME, jams)
    p.fix_penalty(end + 1.0)
    p.sign(end + 5.0)
    return p.done()

