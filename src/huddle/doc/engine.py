"""The bout document as a deterministic function of the group's ``doc`` events.

Events are applied in one total order: (timestamp, source, sequence).  The
same set of events, delivered in any order and with duplicates, gives the
same document, byte for byte.  An operation whose target does not exist when
its turn comes (it was removed by an earlier event in that order, or never
existed) is dropped, and the drop is recorded; docs/document.md explains the
rules.  Pure: no I/O, no clock.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..gcutil import few_collections
from ..wire import LogRecord
from .model import FIXED, PERMANENT, SCHEMA, Element, default_bout, derived_eid
from .ops import DOC_KIND, OperationError, is_normal, normalise

__all__ = ["MAX_TEXT", "BoutDocument", "DocEngine", "Key", "jams"]

MAX_TEXT = 65_536  # characters of text in one element: appends beyond it are dropped

Key = tuple[float, bytes, int]  # (timestamp, source, seq): the order of application


@dataclass(frozen=True, slots=True)
class _Unresolved(Exception):
    reason: str


class BoutDocument:
    """The tree, an index by eid, and every element's history.

    Elements added by events are indexed lazily: their eids are derived and
    entered in the index only when an eid is first looked up (most are
    never addressed by eid; a rebuild of a large document does not pay for
    them).  A removed element's history stays reachable by its eid.
    """

    def __init__(self) -> None:
        self.root: Element = default_bout()
        self._index: dict[str, Element] = {e.eid: e for e in self.root.walk()}
        self._unindexed: list[Element] = []
        self._removed: dict[str, Element] = {}  # eid -> a removed element (for its history)
        self._periods = {e.attrs["number"]: e for e in self.root.children if e.tag == "period"}
        self._teams = {e.attrs["type"]: e for e in self.root.children if e.tag == "team"}
        self._jams: dict[tuple[int, int], Element] = {}
        self.dropped: list[dict[str, Any]] = []
        self.applied = 0
        self.made: list[Element] = []  # the elements the last add made

    @property
    def index(self) -> dict[str, Element]:
        """Every element in the document, by eid."""
        if self._unindexed:
            index = self._index
            for e in self._unindexed:
                if not e.removed:
                    index[e.eid] = e
            self._unindexed = []
        return self._index

    def clone(self) -> BoutDocument:
        """A copy of the tree (not the history), to try operations on."""
        out = BoutDocument.__new__(BoutDocument)
        out.root = self.root.copy()
        out._index = {e.eid: e for e in out.root.walk()}
        out._unindexed, out._removed, out.dropped, out.applied, out.made = [], {}, [], self.applied, []
        out._periods = {e.attrs["number"]: e for e in out.root.children if e.tag == "period"}
        out._teams = {e.attrs["type"]: e for e in out.root.children if e.tag == "team"}
        out._jams = {(int(p.attrs["number"]), int(j.attrs["number"])): j
                     for p in out._periods.values() for j in p.children if j.tag == "jam"}
        return out

    def history_of(self, eid: str) -> list[dict[str, Any]] | None:
        """The element's changes in application order (None: no element ever had this eid)."""
        e = self.index.get(eid) or self._removed.get(eid)
        if e is None:
            return None
        return [{**_origin(key), **_change(what, payload)} for key, what, payload in e.changes or ()]

    # ------------------------------------------------------------ applying

    def apply(self, op: dict[str, Any], key: Key) -> str | None:
        """Apply a normalised operation; returns why it was dropped, or None."""
        try:
            self._apply(op, key, check_only=False)
        except _Unresolved as exc:
            self.dropped.append({**_origin(key), "op": op.get("op"), "to": op.get("to"), "reason": exc.reason})
            return exc.reason
        self.applied += 1
        return None

    def check(self, op: dict[str, Any]) -> None:
        """Raise :class:`OperationError` if ``op`` cannot apply to the document as it is now."""
        try:
            self._apply(op, (0.0, bytes(16), 0), check_only=True)
        except _Unresolved as exc:
            raise OperationError(exc.reason) from None

    def _apply(self, op: dict[str, Any], key: Key, *, check_only: bool) -> None:
        kind = op["op"]
        target = self._resolve(op["to"], key, create=not check_only)
        if target is None:  # check_only and the address would be created (a new jam, a path)
            if kind == "remove":
                raise _Unresolved(f"nothing to remove at {_where(op['to'])}")
            if kind == "set" and "attribute" in op:
                self._check_attribute(_created_tag(op["to"]), op["attribute"])
            return
        if kind == "remove":
            if target.tag in PERMANENT:
                raise _Unresolved(f"<{target.tag}> is part of every bout and cannot be removed")
            if check_only:
                return
            parent = target.parent
            assert parent is not None
            parent.children.remove(target)
            index = self.index
            for e in target.walk():
                e.removed = True
                eid = e.eid
                index.pop(eid, None)
                self._removed[eid] = e
                if e.tag == "jam" and e.parent is not None and e.parent.tag == "period":
                    self._jams.pop((int(e.parent.attrs["number"]), int(e.attrs["number"])), None)
            _note(target, key, "remove", None)
            return
        if kind == "set":
            if "attribute" in op:
                name = op["attribute"]
                self._check_attribute(target.tag, name)
                if check_only:
                    return
                target.attrs[name] = op["value"]
            else:
                if check_only:
                    return
                target.text = op["text"]
            _note(target, key, "set", op)
            return
        # add
        text = op.get("text")
        if text is not None and len(target.text) + len(text) > MAX_TEXT:
            raise _Unresolved(f"the text of <{target.tag}> would pass {MAX_TEXT} characters")
        made: list[Element] = []
        counter = [0]
        origin = (key[1], key[2])
        new = [_build(n, origin, counter, made) for n in op.get("children", ())]
        given = [e.eid for e in made if e.origin is None]  # eids the operation names itself
        if given:
            index = self.index
            clash = next((eid for i, eid in enumerate(given) if eid in index or eid in given[:i]), None)
            if clash is not None:
                raise _Unresolved(f"eid {clash} is already in the document")
        if check_only:
            return
        self.made = made
        for child in new:
            target.append(child)
        if given:
            for e in made:
                self._enter(e)
        else:
            self._unindexed.extend(made)
        for e in made:
            _note(e, key, "added", target)
        if text is not None:
            target.text += text
        _note(target, key, "add", (new, text))

    def _enter(self, e: Element) -> None:
        """Index an element whose eid may have been used before (a jam made
        again after a remove): its history continues the old one."""
        eid = e.eid
        self._index[eid] = e
        old = self._removed.pop(eid, None)
        if old is not None and old.changes:
            e.changes = list(old.changes)

    def _check_attribute(self, tag: str, name: str) -> None:
        allowed = SCHEMA.get(tag, frozenset())
        if name not in allowed:
            raise _Unresolved(f"<{tag}> has no attribute {name!r} (it has {', '.join(sorted(allowed))})")
        if name in FIXED.get(tag, frozenset()):
            raise _Unresolved(f"the {name!r} of a <{tag}> identifies it and cannot be set")

    # --------------------------------------------------------- addressing

    def _resolve(self, to: dict[str, Any], key: Key, *, create: bool) -> Element | None:
        """The element at ``to``; a jam or a path step that is missing is made
        (or, when only checking, ``None`` says it would be)."""
        root = self.root
        if "eid" in to:
            e = self.index.get(to["eid"])
            if e is None:
                raise _Unresolved(f"no element has eid {to['eid']}")
            return e
        if "period" in to:
            period = self._periods[str(to["period"])]  # the two periods are permanent
            if "jam" not in to:
                return period
            jam = self._jams.get((to["period"], to["jam"]))
            if jam is None:
                if not create:
                    return None
                jam = Element("jam", derived_eid(f"bout/period/{to['period']}/jam/{to['jam']}"),
                              {"number": str(to["jam"])})
                _insert_jam(period, jam)
                self._enter(jam)
                self._jams[(to["period"], to["jam"])] = jam
                _note(jam, key, "create", (period, "jam"))
            return jam
        if "team" in to:
            team = self._teams[to["team"]]
            if "person" not in to:
                return team
            who = to["person"]
            for c in team.children:
                if c.tag == "person" and (c.attrs.get("number") == who or c.attrs.get("name") == who):
                    return c
            raise _Unresolved(f"team {to['team']} has no person numbered or named {who!r}")
        e = root
        made = ""
        for step in filter(None, to["path"].split("/")):  # "" is the bout itself
            made += "/" + step
            child = e.find(step)
            if child is None:
                if not create:
                    return None
                child = Element(step, derived_eid("bout" + made))
                e.append(child)
                self._enter(child)
                _note(child, key, "create", (e, step))
            e = child
        return e


