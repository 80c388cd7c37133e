"""The bout as the statsbook's cells: ``{(sheet, address): value}`` (docs/statsbook.md).

Pure: the document and its summary in (doc/model.py, doc/summary.py), cells out; no file,
no openpyxl.  :mod:`.workbook` writes the cells into a workbook, so whatever is written is
one of these addresses (the cell map, :mod:`.cellmap`) and nothing else.  ``computed``
adds the cells a league's blank statsbook computes with formulas (jam and game totals, the
numbers copied from one sheet to another) and huddle's own tables (box trips, reviews): a
workbook made from nothing has no formulas to do it.

The period clock at a timeout is estimated from the jams alone: it runs from the period's
start (else its first jam's) and stops at a timeout from the end of the jam before it to the
next jam's lineup (30 s before that jam starts).
"""

from __future__ import annotations

import datetime
import math
from collections.abc import Mapping
from typing import Any, Final

from ..doc.model import Element
from .cellmap import CLOCK, IGRF, LINEUPS, OFFICIAL_LABELS, PENALTIES, PENALTY_BOX, REVIEWS, SCORE, address

__all__ = ["CellValue", "Cells", "element_of", "skater_order", "statsbook_cells"]

CellValue = str | int | float | datetime.date
Cells = dict[tuple[str, str], CellValue]

SIDES: Final = ("home", "away")
PERIOD_SECONDS: Final = 1800  # a WFTDA period: 30 minutes of period clock
LINEUP_SECONDS: Final = 30  # the lineup before a jam, when the period clock runs again after a timeout
_EVENT: Final = {"team": "TO", "review": "OR", "official": "OFF"}


def element_of(document: Element | Mapping[str, Any]) -> Element:
    """The document's root: as given, or made from its JSON tree (``doc.to_json``), or from the answer
    of ``GET /api/v1/doc?format=json`` that holds the tree as ``document``."""
    if isinstance(document, Element):
        return document
    tree: Mapping[str, Any] = document
    if "tag" not in tree and isinstance(tree.get("document"), Mapping):
        tree = tree["document"]
    if tree.get("tag") != "bout":
        raise ValueError(f"not a bout document: its root is {tree.get('tag')!r}, not 'bout'")
    return _element(tree)


def _element(document: Mapping[str, Any]) -> Element:
    e = Element(str(document.get("tag", "")), str(document.get("eid", "")),
                {str(k): str(v) for k, v in dict(document.get("attrs") or {}).items()}, str(document.get("text", "")))
    for child in document.get("children") or ():
        e.append(_element(child))
    return e


def skater_order(summary: Mapping[str, Any], side: str) -> list[dict[str, str]]:
    """The team's skaters as the IGRF lists them (the Penalties sheet's rows follow): numbers in text order,
    bench staff left out; with no roster, the numbers the bout's penalties name."""
    team = summary["teams"][side]
    skaters = [s for s in team.get("skaters", ()) if s.get("number") and s.get("role") != "bench-staff"]
    if not skaters:
        skaters = [{"number": n} for n in summary.get("penalties", {}).get(side, {}) if n]
    return sorted(skaters, key=lambda s: s["number"])[:len(IGRF.SKATER_ROWS)]


def statsbook_cells(document: Element | Mapping[str, Any], summary: Mapping[str, Any], *,
                    computed: bool = True) -> Cells:
    """Every cell the bout fills (the module docstring); ``computed``: also those a blank computes."""
    root = element_of(document)
    cells: Cells = {}
    _igrf(root, summary, cells)
    _penalties(summary, cells, computed)
    _score_and_lineups(root, summary, cells, computed)
    _clock(root, summary, cells)
    if computed:
        _box_table(root, cells)
        _review_table(root, cells)
    return {k: v for k, v in cells.items() if v != ""}


# ------------------------------------------------------------------ IGRF

