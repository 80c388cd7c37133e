"""The node's local HTTP + WebSocket API (aiohttp).

Every error is JSON ``{"error": "..."}`` with a 4xx status; an unexpected
failure is logged and answered 500 with no stack trace.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import WSMsgType, web

from ..config import parse_hostport
from ..doc import OperationError, jams, parse_ops, to_json, to_xml
from ..errors import ConfigError, CutOffReadOnly, LocalProtocolError
from ..ids import NodeId
from ..protocol import Event, PeerInfo
from ..protocol.delivery import BufferFull, MessageTooLarge, NotIncluded
from ..protocol.events import LogAppended, record_json
from ..wire import MAX_BODY

if TYPE_CHECKING:
    from ..node import Node

__all__ = ["make_app", "start_api"]

log = logging.getLogger("huddle.api")

NODE_KEY: web.AppKey[Node] = web.AppKey("node")
SUBSCRIBER_QUEUE = 10_000
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status)


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        reason = exc.text if exc.text and not exc.text.startswith(f"{exc.status}:") else exc.reason
        if exc.status == 404:
            reason = f"no such endpoint: {request.method} {request.path}"
        elif exc.status == 405:
            reason = f"method {request.method} not allowed on {request.path}"
        return _error(exc.status, reason)
    except CutOffReadOnly as exc:
        return _error(409, str(exc))
    except asyncio.CancelledError:
        raise
    except Exception:
        log.exception("API handler failed on %s %s", request.method, request.path)
        return _error(500, "internal error (see the node's log)")


def _peer_json(p: PeerInfo) -> dict[str, Any]:
    return {
        "uuid": str(p.uuid),
        "name": p.name,
        "endpoint": p.endpoint,
        "group": p.group,
        "state": p.state,
        "last_seen": p.last_seen,
        "rtt_ms": None if p.rtt is None else round(p.rtt * 1000.0, 3),
    }


async def _get_node(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.json_response(node.info())


async def _get_system(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.json_response(node.system())


async def _get_peers(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.json_response([_peer_json(p) for p in node.peers()])


async def _read_json(request: web.Request) -> dict[str, Any]:
    if request.content_length is not None and request.content_length > MAX_BODY + 4096:
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY, actual_size=request.content_length,
                                            text=f"request body larger than {MAX_BODY} octets")
    raw = await request.read()
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        raise web.HTTPBadRequest(text="request body is not valid JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="request body must be a JSON object")
    return body


def _only(body: dict[str, Any], allowed: set[str], expected: str) -> None:
    unknown = set(body) - allowed
    if unknown:
        raise web.HTTPBadRequest(text=f"unknown field(s): {', '.join(sorted(unknown))}; expected {expected}")


async def _post_chat(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    body = await _read_json(request)
    _only(body, {"text", "to"}, "'text' and optional 'to'")
    text = body.get("text")
    if not isinstance(text, str):
        return _error(400, "'text' must be a string")
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BODY:
        return _error(413, f"'text' is longer than {MAX_BODY} octets")
    to_raw = body.get("to")
    to: NodeId | None = None
    if to_raw is not None:
        if not isinstance(to_raw, str):
            return _error(400, "'to' must be a peer's UUID (32 hex digits)")
        try:
            to = NodeId.from_hex(to_raw)
        except ValueError as exc:
            return _error(400, f"'to': {exc}")
    try:
        count = await node.send_chat(text, to)
    except LocalProtocolError as exc:
        return _error(404, str(exc))
    except UnicodeEncodeError:
        return _error(400, "'text' is not valid Unicode")
    return web.json_response({"sent_to": count}, status=202)


async def _post_event(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    body = await _read_json(request)
    _only(body, {"kind", "body"}, "'kind' and 'body'")
    kind = body.get("kind")
    if not isinstance(kind, str) or not kind:
        return _error(400, "'kind' must be a non-empty string")
    if "body" not in body:
        return _error(400, "'body' is required (any JSON value)")
    try:
        record = node.emit(kind, body["body"])
    except LocalProtocolError as exc:
        return _error(400, str(exc))
    return web.json_response(
        {"source": str(record.source), "seq": record.seq, "timestamp": record.timestamp}, status=201
    )


def _int_param(request: web.Request, name: str, default: int, low: int, high: int) -> int:
    raw = request.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise web.HTTPBadRequest(text=f"'{name}' must be an integer, got {raw[:40]!r}") from None
    if not low <= value <= high:
        raise web.HTTPBadRequest(text=f"'{name}' must be in {low}..{high}, got {value}")
    return value


async def _get_log(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    source_raw = request.query.get("source")
    source: NodeId | None = None
    if source_raw:
        try:
            source = NodeId.from_hex(source_raw)
        except ValueError as exc:
            return _error(400, f"'source': {exc}")
    after = _int_param(request, "after", 0, 0, 2**63 - 1)
    limit = _int_param(request, "limit", 100, 1, 10_000)
    if after and source is None:
        return _error(400, "'after' needs 'source'")
    rows = node.store.page(source, after, limit)
    return web.json_response({
        "events": [record_json(r.record, r.received_from) | {"received_at": r.received_at} for r in rows],
    })


async def _get_log_summary(request: web.Request) -> web.Response:
    return web.json_response(request.app[NODE_KEY].log_summary())


async def _events(request: web.Request) -> web.StreamResponse:
    node = request.app[NODE_KEY]
    ws = web.WebSocketResponse(heartbeat=20.0)
    if not ws.can_prepare(request).ok:
        return _error(400, "this endpoint speaks WebSocket: connect with a WebSocket client")
    await ws.prepare(request)
    queue: asyncio.Queue[Event] = asyncio.Queue(SUBSCRIBER_QUEUE)
    closing: list[asyncio.Task[bool]] = []

    def listener(event: Event) -> None:
        try:
            queue.put_nowait(event)
        except asyncio.QueueFull:
            # A subscriber that cannot keep up is cut off rather than slowing the node.
            remove()
            if not closing:
                closing.append(asyncio.ensure_future(
                    ws.close(code=1013, message=b"too slow: event queue overflowed")))

    remove = node.add_listener(listener)

    async def pump() -> None:
        while True:
            event = await queue.get()
            if isinstance(event, LogAppended):  # one message per log event
                for record, frm in event.records:
                    await ws.send_str(json.dumps(record_json(record, frm, arriving=True), ensure_ascii=False))
            else:
                await ws.send_str(json.dumps(event.to_json(), ensure_ascii=False))

    sender = asyncio.create_task(pump())
    try:
        async for msg in ws:  # we ignore what the client sends; this notices a close
            if msg.type == WSMsgType.ERROR:
                break
    finally:
        remove()
        sender.cancel()
    return ws


async def _post_exclude(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    try:
        peer = NodeId.from_hex(request.match_info["uuid"])
    except ValueError as exc:
        return _error(400, str(exc))
    body = await _read_json(request) if request.can_read_body else {}
    _only(body, {"reason"}, "an optional 'reason'")
    reason = body.get("reason", "excluded by hand")
    if not isinstance(reason, str) or not reason or len(reason) > 200:
        return _error(400, "'reason' must be 1..200 characters")
    if peer == node.mesh.uuid:
        return _error(400, "a node cannot exclude itself")
    if not node.exclude(peer, reason):
        return _error(409, f"{peer} is already excluded: {node.mesh.excluded.get(peer)}")
    return web.json_response({"excluded": str(peer), "reason": reason})


async def _get_excluded(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.json_response([{"uuid": str(k), "reason": v} for k, v in sorted(node.mesh.excluded.items())])


# ------------------------------------------------------------------ addressed messages


async def _post_messages(request: web.Request) -> web.Response:
    """``{"to": UUID | "all", "text": STR}`` or ``"base64"``, or ``"texts": [...]`` for many in order.
    Waits up to ``wait`` seconds (default 10) for room in a full send buffer."""
    node = request.app[NODE_KEY]
    body = await _read_json(request)
    _only(body, {"to", "text", "texts", "base64", "wait"}, "'to' and one of 'text', 'texts', 'base64'")
    payloads: list[bytes]
    if isinstance(body.get("text"), str):
        payloads = [body["text"].encode("utf-8")]
    elif isinstance(body.get("texts"), list) and all(isinstance(t, str) for t in body["texts"]):
        payloads = [t.encode("utf-8") for t in body["texts"]]
    elif isinstance(body.get("base64"), str):
        try:
            payloads = [base64.b64decode(body["base64"], validate=True)]
        except ValueError:
            return _error(400, "'base64' is not valid base64")
    else:
        return _error(400, "give the message as 'text' (a string), 'texts' (a list of strings) or 'base64'")
    if any(p[:2] == b"\xaa\xa0" for p in payloads):  # Hydra posts' signature (protocol.md 15.1)
        return _error(400, "an addressed message may not begin with the octets AA A0: they mark Hydra post sync")
    wait = body.get("wait", 10)
    if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 <= wait <= 300:
        return _error(400, "'wait' must be 0..300 seconds")
    to = body.get("to")
    targets: list[NodeId]
    if to == "all":
        targets = node.mesh.alive_peers()
    elif isinstance(to, str):
        try:
            targets = [NodeId.from_hex(to)]
        except ValueError as exc:
            return _error(400, f"'to': {exc}")
    else:
        return _error(400, "'to' must be a peer's UUID or \"all\"")
    sent: list[dict[str, Any]] = []
    try:
        for peer in targets:
            for payload in payloads:
                seq = await node.send_to_wait(peer, payload, float(wait))
                sent.append({"peer": str(peer), "seq": seq})
    except NotIncluded as exc:
        return _error(404, str(exc))
    except MessageTooLarge as exc:
        return _error(413, str(exc))
    except BufferFull as exc:
        return web.json_response({"error": f"{exc}; waited {wait} s", "sent": sent}, status=503)
    return web.json_response({"sent": sent}, status=202)


# ------------------------------------------------------------------ the bout document


def _flag(request: web.Request, name: str) -> bool:
    """``?name``, ``?name=1|true|yes`` -> True; absent, ``0|false|no`` -> False."""
    value = request.query.get(name)
    if value is None:
        return False
    if value.lower() not in ("", "1", "true", "yes", "0", "false", "no"):
        raise web.HTTPBadRequest(text=f"'{name}' must be true or false, not {value!r}")
    return value.lower() in ("", "1", "true", "yes")


async def _post_doc_ops(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    if request.content_length is not None and request.content_length > MAX_BODY:
        return _error(413, f"request body larger than {MAX_BODY} octets")
    raw = await request.read()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        return _error(400, "request body is not UTF-8")
    try:
        ops = parse_ops(text, request.content_type)
    except OperationError as exc:  # malformed
        return _error(400, str(exc))
    try:
        applied = node.apply_ops(ops)
    except OperationError as exc:  # well formed, but does not fit the document
        return _error(422, str(exc))
    except LocalProtocolError as exc:
        return _error(413, str(exc))
    return web.json_response({"ops": applied}, status=201)


async def _get_doc(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    fmt = request.query.get("format", "xml")
    eids = _flag(request, "eids")
    doc = node.doc.document
    if fmt == "json":
        return web.json_response({"document": to_json(doc.root, eids=eids), "events": len(node.doc),
                                  "dropped": len(doc.dropped)})
    if fmt != "xml":
        return _error(400, f"unknown format {fmt!r}: use xml or json")
    return web.Response(text=to_xml(doc.root, eids=eids), content_type="application/xml")


async def _get_doc_history(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    eid = request.query.get("eid")
    if not eid:
        return _error(400, "give the element: ?eid=UUID")
    doc = node.doc.document
    history = doc.history_of(eid.lower())
    element = doc.index.get(eid.lower())
    if history is None and element is None:
        return _error(404, f"no element with eid {eid} was ever in the document")
    return web.json_response({
        "eid": eid.lower(), "present": element is not None,
        "tag": None if element is None else element.tag, "history": history or [],
    })


async def _get_doc_dropped(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.json_response(node.doc.document.dropped)


async def _get_jams(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    return web.json_response(jams(node.doc.document.root))


async def _post_jam(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    try:
        state = node.start_jam() if request.match_info["action"] == "start" else node.stop_jam()
    except OperationError as exc:
        return _error(409, str(exc))
    return web.json_response(state, status=201)


_STATIC = Path(__file__).parent / "static"


async def _get_status_page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(_STATIC / "status.html", headers={"Cache-Control": "no-cache"})


async def _get_guest_js(request: web.Request) -> web.FileResponse:
    return web.FileResponse(_STATIC / "guest.js", headers={"Cache-Control": "no-cache",
                                                           "Content-Type": "text/javascript; charset=utf-8"})


def _guest_server(request: web.Request) -> Any:
    guests = request.app[NODE_KEY].guests
    if guests is None:
        raise web.HTTPConflict(text="this node does not host guests: start it with --guests")
    return guests


async def _get_guests(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    guests = _guest_server(request)
    room = guests.room
    now = node.local_now()
    return web.json_response({
        "room": room.room, **guests.ports(),
        "guests": [g.as_dict(now) for g in room.guests.values()],
        "free": [x.as_dict(now) for x in room.free.values()],
        "others": [x.as_dict(now) for x in room.others.values()],
        "grabbed": sorted(room.grabbed),
        "stats": dict(guests.stats) | {"fired": room.fired, "errors": room.errors},
    })


async def _post_guest_action(request: web.Request) -> web.Response:
    guests = _guest_server(request)
    name = request.match_info["name"]
    if request.match_info["action"] == "grab":
        guests.grab(name)
        return web.json_response({"grabbed": name}, status=201)
    if not guests.fire(name, "fired by hand"):
        return _error(404, f"no guest {name!r} in this room")
    return web.json_response({"fired": name})


async def _get_bout_page(request: web.Request) -> web.FileResponse:
    return web.FileResponse(_STATIC / "bout.html", headers={"Cache-Control": "no-cache"})


def make_app(node: Node) -> web.Application:
    app = web.Application(middlewares=[_errors], client_max_size=MAX_BODY + 4096)
    app[NODE_KEY] = node
    app.router.add_get("/api/v1/node", _get_node)
    app.router.add_get("/api/v1/peers", _get_peers)
    app.router.add_get("/api/v1/system", _get_system)
    app.router.add_post("/api/v1/chat", _post_chat)
    app.router.add_get("/api/v1/events", _events)
    app.router.add_post("/api/v1/events", _post_event)
    app.router.add_get("/api/v1/log", _get_log)
    app.router.add_get("/api/v1/log/summary", _get_log_summary)
    app.router.add_post("/api/v1/messages", _post_messages)
    app.router.add_post("/api/v1/peers/{uuid}/exclude", _post_exclude)
    app.router.add_get("/api/v1/excluded", _get_excluded)
    app.router.add_post("/api/v1/doc/ops", _post_doc_ops)
    app.router.add_get("/api/v1/doc", _get_doc)
    app.router.add_get("/api/v1/doc/history", _get_doc_history)
    app.router.add_get("/api/v1/doc/dropped", _get_doc_dropped)
    app.router.add_get("/api/v1/bout/jams", _get_jams)
    app.router.add_post("/api/v1/bout/{action:start|stop}", _post_jam)
    app.router.add_get("/bout", _get_bout_page)
    app.router.add_get("/", _get_status_page)
    app.router.add_get("/guest.js", _get_guest_js)
    app.router.add_get("/api/v1/guests", _get_guests)
    app.router.add_post("/api/v1/guests/{name}/{action:grab|fire}", _post_guest_action)
    from .posts_http import add_post_routes  # Hydra posts

    add_post_routes(app)
    return app


async def start_api(node: Node, address: str) -> tuple[web.AppRunner, str]:
    """Serve the API on ``HOST:PORT`` (port 0 picks one); returns the runner and URL."""
    host, port = parse_hostport(address, "api")
    runner = web.AppRunner(make_app(node), access_log=None, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise ConfigError(f"cannot serve the API on {address}: {exc.strerror}") from None
    bound = port
    for sock in runner.addresses:
        bound = int(sock[1])
        break
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}"