def _build(node: dict[str, Any], origin: tuple[bytes, int], counter: list[int], made: list[Element]) -> Element:
    counter[0] += 1
    eid = node.get("eid")
    e = Element(node["tag"], eid, dict(node.get("attrs", ())), node.get("text", ""),
                None if eid else (origin[0], origin[1], counter[0]))
    made.append(e)
    for c in node.get("children", ()):
        e.append(_build(c, origin, counter, made))
    return e


def _note(e: Element, key: Key, what: str, payload: Any) -> None:
    if e.changes is None:
        e.changes = [(key, what, payload)]
    else:
        e.changes.append((key, what, payload))


def _insert_jam(period: Element, jam: Element) -> None:
    """Jams stay in number order whatever order they were referred to in."""
    number = int(jam.attrs["number"])
    for i, c in enumerate(period.children):
        if c.tag == "jam" and int(c.attrs["number"]) > number:
            jam.parent = period
            period.children.insert(i, jam)
            return
    period.append(jam)


def _created_tag(to: dict[str, Any]) -> str:
    return "jam" if "jam" in to else (str(to["path"]).split("/")[-1] or "bout")


def _change(what: str, payload: Any) -> dict[str, Any]:
    """A history entry's details, from what _note kept."""
    if what == "set":
        if "attribute" in payload:
            return {"op": "set", "attribute": payload["attribute"], "value": payload["value"]}
        return {"op": "set", "text": payload["text"]}
    if what == "create":
        return {"op": "create", "parent": payload[0].eid, "tag": payload[1]}
    if what == "added":  # the element itself was added, under payload
        return {"op": "add", "parent": payload.eid}
    if what == "add":  # children or text were added to it
        children, text = payload
        return {"op": "add", **({"children": [c.eid for c in children]} if children else {}),
                **({"text": text} if text is not None else {})}
    return {"op": what}


