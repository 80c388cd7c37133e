"""Document operations: parsed from the source's XML form or from JSON, and
normalised to one JSON form, which is what the log carries (event kind ``doc``).

Normal form (docs/document.md)::

    {"op": "add",    "to": ADDRESS, "children": [NODE, ...], "text": "..."}   # either or both
    {"op": "remove", "to": ADDRESS}
    {"op": "set",    "to": ADDRESS, "attribute": NAME, "value": "..."}
    {"op": "set",    "to": ADDRESS, "text": "..."}
    {"op": "set",    "to": JAM, "attribute": FLAG, "team": "home"|"away", "value": "yes"|"no"}  # one team's part
    {"op": "insert-jam", "to": JAM}      # a jam before jam J (or after the last), later jams renumbered up
    {"op": "remove-jam", "to": JAM}      # JAM or {"eid": E}: the jam goes, later jams renumbered down

    Each may carry ``"role": ROLE``, the role of the device that wrote it (doc/roles.py).

    JAM:     {"period": P, "jam": J}
    ADDRESS: {"eid": E} | {"period": P} | {"period": P, "jam": J} | {"team": T}
             | {"team": T, "person": NUMBER_OR_NAME} | {"path": "ruleset/halftime"}
    NODE:    {"tag": T, "attrs": {...}, "eid": E?, "text": "..."?, "children": [NODE, ...]?}
"""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from typing import Any, Final

from ..errors import HuddleError
from .model import SCHEMA, TEAMS
from .roles import FLAG_VALUES, ROLES, TEAM_FLAGS

__all__ = [
    "DOC_KIND", "JamStateError", "OperationError", "check_role", "is_normal", "normalise", "parse_json_ops", "parse_ops",
    "parse_xml_ops",
]

DOC_KIND: Final = "doc"  # the log event kind of a document operation
MAX_DEPTH: Final = 16
MAX_NODES: Final = 2000
MAX_JAM: Final = 200
KINDS: Final = ("add", "remove", "set", "insert-jam", "remove-jam")
_UUID: Final = re.compile(r"^[0-9a-fA-F]{8}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{4}-?[0-9a-fA-F]{12}$")
_ADDRESS_KEYS: Final = ("eid", "period", "jam", "team", "person", "path")


class OperationError(HuddleError):
    """An operation that is malformed or does not fit the document (a 4xx)."""


def check_role(role: Any) -> str:
    """``role`` if it is an official's role (doc/roles.py), else OperationError."""
    if role not in ROLES:
        raise OperationError(f"unknown role {role!r}: one of {', '.join(ROLES)}")
    return str(role)


class JamStateError(OperationError):
    """A jam cannot start or stop now: one is being skated, none is, or the bout is over."""


def parse_ops(text: str, content_type: str = "") -> list[dict[str, Any]]:
    """Operations from an XML or JSON text (by content type, else by its first character)."""
    stripped = text.lstrip()
    if "xml" in content_type or (not content_type.endswith("json") and stripped.startswith("<")):
        return parse_xml_ops(text)
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise OperationError(f"operation is neither XML nor JSON: {exc}") from None
    except RecursionError:
        raise OperationError("operation nested too deeply") from None
    return parse_json_ops(value)


# --------------------------------------------------------------------------- JSON


def parse_json_ops(value: Any) -> list[dict[str, Any]]:
    """One operation (an object) or several (a list, or ``{"ops": [...]}``), normalised."""
    if isinstance(value, dict) and "ops" in value:
        value = value["ops"]
    items = value if isinstance(value, list) else [value]
    if not items:
        raise OperationError("no operation given")
    return [normalise(item) for item in items]


