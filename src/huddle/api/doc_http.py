"""HTTP routes of the bout document and its jams, added to the node's API app by the
document feature (doc/feature.py).

    POST /api/v1/doc/ops                     operations (XML or JSON): recorded all or none
    GET  /api/v1/doc[?format=xml|json][&eids]  the document as this node shows it
    GET  /api/v1/doc/history?eid=UUID        who changed an element, when, with which event
    GET  /api/v1/doc/dropped                 the operations that did not fit, as they arrived
    GET  /api/v1/bout/jams                   the active, just completed and upcoming jams
    GET  /api/v1/bout/summary                the score per jam, period and game, lineups, penalties, timeouts
    GET  /api/v1/bout/clocks                 period, jam, lineup, timeout and intermission clocks at mesh time now
    POST /api/v1/bout/{start|stop}           start the upcoming jam, stop the active one, now
    GET  /api/v1/bout/conflicts              writes by a role that does not own the field, not yet resolved
    GET  /bout                               the bout page
    GET  /bout/{role/ROLE|scoreboard|head}   a role's page, the scoreboard for a display, the head NSO's view

A write may name the role of the device that makes it (``?role=ROLE``, docs/document.md
"Roles"): an unknown role is a 400 and nothing is recorded.

A write waits for the node's start-up window as every write does (``HOLD_WRITES``);
what does not fit the document is a 422, a jam that cannot start or stop a 409
(api/http.py ``ERROR_STATUS``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from aiohttp import web

from ..doc import DocEngine, OperationError, bout_summary, jams, parse_json_ops, parse_ops, to_json, to_xml
from ..doc.clocks import clocks
from ..doc.ops import check_role
from .common import HOLD_WRITES, NODE_KEY, STATE_KEY, page_response, parse_strict, read_body
from .common import error_response as _error

__all__ = ["DOC_KEY", "DocPort", "DocsPort", "add_doc_routes"]

_DOC_TYPES = frozenset({"application/json", "application/xml", "text/xml"})
_STATIC = Path(__file__).parent / "static"


class DocPort(Protocol):
    """The bout document as these routes read and write it (doc/desk.py DocumentDesk)."""

    @property
    def engine(self) -> DocEngine: ...

    def apply_ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]: ...

    def start_jam(self, role: str | None = None) -> dict[str, Any]: ...

    def stop_jam(self, role: str | None = None) -> dict[str, Any]: ...

    def mesh_time(self) -> float: ...


class DocsPort(Protocol):
    """What these routes read of the document feature: its desk (NotRunning before it starts)."""

    @property
    def desk(self) -> DocPort: ...


DOC_KEY: web.AppKey[DocsPort] = web.AppKey("doc")


def _desk(request: web.Request) -> DocPort:
    return request.app[DOC_KEY].desk


def _flag(request: web.Request, name: str) -> bool:
    """``?name``, ``?name=1|true|yes`` -> True; absent, ``0|false|no`` -> False."""
    value = request.query.get(name)
    if value is None:
        return False
    if value.lower() not in ("", "1", "true", "yes", "0", "false", "no"):
        raise web.HTTPBadRequest(text=f"'{name}' must be true or false, not {value!r}")
    return value.lower() in ("", "1", "true", "yes")


def _role(request: web.Request) -> str | None:
    """The writing device's role (``?role=ROLE``), None if not named; an unknown one is a 400."""
    role = request.query.get("role")
    if role is None:
        return None
    try:
        return check_role(role)
    except OperationError as exc:
        request.app[STATE_KEY].counters.bad_input += 1
        raise web.HTTPBadRequest(text=str(exc)) from None


