"""A huddle bout as the game file CRG ScoreBoard saves (docs/crg.md, "From huddle to CRG").

:func:`export_crg` reads the document (doc/model.py) and its summary (doc/summary.py) and
returns ``{"state": {path: value}}``, the shape of CRG's game file (its JSONStateSnapshotter
writes the game's keys under ``"state"``, the same map its WebSocket pushes).  The keys are
5.x's, one game at ``ScoreBoard.Game(ID)``; the game's id is the bout's eid, the same on
every node, and the other ids are the eids of the elements they come from (a skater's is its
roster entry's), so two nodes export the same file from the same events.  Values are what
CRG writes: booleans and whole numbers as JSON values, references as the referred object's
id, times in milliseconds (wall-clock times since the epoch: the document's mesh times).
Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Final

from ..doc.engine import jams
from ..doc.model import Element, derived_eid
from ..doc.rules import SIDES
from .paths import FLAG_OF_ROLE, OFFICIAL_ROLE_NAMES, ms_of_seconds

__all__ = ["VERSION", "export_crg", "game_id", "team_number"]

# The release the file claims: CRG reads a file of an older release by renaming its keys
# (its ScoreBoardJSONSetter.updateToCurrentVersion); these keys are 5.0's.
VERSION: Final = "v5.0.0"
_REFEREES: Final = frozenset({"head-referee", "inside-pack-referee", "outside-pack-referee", "jammer-referee",
                              "alternate-referee"})
_BLOCKER_SLOTS: Final = ("Blocker1", "Blocker2", "Blocker3")


def game_id(document: Element) -> str:
    """The game's id in CRG's paths: the bout's eid (fixed: the same on every node)."""
    return document.eid


def team_number(side: str) -> int:
    return 1 if side == "home" else 2


class _Skaters:
    """The CRG skaters of both teams: the roster's, and one made up for a number the document
    names that its team's roster does not hold (a lineup or penalty before a roster was set)."""

    def __init__(self, document: Element) -> None:
        self.ids: dict[tuple[str, str], str] = {}  # (side, number) -> skater id
        self.entries: dict[str, list[tuple[str, dict[str, Any]]]] = {side: [] for side in SIDES}
        for team in document.children:
            side = team.attrs.get("type", "")
            if team.tag != "team" or side not in SIDES:
                continue
            for p in team.children:
                if p.tag != "person":
                    continue
                number = p.attrs.get("number", "")
                fields: dict[str, Any] = {"RosterNumber": number, "Name": p.attrs.get("name", ""),
                                          "Flags": FLAG_OF_ROLE.get(p.attrs.get("role", ""), "")}
                self.entries[side].append((p.eid, fields))
                if number:
                    self.ids.setdefault((side, number), p.eid)

    def of(self, side: str, number: str) -> str:
        sid = self.ids.get((side, number))
        if sid is None:
            sid = self.ids[(side, number)] = derived_eid(f"crg/skater/{side}/{number}")
            self.entries[side].append((sid, {"RosterNumber": number, "Name": "", "Flags": ""}))
        return sid


def export_crg(document: Element, summary: dict[str, Any]) -> dict[str, Any]:
    """The bout as CRG's game file (the module docstring)."""
    return {"state": _Export(document, summary).state}


