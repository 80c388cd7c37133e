"""The WFTDA statsbook's cell map: which sheet and cell holds what (docs/statsbook.md).

Facts read in CRG ScoreBoard's exporter (rollerderby/scoreboard,
``src/com/carolinarollergirls/scoreboard/utils/StatsbookExporter.java``, the layout of the
current WFTDA statsbook), written here as Excel addresses (rows from 1, columns from A).
Nothing but constants and the arithmetic that turns a row and a column into an address.
"""

from __future__ import annotations

from typing import Final

__all__ = [
    "CLOCK", "IGRF", "LINEUPS", "OFFICIAL_LABELS", "PENALTIES", "PENALTY_BOX", "REVIEWS", "SCORE", "SHEETS", "address",
    "column",
]

SHEETS: Final = ("IGRF", "Score", "Penalties", "Lineups", "Game Clock", "Penalty Box", "Official Reviews")


def column(n: int) -> str:
    """Column ``n`` (1 = A) as Excel names it: A .. Z, AA .. AZ, BA ..."""
    name = ""
    while n > 0:
        n, rest = divmod(n - 1, 26)
        name = chr(ord("A") + rest) + name
    return name


def address(row: int, col: int) -> str:
    """The cell at ``row`` and ``col`` (both from 1): ``address(14, 2) == "B14"``."""
    return f"{column(col)}{row}"


class IGRF:
    """The IGRF sheet: the event, the teams and their rosters, the officials."""

    VENUE: Final = "B3"
    CITY: Final = "I3"
    TOURNAMENT: Final = "B5"  # the event's name: the bout's ``name``
    DATE: Final = "B7"
    TEAM_COL: Final = {"home": 2, "away": 9}  # B, I: league, team, colour, skaters' numbers, captain
    LEAGUE_ROW: Final = 10
    TEAM_ROW: Final = 11
    COLOR_ROW: Final = 12
    SKATER_ROWS: Final = range(14, 34)  # 20 skaters per team: number in TEAM_COL, name in the next column
    CAPTAIN_ROW: Final = 49  # the captain's name
    HEAD_NSO_ROW: Final = 60  # name only: the role is the sheet's own label
    NSO_ROWS: Final = range(61, 80)
    HEAD_REF_ROW: Final = 80
    REF_ROWS: Final = range(81, 89)
    ROLE_COL: Final = 1  # A
    NAME_COL: Final = 3  # C
    LEAGUE_COL: Final = 8  # H: an official's league (the document has none)


class SCORE:
    """The Score sheet: a row per jam (two with a star pass), per team 18 columns."""

    PERIOD_TOP: Final = {1: 1, 2: 43}  # each period's header row
    JAM_ROWS: Final = {1: range(4, 42), 2: range(46, 84)}
    TEAM_COL: Final = {"home": 1, "away": 20}  # A, T: the first of the team's columns
    # offsets from TEAM_COL
    JAM: Final = 0  # the jam's number; on the star pass row SP (this team's) or SP* (the other's)
    JAMMER: Final = 1  # on the star pass row: the pivot who took the star
    LOST: Final = 2
    LEAD: Final = 3
    CALL: Final = 4
    INJURY: Final = 5
    NO_INITIAL: Final = 6
    TRIP_2: Final = 7  # trip N at TRIP_2 + N - 2, for N = 2 .. 9; trips 10 and after summed in TRIP_10
    TRIP_10: Final = 15
    JAM_TOTAL: Final = 16  # formulas in the league's blank: written only in a workbook made from nothing
    GAME_TOTAL: Final = 17
    SCOREKEEPER: Final = {"home": 12, "away": 31}  # L, AE of the header row (per team: left blank, see docs)
    JAMMER_REF: Final = {"home": 15, "away": 34}  # O, AH


