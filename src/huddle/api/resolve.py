"""Names and id prefixes: what a person types where the API asks for a node or a post.

Wherever the API takes a node id (``to``, ``source``, the peer of an exclusion) it takes
the node's *name* or any *unique prefix* of its id (at least :data:`MIN_PREFIX` hex
digits) as well; wherever it takes a post id, a unique prefix of it.  :func:`resolve`
is the one rule, pure and tested alone:

- a whole id (32 hex digits for a node, dashes allowed; 40 for a post) is taken as it is,
  known here or not: what is done with it decides (an unknown peer is 404, as before);
- otherwise the candidates are the known ids whose name is the text exactly, and those
  whose id starts with it (hex, case ignored, at least MIN_PREFIX digits); one is the
  answer, several are refused with the list (:class:`Ambiguous`, 409: a name equal to
  another node's id prefix is ambiguous too, and so are two nodes of one name), none
  is :class:`Unknown` (404);
- empty text, text over :data:`MAX_TEXT` characters, or text that is not Unicode is
  :class:`BadName` (400, counted as bad input); so is a post id that is not hex.

The nodes known here (:func:`known_nodes`): this node, its peers, the system picture's
members, the excluded and every source in its log.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any, Final
from urllib.parse import unquote_to_bytes

from aiohttp import web

from ..errors import HuddleError, LocalProtocolError
from ..ids import NodeId
from .common import NODE_KEY, STATE_KEY
from .guard import bad_text
from .ports import ApiNode

__all__ = ["MAX_TEXT", "MIN_PREFIX", "Ambiguous", "BadName", "Unknown", "known_nodes", "node_id", "node_names",
           "path_text",
           "post_id", "resolve"]

MIN_PREFIX: Final = 4  # hex digits: fewer match too much to be meant
MAX_TEXT: Final = 200  # characters: over any node name (MAX_NAME octets) and any id
NODE_DIGITS: Final = 32
POST_DIGITS: Final = 40
_HEX = re.compile(r"[0-9a-fA-F]+")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class BadName(LocalProtocolError):
    """Text that names nothing by its form: empty, too long, not Unicode (400)."""


class Unknown(HuddleError):
    """No node (or post) known here has that name or an id starting so (404)."""


class Ambiguous(HuddleError):
    """Several match (409): ``candidates`` are their (id, label) pairs, for the answer's list."""

    def __init__(self, message: str, candidates: list[tuple[str, str]], fields: tuple[str, str]) -> None:
        super().__init__(message)
        self.candidates = candidates
        self.fields = fields

    def details(self) -> dict[str, Any]:
        """What the JSON answer carries beside ``error``: the candidates, each as its id and label."""
        id_field, label_field = self.fields
        return {"candidates": [{id_field: i, label_field: label} for i, label in self.candidates]}


def resolve(text: str, known: Iterable[tuple[str, str]], *, digits: int = NODE_DIGITS, by_label: bool = True,
            what: str = "node", fields: tuple[str, str] = ("uuid", "name")) -> str:
    """The one id (lowercase hex, ``digits`` long) ``text`` stands for among ``known``
    ((id, label) pairs: a node's name, a post's subject), by the rules above.  ``by_label``:
    a label equal to the text matches (nodes' names; not posts' subjects)."""
    if not isinstance(text, str) or not text.strip():
        raise BadName(f"give a {what}'s " + ("name or " if by_label else "") + "id (or a unique prefix of its id)")
    if len(text) > MAX_TEXT:
        raise BadName(f"a {what}'s name or id is at most {MAX_TEXT} characters, got {len(text)}")
    if bad_text(text) or "\ufffd" in text or _CONTROL.search(text):
        raise BadName(f"a {what}'s name or id is printable Unicode text")
    bare = text.replace("-", "") if digits == NODE_DIGITS else text
    if len(bare) == digits and _HEX.fullmatch(bare):
        return bare.lower()
    prefix = bare.lower() if _HEX.fullmatch(bare) else ""
    if not prefix and not by_label:  # a post has no name: text that is not hex is no post's id
        raise BadName(f"{text[:60]!r} is not a {what} id ({digits} hex digits, or a unique prefix of them)")
    labels: dict[str, str] = {}
    matches: set[str] = set()
    for ident, label in known:
        if not labels.get(ident):
            labels[ident] = label
        if (by_label and label == text) or (len(prefix) >= MIN_PREFIX and ident.startswith(prefix)):
            matches.add(ident)
    if len(matches) == 1:
        return matches.pop()
    shown = text[:60]
    if matches:
        found = sorted((i, labels.get(i, "")) for i in matches)
        raise Ambiguous(f"{shown!r} matches {len(found)} {what}s: "
                        + ", ".join(f"{label} ({i[:12]})" if label else i[:12] for i, label in found)
                        + "; give more of the id", found, fields)
    if prefix and len(prefix) < MIN_PREFIX:
        raise Unknown(f"no {what} here is named {shown!r}; an id prefix is at least {MIN_PREFIX} hex digits")
    named = "named " if by_label else ""
    raise Unknown(f"no {what} known to this node is {named}{shown!r}" + (" or has an id starting so" if prefix else ""))


