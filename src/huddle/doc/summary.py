"""What the bout document adds up to: the score per team per jam, period and game, each
jam's lead and lineup, the penalties per skater, the timeouts and reviews taken, the
rosters and the sign-off (``GET /api/v1/bout/summary``; docs/document.md "The summary").

A function of the document alone, so every node holding the same events shows the same
summary.  It reads what the document holds, nonsense included (an event recorded before the
bout's rules, or by a peer that ignores them): a trip's points that are not a whole number
count as none.  Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any

from .model import Element
from .rules import SIDES, TEAM_TIMEOUTS

__all__ = ["bout_summary"]


def bout_summary(root: Element) -> dict[str, Any]:
    """The bout's totals (the module docstring)."""
    teams: dict[str, Any] = {}
    officials: list[dict[str, str]] = []
    periods: list[dict[str, Any]] = []
    jam_rows: list[dict[str, Any]] = []
    penalties: dict[str, dict[str, list[dict[str, Any]]]] = {side: {} for side in SIDES}
    timeouts: dict[str, dict[str, int]] = {side: {"team": 0, "review": 0, "retained": 0} for side in SIDES}
    official_timeouts = 0
    for e in root.children:
        if e.tag == "team" and e.attrs.get("type") in SIDES:
            teams[e.attrs["type"]] = {
                "name": e.attrs.get("name", ""), "league": e.attrs.get("league", ""), "color": e.attrs.get("color", ""),
                "skaters": [_person(p) for p in e.children if p.tag == "person"]}
        elif e.tag == "team":
            officials = [_person(p) for p in e.children if p.tag == "person"]
    for period in (e for e in root.children if e.tag == "period"):
        p = int(period.attrs["number"])
        totals = dict.fromkeys(SIDES, 0)
        for item in period.children:
            if item.tag == "timeout":
                official_timeouts += _timeout(item, timeouts)
            if item.tag != "jam":
                continue
            j = int(item.attrs["number"])
            row = _jam(item, p, j)
            for side in SIDES:
                totals[side] += row[side]["points"]
            for c in item.children:
                if c.tag == "penalty" and c.attrs.get("team") in SIDES:
                    penalties[c.attrs["team"]].setdefault(c.attrs.get("number", ""), []).append(
                        {"period": p, "jam": j, "code": c.attrs.get("code", "")})
                elif c.tag == "timeout":
                    official_timeouts += _timeout(c, timeouts)
            jam_rows.append(row)
        periods.append({"period": p, **totals})
    for side in SIDES:
        teams[side]["score"] = sum(row[side] for row in periods)
        teams[side]["timeouts"] = timeouts[side]["team"]
        teams[side]["timeouts_left"] = max(0, TEAM_TIMEOUTS - timeouts[side]["team"])
        teams[side]["reviews"] = timeouts[side]["review"]
        teams[side]["reviews_retained"] = timeouts[side]["retained"]
    return {
        "teams": teams, "officials": officials, "periods": periods, "jams": jam_rows,
        "penalties": {side: dict(sorted(by.items())) for side, by in penalties.items()},
        "official_timeouts": official_timeouts,
        "status": root.attrs.get("status", ""), "signed": root.attrs.get("signed", ""),
    }


def _person(p: Element) -> dict[str, str]:
    return {k: p.attrs[k] for k in ("number", "name", "role") if k in p.attrs}


def _timeout(e: Element, timeouts: dict[str, dict[str, int]]) -> int:
    """Count a timeout in ``timeouts``; 1 if it is an official timeout."""
    kind, team = e.attrs.get("kind"), e.attrs.get("team", "")
    if kind == "official":
        return 1
    if team in timeouts and kind in ("team", "review"):
        timeouts[team][kind] += 1
        if kind == "review" and e.attrs.get("result") == "retained":
            timeouts[team]["retained"] += 1
    return 0


def _jam(jam: Element, period: int, number: int) -> dict[str, Any]:
    """One jam's row: per team its trips (in trip order), points, lineup and flags."""
    a = jam.attrs
    row: dict[str, Any] = {"period": period, "jam": number}
    for side in SIDES:
        numbered: list[tuple[int, int]] = []
        unnumbered: list[int] = []
        lineup: dict[str, Any] = {"jammer": None, "pivot": None, "blockers": []}
        star: int | None = None
        for c in jam.children:
            if c.attrs.get("team") != side:
                continue
            if c.tag == "points":
                points = _whole(c.attrs.get("points"))
                trip = _whole(c.attrs.get("pass"))
                if trip is None:
                    unnumbered.append(points or 0)
                else:
                    numbered.append((trip, points or 0))
            elif c.tag == "lineup":
                position, who = c.attrs.get("position"), c.attrs.get("number")
                if position == "blocker":
                    lineup["blockers"].append(who)
                elif position in ("jammer", "pivot") and lineup[position] is None:
                    lineup[position] = who
            elif c.tag == "starpass":
                star = _whole(c.attrs.get("trip"))
        trips = [points for _, points in sorted(numbered)] + unnumbered
        row[side] = {
            "points": sum(trips), "trips": trips, **lineup, "star_pass": star,
            "lead": a.get("lead") == side, "called": a.get("called") == side,
            **{name.replace("-", "_"): a.get(name) in (side, "both") for name in ("lost", "injury", "no-initial")},
        }
    return row


def _whole(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() and len(text) <= 6 else None