def _igrf(root: Element, summary: Mapping[str, Any], cells: Cells) -> None:
    s = "IGRF"
    venue = root.find("venue")
    if venue is not None:
        cells[s, IGRF.VENUE] = venue.attrs.get("name", "")
        cells[s, IGRF.CITY] = venue.attrs.get("city", "")
    cells[s, IGRF.TOURNAMENT] = root.attrs.get("name", "")
    date = root.attrs.get("date", "")
    try:
        cells[s, IGRF.DATE] = datetime.date.fromisoformat(date)
    except ValueError:
        cells[s, IGRF.DATE] = date
    for side in SIDES:
        team, col = summary["teams"][side], IGRF.TEAM_COL[side]
        cells[s, address(IGRF.LEAGUE_ROW, col)] = team.get("league", "")
        cells[s, address(IGRF.TEAM_ROW, col)] = team.get("name", "")
        cells[s, address(IGRF.COLOR_ROW, col)] = team.get("color", "")
        for row, skater in zip(IGRF.SKATER_ROWS, skater_order(summary, side), strict=False):
            cells[s, address(row, col)] = skater["number"]
            cells[s, address(row, col + 1)] = skater.get("name", "")
        captain = next((p.get("name", "") for p in team.get("skaters", ()) if p.get("role") == "captain"), "")
        cells[s, address(IGRF.CAPTAIN_ROW, col)] = captain
    officials = list(summary.get("officials", ()))
    head_nso = next((o for o in officials if o.get("role") == "head-nso"), None)
    head_ref = next((o for o in officials if o.get("role") == "head-referee"), None)
    if head_nso is not None:
        cells[s, address(IGRF.HEAD_NSO_ROW, IGRF.NAME_COL)] = head_nso.get("name", "")
    if head_ref is not None:
        _official(cells, IGRF.HEAD_REF_ROW, head_ref)
    nsos = [o for o in officials if o is not head_nso and not o.get("role", "").endswith("-referee")]
    refs = [o for o in officials if o is not head_ref and o.get("role", "").endswith("-referee")]
    for row, o in zip(IGRF.NSO_ROWS, nsos, strict=False):
        _official(cells, row, o)
    for row, o in zip(IGRF.REF_ROWS, refs, strict=False):
        _official(cells, row, o)


def _official(cells: Cells, row: int, o: Mapping[str, str]) -> None:
    cells["IGRF", address(row, IGRF.ROLE_COL)] = OFFICIAL_LABELS.get(o.get("role", ""), o.get("role", ""))
    cells["IGRF", address(row, IGRF.NAME_COL)] = o.get("name", "")


# ------------------------------------------------------------------ Penalties

def _penalties(summary: Mapping[str, Any], cells: Cells, computed: bool) -> None:
    s = "Penalties"
    trackers = " / ".join(o.get("name", "") for o in summary.get("officials", ())
                          if o.get("role") in ("penalty-tracker", "penalty-lineup-tracker"))
    for top in PENALTIES.TRACKER:
        cells[s, top] = trackers
    for side in SIDES:
        by_skater = summary.get("penalties", {}).get(side, {})
        for i, skater in enumerate(skater_order(summary, side)):
            row = PENALTIES.FIRST_ROW + 2 * i
            if computed:
                for period in (1, 2):
                    cells[s, address(row, PENALTIES.NUMBER_COL[period, side])] = skater["number"]
            for n, penalty in enumerate(by_skater.get(skater["number"], ())[:PENALTIES.PER_SKATER], start=1):
                first = PENALTIES.FIRST.get((penalty["period"], side))
                if first is not None:
                    cells[s, address(row, first + n - 1)] = penalty.get("code", "")
                    cells[s, address(row + 1, first + n - 1)] = penalty["jam"]


# ------------------------------------------------------------------ Score and Lineups

def _jam_elements(root: Element) -> dict[tuple[int, int], Element]:
    out: dict[tuple[int, int], Element] = {}
    for period in root.children:
        if period.tag == "period":
            for jam in period.children:
                if jam.tag == "jam":
                    out[int(period.attrs["number"]), int(jam.attrs["number"])] = jam
    return out


def _trips(jam: Element | None, side: str) -> dict[int, list[int]]:
    """The team's trips in the jam by number (unnumbered ones after the last numbered, from trip 2 on)."""
    numbered: dict[int, list[int]] = {}
    unnumbered: list[int] = []
    for c in jam.children if jam is not None else ():
        if c.tag == "points" and c.attrs.get("team") == side:
            points = _whole(c.attrs.get("points")) or 0
            trip = _whole(c.attrs.get("pass"))
            if trip is None:
                unnumbered.append(points)
            else:
                numbered.setdefault(trip, []).append(points)
    n = max([1, *numbered])
    for points in unnumbered:
        n += 1
        numbered[n] = [points]
    return numbered


def _star_pivot(jam: Element | None, side: str) -> str | None:
    """The pivot a star pass names, for a jam whose lineup has none."""
    star = None if jam is None else jam.find("starpass", team=side)
    return None if star is None else star.attrs.get("number")


def _sum(values: list[int]) -> CellValue:
    """One number, or the statsbook's way of showing several in one cell: a formula that adds them."""
    return values[0] if len(values) == 1 else "=" + "+".join(map(str, values))


