"""Officials' roles and who owns which field of the bout (docs/document.md "Roles").

An official's device names its role with each write (``?role=ROLE``; the
operation's ``"role"`` member in the log).  Every field of the bout has one
owning role (:data:`OWNERS` and :func:`owners`); the head NSO may write any
field.  A write by a role that does not own the field is recorded in the log
but not applied: the document keeps the owner's value and the write is a
conflict until the head NSO writes the field (the engine keeps the list).  A
write with no role is nobody's conflict: it applies as every write did before
roles.

The per-team flags of a jam (``lead``, ``called``, ``lost``, ``injury``,
``no-initial``) are one attribute naming a team, home, away or both: each
team's part of it is its scorekeeper's field, so a write is owned by the
scorekeepers of the teams whose part it changes (``lead`` home -> away changes
both: the away scorekeeper's claim while the home jammer holds the lead is a
conflict for the head NSO, not a silent overwrite).

Pure: no I/O, no clock.
"""

from __future__ import annotations

from typing import Any, Final

from .model import Element

__all__ = [
    "EXCLUSIVE", "HEAD", "ROLES", "TEAM_FLAGS", "Conflicts", "flag_value", "owners", "owners_of_element", "team_parts",
]

ROLES: Final = (
    "scorekeeper-home", "scorekeeper-away", "lineup-tracker-home", "lineup-tracker-away", "penalty-tracker",
    "penalty-box-timer", "jam-timer", "head-nso",
)
HEAD: Final = "head-nso"  # may write any field: an override, which resolves the field's conflicts
TEAM_FLAGS: Final = ("lead", "called", "lost", "injury", "no-initial")  # a jam's attributes naming teams
EXCLUSIVE: Final = frozenset({"lead", "called"})  # one team at most (lost, injury, no-initial: both may)
FLAG_VALUES: Final = ("yes", "no")  # a per-team set of a flag: explicit, never a toggle

# The owning role of an element's fields, by its tag; "TEAM": the role of the element's own team
# (its ``team`` attribute).  A tag not listed (``note``) has no owner: any role may write it.
OWNERS: Final[dict[str, str]] = {
    "bout": HEAD, "venue": HEAD, "ruleset": HEAD, "halftime": HEAD, "team": HEAD, "person": HEAD,
    "period": "jam-timer", "jam": "jam-timer", "timeout": "jam-timer",
    "points": "scorekeeper-TEAM", "starpass": "scorekeeper-TEAM", "lineup": "lineup-tracker-TEAM",
    "penalty": "penalty-tracker", "box": "penalty-box-timer",
}


def owners_of_element(tag: str, attrs: dict[str, str]) -> tuple[str, ...]:
    """The role that owns an element of ``tag`` with ``attrs`` (an empty tuple: nobody's;
    an element of a team-owned tag with no team of its own: the head NSO's)."""
    owner = OWNERS.get(tag)
    if owner is None:
        return ()
    if owner.endswith("-TEAM"):
        team = attrs.get("team", "")
        return (owner[:-4] + team,) if team in ("home", "away") else (HEAD,)
    return (owner,)


def team_parts(value: str) -> frozenset[str]:
    """The teams a flag's value names: "" none, "home", "away", "both" (anything else: none)."""
    if value == "both":
        return frozenset({"home", "away"})
    return frozenset({value}) if value in ("home", "away") else frozenset()


def flag_value(name: str, current: str, team: str, on: bool) -> str:
    """The value of flag ``name`` after a per-team set of ``team``'s part to ``on``: for an
    exclusive flag, the team takes it (from the other team, if it held it)."""
    parts = set(team_parts(current))
    if on:
        parts = {team} if name in EXCLUSIVE else parts | {team}
    else:
        parts.discard(team)
    return "both" if len(parts) == 2 else next(iter(parts), "")


def owners(target: Element, attribute: str | None, new: str | None = None) -> tuple[str, ...]:
    """The roles that own a write of ``attribute`` of ``target`` (None: the element itself:
    adding, removing it or its text).  For a team flag of a jam, ``new`` is the value the
    write leaves: the scorekeepers of the teams whose part changes own it."""
    if target.tag == "jam" and attribute in TEAM_FLAGS and new is not None:
        changed = team_parts(target.attrs.get(attribute, "")) ^ team_parts(new)
        return tuple(f"scorekeeper-{t}" for t in ("home", "away") if t in changed)
    mine = owners_of_element(target.tag, target.attrs)
    if attribute == "team" and new is not None:  # moving a trip, a lineup... to a team: its owner's too
        return tuple(dict.fromkeys(mine + owners_of_element(target.tag, {**target.attrs, "team": new})))
    return mine


class Conflicts:
    """The writes held as conflicts, by the eid of the element written, in the order they were
    applied; and those the head NSO resolved, each with the write that did.  A function of the
    events in the log's order, as the document is."""

    __slots__ = ("last", "pending", "resolved")

    def __init__(self) -> None:
        self.pending: dict[str, list[dict[str, Any]]] = {}
        self.resolved: list[dict[str, Any]] = []
        self.last: dict[str, Any] | None = None  # the conflict the last hold() listed

    def copy(self) -> Conflicts:
        """The pending conflicts (a scratch document's, to check writes against)."""
        out = Conflicts()
        out.pending = {eid: list(held) for eid, held in self.pending.items()}
        return out

    def __contains__(self, eid: str) -> bool:
        return eid in self.pending

    def listed(self) -> list[dict[str, Any]]:
        """The pending conflicts in the log's order."""
        return sorted((c for held in self.pending.values() for c in held),
                      key=lambda c: (c["time"], c["source"], c["seq"]))

    def hold(self, key: tuple[float, bytes, int], eid: str, field: str, *, owner: str, by: str,
             value: str) -> dict[str, Any]:
        """List the write of event ``key`` (by role ``by``) to ``field`` of ``eid``, owned by ``owner``."""
        conflict = self.last = {"eid": eid, "field": field, "owner": owner, "by": by, "source": key[1].hex(),
                                "seq": key[2], "value": value, "time": key[0]}
        self.pending.setdefault(eid, []).append(conflict)
        return conflict

    def settle(self, eid: str, fields: set[str] | None, key: tuple[float, bytes, int]) -> None:
        """The head NSO wrote ``fields`` of ``eid`` (None: the element itself) in event ``key``:
        their conflicts are resolved."""
        held = self.pending.get(eid)
        if not held:
            return
        settled = [c for c in held if fields is None or c["field"] in fields]
        if settled:
            by = {"source": key[1].hex(), "seq": key[2], "time": key[0]}
            self.resolved.extend({**c, "resolved_by": by} for c in settled)
            left = [c for c in held if c not in settled]
            if left:
                self.pending[eid] = left
            else:
                del self.pending[eid]