def _where(to: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in to.items())


def _origin(key: Key) -> dict[str, Any]:
    return {"timestamp": key[0], "source": key[1].hex(), "seq": key[2]}


# --------------------------------------------------------------------------- engine


class DocEngine:
    """Holds a group's ``doc`` events in order and the document they make.

    Events arriving in order are applied at once; one that sorts before an
    applied event makes the document be rebuilt from its events the next
    time it is read.  Duplicates are ignored.
    """

    def __init__(self) -> None:
        self._keys: list[Key] = []
        self._ops: dict[Key, dict[str, Any] | str] = {}  # a str: the body could not be read
        self._doc = BoutDocument()
        self._stale = False
        self.rebuilds = 0

    def __len__(self) -> int:
        return len(self._keys)

    def add(self, record: LogRecord) -> bool:
        """Take a log record (others than kind ``doc`` are ignored); True if new."""
        if record.kind != DOC_KIND:
            return False
        key: Key = (record.timestamp, bytes(record.source), record.seq)
        if key in self._ops:
            return False
        op = decode_op(record.body)
        self._ops[key] = op
        if self._keys and key < self._keys[-1]:
            self._stale = True  # sorted and replayed when the document is next read
        self._keys.append(key)
        if not self._stale:
            self._apply(self._doc, key, op)
        return True

    def load(self, records: Iterable[LogRecord]) -> int:
        """Take many records at once (a node starting on its store); returns how many were new."""
        with few_collections():
            return sum(self.add(r) for r in records)

    @property
    def document(self) -> BoutDocument:
        if self._stale:
            self._keys.sort()
            doc = BoutDocument()
            with few_collections():  # a rebuild makes many long-lived objects
                for key in self._keys:
                    self._apply(doc, key, self._ops[key])
            self._doc, self._stale = doc, False
            self.rebuilds += 1
        return self._doc

    @staticmethod
    def _apply(doc: BoutDocument, key: Key, op: dict[str, Any] | str) -> None:
        if isinstance(op, str):
            doc.dropped.append({**_origin(key), "op": None, "to": None, "reason": op})
        else:
            doc.apply(op, key)