def known_nodes(node: ApiNode) -> list[tuple[str, str]]:
    """Every node this one knows of, as (id, name; "" when it has none): itself, its peers,
    the system picture's members, the excluded, the sources of its log."""
    mesh = node.mesh
    out = [(str(mesh.uuid), mesh.name)]
    out += [(str(p.uuid), p.name) for p in node.peers()]
    out += [(str(m["uuid"]), str(m.get("name") or "")) for m in node.system().get("members", ())]
    out += [(str(peer), "") for peer in mesh.excluded]
    out += [(str(source), "") for source in node.log_summary().get("version_vector", {})]
    return out


def node_names(node: ApiNode) -> dict[str, str]:
    """The names of the nodes this one knows, by id: what an answer shows beside the ids it
    gives (``source_name``; the first name known for an id).  Only the nodes of
    :func:`known_nodes` that have a name: itself, its peers, the system picture's members."""
    mesh = node.mesh
    out = {str(mesh.uuid): mesh.name}
    for ident, name in [(str(p.uuid), p.name) for p in node.peers()] + [
            (str(m["uuid"]), str(m.get("name") or "")) for m in node.system().get("members", ())]:
        if name:
            out.setdefault(ident, name)
    return out


def _counted(request: web.Request, exc: BadName) -> BadName:
    request.app[STATE_KEY].counters.bad_input += 1
    return exc


def path_text(request: web.Request, key: str) -> str:
    """A path segment as text: aiohttp leaves escapes that are not UTF-8 (``%FF``) as they
    came, so one that still decodes to something else than UTF-8 is refused here (counted)."""
    text = request.match_info[key]
    if "%" in text:
        try:
            unquote_to_bytes(text).decode("utf-8")
        except UnicodeDecodeError:
            raise _counted(request, BadName(f"{key!r}: the path's text is not UTF-8")) from None
    return text


def node_id(request: web.Request, text: str, field: str) -> NodeId:
    """The node ``text`` (from ``field``) names, for a handler: BadName (counted), Unknown or
    Ambiguous otherwise, which the API's error table answers 400, 404 or 409."""
    try:
        if isinstance(text, str) and len(text) <= MAX_TEXT:
            try:
                return NodeId.from_hex(text)  # a whole id: no need to gather the known nodes
            except ValueError:
                pass
        return NodeId.from_hex(resolve(text, known_nodes(request.app[NODE_KEY])))
    except BadName as exc:
        raise _counted(request, BadName(f"{field!r}: {exc}")) from None


def post_id(request: web.Request, text: str, known: Iterable[tuple[str, str]]) -> str:
    """The post ``text`` names among ``known`` ((id, subject) pairs), for a handler."""
    try:
        return resolve(text, known, digits=POST_DIGITS, by_label=False, what="post", fields=("id", "subject"))
    except BadName as exc:
        raise _counted(request, exc) from None
