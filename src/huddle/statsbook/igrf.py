"""A filled statsbook's IGRF sheet as document operations (``huddle bout import --igrf``).

Pure: a reader of the sheet's cells in (an address -> the value openpyxl read), operations
out, in the JSON form of docs/document.md: the event (the bout's name and date, the venue),
the teams (league, name, colour), their rosters and the officials.  Nothing is checked here
beyond the cells' shapes: the node's rules check the operations as any write (a number of five
digits, a skater twice on a roster, an unknown role: refused with the reason, nothing recorded).
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from typing import Any, Final

from .cellmap import IGRF, OFFICIAL_LABELS, address

__all__ = ["igrf_operations", "role_of"]

SIDES: Final = ("home", "away")

# The IGRF's role names as people write them (the labels, their short forms), to the document's roles.
_ROLES: Final = {
    **{label.lower(): role for role, label in OFFICIAL_LABELS.items()},
    **{role: role for role in OFFICIAL_LABELS},
    "hr": "head-referee", "ipr": "inside-pack-referee", "opr": "outside-pack-referee", "jr": "jammer-referee",
    "altr": "alternate-referee", "hnso": "head-nso", "pt": "penalty-tracker", "plt": "penalty-lineup-tracker",
    "iwb": "inside-whiteboard", "jt": "jam-timer", "sk": "scorekeeper", "sbo": "scoreboard-operator",
    "so": "scoreboard-operator", "pbm": "penalty-box-manager", "pbt": "penalty-box-timer", "lt": "lineup-tracker",
    "altn": "alternate-nso", "alternate": "alternate-nso",
}


def role_of(text: str) -> str:
    """The document's role for an IGRF role name ("Jam Timer", "JT", "jam-timer"); the text itself if unknown
    (the node's rules then refuse it with the reason)."""
    return _ROLES.get(" ".join(text.split()).lower(), text)


def text_of(value: object) -> str:
    """A cell's value as the document's text: a whole number without ``.0``, a date in ISO form."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, datetime.datetime):
        return value.date().isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    return " ".join(str(value).split())


def igrf_operations(cell: Callable[[str], object]) -> list[dict[str, Any]]:
    """The operations that set up the bout the IGRF describes (the module docstring)."""
    def get(where: str) -> str:
        return text_of(cell(where))

    ops: list[dict[str, Any]] = []

    def set_(to: dict[str, Any], attribute: str, value: str) -> None:
        if value:
            ops.append({"op": "set", "to": to, "attribute": attribute, "value": value})

    set_({"path": "bout"}, "name", get(IGRF.TOURNAMENT))
    set_({"path": "bout"}, "date", get(IGRF.DATE))
    set_({"path": "venue"}, "name", get(IGRF.VENUE))
    set_({"path": "venue"}, "city", get(IGRF.CITY))
    for side in SIDES:
        col = IGRF.TEAM_COL[side]
        for row, attribute in ((IGRF.LEAGUE_ROW, "league"), (IGRF.TEAM_ROW, "name"), (IGRF.COLOR_ROW, "color")):
            set_({"team": side}, attribute, get(address(row, col)))
        captain = get(address(IGRF.CAPTAIN_ROW, col))
        skaters = []
        for row in IGRF.SKATER_ROWS:
            number, name = get(address(row, col)).rstrip("*"), get(address(row, col + 1))
            if number or name:
                role = "captain" if captain and name == captain else "skater"
                skaters.append({"tag": "person", "attrs": {"number": number, "role": role, **({"name": name} if name else {})}})
        if skaters:
            ops.append({"op": "add", "to": {"team": side}, "children": skaters})
    officials = []
    for row, default in [(IGRF.HEAD_NSO_ROW, "head-nso"), *((r, "") for r in IGRF.NSO_ROWS),
                         (IGRF.HEAD_REF_ROW, "head-referee"), *((r, "") for r in IGRF.REF_ROWS)]:
        name = get(address(row, IGRF.NAME_COL))
        label = "" if row == IGRF.HEAD_NSO_ROW else get(address(row, IGRF.ROLE_COL))
        if name:
            role = role_of(label) if label else default
            officials.append({"tag": "person", "attrs": {"name": name, **({"role": role} if role else {})}})
    if officials:
        ops.append({"op": "add", "to": {"team": "official"}, "children": officials})
    return ops