class _Export:
    """One export: the state made so far, and what the teams gather while the periods are read
    (CRG keeps penalties under their skater and box trips under their team)."""

    def __init__(self, document: Element, summary: dict[str, Any]) -> None:
        self.gid = gid = game_id(document)
        g = f"ScoreBoard.Game({gid})"
        self.state: dict[str, Any] = {"ScoreBoard.Version(release)": VERSION}
        self.body: dict[str, Any] = {}  # the periods' keys, relative to the game: written after the teams
        self.skaters = _Skaters(document)
        self.penalties: dict[str, list[tuple[str, dict[str, Any]]]] = {}  # skater id -> its penalties
        self.boxes: dict[str, list[tuple[str, dict[str, Any]]]] = {side: [] for side in SIDES}
        periods = [e for e in document.children if e.tag == "period"]
        for period in periods:
            self._period(period)
        a = document.attrs
        final = a.get("status") == "final"
        started = any(j.attrs.get("start") for p in periods for j in p.children if j.tag == "jam")
        state = self.state
        state.update({
            f"{g}.Id": gid, f"{g}.Name": a.get("name", ""),
            f"{g}.State": "Finished" if final else "Running" if started else "Prepared",
            f"{g}.OfficialScore": final, f"{g}.InJam": jams(document)["active"] is not None,
            f"{g}.CurrentPeriodNumber": max((int(p.attrs["number"]) for p in periods
                                             if any(j.tag == "jam" for j in p.children)), default=0),
        })
        for e in document.children:
            if e.tag == "venue":
                state[f"{g}.EventInfo(Venue)"] = e.attrs.get("name", "")
                state[f"{g}.EventInfo(City)"] = e.attrs.get("city", "")
            elif e.tag == "ruleset":
                state[f"{g}.RulesetName"] = e.attrs.get("name", "")
        state[f"{g}.EventInfo(Date)"] = a.get("date", "")
        self._officials(document, g)
        for side in SIDES:
            self._team(side, summary, g)
        state.update({f"{g}.{k}": v for k, v in self.body.items()})

    def _officials(self, document: Element, g: str) -> None:
        state = self.state
        signed = document.attrs.get("signed", "")
        for team in document.children:
            if team.tag != "team" or team.attrs.get("type") != "official":
                continue
            for p in team.children:
                if p.tag != "person":
                    continue
                role = p.attrs.get("role", "")
                o = f"{g}.{'Ref' if role in _REFEREES else 'Nso'}({p.eid})"
                state[f"{o}.Id"] = p.eid
                state[f"{o}.Name"] = p.attrs.get("name", "")
                state[f"{o}.Role"] = OFFICIAL_ROLE_NAMES.get(role, "")
                if signed and p.attrs.get("name") == signed and f"{g}.HR" not in state and f"{g}.HNSO" not in state:
                    state[f"{g}.{'HNSO' if role == 'head-nso' else 'HR'}"] = p.eid

    def _team(self, side: str, summary: dict[str, Any], g: str) -> None:
        state = self.state
        n = team_number(side)
        t = f"{g}.Team({n})"
        info = summary["teams"][side]
        name, league = info["name"], info["league"]
        state.update({
            f"{t}.Id": f"{self.gid}_{n}", f"{t}.TeamName": name, f"{t}.LeagueName": league, f"{t}.Name": name or league,
            f"{t}.FullName": " ".join(x for x in (league, name) if x), f"{t}.UniformColor": info["color"],
            f"{t}.Score": info["score"], f"{t}.Timeouts": info["timeouts_left"],
            f"{t}.TotalPenalties": sum(len(v) for v in summary["penalties"][side].values()),
        })
        for sid, fields in self.skaters.entries[side]:
            s = f"{t}.Skater({sid})"
            state[f"{s}.Id"] = sid
            state.update({f"{s}.{k}": v for k, v in fields.items()})
            own = self.penalties.get(sid, [])
            state[f"{s}.PenaltyCount"] = len(own)
            for i, (pid, pfields) in enumerate(own, start=1):
                state[f"{s}.Penalty({i}).Id"] = pid
                state.update({f"{s}.Penalty({i}).{k}": v for k, v in pfields.items()})
        for bid, bfields in self.boxes[side]:
            state[f"{t}.BoxTrip({bid}).Id"] = bid
            state.update({f"{t}.BoxTrip({bid}).{k}": v for k, v in bfields.items()})

    def _period(self, period: Element) -> None:
        p = int(period.attrs["number"])
        pre = f"Period({p})"
        start, duration = ms_of_seconds(period.attrs.get("start")), ms_of_seconds(period.attrs.get("duration"))
        jam_list = [j for j in period.children if j.tag == "jam"]
        self.body.update({
            f"{pre}.Id": period.eid, f"{pre}.Number": p, f"{pre}.WalltimeStart": start,
            f"{pre}.WalltimeEnd": start + duration if start and duration else 0, f"{pre}.Duration": duration,
            f"{pre}.Running": False, f"{pre}.CurrentJamNumber": max((int(j.attrs["number"]) for j in jam_list), default=0)})
        points = dict.fromkeys(SIDES, 0)
        for item in period.children:
            if item.tag == "timeout":
                self._timeout(item, pre, None)
            elif item.tag == "jam":
                scored = self._jam(item, p, pre)
                for side in SIDES:
                    points[side] += scored[side]
        self.body[f"{pre}.Team1Points"], self.body[f"{pre}.Team2Points"] = points["home"], points["away"]

    def _jam(self, jam: Element, p: int, pre: str) -> dict[str, int]:
        body = self.body
        j = int(jam.attrs["number"])
        a = jam.attrs
        jp = f"{pre}.Jam({j})"
        start, duration = ms_of_seconds(a.get("start")), ms_of_seconds(a.get("duration"))
        body.update({f"{jp}.Id": jam.eid, f"{jp}.Number": j, f"{jp}.PeriodNumber": p, f"{jp}.WalltimeStart": start,
                     f"{jp}.WalltimeEnd": start + duration if start and "duration" in a else 0,
                     f"{jp}.Duration": duration})
        scored: dict[str, int] = {}
        any_star = False
        for side in SIDES:
            mine = [c for c in jam.children if c.attrs.get("team") == side]
            tj = f"{jp}.TeamJam({team_number(side)})"
            scored[side], star = self._trips(jam, mine, tj, team_number(side))
            any_star = any_star or star
            body.update({
                f"{tj}.Id": f"{jam.eid}_{team_number(side)}",
                f"{tj}.Lead": a.get("lead") == side, f"{tj}.Calloff": a.get("called") == side,
                f"{tj}.Lost": a.get("lost") in (side, "both"), f"{tj}.Injury": a.get("injury") in (side, "both"),
                f"{tj}.NoInitial": a.get("no-initial") in (side, "both"), f"{tj}.StarPass": star,
            })
            _fieldings(mine, tj, side, body, self.skaters)
            self._sin_bin(mine, side, p, j, jam.eid)
        body[f"{jp}.StarPass"] = any_star
        for c in jam.children:
            if c.tag == "timeout":
                self._timeout(c, pre, jam)
        return scored

    def _trips(self, jam: Element, mine: list[Element], tj: str, n: int) -> tuple[int, bool]:
        """The team's scoring trips, 1 to the last (CRG lists every one; a trip the document
        does not hold has 0 points), the star pass's; returns the jam's points and whether it passed."""
        body = self.body
        trips = {int(c.attrs["pass"]): c for c in mine if c.tag == "points" and c.attrs.get("pass", "").isdigit()}
        for c in mine:  # trips recorded without a number follow the numbered ones
            if c.tag == "points" and not c.attrs.get("pass", "").isdigit():
                trips[max(trips, default=1) + 1] = c
        star = next((c for c in mine if c.tag == "starpass"), None)
        star_trip = int(star.attrs["trip"]) if star is not None and star.attrs.get("trip", "").isdigit() else None
        total = after = 0
        for t in range(1, max([*trips, star_trip or 0], default=0) + 1):
            trip = trips.get(t)
            score = _score(trip)
            after_sp = star_trip is not None and t >= star_trip
            total += score
            after += score if after_sp else 0
            tid = trip.eid if trip is not None else derived_eid(f"crg/{jam.eid}/{n}/trip/{t}")
            body.update({f"{tj}.ScoringTrip({t}).Id": tid, f"{tj}.ScoringTrip({t}).Number": t,
                         f"{tj}.ScoringTrip({t}).Score": score, f"{tj}.ScoringTrip({t}).AfterSP": after_sp})
            if t == star_trip:
                body[f"{tj}.StarPassTrip"] = tid
        body[f"{tj}.JamScore"], body[f"{tj}.AfterSPScore"] = total, after
        return total, star is not None

    def _sin_bin(self, mine: list[Element], side: str, p: int, j: int, jam_id: str) -> None:
        """The team's penalties (to their skaters) and box trips (to the team) in this jam."""
        for c in mine:
            if c.tag == "penalty" and c.attrs.get("number"):
                sid = self.skaters.of(side, c.attrs["number"])
                self.penalties.setdefault(sid, []).append((c.eid, {
                    "Code": c.attrs.get("code", ""), "PeriodNumber": p, "JamNumber": j, "Jam": jam_id,
                    "Time": ms_of_seconds(c.attrs.get("time")), "Served": True}))
            elif c.tag == "box" and c.attrs.get("number"):
                sid = self.skaters.of(side, c.attrs["number"])
                t_in, t_out = ms_of_seconds(c.attrs.get("in")), ms_of_seconds(c.attrs.get("out"))
                self.boxes[side].append((c.eid, {
                    "CurrentSkater": sid, "RosterNumber": c.attrs["number"], "IsCurrent": False,
                    "StartJamNumber": j, "EndJamNumber": j, "WalltimeStart": t_in, "WalltimeEnd": t_out,
                    "Duration": t_out - t_in if t_in and t_out else 0}))

    def _timeout(self, e: Element, pre: str, jam: Element | None) -> None:
        kind, team, result = e.attrs.get("kind", ""), e.attrs.get("team", ""), e.attrs.get("result", "")
        owner = "O" if kind == "official" else f"{self.gid}_{team_number(team)}" if team in SIDES else ""
        to = f"{pre}.Timeout({e.eid})"
        self.body.update({
            f"{to}.Id": e.eid, f"{to}.Owner": owner, f"{to}.Review": kind == "review",
            f"{to}.RetainedReview": result == "retained", f"{to}.OrResult": result.capitalize(),
            f"{to}.PrecedingJamNumber": 0 if jam is None else int(jam.attrs["number"]),
            f"{to}.PrecedingJam": None if jam is None else jam.eid,
            f"{to}.WalltimeStart": ms_of_seconds(e.attrs.get("time")), f"{to}.Running": False,
        })


