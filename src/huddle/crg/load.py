"""A CRG ScoreBoard game file as document operations (docs/crg.md, "From CRG to huddle").

:func:`import_crg` reads a game file CRG 4.x or 5.x saved (``{"state": {path: value}}``)
and returns the operations (doc/ops.py's JSON form) that record the same bout in an empty
document: the bout's name, date, venue and ruleset; the teams and their rosters; the
officials; per period its times; per jam its times and flags, then one ``add`` of its
lineups, scoring trips, star passes, penalties, box trips and timeouts; the sign-off last.
Sent as one batch, the node checks them against the bout's rules as it checks any write:
all are recorded or none.

A 5.x file may hold several games (an autosave holds them all): the one
``ScoreBoard.CurrentGame.Game`` names, else the first.  What does not map is left out
(docs/crg.md lists it).  Pure: no I/O.
"""

from __future__ import annotations

from typing import Any, Final

from ..doc.rules import PENALTY_CODES, SIDES
from .paths import (
    MAX_KEY,
    OFFICIAL_ROLE_NAMES,
    ROLE_OF_FLAG,
    CrgError,
    Node,
    as_bool,
    as_int,
    as_text,
    seconds_of_ms,
    split_key,
)

__all__ = ["MAX_KEYS", "import_crg"]

MAX_KEYS: Final = 1_000_000  # keys in one file: a long game's are some tens of thousands
_PERIODS: Final = (1, 2)  # the document's periods (CRG's overtime is a jam of period 2)
_ROLE_OF_NAME: Final = {name: role for role, name in OFFICIAL_ROLE_NAMES.items()}
# The keys of a 4.x file's one game (at the root); the rest of its state is not the game's.
_V4_GAME: Final = frozenset({"Team", "Period", "Name", "OfficialScore", "Ruleset", "RulesetName"})

Op = dict[str, Any]


def import_crg(data: Any) -> list[Op]:
    """The operations that record the game of ``data`` (the module docstring); CrgError if
    ``data`` is not a game file."""
    game = _game(data)
    ops: list[Op] = []
    bout = {"name": as_text(game.at("Name")), "date": as_text(game.at("EventInfo", "Date"))}
    ops += _sets({"path": "bout"}, bout)
    ops += _sets({"path": "venue"}, {"name": as_text(game.at("EventInfo", "Venue")),
                                     "city": as_text(game.at("EventInfo", "City"))})
    ruleset = as_text(game.at("RulesetName"))
    ops += _sets({"path": "ruleset"}, {"name": "" if ruleset == "Custom" else ruleset})  # CRG's default: none named
    numbers: dict[str, dict[str, str]] = {}  # side -> skater id -> number
    for side in SIDES:
        team = game.get("Team", str(_team_number(side))) or Node()
        ops += _sets({"team": side}, {
            "name": as_text(team.at("TeamName")) or as_text(team.at("Name")), "league": as_text(team.at("LeagueName")),
            "color": as_text(team.at("UniformColor"))})
        people, numbers[side] = _roster(team)
        if people:
            ops.append({"op": "add", "to": {"team": side}, "children": people})
    officials, names = _officials(game)
    if officials:
        ops.append({"op": "add", "to": {"team": "official"}, "children": officials})
    items = _items(game, numbers)
    for p in _PERIODS:
        period = game.get("Period", str(p))
        if period is None:
            continue
        ops += _sets({"period": p}, {"start": seconds_of_ms(period.at("WalltimeStart")) or "",
                                     "duration": seconds_of_ms(period.at("Duration")) or ""})
        for j, jam in period.numbered("Jam"):
            ops += _jam(p, j, jam, numbers, items.get((p, j), []))
        if items.get((p, 0)):  # the period's own timeouts (before its first jam), after its jams
            ops.append({"op": "add", "to": {"period": p}, "children": items[(p, 0)]})
    signer = names.get(as_text(game.at("HR"))) or names.get(as_text(game.at("HNSO")))
    if as_bool(game.at("OfficialScore")) and signer:
        ops.append({"op": "set", "to": {"path": "bout"}, "attribute": "signed", "value": signer})
        ops.append({"op": "set", "to": {"path": "bout"}, "attribute": "status", "value": "final"})
    return ops


def _game(data: Any) -> Node:
    """The tree of the file's game (its keys without the ``ScoreBoard.Game(ID).`` prefix)."""
    if not isinstance(data, dict) or not isinstance(data.get("state"), dict):
        raise CrgError('not a CRG game file: expected {"state": {path: value, ...}}')
    state: dict[Any, Any] = data["state"]
    if len(state) > MAX_KEYS:
        raise CrgError(f"more than {MAX_KEYS} keys: not a game file")
    current = state.get("ScoreBoard.CurrentGame.Game")
    games: dict[str, Node] = {}
    root = Node()
    for key, value in state.items():
        if not isinstance(key, str) or len(key) > MAX_KEY or not key.startswith("ScoreBoard."):
            continue
        if isinstance(value, (dict, list)):
            raise CrgError(f"{key[:80]}: a value must be a string, number, boolean or null")
        try:
            segments = split_key(key)[1:]
        except CrgError:
            continue  # a key of CRG's state this reader does not know the shape of: not the game's
        if segments and segments[0][0] == "Game" and segments[0][1] is not None:
            games.setdefault(segments[0][1], Node()).put(segments[1:], value)
        elif segments and segments[0][0] in _V4_GAME:  # 4.x: the one game at the root
            root.put(segments, value)
    if games:
        return games[current] if isinstance(current, str) and current in games else next(iter(games.values()))
    if not root.kids:
        raise CrgError("the file holds no game (no ScoreBoard.Game(ID) keys, nor a 4.x game's)")
    return root