def decode_op(body: str) -> dict[str, Any] | str:
    """A ``doc`` event's body as a normalised operation, or why it is unusable.
    Bodies from other nodes are checked again: a peer may be buggy or hostile."""
    try:
        op = json.loads(body)
        return op if is_normal(op) else normalise(op)
    except (ValueError, RecursionError, OperationError) as exc:
        return f"unusable operation: {exc}"


# --------------------------------------------------------------------------- jams


def jams(root: Element) -> dict[str, Any]:
    """"What jam are we on?" after the source document's definitions.

    * active: the jam with the most recent start, if it has no duration;
    * just completed: the jam with the most recent start among those with a duration;
    * upcoming: none while a jam is active or once the bout is over; else
      period 1 jam 1 at the start; else the just completed jam's number + 1 in
      its period, except that a period-1 jam ending after period 1's end
      (period start + duration) is followed by period 2 jam 1.

    The bout is over when the just completed jam is in period 2 and ends
    after period 2's end, or the bout's ``status`` is ``final``.
    """
    started: list[tuple[float, int, int, Element]] = []
    periods: dict[int, Element] = {}
    for period in root.children:
        if period.tag != "period":
            continue
        p = int(period.attrs["number"])
        periods[p] = period
        for jam in period.children:
            if jam.tag == "jam":
                start = _num(jam.attrs.get("start"))
                if start is not None:
                    started.append((start, p, int(jam.attrs["number"]), jam))
    latest = max(started, key=lambda t: t[:3], default=None)
    active = latest if latest is not None and _num(latest[3].attrs.get("duration")) is None else None
    done = [t for t in started if _num(t[3].attrs.get("duration")) is not None]
    completed = max(done, key=lambda t: t[:3], default=None)
    over = root.attrs.get("status") == "final"
    upcoming: dict[str, int] | None = None
    if completed is not None:
        _, p, j, jam = completed
        end = _end(jam)
        period_end = _end(periods[p])
        after_period = end is not None and period_end is not None and end > period_end
        if p == 2 and after_period:
            over = True
        elif p == 1 and after_period:
            upcoming = {"period": 2, "jam": 1}
        else:
            upcoming = {"period": p, "jam": j + 1}
    else:
        upcoming = {"period": 1, "jam": 1}
    if active is not None or over:
        upcoming = None
    return {
        "active": None if active is None else _jam_json(active),
        "just_completed": None if completed is None else _jam_json(completed),
        "upcoming": upcoming,
        "bout_over": over,
    }


def _num(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _end(e: Element) -> float | None:
    start, duration = _num(e.attrs.get("start")), _num(e.attrs.get("duration"))
    return None if start is None or duration is None else start + duration


def _jam_json(t: tuple[float, int, int, Element]) -> dict[str, Any]:
    start, p, j, jam = t
    return {"period": p, "jam": j, "eid": jam.eid, "start": start, "duration": _num(jam.attrs.get("duration"))}
