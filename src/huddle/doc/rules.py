"""The bout's rules: what an operation may say about a roller-derby bout.

The document's schema (model.py) says which elements and attributes exist;
these rules say which values make sense, against the bout as it stands: a
team that exists, a skater on the team's roster once it has one, the points
of one scoring trip (0 to 4), a known WFTDA penalty code, one jammer per team
per jam, a final result signed by the head official.  The node's API checks
every operation against them before recording it (``BoutDocument.check``):
an operation that breaks one is refused with the reason (HTTP 422) and
nothing is recorded.  docs/document.md ("The bout's rules") lists them.

The rules guard the door, not the replay: events already in the log are
applied by the engine's schema alone, so every node makes the same document
from the same events whatever these rules said when they were recorded.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import re
from typing import Any, Final

from .model import Element
from .ops import OperationError

__all__ = [
    "KINDS", "OFFICIAL_ROLES", "PENALTY_CODES", "POSITIONS", "SKATER_ROLES", "TEAM_TIMEOUTS", "TRIP_POINTS", "fits",
]

# WFTDA penalty codes (the rules' verbal cues, as CRG ScoreBoard's WFTDA penalty list and the
# statsbook's Penalties sheet record them).
PENALTY_CODES: Final[dict[str, str]] = {
    "A": "High Block", "B": "Back Block", "C": "Illegal Contact", "D": "Direction", "E": "Leg Block",
    "F": "Forearm", "G": "Misconduct", "H": "Head Block", "I": "Illegal Procedure", "L": "Low Block",
    "M": "Multiplayer", "N": "Interference", "P": "Illegal Position", "X": "Cut",
}
# A jammer scores a point per opposing blocker passed on a scoring trip: at most four (the
# WFTDA rules give no point for the opposing jammer since 2019).
TRIP_POINTS: Final = 4
MAX_TRIP: Final = 99  # trips in one jam, far above any real jam
TEAM_TIMEOUTS: Final = 3  # team timeouts per team per game
POSITIONS: Final = ("jammer", "pivot", "blocker")
KINDS: Final = ("team", "review", "official")  # a timeout: a team's, an official review, an official timeout
REVIEW_RESULTS: Final = ("retained", "lost")
# The officials' roles the statsbook's IGRF lists (referees, then non-skating officials).
OFFICIAL_ROLES: Final = (
    "head-referee", "inside-pack-referee", "outside-pack-referee", "jammer-referee", "alternate-referee",
    "head-nso", "penalty-tracker", "penalty-lineup-tracker", "inside-whiteboard", "jam-timer", "scorekeeper",
    "scoreboard-operator", "penalty-box-manager", "penalty-box-timer", "lineup-tracker", "alternate-nso",
)
SKATER_ROLES: Final = ("skater", "captain", "alternate-captain", "bench-staff")
SIGNERS: Final = frozenset({"head-referee", "head-nso"})
SIDES: Final = ("home", "away")
_EITHER: Final = ("", "home", "away")
_ANY: Final = ("", "home", "away", "both")
_NUMBER: Final = re.compile(r"[0-9]{1,4}")  # a skater's number: up to four digits
# Where an element may be added: its parent's tag.
_PARENTS: Final[dict[str, frozenset[str]]] = {
    "person": frozenset({"team"}), "lineup": frozenset({"jam"}), "points": frozenset({"jam"}),
    "penalty": frozenset({"jam"}), "starpass": frozenset({"jam"}), "box": frozenset({"jam"}),
    "timeout": frozenset({"jam", "period"}), "halftime": frozenset({"ruleset"}),  # a note goes anywhere
    "venue": frozenset({"bout"}), "ruleset": frozenset({"bout"}),
}


def fits(root: Element, op: dict[str, Any], target: Element | None, tag: str) -> None:
    """Raise :class:`OperationError` with the reason if ``op`` breaks a rule of the bout.

    ``target`` is the element ``op`` addresses (None: a jam or path step the
    operation would make, of tag ``tag``); the schema has been checked."""
    kind = op["op"]
    if kind == "set" and "attribute" in op:
        attrs = {} if target is None else dict(target.attrs)
        attrs[op["attribute"]] = op["value"]
        _element(root, tag, attrs, target, None if target is None else target.parent)
    elif kind == "add":
        # The elements one add makes are checked as siblings of each other too (two jammers
        # in one add): each joins a stand-in of the target once checked.
        parent = Element(tag, None) if target is None else target  # a jam the add would make: empty
        holder, siblings = Element(parent.tag, None, parent.attrs), list(parent.children)
        holder.children = siblings
        for node in op.get("children", ()):
            _node(root, node, holder)
            siblings.append(Element(node["tag"], None, node.get("attrs", {})))


def _node(root: Element, node: dict[str, Any], parent: Element) -> None:
    tag = node["tag"]
    allowed = _PARENTS.get(tag)
    if allowed is not None and parent.tag not in allowed:
        raise OperationError(f"a <{tag}> belongs in a <{' or <'.join(sorted(allowed))}>, not in a <{parent.tag}>")
    _element(root, tag, node.get("attrs", {}), None, parent)
    children = node.get("children", ())
    if children:
        made = Element(tag, None)  # the element being added: its children are checked in it
        for child in children:
            _node(root, child, made)


def _element(root: Element, tag: str, attrs: dict[str, str], itself: Element | None,
             parent: Element | None) -> None:
    """The element ``tag`` with ``attrs`` (``itself``: the element being changed, None: a new one) fits."""
    check = _CHECKS.get(tag)
    if check is not None:
        check(root, attrs, itself, parent)


# ----------------------------------------------------------------------- values


def _one_of(attrs: dict[str, str], name: str, values: tuple[str, ...], what: str) -> str:
    value = attrs.get(name, "")
    if value not in values:
        shown = ", ".join(v for v in values if v) + (" or nothing" if "" in values else "")
        raise OperationError(f"{what}: {name} must be {shown}, not {value!r}")
    return value


def _side(attrs: dict[str, str], what: str) -> str:
    return _one_of(attrs, "team", SIDES, what)


def _count(attrs: dict[str, str], name: str, low: int, high: int, what: str, *, required: bool) -> int | None:
    value = attrs.get(name, "")
    if value == "" and not required:
        return None
    if not value.isascii() or not value.isdigit() or not low <= int(value) <= high:
        raise OperationError(f"{what}: {name} must be a whole number from {low} to {high}, not {value!r}")
    return int(value)


def _seconds(attrs: dict[str, str], what: str, *names: str) -> None:
    for name in names:
        value = attrs.get(name, "")
        if value == "":
            continue
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if not math.isfinite(seconds) or seconds < 0:
            raise OperationError(f"{what}: {name} must be a number of seconds, not {value!r}")


def _skater(root: Element, team: str, attrs: dict[str, str], what: str, *, required: bool) -> None:
    """``number`` names a skater of ``team``: on its roster once it has one."""
    number = attrs.get("number", "")
    if number == "":
        if required:
            raise OperationError(f"{what}: the skater's number is missing")
        return
    roster = _roster(root, team)
    if roster and number not in roster:
        raise OperationError(f"{what}: skater {number!r} is not on the {team} roster")
    if not roster and not _NUMBER.fullmatch(number):
        raise OperationError(f"{what}: a skater's number is up to four digits, not {number!r}")


def _roster(root: Element, team: str) -> set[str]:
    for e in root.children:
        if e.tag == "team" and e.attrs.get("type") == team:
            return {p.attrs["number"] for p in e.children if p.tag == "person" and p.attrs.get("number")}
    return set()


def _siblings(parent: Element | None, tag: str, itself: Element | None) -> list[Element]:
    """The other ``tag`` elements under ``parent`` (not ``itself``)."""
    if parent is None:
        return []
    return [c for c in parent.children if c.tag == tag and c is not itself]


# ----------------------------------------------------------------------- elements


def _bout(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    status = _one_of(attrs, "status", ("", "final"), "the bout")
    signed = attrs.get("signed", "")
    if status == "final" and not signed:
        raise OperationError("the bout: the final result needs the head official's sign-off (set 'signed' first)")
    if signed:
        heads = {p.attrs.get("name", "") for team in root.children if team.attrs.get("type") == "official"
                 for p in team.children if p.tag == "person" and p.attrs.get("role") in SIGNERS}
        if heads and signed not in heads:
            raise OperationError(f"the bout: {signed!r} is not the head referee or head NSO of the officials' roster")


def _jam(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    _seconds(attrs, "a jam", "start", "duration")
    for name in ("lead", "called"):
        _one_of(attrs, name, _EITHER, "a jam")
    for name in ("lost", "injury", "no-initial"):
        _one_of(attrs, name, _ANY, "a jam")


def _period(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    _seconds(attrs, "a period", "start", "duration")


def _halftime(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    _seconds(attrs, "the halftime", "duration")


def _person(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    team = "" if parent is None else parent.attrs.get("type", "")
    if team == "official":
        if not attrs.get("name"):
            raise OperationError("an official: the name is missing")
        _one_of(attrs, "role", ("", *OFFICIAL_ROLES), "an official")
        return
    what = f"a {team} skater"
    _one_of(attrs, "role", ("", *SKATER_ROLES), what)
    number = attrs.get("number", "")
    if attrs.get("role") == "bench-staff" and not number:
        return
    if not _NUMBER.fullmatch(number):
        raise OperationError(f"{what}: the number is up to four digits, not {number!r}")
    if any(p.attrs.get("number") == number for p in _siblings(parent, "person", itself)):
        raise OperationError(f"{what}: number {number} is on the {team} roster already")


def _lineup(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    team = _side(attrs, "a lineup")
    position = _one_of(attrs, "position", POSITIONS, "a lineup")
    _skater(root, team, attrs, "a lineup", required=True)
    same = [c for c in _siblings(parent, "lineup", itself) if c.attrs.get("team") == team]
    if any(c.attrs.get("number") == attrs["number"] for c in same):
        raise OperationError(f"a lineup: skater {attrs['number']} of {team} is in this jam's lineup already")
    taken = sum(1 for c in same if c.attrs.get("position") == position)
    if position in ("jammer", "pivot") and taken:
        raise OperationError(f"a lineup: {team} has a {position} in this jam already")
    if position in ("pivot", "blocker") and sum(1 for c in same if c.attrs.get("position") != "jammer") >= 4:
        raise OperationError(f"a lineup: {team} has four blockers in this jam already (the pivot is one)")


def _points(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    team = _side(attrs, "a scoring trip")
    _count(attrs, "points", 0, TRIP_POINTS, "a scoring trip", required=True)
    trip = _count(attrs, "pass", 1, MAX_TRIP, "a scoring trip", required=False)
    _skater(root, team, attrs, "a scoring trip", required=False)
    if trip is not None and any(c.attrs.get("team") == team and c.attrs.get("pass") == str(trip)
                                for c in _siblings(parent, "points", itself)):
        raise OperationError(f"a scoring trip: trip {trip} of {team} is recorded already: fix it with a set")


def _penalty(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    team = _side(attrs, "a penalty")
    code = attrs.get("code", "")
    if code not in PENALTY_CODES:
        raise OperationError(f"a penalty: {code!r} is not a WFTDA penalty code ({', '.join(PENALTY_CODES)})")
    _skater(root, team, attrs, "a penalty", required=True)
    _seconds(attrs, "a penalty", "time")


def _starpass(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    team = _side(attrs, "a star pass")
    _count(attrs, "trip", 1, MAX_TRIP, "a star pass", required=True)
    _skater(root, team, attrs, "a star pass", required=False)
    pivot = next((c.attrs.get("number") for c in _siblings(parent, "lineup", None)
                  if c.attrs.get("team") == team and c.attrs.get("position") == "pivot"), None)
    if pivot is not None and attrs.get("number", pivot) != pivot:
        raise OperationError(f"a star pass: the star goes to the pivot, and {team}'s pivot in this jam is {pivot}")
    if any(c.attrs.get("team") == team for c in _siblings(parent, "starpass", itself)):
        raise OperationError(f"a star pass: {team} passed the star in this jam already: move that one with a set")


def _box(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    team = _side(attrs, "a box entry")
    _skater(root, team, attrs, "a box entry", required=True)
    _seconds(attrs, "a box entry", "in", "out")
    if attrs.get("in") and attrs.get("out") and float(attrs["out"]) < float(attrs["in"]):
        raise OperationError("a box entry: the skater cannot leave the box before entering it")


def _timeout(root: Element, attrs: dict[str, str], itself: Element | None, parent: Element | None) -> None:
    kind = _one_of(attrs, "kind", KINDS, "a timeout")
    _seconds(attrs, "a timeout", "time")
    if kind == "official":
        _one_of(attrs, "team", ("", "official"), "an official timeout")
        if attrs.get("result"):
            raise OperationError("an official timeout has no result")
        return
    team = _side(attrs, f"a {kind} timeout" if kind == "team" else "an official review")
    if kind == "review":
        _one_of(attrs, "result", ("", *REVIEW_RESULTS), "an official review")
        return
    if attrs.get("result"):
        raise OperationError("a team timeout has no result")
    taken = sum(1 for e in root.walk() if e.tag == "timeout" and e is not itself
                and e.attrs.get("kind") == "team" and e.attrs.get("team") == team)
    if taken >= TEAM_TIMEOUTS:
        raise OperationError(f"a team timeout: {team} has taken its {TEAM_TIMEOUTS} team timeouts")


_CHECKS: Final = {
    "bout": _bout, "jam": _jam, "period": _period, "halftime": _halftime, "person": _person, "lineup": _lineup,
    "points": _points, "penalty": _penalty, "starpass": _starpass, "box": _box, "timeout": _timeout,
}