def _team_number(side: str) -> int:
    return 1 if side == "home" else 2


def _sets(to: dict[str, Any], attrs: dict[str, str]) -> list[Op]:
    return [{"op": "set", "to": to, "attribute": k, "value": v} for k, v in attrs.items() if v]


def _roster(team: Node) -> tuple[list[Op], dict[str, str]]:
    people: list[Op] = []
    numbers: dict[str, str] = {}
    for sid, s in team.each("Skater"):
        number = as_text(s.at("RosterNumber")) or as_text(s.at("Number"))  # 4.0 said Number
        attrs = {"number": number, "name": as_text(s.at("Name")), "role": ROLE_OF_FLAG.get(as_text(s.at("Flags")), "")}
        attrs = {k: v for k, v in attrs.items() if v}
        if attrs:
            people.append({"tag": "person", "attrs": attrs})
        if number:
            numbers[sid] = number
    return people, numbers


def _officials(game: Node) -> tuple[list[Op], dict[str, str]]:
    """The officials (CRG's ``Ref`` and ``Nso``, in file order) and their names by id."""
    people: list[Op] = []
    names: dict[str, str] = {}
    for (kind, oid), o in game.kids.items():
        if kind not in ("Ref", "Nso") or oid is None:
            continue
        name = as_text(o.at("Name"))
        if not name:
            continue
        names[oid] = name
        attrs = {"name": name, "role": _ROLE_OF_NAME.get(as_text(o.at("Role")), "")}
        people.append({"tag": "person", "attrs": {k: v for k, v in attrs.items() if v}})
    return people, names


def _number(numbers: dict[str, str], skater: Any, fallback: Any) -> str:
    """A skater's number: its roster entry's, else the number written beside the reference."""
    number = numbers.get(as_text(skater)) or as_text(fallback)
    return "" if number == "?" else number


def _items(game: Node, numbers: dict[str, dict[str, str]]) -> dict[tuple[int, int], list[Op]]:
    """Penalties, box trips and timeouts, by (period, jam) (jam 0: the period's own), each
    jam's in time order: CRG keeps penalties by skater, box trips by team, timeouts by period."""
    timed: dict[tuple[int, int], list[tuple[int, int, Op]]] = {}
    order = 0
    jam_starts = {(p, j): as_int(jam.at("WalltimeStart")) or 0
                  for p in _PERIODS for j, jam in (game.get("Period", str(p)) or Node()).numbered("Jam")}
    for side in SIDES:
        team = game.get("Team", str(_team_number(side))) or Node()
        for sid, s in team.each("Skater"):
            for n, pen in s.numbered("Penalty"):
                code, p, j = as_text(pen.at("Code")), as_int(pen.at("PeriodNumber")), as_int(pen.at("JamNumber"))
                number = numbers[side].get(sid, "")
                if n == 0 or code not in PENALTY_CODES or p not in _PERIODS or not j or not number:
                    continue  # 0 is CRG's foul-out or expulsion: no penalty code of the document
                attrs = {"team": side, "number": number, "code": code, "time": seconds_of_ms(pen.at("Time")) or ""}
                order += 1
                timed.setdefault((p, j), []).append((0, order, _element("penalty", attrs)))
        for _, b in team.each("BoxTrip"):
            number = _number(numbers[side], b.at("CurrentSkater"), b.at("RosterNumber"))
            t_in = as_int(b.at("WalltimeStart")) or 0
            where = _box_jam(as_int(b.at("StartJamNumber")) or as_int(b.at("EndJamNumber")) or 0, t_in, jam_starts)
            if not number or where is None:
                continue
            attrs = {"team": side, "number": number, "in": seconds_of_ms(t_in) or "",
                     "out": seconds_of_ms(b.at("WalltimeEnd")) or ""}
            order += 1
            timed.setdefault(where, []).append((1, order, _element("box", attrs)))
    for p in _PERIODS:
        for _, t in (game.get("Period", str(p)) or Node()).each("Timeout"):
            said = _timeout(t)
            if said is None:
                continue
            order += 1
            timed.setdefault((p, as_int(t.at("PrecedingJamNumber")) or 0), []).append((2, order, _element("timeout", said)))
    out: dict[tuple[int, int], list[Op]] = {}
    for where, entries in timed.items():
        entries.sort(key=lambda e: (e[0], _time(e[2]), e[1]))
        out[where] = [op for _, _, op in entries]
    return out