def normalise(op: Any) -> dict[str, Any]:
    if not isinstance(op, dict):
        raise OperationError("an operation is a JSON object")
    kind = op.get("op")
    if kind not in KINDS:
        raise OperationError(f"unknown operation {kind!r}: use add, remove, set, insert-jam or remove-jam")
    unknown = set(op) - {"op", "to", "children", "text", "attribute", "value", "xml", "team", "role"}
    if unknown or ("team" in op and kind != "set"):
        raise OperationError(f"unknown member(s) in a {kind} operation: {', '.join(sorted(unknown or {'team'}))}")
    out: dict[str, Any] = {"op": kind, "to": _address(op.get("to"))}
    if "role" in op:
        out["role"] = check_role(op["role"])
    if kind in ("remove", "insert-jam", "remove-jam"):
        if any(k in op for k in ("children", "text", "attribute", "value", "xml")):
            raise OperationError(f"{kind} takes no payload")
        if kind != "remove" and "jam" not in out["to"] and not (kind == "remove-jam" and "eid" in out["to"]):
            raise OperationError(f"{kind} addresses a jam: period and jam" + (" (or its eid)" if kind == "remove-jam"
                                                                              else ""))
        return out
    if kind == "set":
        if "team" in op:  # one team's part of a jam's flag: an explicit yes or no
            name, team, value = op.get("attribute"), op["team"], op.get("value")
            if name not in TEAM_FLAGS or "jam" not in out["to"]:
                raise OperationError(f"set: a team's part is set of a jam's {', '.join(TEAM_FLAGS)}")
            if team not in ("home", "away"):
                raise OperationError(f"set: team must be home or away, not {team!r}")
            if isinstance(value, bool):
                value = "yes" if value else "no"
            if value not in FLAG_VALUES:
                raise OperationError(f"set: a team's {name} is yes or no, not {value!r}")
            out["attribute"], out["team"], out["value"] = name, team, value
            return out
        if "attribute" in op:
            name, value = op["attribute"], op.get("value")
            if not isinstance(name, str) or not name:
                raise OperationError("set: 'attribute' must name an attribute")
            if name == "eid":
                raise OperationError("set: an element's eid cannot be changed")
            if not isinstance(value, (str, int, float)) or isinstance(value, bool):
                raise OperationError(f"set: the value of attribute {name!r} must be a string or a number")
            out["attribute"], out["value"] = name, _text(value)
        elif "text" in op:
            out["text"] = _text(op["text"])
        else:
            raise OperationError("set needs 'attribute' and 'value', or 'text'")
        return out
    # add
    children: list[Any] = []
    if "xml" in op:
        if not isinstance(op["xml"], str):
            raise OperationError("add: 'xml' must be a string of elements")
        children += [_node_from_xml(e, 1) for e in _parse_fragment(op["xml"])]
    if "children" in op:
        if not isinstance(op["children"], list):
            raise OperationError("add: 'children' must be a list of elements")
        children += [_node(c, 1) for c in op["children"]]
    text = op.get("text")
    if not children and not text:
        raise OperationError("add needs child elements or text")
    _count(children)
    if children:
        out["children"] = children
    if text:
        out["text"] = _text(text)
    return out


