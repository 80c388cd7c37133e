"""The bout document's tree: elements, the vocabulary, the default bout, XML and JSON output.

A small DerbyXML: the elements and attributes a bout needs (docs/document.md
lists them).  Every element has an ``eid``; elements of the default bout and
implicitly created jams get fixed eids (derived from their place), added
elements get the eid they were given or one derived from the event that
added them, so every node names every element the same way.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator
from typing import Any, Final
from xml.sax.saxutils import escape, quoteattr

__all__ = ["SCHEMA", "TEAMS", "Element", "default_bout", "derived_eid", "digest", "to_json", "to_xml"]

# eids derived from names: uuid5 in this namespace (fixed forever: the eids must agree across nodes).
_NAMESPACE: Final = uuid.UUID("5b1e9a52-3c1f-4f4e-9d43-6b7d0c1e2f10")

TEAMS: Final = ("home", "away", "official")

# element -> the attributes it may carry (besides eid).
SCHEMA: Final[dict[str, frozenset[str]]] = {
    "bout": frozenset({"name", "date", "status", "signed"}),
    "venue": frozenset({"name", "city", "address"}),
    "ruleset": frozenset({"name", "version"}),
    "halftime": frozenset({"duration"}),
    "team": frozenset({"type", "name", "league", "color"}),
    "person": frozenset({"number", "name", "role"}),
    "period": frozenset({"number", "start", "duration"}),
    "jam": frozenset({"number", "start", "duration", "lead", "called", "lost", "injury", "no-initial"}),
    "lineup": frozenset({"team", "position", "number"}),
    "points": frozenset({"team", "number", "points", "pass"}),
    "penalty": frozenset({"team", "number", "code", "time"}),
    "starpass": frozenset({"team", "trip", "number"}),
    "box": frozenset({"team", "number", "in", "out"}),
    "timeout": frozenset({"team", "kind", "time", "result"}),
    "note": frozenset({"by", "time"}),
}

# Attributes that identify an element and may not be changed by `set`.
FIXED: Final[dict[str, frozenset[str]]] = {
    "team": frozenset({"type"}),
    "period": frozenset({"number"}),
    "jam": frozenset({"number"}),
}

# Elements of the default bout that may not be removed (addresses depend on them).
PERMANENT: Final = frozenset({"bout", "team", "period"})


_NS_BYTES: Final = _NAMESPACE.bytes


def derived_eid(name: str) -> str:
    """A fixed eid for a name, the same on every node: ``uuid5(namespace, name)``,
    formatted without building a UUID object (this runs once per added element)."""
    d = bytearray(hashlib.sha1(_NS_BYTES + name.encode("utf-8"), usedforsecurity=False).digest()[:16])
    d[6] = (d[6] & 0x0F) | 0x50  # version 5
    d[8] = (d[8] & 0x3F) | 0x80  # RFC 4122 variant
    h = d.hex()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Element:
    """One element.  Its eid is given, fixed (derived from a name), or derived
    from the event that added it (``key``: timestamp, source, seq; ``n``: its
    number among the elements that event added) the first time it is asked
    for: most elements of a large document are never addressed by eid, and
    deriving one costs a SHA-1.

    ``key`` is set on every element an ``add`` made (given eid or not): it is
    also the first entry of the element's history, which the engine does not
    store (see ``BoutDocument.history_of``).  ``changes`` holds the rest, flat:
    ``[key, what, payload, key, what, payload, ...]``; ``before`` is an element
    of the same eid removed earlier, whose history this one continues."""

    __slots__ = ("_eid", "attrs", "before", "changes", "children", "key", "n", "parent", "removed", "tag", "text")

    # Positional only in effect: a keyword argument makes constructing a class several times
    # slower (a dict per call), and a rebuild constructs a million.
    def __init__(self, tag: str, eid: str | None, attrs: dict[str, str] | None = None, text: str = "",  # noqa: PLR0917
                 key: tuple[float, bytes, int] | None = None, n: int = 0) -> None:
        self.tag = tag
        self._eid = eid
        self.attrs: dict[str, str] = {} if attrs is None else attrs
        self.text = text
        self.children: list[Element] | tuple[()] = ()  # a list from the first child on
        self.parent: Element | None = None
        self.key = key
        self.n = n
        self.changes: list[Any] | None = None  # this element's history (engine)
        self.before: Element | None = None
        self.removed = False

    @property
    def eid(self) -> str:
        eid = self._eid
        if eid is None:
            assert self.key is not None
            _, source, seq = self.key
            eid = self._eid = derived_eid(f"{source.hex()}:{seq}:{self.n}")
        return eid

    def append(self, child: Element) -> None:
        child.parent = self
        if isinstance(self.children, list):
            self.children.append(child)
        else:  # most elements never have a child: they share the empty tuple
            self.children = [child]

    def insert(self, i: int, child: Element) -> None:
        child.parent = self
        if isinstance(self.children, list):
            self.children.insert(i, child)
        else:
            self.children = [child]

    def remove(self, child: Element) -> None:
        assert isinstance(self.children, list)
        self.children.remove(child)

    def find(self, tag: str, **attrs: str) -> Element | None:
        """The first child with ``tag`` and these attribute values."""
        for c in self.children:
            if c.tag == tag and all(c.attrs.get(k) == v for k, v in attrs.items()):
                return c
        return None

    def walk(self) -> Iterator[Element]:
        yield self
        for c in self.children:
            yield from c.walk()

    def copy(self) -> Element:
        out = Element(self.tag, self._eid, dict(self.attrs), self.text, self.key, self.n)
        for c in self.children:
            out.append(c.copy())
        return out

    def __repr__(self) -> str:
        return f"Element({self.tag!r}, {self.attrs!r})"


def default_bout() -> Element:
    """The document before any event: venue, ruleset, three teams, two periods."""
    bout = Element("bout", derived_eid("bout"))
    bout.append(Element("venue", derived_eid("bout/venue")))
    ruleset = Element("ruleset", derived_eid("bout/ruleset"))
    bout.append(ruleset)
    ruleset.append(Element("halftime", derived_eid("bout/ruleset/halftime"), {"duration": "900"}))
    for team in TEAMS:
        bout.append(Element("team", derived_eid(f"bout/team/{team}"), {"type": team}))
    for number in ("1", "2"):
        bout.append(Element("period", derived_eid(f"bout/period/{number}"), {"number": number}))
    return bout


def digest(root: Element) -> str:
    """SHA-256 (hex) of the document's canonical XML with eids: equal on two
    nodes exactly when they show the same document, element names included.
    The node records it in its statistics rows and the pipeline's replay
    computes it the same way, so the two can be compared."""
    return hashlib.sha256(to_xml(root, eids=True).encode()).hexdigest()


def to_xml(root: Element, *, eids: bool = False) -> str:
    """Canonical XML: attributes sorted, no whitespace added, eids only if asked."""
    out: list[str] = []
    _write(root, out, eids)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + "".join(out) + "\n"


def _write(e: Element, out: list[str], eids: bool) -> None:
    attrs = dict(e.attrs)
    if eids:
        attrs["eid"] = e.eid
    out.append("<" + e.tag)
    for k in sorted(attrs):
        out.append(f" {k}={quoteattr(attrs[k])}")
    if not e.text and not e.children:
        out.append("/>")
        return
    out.append(">")
    if e.text:
        out.append(escape(e.text))
    for c in e.children:
        _write(c, out, eids)
    out.append(f"</{e.tag}>")


def to_json(e: Element, *, eids: bool = True) -> dict[str, Any]:
    out: dict[str, Any] = {"tag": e.tag}
    if eids:
        out["eid"] = e.eid
    if e.attrs:
        out["attrs"] = dict(sorted(e.attrs.items()))
    if e.text:
        out["text"] = e.text
    if e.children:
        out["children"] = [to_json(c, eids=eids) for c in e.children]
    return out
