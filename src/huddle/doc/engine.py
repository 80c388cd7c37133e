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
from operator import itemgetter
from typing import Any

import orjson

from ..gcutil import paused_collections
from ..wire import LogRecord
from .model import FIXED, PERMANENT, SCHEMA, Element, default_bout, derived_eid
from .ops import DOC_KIND, MAX_JAM, MAX_STRING, NOT_ADDED, OperationError, is_normal, normalise
from .roles import HEAD, Conflicts, flag_value, owners, owners_of_element
from .rules import fits

__all__ = ["MAX_TEXT", "BoutDocument", "DocEngine", "Key", "jams"]

MAX_TEXT = 65_536  # characters of text in one element: appends beyond it are dropped

Key = tuple[float, bytes, int]  # (timestamp, source, seq): the order of application
_JAM_OPS = frozenset({"insert-jam", "remove-jam"})  # corrections that renumber a period's jams

# The short path's vocabulary: what an add may put in a jam, what a set may change on one.
# The tag with its attributes: the element takes this str, not the parsed body's copy.
_ADDABLE: dict[str, tuple[str, frozenset[str]]] = {
    tag: (tag, attrs) for tag, attrs in SCHEMA.items() if tag not in NOT_ADDED}
_JAM_SETTABLE = SCHEMA["jam"] - FIXED["jam"]