def _text(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        raise OperationError("text must be a string")
    text = value if isinstance(value, str) else repr(value) if isinstance(value, float) else str(value)
    if len(text) > 100_000:
        raise OperationError("text longer than 100000 characters")
    return text


def _address(to: Any) -> dict[str, Any]:
    if not isinstance(to, dict) or not to:
        raise OperationError("an operation needs an address 'to': eid, period [+ jam], team [+ person] or path")
    unknown = set(to) - set(_ADDRESS_KEYS)
    if unknown:
        raise OperationError(f"unknown address key(s): {', '.join(sorted(unknown))}")
    keys = frozenset(to)
    if keys == {"eid"}:
        eid = to["eid"]
        if not isinstance(eid, str) or not _UUID.match(eid):
            raise OperationError(f"eid must be a UUID, not {eid!r}")
        return {"eid": eid.lower()}
    if keys in ({"period"}, {"period", "jam"}):
        out: dict[str, Any] = {"period": _int(to["period"], "period", 1, 2)}
        if "jam" in to:
            out["jam"] = _int(to["jam"], "jam", 1, MAX_JAM)
        return out
    if keys in ({"team"}, {"team", "person"}):
        team = to["team"]
        if team not in TEAMS:
            raise OperationError(f"team must be one of {', '.join(TEAMS)}, not {team!r}")
        out = {"team": team}
        if "person" in to:
            person = to["person"]
            if isinstance(person, int) and not isinstance(person, bool):
                person = str(person)
            if not isinstance(person, str) or not person:
                raise OperationError("person must be a number or a name")
            out["person"] = person
        return out
    if keys == {"path"}:
        path = to["path"]
        if not isinstance(path, str) or not path.strip("/"):
            raise OperationError("path must be tags separated by '/', e.g. ruleset/halftime")
        steps = path.strip("/").split("/")
        if steps[0] == "bout":
            steps = steps[1:]
        for step in steps:
            if step not in SCHEMA or step == "bout":
                raise OperationError(f"path step {step!r} is not an element of the document")
        return {"path": "/".join(steps)}
    raise OperationError(
        f"cannot address by {', '.join(sorted(keys))}: use eid, period, period + jam, team, team + person, or path")


def _int(value: Any, what: str, low: int, high: int) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise OperationError(f"{what} must be a number from {low} to {high}, not {value!r}")
    return value


def _node(node: Any, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise OperationError(f"elements nested deeper than {MAX_DEPTH}")
    if not isinstance(node, dict) or not isinstance(node.get("tag"), str):
        raise OperationError("an element is an object with a 'tag'")
    unknown = set(node) - {"tag", "attrs", "eid", "text", "children"}
    if unknown:
        raise OperationError(f"unknown member(s) in an element: {', '.join(sorted(unknown))}")
    tag = node["tag"]
    attrs = node.get("attrs", {})
    if not isinstance(attrs, dict):
        raise OperationError(f"<{tag}>: 'attrs' must be an object")
    out = _element(tag, {str(k): v for k, v in attrs.items()}, node.get("eid"))
    if node.get("text"):
        out["text"] = _text(node["text"])
    children = node.get("children", [])
    if not isinstance(children, list):
        raise OperationError(f"<{tag}>: 'children' must be a list")
    if children:
        out["children"] = [_node(c, depth + 1) for c in children]
    return out


def _element(tag: str, attrs: dict[str, Any], eid: Any) -> dict[str, Any]:
    allowed = SCHEMA.get(tag)
    if allowed is None or tag == "bout":
        raise OperationError(f"unknown element <{tag}>: the document has {', '.join(sorted(SCHEMA))}")
    out: dict[str, Any] = {"tag": tag}
    clean: dict[str, str] = {}
    for k, v in attrs.items():
        if k == "eid":
            eid = v
            continue
        if k not in allowed:
            raise OperationError(f"<{tag}> has no attribute {k!r} (it has {', '.join(sorted(allowed))})")
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise OperationError(f"<{tag} {k}=...>: the value must be a string or a number")
        clean[k] = _text(v)
    if tag == "team":
        raise OperationError("teams are fixed (home, away, official): add people to a team instead")
    if tag == "period":
        raise OperationError("the two periods are fixed: address them with period=1 or 2")
    if tag == "jam":
        raise OperationError("jams are made by referring to them (period + jam), not added")
    if clean:
        out["attrs"] = dict(sorted(clean.items()))
    if eid is not None:
        if not isinstance(eid, str) or not _UUID.match(eid):
            raise OperationError(f"<{tag}>: eid must be a UUID, not {eid!r}")
        out["eid"] = eid.lower()
    return out


def _count(nodes: list[dict[str, Any]]) -> None:
    n = 0
    stack = list(nodes)
    while stack:
        node = stack.pop()
        n += 1
        stack.extend(node.get("children", []))
    if n > MAX_NODES:
        raise OperationError(f"more than {MAX_NODES} elements in one operation")


# --------------------------------------------------------------------------- fast check


NOT_ADDED: Final = frozenset({"bout", "team", "period", "jam"})  # elements an add may not make
MAX_STRING: Final = 100_000  # characters in one string of an operation


def is_normal(op: Any) -> bool:
    """True if ``op`` is already a valid operation in normal form, so that
    ``normalise(op) == op``: the cheap check a stored body takes (a node
    rebuilding its document reads every body again).  False sends the
    caller to :func:`normalise`, which accepts or explains."""
    if type(op) is not dict or not _normal_address(op.get("to")):
        return False
    kind = op.get("op")
    n = len(op)
    if "role" in op:
        if op["role"] not in ROLES:
            return False
        n -= 1
    if kind in ("remove", "insert-jam", "remove-jam"):
        return n == 2 and (kind == "remove" or "jam" in op["to"] or (kind == "remove-jam" and "eid" in op["to"]))
    if kind == "set":
        if "team" in op:
            return (n == 5 and op.get("attribute") in TEAM_FLAGS and op["team"] in ("home", "away")
                    and op.get("value") in FLAG_VALUES and "jam" in op["to"])
        if n == 4:
            name, value = op.get("attribute"), op.get("value")
            return (type(name) is str and name not in {"eid", ""} and type(value) is str and len(value) <= MAX_STRING)
        text = op.get("text")
        return n == 3 and type(text) is str and len(text) <= MAX_STRING
    if kind == "add":
        children, text = op.get("children"), op.get("text")
        if n != 2 + (children is not None) + (text is not None):
            return False
        if text is not None and (type(text) is not str or not text or len(text) > MAX_STRING):
            return False
        if children is None:
            return text is not None
        count = [0]
        return (type(children) is list and bool(children) and all(_normal_node(c, 1, count) for c in children)
                and count[0] <= MAX_NODES)
    return False


def _normal_address(to: Any) -> bool:
    if type(to) is not dict:
        return False
    n = len(to)
    if "period" in to:
        p = to["period"]
        if type(p) is not int or not 1 <= p <= 2:
            return False
        if n == 1:
            return True
        j = to.get("jam")
        return n == 2 and type(j) is int and 1 <= j <= MAX_JAM
    if "team" in to:
        if to["team"] not in TEAMS:
            return False
        if n == 1:
            return True
        who = to.get("person")
        return n == 2 and type(who) is str and who != ""
    if n != 1:
        return False
    if "eid" in to:
        eid = to["eid"]
        return type(eid) is str and eid == eid.lower() and _UUID.match(eid) is not None
    path = to.get("path")
    if type(path) is not str:
        return False
    if path == "":
        return True
    steps = path.split("/")
    return steps[0] != "bout" and all(s in SCHEMA and s != "bout" for s in steps)


def _normal_node(node: Any, depth: int, count: list[int]) -> bool:
    count[0] += 1
    if type(node) is not dict or depth > MAX_DEPTH:
        return False
    tag = node.get("tag")
    allowed = SCHEMA.get(tag) if type(tag) is str else None
    if allowed is None or tag in NOT_ADDED:
        return False
    n = 1
    attrs = node.get("attrs")
    if attrs is not None:
        n += 1
        if type(attrs) is not dict or not attrs:
            return False
        for k, v in attrs.items():
            if k not in allowed or type(v) is not str or len(v) > MAX_STRING:
                return False
    eid = node.get("eid")
    if eid is not None:
        n += 1
        if type(eid) is not str or eid != eid.lower() or _UUID.match(eid) is None:
            return False
    text = node.get("text")
    if text is not None:
        n += 1
        if type(text) is not str or not text or len(text) > MAX_STRING:
            return False
    children = node.get("children")
    if children is not None:
        n += 1
        if type(children) is not list or not children or not all(_normal_node(c, depth + 1, count) for c in children):
            return False
    return len(node) == n


# --------------------------------------------------------------------------- XML


def _parse_xml(text: str) -> ET.Element:
    """``text`` parsed by defusedxml (no DTDs, no entities); OperationError when refused.
    defusedxml is imported here, by the first XML operation, not by every node's start."""
    from defusedxml import DefusedXmlException  # noqa: PLC0415 - deferred (see above)
    from defusedxml.ElementTree import fromstring  # noqa: PLC0415 - deferred (see above)

    try:
        return fromstring(text)
    except ET.ParseError as exc:
        raise OperationError(f"malformed XML: {exc}") from None
    except DefusedXmlException as exc:
        raise OperationError(f"XML with DTDs or entities is refused: {exc}") from None
    except RecursionError:
        raise OperationError("XML nested too deeply") from None


def parse_xml_ops(text: str) -> list[dict[str, Any]]:
    """``<add|remove|set ...>`` or an ``<action>`` holding several of them."""
    root = _parse_xml(text)
    ops = list(root) if root.tag == "action" else [root]
    if not ops:
        raise OperationError("<action> holds no operation")
    return [_op_from_xml(e) for e in ops]


def _op_from_xml(e: ET.Element) -> dict[str, Any]:
    if e.tag not in KINDS:
        raise OperationError(f"<{e.tag}> is not an operation: use <add>, <remove>, <set>, <insert-jam> or <remove-jam>")
    to: dict[str, Any] = dict(e.attrib)
    op: dict[str, Any] = {"op": e.tag, "to": to}
    if e.tag in ("remove", "insert-jam", "remove-jam"):
        if len(e) or (e.text or "").strip():
            raise OperationError(f"<{e.tag}> takes no payload")
    elif e.tag == "set":
        attribute = e.find("attribute")
        if attribute is not None:
            if len(e) != 1:
                raise OperationError("<set> holds one <attribute> and nothing else")
            if "name" in attribute.attrib:  # <attribute name="duration">120</attribute>
                op["attribute"], op["value"] = attribute.attrib["name"], attribute.text or ""
            else:  # <attribute>duration</attribute>120
                op["attribute"], op["value"] = (attribute.text or "").strip(), (attribute.tail or "").strip()
        else:
            if len(e):
                raise OperationError("<set> holds an <attribute> element or text, not other elements")
            op["text"] = e.text or ""
    else:
        op["children"] = [_node_from_xml(c, 1) for c in e]
        if (e.text or "").strip():
            op["text"] = e.text.strip() if e.text else ""
    return normalise(op)


def _parse_fragment(text: str) -> list[ET.Element]:
    return list(_parse_xml(f"<fragment>{text}</fragment>"))


def _node_from_xml(e: ET.Element, depth: int) -> dict[str, Any]:
    if depth > MAX_DEPTH:
        raise OperationError(f"elements nested deeper than {MAX_DEPTH}")
    out = _element(e.tag, dict(e.attrib), None)
    if e.text and e.text.strip():
        out["text"] = e.text.strip()
    if len(e):
        out["children"] = [_node_from_xml(c, depth + 1) for c in e]
    return out
