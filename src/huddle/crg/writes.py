"""CRG's ``Set`` as document operations, for a ``/WS`` that takes writes (``[crg] ws-writable``;
docs/crg.md, "Writes").

A Set names one of the state's paths and a value.  The paths the document can say map to
explicit set operations (never a toggle: the value is what the official means, whoever else
wrote before): a team's ``TeamName``, ``LeagueName`` and ``UniformColor``; a team jam's
``Lead``, ``Calloff``, ``Lost``, ``Injury`` and ``NoInitial``; a scoring trip's ``Score``
(``null`` removes the trip, as CRG's null deletes).  The operations go through the node's
door as any write, so the bout's rules check them.  Anything else is refused with the
reason.  Pure: the document in, operations out.
"""

from __future__ import annotations

from typing import Any, Final

from ..doc.model import Element
from ..doc.rules import SIDES
from .export import game_id
from .paths import MAX_KEY, CrgError, as_bool, as_int, split_key

__all__ = ["ops_of_set"]

_TEAM: Final = {"TeamName": "name", "LeagueName": "league", "UniformColor": "color"}
_ONE_SIDE: Final = {"Lead": "lead", "Calloff": "called"}  # home, away or nothing
_EITHER_SIDE: Final = {"Lost": "lost", "Injury": "injury", "NoInitial": "no-initial"}  # home, away, both or nothing


def ops_of_set(document: Element, key: Any, value: Any, flag: Any = None) -> list[dict[str, Any]]:
    """The operations a Set of ``key`` to ``value`` means for this bout (none: it says what
    the document says already).  Raises CrgError with the reason when it means nothing here."""
    if not isinstance(key, str) or not 0 < len(key) <= MAX_KEY:
        raise CrgError(f"'key' must be a path of 1..{MAX_KEY} characters")
    if flag is not None:
        raise CrgError(f"a Set with the flag {str(flag)[:20]!r} is not taken: set the value itself")
    segments = _relative(document, split_key(key))
    names = [name for name, _ in segments]
    if names[:1] == ["Team"] and len(segments) == 2 and names[1] in _TEAM:
        side = _side(segments[0][1])
        text = "" if value is None else str(value)
        return [{"op": "set", "to": {"team": side}, "attribute": _TEAM[names[1]], "value": text}]
    if names[:3] == ["Period", "Jam", "TeamJam"]:
        p, j, side = _number(segments[0][1], 2), _number(segments[1][1], 200), _side(segments[2][1])
        jam = _jam(document, p, j)
        to = {"period": p, "jam": j}
        rest = segments[3:]
        if len(rest) == 1 and rest[0][0] in _ONE_SIDE:
            attribute = _ONE_SIDE[rest[0][0]]
            now = "" if jam is None else jam.attrs.get(attribute, "")
            new = side if as_bool(value) else "" if now == side else now
            return [] if new == now else [{"op": "set", "to": to, "attribute": attribute, "value": new}]
        if len(rest) == 1 and rest[0][0] in _EITHER_SIDE:
            attribute = _EITHER_SIDE[rest[0][0]]
            now = "" if jam is None else jam.attrs.get(attribute, "")
            sides = {s for s in SIDES if now in (s, "both")} - {side} | ({side} if as_bool(value) else set())
            new = "both" if len(sides) == 2 else next(iter(sides), "")
            return [] if new == now else [{"op": "set", "to": to, "attribute": attribute, "value": new}]
        if len(rest) == 2 and rest[0][0] == "ScoringTrip" and rest[1] == ("Score", None):
            return _trip(jam, to, side, _number(rest[0][1], 99), value)
    raise CrgError(f"{key[:100]} cannot be set here: a team's TeamName, LeagueName, UniformColor, a team jam's "
                   "Lead, Calloff, Lost, Injury, NoInitial and a scoring trip's Score can (docs/crg.md)")


def _relative(document: Element, segments: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
    """The path below the game: ``ScoreBoard.Game(ID).`` (this bout's id) or ``ScoreBoard.CurrentGame.``."""
    if len(segments) > 2 and segments[0] == ("ScoreBoard", None) and segments[1] in (
            ("CurrentGame", None), ("Game", game_id(document))):
        return segments[2:]
    raise CrgError("a Set names a path of this bout's game: ScoreBoard.CurrentGame.… or ScoreBoard.Game(ID).…")


def _side(ident: str | None) -> str:
    if ident in ("1", "2"):
        return SIDES[int(ident) - 1]
    raise CrgError(f"a team is 1 or 2, not {str(ident)[:20]!r}")


def _number(ident: str | None, high: int) -> int:
    n = as_int(ident)
    if n is None or not 1 <= n <= high:
        raise CrgError(f"{str(ident)[:20]!r} is not a number 1..{high}")
    return n


def _jam(document: Element, p: int, j: int) -> Element | None:
    period = document.find("period", number=str(p))
    return None if period is None else period.find("jam", number=str(j))


def _trip(jam: Element | None, to: dict[str, int], side: str, trip: int, value: Any) -> list[dict[str, Any]]:
    """A trip's points: set where the document has the trip, added where not; null removes it."""
    held = None if jam is None else jam.find("points", team=side, **{"pass": str(trip)})
    if value is None:
        return [] if held is None else [{"op": "remove", "to": {"eid": held.eid}}]
    points = as_int(value)
    if points is None:
        raise CrgError(f"a trip's Score is a whole number, not {str(value)[:20]!r}")
    if held is not None:
        return [{"op": "set", "to": {"eid": held.eid}, "attribute": "points", "value": str(points)}]
    return [{"op": "add", "to": to, "children": [
        {"tag": "points", "attrs": {"team": side, "points": str(points), "pass": str(trip)}}]}]