def _score(trip: Element | None) -> int:
    text = "" if trip is None else trip.attrs.get("points", "")
    return int(text) if text.isascii() and text.isdigit() and len(text) <= 6 else 0


def _fieldings(mine: list[Element], tj: str, side: str, body: dict[str, Any], skaters: _Skaters) -> None:
    """The team's lineup in CRG's five places: Jammer, Pivot, Blocker1..3; with no pivot
    the Pivot place holds the fourth blocker (NoPivot), as CRG's FloorPosition has it."""
    lineup = [c for c in mine if c.tag == "lineup" and c.attrs.get("number")]
    jammer = next((c for c in lineup if c.attrs.get("position") == "jammer"), None)
    pivot = next((c for c in lineup if c.attrs.get("position") == "pivot"), None)
    blockers = [c for c in lineup if c.attrs.get("position") == "blocker"]
    places: dict[str, Element | None] = {"Jammer": jammer, "Pivot": pivot}
    no_pivot = pivot is None and len(blockers) > len(_BLOCKER_SLOTS)
    for slot, c in zip(_BLOCKER_SLOTS, blockers, strict=False):
        places[slot] = c
    if no_pivot:
        places["Pivot"] = blockers[len(_BLOCKER_SLOTS)]
    body[f"{tj}.NoPivot"] = no_pivot
    for slot in ("Jammer", "Pivot", *_BLOCKER_SLOTS):
        placed = places.get(slot)
        f = f"{tj}.Fielding({slot})"
        number = "" if placed is None else placed.attrs["number"]
        body[f"{f}.Skater"] = skaters.of(side, number) if number else None
        body[f"{f}.SkaterNumber"] = number or "?"
        body[f"{f}.NotFielded"] = False
