"""What CRG's WebSocket pushes, made from a huddle bout: the state's paths, the paths a client
registered, and what changed (docs/crg.md, "/WS").

The state is the game file's (crg/export.py) twice: at ``ScoreBoard.Game(ID)`` and at
``ScoreBoard.CurrentGame``, where CRG 5.x mirrors the game it is running (its screens
register there), with ``ScoreBoard.CurrentGame.Game`` naming it; and the clocks, as CRG's
``Clock(Period|Jam|Lineup|Timeout|Intermission)`` (:func:`clock_keys`).

A client's registered paths match as CRG's PathTrie matches them: a path covers every key
it is a prefix of, split before each ``.`` and ``(`` (``Team(1).Score`` covers
``Team(1).Score`` but not ``Team(1).ScoreX``), and ``Name(*)`` covers any id.
Pure: no I/O, no clock.
"""

from __future__ import annotations

import re
from typing import Any, Final

from ..doc.engine import jams
from ..doc.model import Element
from .export import export_crg, game_id

__all__ = ["Paths", "changed", "clock_keys", "clocks_of_jams", "ws_state"]

_TOKEN: Final = re.compile(r"(?=[.(])")
_CLOCKS: Final = (("period", "Period", "remaining"), ("jam", "Jam", "remaining"), ("lineup", "Lineup", "elapsed"),
                  ("timeout", "Timeout", "elapsed"), ("intermission", "Intermission", "remaining"))


def clocks_of_jams(document: Element) -> dict[str, Any]:
    """The clocks as far as the document's jams say them (the period and jam numbers, the jam
    running or not), in the shape of ``GET /api/v1/bout/clocks``.  The seam: where the clocks'
    pure function (``clocks(document, now)``, doc/clocks.py) is at hand, its answer goes to
    :func:`ws_state` instead, and the clocks' times reach CRG's screens too."""
    state = jams(document)
    current = state["active"] or state["upcoming"] or state["just_completed"]
    period = current["period"] if current else 1
    return {"period": {"number": period, "running": state["active"] is not None},
            "jam": {"number": current["jam"] if current else 0, "running": state["active"] is not None}}


def clock_keys(clocks: dict[str, Any]) -> dict[str, Any]:
    """The clocks (``GET /api/v1/bout/clocks``'s shape) as CRG's clock keys, relative to the game:
    ``Clock(Jam).Number``, ``.Running``, ``.Time`` (milliseconds, as CRG counts: the period,
    jam and intermission clocks down, the lineup and timeout clocks up)."""
    out: dict[str, Any] = {}
    for name, crg, counts in _CLOCKS:
        clock = clocks.get(name)
        if not isinstance(clock, dict):
            continue
        c = f"Clock({crg})"
        out[f"{c}.Id"] = crg
        out[f"{c}.Running"] = bool(clock.get("running"))
        if isinstance(clock.get("number"), int):
            out[f"{c}.Number"] = clock["number"]
        seconds = clock.get(counts)
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
            out[f"{c}.Time"] = max(0, round(seconds * 1000))
    return out


def ws_state(document: Element, summary: dict[str, Any], clocks: dict[str, Any] | None = None) -> dict[str, Any]:
    """The state CRG's WebSocket would hold for this bout (the module docstring)."""
    gid = game_id(document)
    game = f"ScoreBoard.Game({gid})"
    state: dict[str, Any] = export_crg(document, summary)["state"]
    state.update({f"{game}.{k}": v for k, v in clock_keys(clocks_of_jams(document) if clocks is None else clocks).items()})
    cut = len(game)
    mirror = {"ScoreBoard.CurrentGame" + k[cut:]: v for k, v in state.items() if k.startswith(game)}
    state.update(mirror)
    state["ScoreBoard.CurrentGame.Game"] = gid
    return state


def changed(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The keys whose value changed, new ones included; a key gone is None (as CRG says it)."""
    out = {k: v for k, v in after.items() if k not in before or before[k] != v or type(before[k]) is not type(v)}
    out.update({k: None for k in before if k not in after})
    return out


class Paths:
    """The paths one client registered, as a trie of their tokens (CRG's PathTrie)."""

    __slots__ = ("count", "root")

    def __init__(self) -> None:
        self.root: dict[str, Any] = {}  # token -> subtrie; "" -> True where a path ends
        self.count = 0

    def add(self, path: str) -> None:
        head = self.root
        for token in _TOKEN.split(path):
            if "" in head:
                return  # a shorter path covers it already
            head = head.setdefault(token, {})
        head.clear()
        head[""] = True
        self.count += 1

    def covers(self, key: str) -> bool:
        return _covers(self.root, _TOKEN.split(key), 0)

    def select(self, state: dict[str, Any]) -> dict[str, Any]:
        """The part of ``state`` the registered paths cover."""
        return {k: v for k, v in state.items() if self.covers(k)} if self.root else {}


def _covers(head: dict[str, Any], tokens: list[str], i: int) -> bool:
    while True:
        if "" in head:
            return True
        if i >= len(tokens):
            return False
        star = head.get("(*)")
        if star is not None and tokens[i].startswith("("):
            j = i  # an id holding dots was split: it ends at the token that ends with ")"
            while j < len(tokens) and not tokens[j].endswith(")"):
                j += 1
            if _covers(star, tokens, j + 1):
                return True
        nxt = head.get(tokens[i])
        if nxt is None:
            return False
        head, i = nxt, i + 1