def _score_and_lineups(root: Element, summary: Mapping[str, Any], cells: Cells, computed: bool) -> None:
    jams = _jam_elements(root)
    boxes = _box_trips(root)
    game = dict.fromkeys(SIDES, 0)
    rows = {1: iter(SCORE.JAM_ROWS[1]), 2: iter(SCORE.JAM_ROWS[2])}
    for given in summary.get("jams", ()):
        period, number = given["period"], given["jam"]
        if period not in rows:
            continue
        star = any(given[side]["star_pass"] is not None for side in SIDES)
        base = next(rows[period], None)
        sp_row = next(rows[period], None) if star else None
        if base is None or (star and sp_row is None):
            continue  # past the sheet's last row
        jam = jams.get((period, number))
        window = _window(jam)
        row = {**given, **{side: {**given[side], "pivot": _star_pivot(jam, side)} for side in SIDES
                           if given[side]["pivot"] is None and given[side]["star_pass"] is not None}}
        for side in SIDES:
            game[side] += row[side]["points"]
            _score_team(cells, row, side, base, sp_row, _trips(jam, side), computed, game[side])
            _lineup_team(cells, row, side, base, sp_row, window, boxes.get(side, {}), computed)


def _score_team(cells: Cells, row: Mapping[str, Any], side: str, base: int, sp_row: int | None,  # noqa: PLR0917
                trips: dict[int, list[int]], computed: bool, game: int) -> None:
    s, col = "Score", SCORE.TEAM_COL[side]
    team = row[side]
    cells[s, address(base, col + SCORE.JAM)] = row["jam"]
    cells[s, address(base, col + SCORE.JAMMER)] = team["jammer"] or ""
    for offset, flag in ((SCORE.LOST, "lost"), (SCORE.LEAD, "lead"), (SCORE.CALL, "called"),
                         (SCORE.INJURY, "injury"), (SCORE.NO_INITIAL, "no_initial")):
        cells[s, address(base, col + offset)] = "X" if team[flag] else ""
    star = team["star_pass"]
    if sp_row is not None:
        cells[s, address(sp_row, col + SCORE.JAM)] = "SP" if star is not None else "SP*"
        if star is not None:
            cells[s, address(sp_row, col + SCORE.JAMMER)] = team["pivot"] or ""
    initial = [p for p in trips.pop(1, []) if p]  # points on the initial trip (overtime): shown with trip 2's
    if initial:
        trips[2] = initial + trips.get(2, [])
    late: dict[int, list[int]] = {}
    for n, points in sorted(trips.items()):
        at = sp_row if star is not None and sp_row is not None and n >= star else base
        if n >= 10:
            late.setdefault(at, []).extend(points)
        else:
            cells[s, address(at, col + SCORE.TRIP_2 + n - 2)] = _sum(points)
    for at, points in late.items():
        cells[s, address(at, col + SCORE.TRIP_10)] = _sum(points)
    if computed:
        cells[s, address(base, col + SCORE.JAM_TOTAL)] = team["points"]
        cells[s, address(base, col + SCORE.GAME_TOTAL)] = game


def _lineup_team(cells: Cells, row: Mapping[str, Any], side: str, base: int, sp_row: int | None,  # noqa: PLR0917
                 window: tuple[float, float] | None, boxes: dict[str, list[tuple[float, float | None]]],
                 computed: bool) -> None:
    s, col = "Lineups", LINEUPS.TEAM_COL[side]
    team = row[side]
    jammer, pivot, blockers = team["jammer"], team["pivot"], list(team["blockers"])
    if pivot is None and len(blockers) > 3:
        pivot = blockers.pop(0)  # no pivot: the fourth blocker sits in the pivot's column
    cells[s, address(base, col + LINEUPS.NO_PIVOT)] = "X" if team["pivot"] is None and (jammer or blockers) else ""
    if computed:
        cells[s, address(base, col + LINEUPS.JAM)] = row["jam"]
    layout = [(LINEUPS.JAMMER, jammer), (LINEUPS.PIVOT, pivot), *zip(LINEUPS.BLOCKERS, blockers, strict=False)]
    for offset, who in layout:
        if who is None:
            continue
        if offset != LINEUPS.JAMMER or computed:
            cells[s, address(base, col + offset)] = who
        for i, symbol in enumerate(_box_symbols(boxes.get(who, []), window)):
            cells[s, address(base, col + offset + 1 + i)] = symbol
    if sp_row is not None and team["star_pass"] is not None:
        cells[s, address(sp_row, col + LINEUPS.NO_PIVOT)] = "X"
        swapped = [(LINEUPS.JAMMER, team["pivot"]), (LINEUPS.PIVOT, jammer), *zip(LINEUPS.BLOCKERS, blockers, strict=False)]
        for offset, who in swapped:
            if who is not None and (offset != LINEUPS.JAMMER or computed):
                cells[s, address(sp_row, col + offset)] = who