# Bodies are parsed by orjson (several times faster than json); what it refuses (NaN, lone surrogates)
# or might read differently (integers past 64 bits become floats) goes to json.loads: see apply_body.
_loads = orjson.loads
_JSONDecodeError = orjson.JSONDecodeError
_first = itemgetter(0)


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
        self.ledger = Conflicts()  # writes by a role that does not own the field (doc/roles.py)
        self.applied = 0  # operations applied or recorded as conflicts (all but the dropped)
        self.made: list[Element] = []  # the elements the last add made by apply() (not apply_body's short path)

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
        out.ledger = self.ledger.copy()
        out._periods = {e.attrs["number"]: e for e in out.root.children if e.tag == "period"}
        out._teams = {e.attrs["type"]: e for e in out.root.children if e.tag == "team"}
        out._jams = {(int(p.attrs["number"]), int(j.attrs["number"])): j
                     for p in out._periods.values() for j in p.children if j.tag == "jam"}
        return out

    def discard(self) -> None:
        """Let this document's memory go as soon as the last reference to it does.

        Elements point up (``parent``) and sideways (a history names parents and
        added children; ``before`` names a removed element), so a document is a
        web of reference cycles that only a full collection of the garbage
        collector frees.  A node replacing its document many times a minute (a
        rebuild, a scratch copy per write) made garbage faster than those ran:
        a node's memory grew by hundreds of MiB (bench/HISTORY.md, "Memory under the stream").
        Here those links are cut, on every element ever in the document: what
        is left points down only (the tree still reads, as XML or JSON), and
        reference counting frees it.  The history and removes are gone: the
        document must not be changed or asked for a history afterwards."""
        stack = [self.root, *self._removed.values()]
        while stack:
            e = stack.pop()
            if e.before is not None:
                stack.append(e.before)
            stack.extend(e.children)
            e.parent = e.changes = e.before = None
        self._removed = {}
        self.made = []

    def history_of(self, eid: str) -> list[dict[str, Any]] | None:
        """The element's changes in application order (None: no element ever had this eid).

        Built on demand from what applying kept: an element of the same eid
        removed earlier (``before``: its history comes first), the event that
        added it (``key``), and its later changes, flat (``changes``)."""
        e = self.index.get(eid) or self._removed.get(eid)
        if e is None:
            return None
        chain = []
        while e is not None:
            chain.append(e)
            e = e.before
        out: list[dict[str, Any]] = []
        for e in reversed(chain):
            if e.key is not None:  # made by an add: that is its first change
                out.append({**_origin(e.key), "op": "add", "parent": _added_under(e).eid})
            changes = e.changes or ()
            for i in range(0, len(changes), 3):
                out.append({**_origin(changes[i]), **_change(changes[i + 1], changes[i + 2])})
        return out

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

    def apply_body(self, body: str, key: Key, *, fast: bool = True) -> None:
        """Apply a stored ``doc`` event: its body is read and checked again (a
        peer may be buggy or hostile); one that is not a valid operation is
        dropped, and the drop recorded, as one that does not fit.

        The common operations (set a jam's attribute, add one element to a
        jam) take a short path: the body is parsed by orjson and checked and
        applied in one step, with the outcome :meth:`apply` would give.
        Anything else goes the general way (``fast=False``: everything, for
        the tests that compare the two)."""
        if fast:
            try:
                op = _loads(body)
            except _JSONDecodeError:
                pass  # json may still read it (NaN, big numbers): decode_op says
            else:
                if self._fast(op, key):
                    return
                if is_normal(op):  # then it holds no float: json.loads would give the same value
                    self.apply(op, key)
                    return
        decoded = decode_op(body)
        if isinstance(decoded, str):
            self.dropped.append({**_origin(key), "op": None, "to": None, "reason": decoded})
        else:
            self.apply(decoded, key)

    def _fast(self, op: Any, key: Key) -> bool:
        """Apply ``op`` if it is a valid operation in normal form of a common
        shape (what :func:`is_normal` and :meth:`_apply` check, for these
        shapes only); False, having changed nothing, if it is not."""
        if type(op) is not dict:
            return False
        to = op.get("to")
        if type(to) is not dict or len(to) != 2:
            return False
        p, j = to.get("period"), to.get("jam")
        if type(p) is not int or type(j) is not int or not 1 <= p <= 2 or not 1 <= j <= MAX_JAM:
            return False
        kind, role = op.get("op"), op.get("role")
        size = 3 if role is None else 4  # an add's members (a set: one more); a role: its own fields only
        if kind == "add":
            if len(op) != size:
                return False
            children = op.get("children")
            if type(children) is not list or len(children) != 1:
                return False
            node = children[0]
            if type(node) is not dict:
                return False
            tag = node.get("tag", "")
            vocabulary = _ADDABLE.get(tag) if type(tag) is str else None
            if vocabulary is None:
                return False
            tag, allowed = vocabulary
            attrs = node.get("attrs")
            if attrs is None:
                attrs, members = {}, 1
            elif type(attrs) is dict and attrs and allowed.issuperset(attrs):
                try:  # every value a string (join refuses others), none too long (their sum is not)
                    if len("".join(attrs.values())) > MAX_STRING:
                        return False
                except TypeError:
                    return False
                members = 2
            else:
                return False
            text = node.get("text")
            if text is None:
                text = ""
            elif type(text) is not str or not text or len(text) > MAX_STRING:
                return False
            else:
                members += 1
            if len(node) != members:  # no eid, no children, nothing unknown
                return False
            if role is not None and owners_of_element(tag, attrs) != (role,):
                return False
            jam = self._jams.get((p, j)) or self._make_jam(p, j, key)
            e = Element(tag, None, attrs, text, key, 1)  # attrs: the parsed body's own dict, used once
            e.parent = jam
            if type(jam.children) is list:
                jam.children.append(e)
            else:
                jam.children = [e]
            self._unindexed.append(e)
            payload: Any = e
        elif kind == "set":
            name, value = op.get("attribute"), op.get("value")
            if (len(op) != size + 1 or type(name) is not str or name not in _JAM_SETTABLE
                    or type(value) is not str or len(value) > MAX_STRING):
                return False
            if role is not None and ((p, j) not in self._jams or owners(self._jams[(p, j)], name, value) != (role,)):
                return False
            jam = self._jams.get((p, j)) or self._make_jam(p, j, key)
            jam.attrs[name] = value
            payload = op
        else:
            return False
        changes = jam.changes
        if changes is not None:  # as always but in a clone: its history began with "create"
            changes.append(key)  # _note, inline
            changes.append(kind)
            changes.append(payload)
        else:
            _note(jam, key, kind, payload)
        self.applied += 1
        return True

    @property
    def conflicts(self) -> list[dict[str, Any]]:
        """The cross-role writes the head NSO has not resolved, in the order (docs/document.md "Roles")."""
        return self.ledger.listed()

    def check(self, op: dict[str, Any]) -> None:
        """Raise :class:`OperationError` if ``op`` cannot apply to the document as it is now."""
        key: Key = (0.0, bytes(16), 0)
        to = op["to"]
        try:
            if op["op"] in _JAM_OPS:
                self._jam_op(op, key, check_only=True)
                return
            if op["op"] == "remove" and op.get("role") == HEAD and self._dismiss(to, key, check_only=True):
                return
            if "jam" in to and (to["period"], to["jam"]) not in self._jams:  # jam numbers: no gap at the door
                last = self._last_jam(to["period"])
                if to["jam"] > last + 1:
                    raise _Unresolved(f"period {to['period']} has jams up to {last}: the next is jam {last + 1}, "
                                      f"not {to['jam']} (insert-jam puts a jam between others)")
            self._apply(op, key, check_only=True)
            target = self._resolve(to, key, create=False)
        except _Unresolved as exc:
            raise OperationError(exc.reason) from None
        if "team" in op:  # one team's part of a flag: the rules check the value it leaves
            current = "" if target is None else target.attrs.get(op["attribute"], "")
            op = {**op, "value": flag_value(op["attribute"], current, op["team"], op["value"] == "yes")}
        fits(self.root, op, target, _created_tag(to) if target is None else target.tag)  # the bout's rules

    def _apply(self, op: dict[str, Any], key: Key, *, check_only: bool) -> None:
        kind = op["op"]
        if kind in _JAM_OPS:
            self._jam_op(op, key, check_only=check_only)
            return
        if kind == "remove" and op.get("role") == HEAD and self._dismiss(op["to"], key, check_only=check_only):
            return
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
            if check_only or self._held(op, target, key):
                return
            self._remove(target, key)
            return
        if kind == "set":
            if "attribute" in op:
                name = op["attribute"]
                self._check_attribute(target.tag, name)
                if check_only:
                    return
                if "team" in op:  # one team's part of a jam's flag: the value it leaves
                    current = target.attrs.get(name, "")
                    op = {**op, "value": flag_value(name, current, op["team"], op["value"] == "yes")}
                if self._held(op, target, key):
                    return
                target.attrs[name] = op["value"]
            else:
                if check_only or self._held(op, target, key):
                    return
                target.text = op["text"]
            _note(target, key, "set", op)
            return
        # add
        text = op.get("text")
        if text is not None and len(target.text) + len(text) > MAX_TEXT:
            raise _Unresolved(f"the text of <{target.tag}> would pass {MAX_TEXT} characters")
        made: list[Element] = []
        given: list[str] = []  # eids the operation names itself
        new = [_build(n, key, made, given) for n in op.get("children", ())]
        if given:
            index = self.index
            clash = next((eid for i, eid in enumerate(given) if eid in index or eid in given[:i]), None)
            if clash is not None:
                raise _Unresolved(f"eid {clash} is already in the document")
        if check_only or self._held(op, target, key, new):
            return
        self.made = made
        for child in new:
            target.append(child)
        if given:
            for e in made:
                self._enter(e)
        else:
            self._unindexed.extend(made)
        # Each made element's own history starts with this event: its key says so (see history_of).
        if text is not None:
            target.text += text
        _note(target, key, "add", new[0] if len(new) == 1 and text is None else (new, text))

    def _remove(self, target: Element, key: Key) -> None:
        parent = target.parent
        assert parent is not None
        parent.remove(target)
        index = self.index
        for e in target.walk():
            e.removed = True
            eid = e.eid
            index.pop(eid, None)
            self._removed[eid] = e
            if e.tag == "jam" and e.parent is not None and e.parent.tag == "period":
                self._jams.pop((int(e.parent.attrs["number"]), int(e.attrs["number"])), None)
        _note(target, key, "remove", None)

    # ------------------------------------------------------- roles and conflicts

    def _held(self, op: dict[str, Any], target: Element, key: Key, new: list[Element] | None = None) -> bool:
        """True if ``op``, written by a role that does not own the field, is held as a conflict
        (not applied: the document keeps the owner's value).  A head NSO's write resolves the
        conflicts of the field it writes.  A write with no role is nobody's conflict."""
        role = op.get("role")
        if role is None:
            return False
        kind, name = op["op"], op.get("attribute")
        if kind == "add" and new:  # the field is the element added (its eid: the one the add gives it)
            first = new[0]
            eid, fields, field = first.eid, None, first.tag
            value = " ".join([first.tag, *(f"{k}={v}" for k, v in sorted(first.attrs.items()))])
            who = {r for e in new for r in owners_of_element(e.tag, e.attrs)}
        elif kind == "remove":
            eid, fields, field, value, who = target.eid, None, target.tag, "", set(owners(target, None))
        else:  # a set, or text added
            field = name or "text"
            eid, fields, value = target.eid, {field, target.tag}, op.get("value", op.get("text", ""))
            who = set(owners(target, name, op.get("value")))
        if role == HEAD:
            for e in new or (target,):
                self.ledger.settle(e.eid if new else eid, fields if not new else None, key)
            return False
        others = who - {role}  # the write must change no other role's field (a flag: its teams' parts)
        if not others:
            return False
        conflict = self.ledger.hold(key, eid, field, owner=min(others), by=role, value=value)
        if "team" in op:
            conflict["team"] = op["team"]
        return True

    def _dismiss(self, to: dict[str, Any], key: Key, *, check_only: bool) -> bool:
        """A head NSO's remove of an element a held add would have made: the conflict is dismissed."""
        eid = to.get("eid")
        if eid is None or eid not in self.ledger or eid in self.index:
            return False
        if not check_only:
            self.ledger.settle(eid, None, key)
        return True

    # ------------------------------------------------------------ corrections

    def _last_jam(self, period: int) -> int:
        return max((j for p, j in self._jams if p == period), default=0)

    def _jam_op(self, op: dict[str, Any], key: Key, *, check_only: bool) -> None:
        """insert-jam: a jam numbered J, the jams from J on numbered one up; remove-jam: the jam
        goes, the later ones numbered one down (docs/document.md "Corrections")."""
        to = op["to"]
        if "eid" in to:
            jam = self.index.get(to["eid"])
            if jam is None or jam.tag != "jam" or jam.parent is None:
                raise _Unresolved(f"no jam has eid {to['eid']}")
            p, j = int(jam.parent.attrs["number"]), int(jam.attrs["number"])
        else:
            p, j = to["period"], to["jam"]
        period, last = self._periods[str(p)], self._last_jam(p)
        inserting = op["op"] == "insert-jam"
        if inserting and j > last + 1:
            raise _Unresolved(f"period {p} has jams up to {last}: a jam is inserted at {last + 1} at most, not {j}")
        if inserting and last >= MAX_JAM:
            raise _Unresolved(f"period {p} has {MAX_JAM} jams: no more can be inserted")
        if not inserting and (p, j) not in self._jams:
            raise _Unresolved(f"period {p} has no jam {j} to remove")
        if check_only:
            return
        role = op.get("role")
        owner = owners_of_element("jam", {})[0]
        if role is not None and role not in {HEAD, owner}:
            self.ledger.hold(key, period.eid, "jams", owner=owner, by=role, value=f"{op['op']} {j}")
            return
        if role == HEAD:
            self.ledger.settle(period.eid, {"jams"}, key)
        if not inserting:
            self._remove(self._jams[(p, j)], key)
        step = 1 if inserting else -1
        for n in sorted((n for q, n in self._jams if q == p and n >= j), reverse=inserting):
            moved = self._jams.pop((p, n))
            moved.attrs["number"] = str(n + step)
            self._jams[(p, n + step)] = moved
            _note(moved, key, "renumber", n + step)
        if inserting:
            self._make_jam(p, j, key)

    def _enter(self, e: Element) -> None:
        """Index an element whose eid may have been used before (a jam made
        again after a remove): its history continues the old one."""
        eid = e.eid
        self._index[eid] = e
        old = self._removed.pop(eid, None)
        if old is not None:
            e.before = old

    def _make_jam(self, period: int, number: int, key: Key) -> Element:
        """A jam referred to for the first time (or again, after a remove), or inserted.  Its eid
        is derived from its place, unless a jam renumbered by a correction holds that one: then
        from the event that made it (``SOURCE:SEQ:0``; an add's elements count from 1)."""
        eid = derived_eid(f"bout/period/{period}/jam/{number}")
        if eid in self._index:
            eid = derived_eid(f"{key[1].hex()}:{key[2]}:0")
        jam = Element("jam", eid, {"number": str(number)})
        parent = self._periods[str(period)]
        _insert_jam(parent, jam)
        self._enter(jam)
        self._jams[(period, number)] = jam
        _note(jam, key, "create", (parent, "jam"))
        return jam

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
                jam = self._make_jam(to["period"], to["jam"], key)
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