class LINEUPS:
    """The Lineups sheet: the same rows as Score; per team a skater and three box cells per position."""

    PERIOD_TOP: Final = SCORE.PERIOD_TOP
    JAM_ROWS: Final = SCORE.JAM_ROWS
    TEAM_COL: Final = {"home": 1, "away": 27}  # A, AA
    JAM: Final = 0  # formula (from Score) in the league's blank: only in a workbook made from nothing
    NO_PIVOT: Final = 1  # X: no pivot; on the star pass row, X: the star passed
    JAMMER: Final = 2  # formula (from Score) in the league's blank; its box cells are JAMMER + 1 .. + 3
    PIVOT: Final = 6
    BLOCKERS: Final = (10, 14, 18)
    BOX_CELLS: Final = 3
    TRACKER: Final = {"home": 16, "away": 42}  # P, AP of the header row


class PENALTIES:
    """The Penalties sheet: two rows per skater (code, jam), nine penalties a skater, a block per period and team."""

    TRACKER: Final = ("N1", "AP1")  # the penalty tracker, period 1 and period 2
    FIRST_ROW: Final = 4  # skater i (in IGRF order) has codes on row 4 + 2i, jams on the row below
    SKATERS: Final = 20
    PER_SKATER: Final = 9
    # the column of penalty 1 of each block; penalty n at FIRST + n - 1
    FIRST: Final = {(1, "home"): 2, (1, "away"): 17, (2, "home"): 30, (2, "away"): 45}  # B, Q, AD, AS
    NUMBER_COL: Final = {(1, "home"): 1, (1, "away"): 16, (2, "home"): 29, (2, "away"): 44}  # formulas in the blank


class CLOCK:
    """The Game Clock sheet: captains, timeouts and reviews per period; a row per jam."""

    TEAM_ROW: Final = {(1, "home"): 5, (1, "away"): 7, (2, "home"): 56, (2, "away"): 58}  # captain; timeouts
    NAME_COL: Final = 2  # B: the captain's name on TEAM_ROW, the alternate's on the row below
    TIMEOUT_COLS: Final = (4, 5, 6)  # D, E, F: the period clock at each team timeout (3 a game), X: used before
    REVIEW_COLS: Final = (7, 8)  # G, H: the period clock at an official review; X: the second lost with the first
    JAM_ROW0: Final = {1: 10, 2: 61}  # jam J on row JAM_ROW0 + J
    JAMS: Final = 40
    DURATION_COL: Final = 2  # B: the jam's length in seconds
    EVENTS_COL: Final = 4  # D: TO, OR, OFF, INJ after the jam
    DETAILS_COL: Final = 5  # E: whose, and the period clock


class PENALTY_BOX:
    """The Penalty Box sheet's header: the box timers (per team: left blank, see docs).  A workbook
    made from nothing lists the box trips below it, in huddle's own table (the map has no trips)."""

    TABLE_ROW: Final = 3  # the table's header; a trip a row below it
    TABLE: Final = ("Period", "Jam", "Team", "Skater", "In (mesh time)", "Out (mesh time)", "Seconds")


class REVIEWS:
    """The Official Reviews sheet: huddle's own table (the statsbook keeps reviews on Game Clock)."""

    TABLE_ROW: Final = 1
    TABLE: Final = ("Period", "After jam", "Team", "Result", "Time (mesh time)")


# The IGRF's names of the officials' roles, by the document's role (docs/document.md).
OFFICIAL_LABELS: Final = {
    "head-referee": "Head Referee", "inside-pack-referee": "Inside Pack Referee",
    "outside-pack-referee": "Outside Pack Referee", "jammer-referee": "Jammer Referee",
    "alternate-referee": "Alternate Referee", "head-nso": "Head NSO", "penalty-tracker": "Penalty Tracker",
    "penalty-lineup-tracker": "Penalty Lineup Tracker", "inside-whiteboard": "Inside Whiteboard",
    "jam-timer": "Jam Timer", "scorekeeper": "Scorekeeper", "scoreboard-operator": "Scoreboard Operator",
    "penalty-box-manager": "Penalty Box Manager", "penalty-box-timer": "Penalty Box Timer",
    "lineup-tracker": "Lineup Tracker", "alternate-nso": "Alternate NSO",
}
