"""CRG ScoreBoard's state keys and values: the vocabulary both directions of the game file share.

CRG ScoreBoard (github.com/rollerderby/scoreboard) keeps its whole state as a flat map of
paths to values, ``ScoreBoard.Game(ID).Period(1).Jam(3).TeamJam(1).Lead -> true``: one
segment per object, its id in parentheses (a number for numbered children such as periods,
jams and scoring trips; a UUID or a name otherwise).  Its game file is that map, restricted to
one game, under ``{"state": {...}}`` (its JSONStateSnapshotter), and its WebSocket pushes the
same paths (its WS.java).  Version 4.x kept one game at the root (``ScoreBoard.Team(1)...``);
5.x holds games by id (``ScoreBoard.Game(ID).Team(1)...``).

Here: a key split into its segments, the keys of one game as a tree, the values read
leniently (CRG writes booleans and numbers as JSON values, older files as strings), and the
mappings of roles and flags between the two vocabularies.  Pure: no I/O.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Final

from ..errors import HuddleError

__all__ = ["FLAG_OF_ROLE", "MAX_KEY", "OFFICIAL_ROLE_NAMES", "ROLE_OF_FLAG", "CrgError", "Node", "as_bool",
           "as_int", "as_text", "ms_of_seconds", "seconds_of_ms", "split_key"]

MAX_KEY: Final = 1000  # characters in one state key; CRG's are well under 200

_NAME: Final = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_SEGMENT: Final = re.compile(r"([A-Za-z][A-Za-z0-9_]*)(?:\(([^()]*)\))?")  # an id without parentheses in it

# The huddle officials' roles (doc/rules.py OFFICIAL_ROLES) as CRG names them (its Official.java,
# the statsbook IGRF's words); a referee is one of CRG's `Ref`, the others `Nso`.
OFFICIAL_ROLE_NAMES: Final[dict[str, str]] = {
    "head-referee": "Head Referee", "inside-pack-referee": "Inside Pack Referee",
    "outside-pack-referee": "Outside Pack Referee", "jammer-referee": "Jammer Referee",
    "alternate-referee": "Referee Alternate", "head-nso": "Head Non-Skating Official",
    "penalty-tracker": "Penalty Tracker", "penalty-lineup-tracker": "Penalty Lineup Tracker",
    "inside-whiteboard": "Inside Whiteboard Operator", "jam-timer": "Jam Timer", "scorekeeper": "Scorekeeper",
    "scoreboard-operator": "ScoreBoard Operator", "penalty-box-manager": "Penalty Box Manager",
    "penalty-box-timer": "Penalty Box Timer", "lineup-tracker": "Lineup Tracker",
    "alternate-nso": "Non-Skating Official Alternate",
}
# A skater's role as CRG's roster flags say it (its team editor: "" skater, C captain, A alternate
# captain, B bench staff; BA, a bench alternate captain, and ALT, not skating, have no huddle role).
FLAG_OF_ROLE: Final[dict[str, str]] = {"captain": "C", "alternate-captain": "A", "bench-staff": "B"}
ROLE_OF_FLAG: Final[dict[str, str]] = {flag: role for role, flag in FLAG_OF_ROLE.items()}


class CrgError(HuddleError):
    """A game file that is not one: its reason."""


def split_key(key: str) -> list[tuple[str, str | None]]:
    """``Game(x).Rule(Period.Number).Name`` -> ``[("Game", "x"), ("Rule", "Period.Number"), ("Name", None)]``.
    An id may hold dots and balanced parentheses.  Raises CrgError for anything else."""
    out: list[tuple[str, str | None]] = []
    i, n = 0, len(key)
    while True:
        m = _SEGMENT.match(key, i)  # the common segment, in one step
        if m is not None and (m.end() == n or key[m.end()] == "."):
            out.append((m[1], m[2]))
            if m.end() == n:
                return out
            if m.end() + 1 == n:
                raise CrgError(f"not a state key: {key[:80]!r}")
            i = m.end() + 1
            continue
        m = _NAME.match(key, i)
        if m is None:
            raise CrgError(f"not a state key: {key[:80]!r}")
        name, i = m.group(), m.end()
        ident: str | None = None
        if i < n and key[i] == "(":
            depth, j = 1, i + 1
            while j < n and depth:
                depth += {"(": 1, ")": -1}.get(key[j], 0)
                j += 1
            if depth:
                raise CrgError(f"not a state key (unbalanced parentheses): {key[:80]!r}")
            ident, i = key[i + 1:j - 1], j
        out.append((name, ident))
        if i == n:
            return out
        if key[i] != "." or i + 1 == n:
            raise CrgError(f"not a state key: {key[:80]!r}")
        i += 1


class Node:
    """One object of the state: its value (if the path itself has one) and its children, by
    (name, id), in the order the file first names them."""

    __slots__ = ("kids", "value")

    def __init__(self) -> None:
        self.value: Any = None
        self.kids: dict[tuple[str, str | None], Node] = {}

    def put(self, segments: list[tuple[str, str | None]], value: Any) -> None:
        node = self
        for seg in segments:
            child = node.kids.get(seg)
            if child is None:
                child = node.kids[seg] = Node()
            node = child
        node.value = value

    def get(self, name: str, ident: str | None = None) -> Node | None:
        return self.kids.get((name, ident))

    def at(self, name: str, ident: str | None = None) -> Any:
        """The value of a child (None if it has none)."""
        child = self.kids.get((name, ident))
        return None if child is None else child.value

    def each(self, name: str) -> Iterator[tuple[str, Node]]:
        """The children called ``name``, with their ids, in file order."""
        for (kid_name, ident), child in self.kids.items():
            if kid_name == name and ident is not None:
                yield ident, child

    def numbered(self, name: str) -> list[tuple[int, Node]]:
        """The children called ``name`` whose id is a number (periods, jams, trips), by number."""
        out = [(int(ident), child) for ident, child in self.each(name) if ident.isascii() and ident.isdigit()
               and len(ident) <= 6]
        return sorted(out, key=lambda item: item[0])


def as_text(value: Any) -> str:
    """A value as text: None -> ""."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def as_bool(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.lower() == "true")


def as_int(value: Any) -> int | None:
    """A whole number (a JSON number or its text), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and 0 < len(value) <= 20 and value.lstrip("-").isascii() and value.lstrip("-").isdigit():
        return int(value)
    return None


def seconds_of_ms(value: Any) -> str | None:
    """CRG's milliseconds as the document's seconds (``120500`` -> ``"120.5"``); None for none,
    zero or nonsense (CRG writes 0 for a time never taken)."""
    ms = as_int(value)
    if ms is None or ms <= 0:
        return None
    whole, rest = divmod(ms, 1000)
    return str(whole) if not rest else f"{whole}.{rest:03d}".rstrip("0")


def ms_of_seconds(text: str | None) -> int:
    """The document's seconds as CRG's milliseconds (0: none, or not a number)."""
    if not text:
        return 0
    try:
        seconds = float(text)
    except ValueError:
        return 0
    if not 0 <= seconds < 1e13:  # NaN and infinities fail this too
        return 0
    return round(seconds * 1000)