def _time(element: Op) -> float:
    a = element["attrs"]
    text = a.get("time") or a.get("in") or "0"
    return float(text)


def _box_jam(number: int, t_in: int, jam_starts: dict[tuple[int, int], int]) -> tuple[int, int] | None:
    """The jam a box trip began in: CRG names its number, not its period; the period is the
    one whose jam of that number started last before the trip did (else the first)."""
    candidates = sorted((start, p) for (p, j), start in jam_starts.items() if j == number)
    if not candidates:
        return None
    before = [c for c in candidates if c[0] <= t_in] if t_in else []
    return ((before or candidates)[-1 if before else 0][1], number)


def _timeout(t: Node) -> dict[str, str] | None:
    owner = as_text(t.at("Owner"))
    if owner == "O":
        attrs = {"kind": "official"}
    elif owner.endswith(("_1", "_2")) or owner in ("1", "2"):  # 5.x: GAMEID_N; 4.x: N
        side = SIDES[int(owner[-1]) - 1]
        attrs = {"kind": "review" if as_bool(t.at("Review")) else "team", "team": side}
        if attrs["kind"] == "review":
            said = as_text(t.at("OrResult")).strip().lower()
            retained = said == "retained" or (said != "lost" and as_bool(t.at("RetainedReview")))
            attrs["result"] = "retained" if retained else "lost" if said == "lost" else ""
    else:
        return None  # a timeout nobody took yet (CRG's owner none): nothing the document can say
    attrs["time"] = seconds_of_ms(t.at("WalltimeStart")) or ""
    return {k: v for k, v in attrs.items() if v}


def _element(tag: str, attrs: dict[str, str]) -> Op:
    return {"tag": tag, "attrs": {k: v for k, v in attrs.items() if v}}


def _jam(p: int, j: int, jam: Node, numbers: dict[str, dict[str, str]], items: list[Op]) -> list[Op]:
    started = bool(as_int(jam.at("WalltimeStart")) or as_int(jam.at("Duration")))
    flags: dict[str, list[str]] = {"lead": [], "called": [], "lost": [], "injury": [], "no-initial": []}
    lineups: list[Op] = []
    trips: list[Op] = []
    stars: list[Op] = []
    for side in SIDES:
        tj = jam.get("TeamJam", str(_team_number(side)))
        if tj is None:
            continue
        for flag, key in (("lead", "Lead"), ("called", "Calloff"), ("lost", "Lost"), ("injury", "Injury"),
                          ("no-initial", "NoInitial")):
            if as_bool(tj.at(key)) and (started or flag != "no-initial"):  # CRG's NoInitial is true until a trip
                flags[flag].append(side)
        placed = _lineup(tj, side, numbers[side])
        lineups += placed
        trip_ids: dict[str, int] = {}
        after_sp: list[int] = []
        for n, trip in tj.numbered("ScoringTrip"):
            trip_ids[as_text(trip.at("Id"))] = n
            if as_bool(trip.at("AfterSP")):
                after_sp.append(n)
            score = as_int(trip.at("Score"))
            if score:  # CRG lists every trip, the initial one with its 0: a trip of no points says nothing
                trips.append(_element("points", {"team": side, "points": str(score), "pass": str(n)}))
        if as_bool(tj.at("StarPass")):
            trip_no = trip_ids.get(as_text(tj.at("StarPassTrip"))) or (after_sp[0] if after_sp else 1)
            pivot = next((c["attrs"]["number"] for c in placed if c["attrs"]["position"] == "pivot"), "")
            stars.append(_element("starpass", {"team": side, "trip": str(trip_no), "number": pivot}))
    attrs = {"start": seconds_of_ms(jam.at("WalltimeStart")) or "",
             "duration": seconds_of_ms(jam.at("Duration")) or "" if started else ""}
    for flag, sides in flags.items():
        attrs[flag] = "both" if len(sides) == 2 and flag in ("lost", "injury", "no-initial") else \
            sides[0] if len(sides) == 1 else ""
    ops = _sets({"period": p, "jam": j}, attrs)
    children = lineups + trips + stars + items
    if children:
        ops.append({"op": "add", "to": {"period": p, "jam": j}, "children": children})
    return ops


def _lineup(tj: Node, side: str, numbers: dict[str, str]) -> list[Op]:
    """The team's fielding: Jammer, Pivot (a blocker with NoPivot), Blocker1..3."""
    no_pivot = as_bool(tj.at("NoPivot"))
    slots = ("Jammer", "Blocker1", "Blocker2", "Blocker3", "Pivot") if no_pivot else \
        ("Jammer", "Pivot", "Blocker1", "Blocker2", "Blocker3")  # the fourth blocker comes after the other three
    out: list[Op] = []
    for slot in slots:
        f = tj.get("Fielding", slot)
        if f is None:
            continue
        number = _number(numbers, f.at("Skater"), f.at("SkaterNumber"))
        if not number or as_bool(f.at("NotFielded")):
            continue
        position = "jammer" if slot == "Jammer" else "pivot" if slot == "Pivot" and not no_pivot else "blocker"
        out.append(_element("lineup", {"team": side, "position": position, "number": number}))
    return out