def _window(jam: Element | None) -> tuple[float, float] | None:
    """The jam's start and end in mesh time (no end yet: it goes on); None without a start."""
    if jam is None:
        return None
    start, duration = _seconds(jam.attrs.get("start")), _seconds(jam.attrs.get("duration"))
    if start is None:
        return None
    return start, math.inf if duration is None else start + duration


def _box_trips(root: Element) -> dict[str, dict[str, list[tuple[float, float | None]]]]:
    """Per team and skater, the box trips (in, out) the document records, in any jam."""
    out: dict[str, dict[str, list[tuple[float, float | None]]]] = {}
    for e in root.walk():
        if e.tag == "box":
            start = _seconds(e.attrs.get("in"))
            if start is not None:
                out.setdefault(e.attrs.get("team", ""), {}).setdefault(e.attrs.get("number", ""), []).append(
                    (start, _seconds(e.attrs.get("out"))))
    return out


def _box_symbols(trips: list[tuple[float, float | None]], window: tuple[float, float] | None) -> list[str]:
    """The statsbook's box marks of a skater in a jam: ``-`` sat down during it, ``+`` sat down and stood up
    during it, ``S`` sat from before it through it, ``$`` sat from before it and stood up during it."""
    if window is None:
        return []
    start, end = window
    marks = []
    for sat, stood in sorted(trips, key=lambda t: t[0]):
        if sat > end or (stood is not None and stood <= start):
            continue
        ended = stood is not None and stood <= end
        marks.append(("+" if ended else "-") if sat > start else ("$" if ended else "S"))
    return marks[:LINEUPS.BOX_CELLS]


# ------------------------------------------------------------------ Game Clock

def _timeouts(root: Element) -> list[tuple[int, int, Element]]:
    """Every timeout with the jam it follows (period, jam; 0: before the period's first jam), in bout order."""
    out: list[tuple[int, int, float, Element]] = []
    for period in (e for e in root.children if e.tag == "period"):
        p = int(period.attrs["number"])
        ends = [(w[1], int(j.attrs["number"])) for j in period.children
                if j.tag == "jam" and (w := _window(j)) is not None]
        last = 0
        for item in period.children:
            if item.tag == "jam":
                last = int(item.attrs["number"])
                out.extend((p, last, _seconds(t.attrs.get("time")) or 0.0, t) for t in item.children if t.tag == "timeout")
            elif item.tag == "timeout":
                time = _seconds(item.attrs.get("time"))
                after = last if time is None else max((j for end, j in ends if end <= time), default=0)
                out.append((p, after, time or 0.0, item))
    out.sort(key=lambda t: (t[0], t[1], t[2]))
    return [(p, j, t) for p, j, _, t in out]


def _period_clocks(root: Element, timeouts: list[tuple[int, int, Element]]) -> dict[tuple[int, int], str]:
    """The period clock (``M:SS`` left) at the end of each jam with a start and a duration (module docstring)."""
    stops = {(p, j) for p, j, _ in timeouts}
    out: dict[tuple[int, int], str] = {}
    for period in (e for e in root.children if e.tag == "period"):
        p = int(period.attrs["number"])
        jams = sorted((int(j.attrs["number"]), w) for j in period.children
                      if j.tag == "jam" and (w := _window(j)) is not None and w[1] != math.inf)
        if not jams:
            continue
        zero = _seconds(period.attrs.get("start"))
        zero = jams[0][1][0] if zero is None else zero
        stopped = 0.0
        for k, (number, (_, end)) in enumerate(jams):
            left = max(0.0, PERIOD_SECONDS - (end - zero - stopped))
            out[p, number] = f"{int(left) // 60}:{int(left) % 60:02d}"
            if (p, number) in stops and k + 1 < len(jams):
                stopped += max(0.0, jams[k + 1][1][0] - LINEUP_SECONDS - end)
    return out


