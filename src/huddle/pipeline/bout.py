"""The bout job's reading of a log: the bout its ``doc`` events make, who recorded what, and
the corrections (docs/pipeline.md, "bout").

Pure Python (no Spark: the job runs it in its Python workers, one group or node at a time).
The events are applied in the document's own order (timestamp, source, sequence) by
huddle's own engine, so the bout is the one the node shows; around each operation the
values it replaced are looked at, to tell a correction from a first entry:

- a **correction** is a ``set`` that changes a value already recorded (a trip's points, a
  penalty's code, a jam's lead), or a ``remove`` of an element; it is the corrector's
  (source and role) and names who wrote the value it replaced (``own``: the same source);
- a set that records a value where there was none, or the same value again, is an entry.

A write's role is the ``role`` field of its operation (the ``?role=ROLE`` of the request
that made it, docs/document.md); empty for a write without one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ..doc import digest
from ..doc.engine import BoutDocument, Key, decode_op
from ..doc.model import Element
from ..doc.summary import bout_summary

__all__ = ["BoutReplay", "replay_bout"]

Row = tuple[str, int, float, str]  # source (hex), seq, timestamp, body


@dataclass
class BoutReplay:
    """A log's bout: the document, its summary, the events taken, and who did what."""

    document: BoutDocument
    events: int
    # (source, role, what) -> operations: ``add points``, ``set jam.start``, ``remove jam``
    writers: dict[tuple[str, str, str], int] = field(default_factory=dict)
    corrections: list[dict[str, Any]] = field(default_factory=list)

    @property
    def root(self) -> Element:
        return self.document.root

    def summary(self) -> dict[str, Any]:
        return bout_summary(self.document.root)

    def digest(self) -> str:
        return digest(self.document.root)


def replay_bout(rows: Iterable[Row]) -> BoutReplay:
    """The bout of these ``doc`` events (duplicates taken once), applied in the document's order."""
    keyed: dict[Key, str] = {}
    for source, seq, timestamp, body in rows:
        keyed.setdefault((float(timestamp), bytes.fromhex(source), int(seq)), body)
    doc = BoutDocument()
    out = BoutReplay(doc, len(keyed))
    wrote: dict[tuple[str, str], tuple[str, str]] = {}  # (eid, attribute or "") -> (source, role) of its value
    for key in sorted(keyed):
        body = keyed[key]
        op = decode_op(body)
        role = _role(body)
        source = key[1].hex()
        if isinstance(op, str):  # unusable: the engine records the drop
            doc.apply_body(body, key, fast=False)
            continue
        kind, attribute = op["op"], op.get("attribute")
        address = op.get("to")
        to: dict[str, Any] = address if isinstance(address, dict) else {}  # an operation of another shape has none
        target = _target(doc.root, doc, to)
        before = None if target is None else _value(target, attribute, op)
        doc.made = []
        if doc.apply(op, key) is not None:
            continue  # dropped: it changed nothing
        target = target if target is not None else _target(doc.root, doc, to)
        tag = _tag_of(to) if target is None else target.tag
        what = (f"add {' '.join(sorted({e.tag for e in doc.made if e.parent is target})) or 'text'}" if kind == "add"
                else f"set {tag}.{attribute or 'text'}" if kind == "set" else f"{kind} {tag}")
        out.writers[(source, role, what)] = out.writers.get((source, role, what), 0) + 1
        for e in doc.made:
            for name in e.attrs:
                wrote[(e.eid, name)] = (source, role)
            wrote[(e.eid, "")] = (source, role)
        if target is None:
            continue
        if kind == "set":
            after = _value(target, attribute, op)
            if before is not None and before != after:
                was = wrote.get((target.eid, attribute or ""), ("", ""))
                out.corrections.append(_correction(key, (source, role), target, was, op="set", attribute=attribute,
                                                   before=before, after=after))
            if after == _new_value(op) and after != before:  # a value set again keeps its first author
                wrote[(target.eid, attribute or "")] = (source, role)
        elif kind == "remove" and target.removed:
            was = wrote.get((target.eid, ""), ("", ""))
            out.corrections.append(_correction(key, (source, role), target, was, op="remove"))
    return out


def _correction(key: Key, by: tuple[str, str], target: Element, was: tuple[str, str], *, op: str,
                attribute: str | None = None, before: str | None = None, after: str | None = None) -> dict[str, Any]:
    """A correction's row: by (source, role), of the value ``was`` (source, role) wrote."""
    source, role = by
    return {"source": source, "role": role, "seq": key[2], "timestamp": key[0], "op": op, "tag": target.tag,
            "eid": target.eid, "attribute": attribute or "", "before": before, "after": after,
            "wrote_source": was[0], "wrote_role": was[1], "own": was[0] == source}


def _role(body: str) -> str:
    try:
        value = json.loads(body)
    except ValueError:
        return ""
    role = value.get("role") if isinstance(value, dict) else None
    return role if isinstance(role, str) else ""


def _new_value(op: dict[str, Any]) -> str | None:
    return op.get("value") if "attribute" in op else op.get("text")


def _value(e: Element, attribute: str | None, op: dict[str, Any]) -> str | None:
    """The value a set changes: the attribute's (None: not set), or the element's text."""
    if "attribute" in op:
        return e.attrs.get(str(attribute))
    return e.text or None


def _tag_of(to: dict[str, Any]) -> str:
    """The tag an address names when its element is gone (a remove of a jam no one made)."""
    for key in ("person", "jam", "period", "team"):
        if key in to:
            return key
    return str(to.get("path", "")).rsplit("/", 1)[-1] or "element"


def _target(root: Element, doc: BoutDocument, to: dict[str, Any]) -> Element | None:
    """The element an address names now, without making it (None: it does not exist)."""
    if "eid" in to:
        return doc.index.get(str(to["eid"]))
    if "period" in to:
        period = root.find("period", number=str(to["period"]))
        if period is None or "jam" not in to:
            return period
        return period.find("jam", number=str(to["jam"]))
    if "team" in to:
        team = root.find("team", type=str(to["team"]))
        if team is None or "person" not in to:
            return team
        who = str(to["person"])
        return next((p for p in team.children if p.tag == "person" and who in (p.attrs.get("number"),
                                                                              p.attrs.get("name"))), None)
    if "path" in to:
        e: Element | None = root
        for step in str(to["path"]).split("/"):
            if e is None or step in ("", "bout"):
                continue
            e = e.find(step)
        return e
    return None
