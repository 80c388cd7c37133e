"""The bout's clocks: period, jam, lineup, timeout and intermission, from the document and a time.

``clocks(root, now)`` reads the jams' ``start`` / ``duration``, the periods' ``start`` /
``duration``, the timeouts' ``time`` and ``kind`` and the ruleset's halftime, all in the
group's mesh time, and says what each clock shows at mesh time ``now``
(``GET /api/v1/bout/clocks``; docs/document.md "Clocks" gives each rule).  Every node that holds
the same events shows the same clocks at the same mesh time: nothing here reads a clock of its
own.  Pure: no I/O, no clock.

The timings are the WFTDA's, as CRG ScoreBoard's default ruleset carries them: a period of
30:00, a jam of at most 2:00 (a jam not stopped ends itself then), a lineup of 0:30 (its clock
counts up: a late jam shows as a lineup past 30 s), a team timeout of 1:00, the period clock
stopped by every timeout until the next jam starts, a period that ends when its clock runs out
outside a jam (or as the jam skated then ends), and the halftime the ruleset names (15:00).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

from .model import Element

__all__ = ["HALFTIME", "JAM_LENGTH", "LINEUP_LENGTH", "PERIOD_LENGTH", "TEAM_TIMEOUT_LENGTH", "clocks"]

PERIOD_LENGTH: Final = 30 * 60.0
JAM_LENGTH: Final = 2 * 60.0
LINEUP_LENGTH: Final = 30.0  # the rule the lineup clock is read against (it counts up past it)
TEAM_TIMEOUT_LENGTH: Final = 60.0
HALFTIME: Final = 15 * 60.0  # when the ruleset's halftime has no duration


@dataclass(frozen=True, slots=True)
class _Jam:
    period: int
    number: int
    start: float
    end: float | None  # None: being skated at ``now``


@dataclass(frozen=True, slots=True)
class _Timeout:
    time: float
    kind: str
    team: str


def clocks(root: Element, now: float) -> dict[str, Any]:
    """The clocks at mesh time ``now`` (the module docstring; docs/document.md "Clocks")."""
    period_elements = {int(e.attrs["number"]): e for e in root.children if e.tag == "period"}
    started = sorted(_jams(period_elements, now), key=lambda j: (j.start, j.period, j.number))
    timeouts = sorted(_timeouts(root), key=lambda t: t.time)
    starts = [j.start for j in started]
    ends: dict[int, float | None] = {}  # period -> when it ended (None: it has not)
    used: dict[int, float] = {}  # period -> period-clock time used by ``now`` (or by its end)
    for p, element in sorted(period_elements.items()):
        mine = [j for j in started if j.period == p]
        begin = _num(element.attrs.get("start"))
        if begin is None and mine:
            begin = mine[0].start
        if begin is None:
            continue
        stops = _stops(begin, timeouts, starts, now)
        used[p], expiry = _run(begin, stops, PERIOD_LENGTH, now)
        end = _period_end(element, begin, expiry, mine)
        later = [j for j in started if j.period > p]
        if end is None and later:  # a later period started: this one ended with its last jam at the latest
            end = max((j.end for j in mine if j.end is not None), default=later[0].start)
        if end is not None and end < now:  # its clock stands where the period ended
            used[p] = _run(begin, stops, PERIOD_LENGTH, end)[0]
        ends[p] = end
    end_2 = ends.get(2)
    over = root.attrs.get("status") == "final" or (end_2 is not None and end_2 <= now)
    current = max(used, default=0)
    end = ends.get(current)
    ended = end is not None and end <= now
    last = started[-1] if started else None
    timeout = _current_timeout(timeouts, last, now, over)
    remaining = max(0.0, PERIOD_LENGTH - used[current]) if current else PERIOD_LENGTH
    running = bool(current) and not ended and not over and remaining > 0 and not _in_stop(timeouts, starts, now)
    period = {"number": current, "running": running, "remaining": _r(remaining)}
    jam: dict[str, Any] = {"number": 0, "running": False, "elapsed": 0.0, "remaining": JAM_LENGTH}
    if last is not None:
        elapsed = min(JAM_LENGTH, max(0.0, (now if last.end is None else last.end) - last.start))
        jam = {"number": last.number, "running": last.end is None and not over, "elapsed": _r(elapsed),
               "remaining": _r(JAM_LENGTH - elapsed)}
    lineup = {"running": False, "elapsed": 0.0}
    if last is not None and last.end is not None and not ended and not over and timeout is None:
        since = max([last.end, *(_timeout_end(t) for t in timeouts if last.end <= t.time <= now)])
        lineup = {"running": True, "elapsed": _r(max(0.0, now - since))}
    intermission = {"running": False, "remaining": 0.0}
    end_1 = ends.get(1)
    if end_1 is not None and end_1 <= now and 2 not in used and not over:
        halftime = _halftime(root)
        left = max(0.0, halftime - (now - end_1))
        intermission = {"running": left > 0, "remaining": _r(left)}
    return {
        "now": now, "period": period, "jam": jam, "lineup": lineup,
        "timeout": {"running": timeout is not None, "kind": None if timeout is None else timeout.kind,
                    "team": None if timeout is None else (timeout.team or None),
                    "elapsed": 0.0 if timeout is None else _r(max(0.0, now - timeout.time))},
        "intermission": intermission,
    }


def _jams(periods: dict[int, Element], now: float) -> list[_Jam]:
    """The jams that have a start, each with its end: start + duration (at most 2:00), or
    start + 2:00 once that has passed unstopped, else None (being skated)."""
    out = []
    for p, period in periods.items():
        for e in period.children:
            if e.tag != "jam":
                continue
            start = _num(e.attrs.get("start"))
            if start is None:
                continue
            duration = _num(e.attrs.get("duration"))
            if duration is not None:
                end: float | None = start + min(max(0.0, duration), JAM_LENGTH)
            elif now >= start + JAM_LENGTH:
                end = start + JAM_LENGTH
            else:
                end = None
            out.append(_Jam(p, int(e.attrs["number"]), start, end))
    return out


def _timeouts(root: Element) -> list[_Timeout]:
    """Every timeout with a time (in a period or a jam): one without a time is not on the clock."""
    out = []
    for e in root.walk():
        if e.tag == "timeout":
            time = _num(e.attrs.get("time"))
            kind = e.attrs.get("kind", "")
            if time is not None and kind in ("team", "review", "official"):
                team = e.attrs.get("team", "")
                out.append(_Timeout(time, kind, team if team in ("home", "away") else ""))
    return out


def _stops(begin: float, timeouts: list[_Timeout], starts: list[float], now: float) -> list[tuple[float, float]]:
    """When the period clock stands still: from each timeout until the next jam starts (or ``now``)."""
    out: list[tuple[float, float]] = []
    for t in timeouts:
        if t.time < begin or t.time > now:
            continue
        until = min([s for s in starts if s > t.time] or [now])
        if out and t.time <= out[-1][1]:  # overlapping: one stop
            out[-1] = (out[-1][0], max(out[-1][1], until))
        else:
            out.append((t.time, until))
    return out


def _run(begin: float, stops: list[tuple[float, float]], length: float, now: float) -> tuple[float, float | None]:
    """A clock of ``length`` that runs from ``begin`` except in ``stops`` (sorted, disjoint):
    the time it has used by ``now``, and the mesh time it ran out (None: not by ``now``)."""
    used, at = 0.0, begin
    if now <= begin:  # a start a moment ahead of this node's mesh time (two nodes' clocks a hair apart)
        return 0.0, None
    for stop, go in [*stops, (now, now)]:
        halt = min(max(stop, at), now)
        if used + (halt - at) >= length:
            return length, at + (length - used)
        used += halt - at
        at = max(at, min(go, now))
    return used, None


def _period_end(period: Element, begin: float, expiry: float | None, jams: list[_Jam]) -> float | None:
    """When a period ended: its recorded start + duration; else when its clock ran out outside a
    jam, or the end of the jam skated then (None: not yet)."""
    duration = _num(period.attrs.get("duration"))
    if duration is not None:
        return begin + duration
    if expiry is None:
        return None
    for j in jams:
        if j.start <= expiry and (j.end is None or j.end > expiry):
            return j.end
    return expiry


def _current_timeout(timeouts: list[_Timeout], last: _Jam | None, now: float, over: bool) -> _Timeout | None:
    """The timeout running at ``now``: the latest taken since the last jam started, if it has
    not ended (a team timeout ends after 1:00, a review or an official timeout as a jam starts)."""
    if over or (last is not None and last.end is None):
        return None
    taken = [t for t in timeouts if t.time <= now and (last is None or t.time >= last.start)]
    if not taken:
        return None
    t = taken[-1]
    return t if now < _timeout_end(t) else None


def _timeout_end(t: _Timeout) -> float:
    return t.time + TEAM_TIMEOUT_LENGTH if t.kind == "team" else math.inf


def _in_stop(timeouts: list[_Timeout], starts: list[float], now: float) -> bool:
    """Whether a timeout taken since the last jam started has the period clock standing at ``now``
    (as ``_stops`` has it: until the next jam starts)."""
    last = max((s for s in starts if s <= now), default=None)
    return any(t.time <= now and (last is None or t.time >= last) for t in timeouts)


def _halftime(root: Element) -> float:
    ruleset = root.find("ruleset")
    halftime = None if ruleset is None else ruleset.find("halftime")
    duration = None if halftime is None else _num(halftime.attrs.get("duration"))
    return HALFTIME if duration is None or duration < 0 else duration


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _r(seconds: float) -> float:
    """Seconds as the clocks report them: to the millisecond (what the jams' times are recorded to)."""
    return round(seconds, 3)