def _clock(root: Element, summary: Mapping[str, Any], cells: Cells) -> None:
    s = "Game Clock"
    for side in SIDES:
        skaters = summary["teams"][side].get("skaters", ())
        for period in (1, 2):
            row = CLOCK.TEAM_ROW[period, side]
            for offset, role in ((0, "captain"), (1, "alternate-captain")):
                name = next((p.get("name", "") for p in skaters if p.get("role") == role), "")
                cells[s, address(row + offset, CLOCK.NAME_COL)] = name
    timeouts = _timeouts(root)
    clocks = _period_clocks(root, timeouts)
    used = dict.fromkeys(SIDES, 0)  # team timeouts: three a game, the second period's row continues the first's
    reviews: dict[tuple[int, str], int] = {}
    after: dict[tuple[int, int], list[Element]] = {}
    for period, jam, t in timeouts:
        after.setdefault((period, jam), []).append(t)
        kind, side = t.attrs.get("kind", ""), t.attrs.get("team", "")
        if period not in (1, 2) or side not in SIDES:
            continue
        row, when = CLOCK.TEAM_ROW[period, side], clocks.get((period, jam), "")
        if kind == "team" and used[side] < len(CLOCK.TIMEOUT_COLS):
            cells[s, address(row, CLOCK.TIMEOUT_COLS[used[side]])] = when or "X"
            used[side] += 1
        elif kind == "review" and reviews.get((period, side), 0) < len(CLOCK.REVIEW_COLS):
            slot = reviews.get((period, side), 0)
            cells[s, address(row, CLOCK.REVIEW_COLS[slot])] = when or "X"
            reviews[period, side] = slot + (2 if t.attrs.get("result") == "lost" else 1)
            if slot == 0 and t.attrs.get("result") == "lost":  # a lost review: no second one this period
                cells[s, address(row, CLOCK.REVIEW_COLS[1])] = "X"
        if period == 1 and kind == "team":
            for i in range(used[side]):
                cells[s, address(CLOCK.TEAM_ROW[2, side], CLOCK.TIMEOUT_COLS[i])] = "X"
    jams = _jam_elements(root)
    colours = {side: summary["teams"][side].get("color") or summary["teams"][side].get("name") or side.title()
               for side in SIDES}
    for row in summary.get("jams", ()):
        period, number = row["period"], row["jam"]
        if period not in CLOCK.JAM_ROW0 or not 1 <= number <= CLOCK.JAMS:
            continue
        at = CLOCK.JAM_ROW0[period] + number
        window = _window(jams.get((period, number)))
        if window is not None and window[1] != math.inf:
            cells[s, address(at, CLOCK.DURATION_COL)] = round(window[1] - window[0])
        events, details = [], []
        if any(row[side]["injury"] for side in SIDES):
            events.append("INJ")
        for t in after.get((period, number), ()):
            events.append(_EVENT.get(t.attrs.get("kind", ""), "OFF"))
            if t.attrs.get("team") in SIDES:
                details.append(colours[t.attrs["team"]])
        if after.get((period, number)) and clocks.get((period, number)):
            details.append(clocks[period, number])
        cells[s, address(at, CLOCK.EVENTS_COL)] = "; ".join(events)
        cells[s, address(at, CLOCK.DETAILS_COL)] = "; ".join(details)


# ------------------------------------------------------------------ huddle's own tables

def _box_table(root: Element, cells: Cells) -> None:
    s, row = "Penalty Box", PENALTY_BOX.TABLE_ROW
    for i, title in enumerate(PENALTY_BOX.TABLE, start=1):
        cells[s, address(row, i)] = title
    for period, number, jam in _jams_in_order(root):
        for e in jam.children:
            if e.tag != "box":
                continue
            row += 1
            sat, stood = _seconds(e.attrs.get("in")), _seconds(e.attrs.get("out"))
            served: CellValue = round(stood - sat) if sat is not None and stood is not None else ""
            values: list[CellValue] = [period, number, e.attrs.get("team", ""), e.attrs.get("number", ""),
                                       e.attrs.get("in", ""), e.attrs.get("out", ""), served]
            for i, value in enumerate(values, start=1):
                cells[s, address(row, i)] = value


def _review_table(root: Element, cells: Cells) -> None:
    s, row = "Official Reviews", REVIEWS.TABLE_ROW
    for i, title in enumerate(REVIEWS.TABLE, start=1):
        cells[s, address(row, i)] = title
    for period, jam, t in _timeouts(root):
        if t.attrs.get("kind") == "review":
            row += 1
            values: list[CellValue] = [period, jam, t.attrs.get("team", ""), t.attrs.get("result", ""),
                                       t.attrs.get("time", "")]
            for i, value in enumerate(values, start=1):
                cells[s, address(row, i)] = value


def _jams_in_order(root: Element) -> list[tuple[int, int, Element]]:
    return [(p, j, e) for (p, j), e in sorted(_jam_elements(root).items())]


def _whole(text: str | None) -> int | None:
    return int(text) if text is not None and text.isascii() and text.isdigit() and len(text) <= 6 else None


def _seconds(text: str | None) -> float | None:
    try:
        value = float(text) if text else None
    except ValueError:
        return None
    return value if value is not None and math.isfinite(value) else None