def _build(node: dict[str, Any], key: Key, made: list[Element], given: list[str]) -> Element:
    eid = node.get("eid")
    if eid:
        given.append(eid)
    e = Element(node["tag"], eid, dict(node.get("attrs", ())), node.get("text", ""), key, len(made) + 1)
    made.append(e)
    for c in node.get("children", ()):
        e.append(_build(c, key, made, given))
    return e


def _note(e: Element, key: Key, what: str, payload: Any) -> None:
    """Add to an element's history (flat: key, what, payload)."""
    changes = e.changes
    if changes is None:
        e.changes = [key, what, payload]
    else:
        changes.append(key)
        changes.append(what)
        changes.append(payload)


def _added_under(e: Element) -> Element:
    """The element an add put ``e`` under: its parent, or for an element
    nested in what the add made, the add's target."""
    parent = e.parent
    assert parent is not None
    while parent.key is not None and parent.key == e.key:
        parent = parent.parent
        assert parent is not None
    return parent


def _insert_jam(period: Element, jam: Element) -> None:
    """Jams stay in number order whatever order they were referred to in."""
    number = int(jam.attrs["number"])
    for i, c in enumerate(period.children):
        if c.tag == "jam" and int(c.attrs["number"]) > number:
            period.insert(i, jam)
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
    if what == "renumber":
        return {"op": "renumber", "number": payload}
    if what == "add":  # children or text were added to it
        if isinstance(payload, Element):  # one child, no text
            return {"op": "add", "children": [payload.eid]}
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
    time it is read.  Duplicates are ignored.  Bodies are kept as they came
    (a string is small; a parsed operation is many objects) and read again
    when the document is rebuilt.
    """

    def __init__(self, *, fast: bool = True) -> None:
        self._seen: set[Key] = set()
        # (timestamp, key, body): in order of arrival, sorted when the document is rebuilt.  The
        # timestamp first, so that the sort compares floats, not tuples (several times faster).
        self._events: list[tuple[float, Key, str]] = []
        self._last: Key | None = None  # the greatest key while nothing arrived out of order
        self._sources: dict[bytes, bytes] = {}  # one bytes object per source, shared by its keys
        self._doc = BoutDocument()
        self._stale = False
        self._fast = fast  # False: every operation takes the general path (tests compare the two)
        self.rebuilds = 0

    def __len__(self) -> int:
        return len(self._seen)

    def discard(self) -> None:
        """The engine is no longer used: its document's memory goes with the last
        reference to it (:meth:`BoutDocument.discard`)."""
        self._doc.discard()

    def add(self, record: LogRecord) -> bool:
        """Take a log record (others than kind ``doc`` are ignored); True if new."""
        return self._take((record,)) == 1

    def load(self, records: Iterable[LogRecord]) -> int:
        """Take many records at once (a node starting on its store); returns how many were new."""
        with paused_collections():
            return self._take(records)

    def _take(self, records: Iterable[LogRecord]) -> int:
        seen, events, sources = self._seen, self._events, self._sources
        new = 0
        for r in records:
            if r.kind != DOC_KIND:
                continue
            source = sources.get(r.source)
            if source is None:
                source = sources[r.source] = bytes(r.source)
            stamp = r.timestamp
            key: Key = (stamp, source, r.seq)
            n = len(seen)
            seen.add(key)
            if len(seen) == n:
                continue  # a duplicate
            new += 1
            events.append((stamp, key, r.body))
            if not self._stale:
                if self._last is not None and key < self._last:
                    self._stale = True  # sorted and replayed when the document is next read
                else:
                    self._last = key
                    self._doc.apply_body(r.body, key, fast=self._fast)
        return new

    @property
    def document(self) -> BoutDocument:
        if self._stale:
            events = self._events
            # By timestamp (floats), then as tuples: by then nearly sorted, one pass unless
            # timestamps tie (keys are unique: bodies are never compared).  Both orders agree:
            # timestamps are finite (the wire and the store check).
            events.sort(key=_first)
            events.sort()
            doc = BoutDocument()
            apply, fast = doc.apply_body, self._fast
            with paused_collections(collect=False):  # it makes a million objects that live on
                for _, key, body in events:
                    apply(body, key, fast=fast)
            old, self._doc, self._stale, self._last = self._doc, doc, False, events[-1][1]
            old.discard()  # freed now, not at the next full collection (see BoutDocument.discard)
            self.rebuilds += 1
        return self._doc


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