async def _post_doc_ops(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    role = _role(request)
    raw = await read_body(request, _DOC_TYPES)
    try:
        if request.content_type == "application/json":
            ops = parse_json_ops(parse_strict(request, raw))
        else:
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                request.app[STATE_KEY].counters.bad_input += 1
                return _error(400, "request body is not UTF-8")
            ops = parse_ops(text, request.content_type)
        if role is not None:
            if any(op.get("role", role) != role for op in ops):
                raise OperationError(f"an operation names another role than ?role={role}")
            ops = [{**op, "role": role} for op in ops]
    except OperationError as exc:  # malformed: the request's input, as for JSON that is not
        raise web.HTTPBadRequest(text=str(exc)) from None
    await node.until_recording(HOLD_WRITES)
    applied = _desk(request).apply_ops(ops)  # not fitting the document: 422; too large: 413 (ERROR_STATUS)
    return web.json_response({"ops": applied}, status=201)


async def _get_doc(request: web.Request) -> web.Response:
    fmt = request.query.get("format", "xml")
    eids = _flag(request, "eids")
    engine = _desk(request).engine
    doc = engine.document
    if fmt == "json":
        return web.json_response({"document": to_json(doc.root, eids=eids), "events": len(engine),
                                  "dropped": len(doc.dropped)})
    if fmt != "xml":
        return _error(400, f"unknown format {fmt!r}: use xml or json")
    return web.Response(text=to_xml(doc.root, eids=eids), content_type="application/xml")


async def _get_doc_history(request: web.Request) -> web.Response:
    eid = request.query.get("eid")
    if not eid:
        return _error(400, "give the element: ?eid=UUID")
    doc = _desk(request).engine.document
    history = doc.history_of(eid.lower())
    element = doc.index.get(eid.lower())
    if history is None and element is None:
        return _error(404, f"no element with eid {eid} was ever in the document")
    return web.json_response({
        "eid": eid.lower(), "present": element is not None,
        "tag": None if element is None else element.tag, "history": history or [],
    })


async def _get_doc_dropped(request: web.Request) -> web.Response:
    return web.json_response(_desk(request).engine.document.dropped)


async def _get_jams(request: web.Request) -> web.Response:
    return web.json_response(jams(_desk(request).engine.document.root))


async def _get_summary(request: web.Request) -> web.Response:
    return web.json_response(bout_summary(_desk(request).engine.document.root))


async def _get_conflicts(request: web.Request) -> web.Response:
    doc = _desk(request).engine.document
    return web.json_response({"conflicts": doc.conflicts, "resolved": doc.ledger.resolved})


async def _get_clocks(request: web.Request) -> web.Response:
    desk = _desk(request)
    return web.json_response(clocks(desk.engine.document.root, desk.mesh_time()))


async def _post_jam(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    role = _role(request)
    await node.until_recording(HOLD_WRITES)
    desk = _desk(request)
    state = desk.start_jam(role) if request.match_info["action"] == "start" else desk.stop_jam(role)  # JamStateError: 409
    return web.json_response(state, status=201)


async def _get_bout_page(request: web.Request) -> web.StreamResponse:
    return page_response(request, _STATIC / "bout.html", "text/html")


# The bout's pages (docs/document.md "The pages"): a role's page (without a role, or an unknown
# one, it offers the roles), the scoreboard, the head NSO's view, and the script they share.
_PAGES = {"role": "role.html", "scoreboard": "scoreboard.html", "head": "head.html"}


async def _get_bout_view(request: web.Request) -> web.StreamResponse:
    return page_response(request, _STATIC / _PAGES[request.match_info["view"]], "text/html")


async def _get_role_page(request: web.Request) -> web.StreamResponse:
    page = "head.html" if request.match_info["role"] == "head-nso" else "role.html"  # the head NSO's is the head view
    return page_response(request, _STATIC / page, "text/html")


async def _get_bout_js(request: web.Request) -> web.StreamResponse:
    return page_response(request, _STATIC / "bout.js", "text/javascript")


def add_doc_routes(app: web.Application, doc: DocsPort) -> None:
    """Add the document's routes, reading ``doc``'s desk."""
    app[DOC_KEY] = doc
    app.router.add_post("/api/v1/doc/ops", _post_doc_ops)
    app.router.add_get("/api/v1/doc", _get_doc)
    app.router.add_get("/api/v1/doc/history", _get_doc_history)
    app.router.add_get("/api/v1/doc/dropped", _get_doc_dropped)
    app.router.add_get("/api/v1/bout/jams", _get_jams)
    app.router.add_get("/api/v1/bout/summary", _get_summary)
    app.router.add_get("/api/v1/bout/conflicts", _get_conflicts)
    app.router.add_get("/api/v1/bout/clocks", _get_clocks)
    app.router.add_post("/api/v1/bout/{action:start|stop}", _post_jam)
    app.router.add_get("/bout", _get_bout_page)
    app.router.add_get("/bout/{view:role|scoreboard|head}", _get_bout_view)
    app.router.add_get("/bout/role/{role:[a-z-]{1,40}}", _get_role_page)
    app.router.add_get("/bout/bout.js", _get_bout_js)
