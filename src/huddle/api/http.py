"""The node's local HTTP + WebSocket API (aiohttp).

Every error is JSON ``{"error": "..."}`` with a 4xx status; an unexpected
failure is logged and answered 500 with no stack trace.  The door's rules
(Host, Origin, content types, strict JSON, connection and subscriber bounds)
are data in :mod:`huddle.api.guard`; this module applies them.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import html
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, quote

from aiohttp import WSMsgType, web
from aiohttp.web_protocol import RequestHandler

from ..config import parse_hostport
from ..doc import JamStateError, OperationError
from ..errors import ConfigError, CutOffReadOnly, LocalProtocolError, NoSuchPeer, NotRecording, NotRunning, TooLarge
from ..gated import STOP_GRACE, GatedSite
from ..ids import NodeId
from ..limits import ApiLimits
from ..ports import Renderer
from ..protocol import Event, PeerInfo
from ..protocol.delivery import BufferFull
from ..protocol.events import LogAppended, record_json
from ..security import load_or_create_token, token_matches
from ..wire import MAX_BODY, TagError, matches, parse_filter
from .common import (
    HOLD_WRITES,
    NODE_KEY,
    OTHER_PEERS_KEY,
    READ_JSON_KEY,
    STATE_KEY,
    ApiState,
    close_sockets_at_stop,
    page_response,
    parse_strict,
    read_body,
)
from .common import error_response as _error
from .guard import (
    SIMPLE_TYPES,
    TOKEN_COOKIE,
    bad_text,
    host_allowed,
    is_loopback,
    origin_allowed,
    presented_token,
    safe_next,
    token_required,
)
from .join import add_join_routes
from .members_http import add_member_routes
from .monitor_http import add_monitor_routes
from .peer_join_http import add_peer_join_routes
from .ports import ApiNode
from .resolve import Ambiguous, Unknown, node_id, node_names, path_text

__all__ = ["make_app", "start_api"]

log = logging.getLogger("huddle.api")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# What a refused connection (one over api.max-connections) is told before it is closed.
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
         b"Content-Length: 58\r\n\r\n" b'{"error": "too many connections to this API; try again"}\r\n')
_JSON_WRITE_TYPES = frozenset({"application/json"})
_FORM_TYPES = frozenset({"application/x-www-form-urlencoded"})
_LOGIN = "/login"
# The features' event classes, each with its JSON for the stream (the core's events have to_json).
_RENDERERS: web.AppKey[dict[type, Renderer]] = web.AppKey("renderers")




@web.middleware
async def _door(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Host, Origin and content type checked before anything else; the connection's
    request counted as in progress until its answer is written."""
    state = request.app[STATE_KEY]
    host = request.headers.get("Host")
    if host is not None:
        sockname = request.transport.get_extra_info("sockname") if request.transport is not None else None
        local = str(sockname[0]) if sockname else None
        if not host_allowed(host, local, state.limits.allowed_hosts):
            state.counters.bad_host += 1
            state.refused("host", "API: refused a request for host %r (not this API's address; "
                          "add it to api.allowed-hosts if it names this node)", host[:100])
            return _error(403, f"this API does not answer for host {host[:100]!r} (see api.allowed-hosts)")
    origin = request.headers.get("Origin")
    if origin is not None and not origin_allowed(origin, host or ""):
        state.counters.cross_origin += 1
        state.refused("origin", "API: refused a %s %s from the web page at %r", request.method, request.path,
                      origin[:100])
        return _error(403, "requests from other web pages are refused (Origin is not this API's own)")
    if state.token is not None and request.path != _LOGIN:
        given = presented_token(request.headers.get("Authorization"), request.cookies.get(TOKEN_COOKIE))
        if token_matches(given, state.token):
            state.guard.proved(request.protocol)  # its connection now counts as a known client's
        else:
            state.counters.unauthorized += 1
            state.refused("token", "API: refused a request without the API token (%s %s)", request.method,
                          request.path[:100])
            if request.path.startswith("/api/"):
                return web.json_response(
                    {"error": "this API requires its token: send 'Authorization: Bearer TOKEN' (the token is in "
                     "the node's data directory, file api-token), or log in at /login"},
                    status=401, headers={"WWW-Authenticate": 'Bearer realm="huddle"'})
            raise web.HTTPSeeOther(f"{_LOGIN}?next={quote(request.path_qs, safe='/')}")
    if request.method not in ("GET", "HEAD", "OPTIONS") and request.content_type in SIMPLE_TYPES \
            and "Content-Type" in request.headers and request.path != _LOGIN:
        state.counters.bad_content_type += 1
        return _error(415, f"content type {request.content_type} is not taken: send application/json "
                      "(or, to the endpoints that take them, XML or the post's content)")
    key = request.protocol
    loop = asyncio.get_running_loop()
    state.guard.started(key, loop.time())
    try:
        resp = await handler(request)
        if not resp.prepared:  # written here, so the connection is busy until its answer is out
            try:
                await resp.prepare(request)
                await resp.write_eof()
            except ConnectionError:  # the client left first: aiohttp, writing it again, takes it quietly
                pass
        return resp
    finally:
        state.guard.finished(key, loop.time())


# The answer to an error a handler lets through, by its type: the first class of the error's
# method resolution order found here gives the status, the same on every endpoint.  An error
# of no type here is a bug: 500, and logged.
ERROR_STATUS: Final[dict[type[Exception], int]] = {
    NotRunning: 503,  # not started yet, or stopping: try again (Retry-After)
    NotRecording: 503,  # held past HOLD_WRITES as the node starts, or its identity retired (Retry-After)
    BufferFull: 503,  # a peer's send buffer stayed full
    CutOffReadOnly: 409,  # a read-only node type cut off from its group
    JamStateError: 409,  # a jam to start while one runs, to stop while none does
    NoSuchPeer: 404,  # no admitted peer so named (addressed delivery's NotIncluded among them)
    Unknown: 404,  # no node (or post) known here by that name or id prefix (api/resolve.py)
    Ambiguous: 409,  # several match that name or id prefix: the answer lists them (api/resolve.py)
    TooLarge: 413,  # an addressed message, or document operations, over a limit
    OperationError: 422,  # document operations, well formed, that do not fit the document
    LocalProtocolError: 400,  # anything else this node will not do as asked (an event it cannot record)
}


def error_status(exc: Exception) -> int | None:
    """The status :data:`ERROR_STATUS` gives ``exc`` (None: none, a bug)."""
    for kind in type(exc).__mro__:
        status = ERROR_STATUS.get(kind)
        if status is not None:
            return status
    return None


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
    except asyncio.CancelledError:
        raise
    except Exception as exc:
        status = error_status(exc)
        if status is None:
            log.exception("API handler failed on %s %s", request.method, request.path)
            return _error(500, "internal error (see the node's log)")
        response = _error(status, str(exc))
        if isinstance(exc, Ambiguous):
            response = web.json_response({"error": str(exc)} | exc.details(), status=status)
        if status == 503:
            response.headers["Retry-After"] = "1"
        return response


def _peer_json(p: PeerInfo) -> dict[str, Any]:
    return {
        "uuid": str(p.uuid),
        "name": p.name,
        "endpoint": p.endpoint,
        "group": p.group,
        "state": p.state,
        "last_seen": p.last_seen,
        "rtt_ms": None if p.rtt is None else round(p.rtt * 1000.0, 3),
        "joined_local": p.joined,
        "key": p.key or None,  # the fingerprint of the key its HELO carried (null: it sent none)
        "verified": p.verified,  # its uuid is the one that key gives (docs/protocol.md 4.1, "Identity")
        "tags": p.tags,  # what its HELO advertised ({}: none; docs/protocol.md 4.1, "Tags")
    }


async def _get_node(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    state = request.app[STATE_KEY]
    info = node.info()
    info["stats"]["api"] = state.counters.as_dict() | {"connections": len(state.guard),
                                                      "subscribers": state.subscribers}
    info["api"] = {"url": node.api_url, "exposed": state.exposed, "token_required": state.token is not None,
                   "warning": state.warning()}
    return web.json_response(info)


async def _get_system(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    picture = node.system()  # its digest is of the picture; the links' names are this view's
    names = {str(m["uuid"]): str(m["name"]) for m in picture.get("members", ()) if m.get("name")}
    return web.json_response(picture | {"links": [_named(x, names, "a", "b", "from", "to")
                                                  for x in picture.get("links", ())]})


async def _get_peers(request: web.Request) -> web.Response:
    """The admitted peers, then those this node lost: ``failed`` or ``left`` (protocol.md 14.2),
    with ``since`` (when it last heard them), until they return or are forgotten.  ``?tag=KEY=VALUE``
    (or ``?tag=KEY``: the key, any value), repeated: those whose tags match every one (a lost
    peer's tags are not kept: it matches no filter)."""
    node = request.app[NODE_KEY]
    try:
        wanted = parse_filter(request.query.getall("tag", []))
    except TagError as exc:
        raise web.HTTPBadRequest(text=f"'tag': {exc}") from None
    lost = node.members.lost_peers()
    out = []
    for p in node.peers():
        d = lost.pop(p.uuid, None) if p.state == "gone" else None
        if not matches(p.tags, wanted):
            continue
        row = _peer_json(p)
        out.append(row if d is None else row | {"state": d.state, "since": d.since / 1000})
    if matches({}, wanted):
        out += [{"uuid": str(d.peer), "name": d.name, "endpoint": None, "group": None, "state": d.state,
                 "since": d.since / 1000, "last_seen": None, "rtt_ms": None, "joined_local": None, "key": None,
                 "verified": False, "tags": {}} for d in sorted(lost.values(), key=lambda d: (d.name, d.peer))]
    return web.json_response(out)


async def _read_json(request: web.Request) -> dict[str, Any]:
    body = parse_strict(request, await read_body(request, _JSON_WRITE_TYPES))
    if not isinstance(body, dict):
        request.app[STATE_KEY].counters.bad_input += 1
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
            return _error(400, "'to' must be a peer's name, UUID or unique UUID prefix")
        to = node_id(request, to_raw, "to")  # by name or prefix too (api/resolve.py)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate (JSON's \ud800): checked before the node sees it
        return _error(400, "'text' is not valid Unicode")
    count = await node.send_chat(text, to)  # no admitted peer so named: NoSuchPeer, 404
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
    await node.until_recording(HOLD_WRITES)
    record = node.emit(kind, body["body"])  # an event the log refuses: LocalProtocolError, 400
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
        source = node_id(request, source_raw, "source")
    after = _int_param(request, "after", 0, 0, 2**63 - 1)
    limit = _int_param(request, "limit", 100, 1, 10_000)
    if after and source is None:
        return _error(400, "'after' needs 'source'")
    rows = node.store.page(source, after, limit)
    names = node_names(node)  # beside the ids: source_name, received_from_name (where known)
    return web.json_response({
        "events": [_named(record_json(r.record, r.received_from) | {"received_at": r.received_at}, names,
                          "source", "received_from") for r in rows],
    })


def _named(item: dict[str, Any], names: dict[str, str], *keys: str) -> dict[str, Any]:
    """``item`` with ``KEY_name`` beside each of its ``keys`` whose node id has a known name."""
    return item | {f"{k}_name": names[item[k]] for k in keys if item.get(k) in names}


async def _get_log_summary(request: web.Request) -> web.Response:
    return web.json_response(request.app[NODE_KEY].log_summary())


def _event_messages(event: Event, renderers: dict[type, Renderer]) -> list[bytes]:
    """An event as the stream's text messages (one per log record), UTF-8; a feature's
    own event as its renderer makes it."""
    if isinstance(event, LogAppended):
        items = [record_json(record, frm, arriving=True) for record, frm in event.records]
    else:
        render = renderers.get(type(event))
        items = [event.to_json() if render is None else render(event)]
    return [json.dumps(item, ensure_ascii=False).encode("utf-8", "replace") for item in items]


def _text_frame_head(size: int) -> bytes:
    """The head of an unmasked, final WebSocket text frame of ``size`` octets (RFC 6455 5.2)."""
    if size < 126:
        return bytes((0x81, size))
    if size < 1 << 16:
        return bytes((0x81, 126)) + size.to_bytes(2, "big")
    return bytes((0x81, 127)) + size.to_bytes(8, "big")


async def _events(request: web.Request) -> web.StreamResponse:
    """The event stream.  Each event is written to the subscriber's connection as it
    happens (the kernel sends what it can at once); one whose connection holds more
    than api.subscriber-buffer-bytes unsent is closed (code 1013) and counted."""
    node = request.app[NODE_KEY]
    state = request.app[STATE_KEY]
    ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=64 * 1024)
    if not ws.can_prepare(request).ok:
        return _error(400, "this endpoint speaks WebSocket: connect with a WebSocket client")
    if state.subscribers >= state.limits.max_subscribers:
        state.counters.subscribers_refused += 1
        state.refused("subscribers", "API: refused an event subscriber: %d already (api.max-subscribers)",
                      state.subscribers)
        return _error(503, f"this node already streams events to {state.subscribers} subscribers "
                      "(api.max-subscribers)")
    await ws.prepare(request)
    transport = request.transport
    if transport is None:
        return ws
    state.subscribers += 1
    limit = state.limits.subscriber_buffer_bytes
    renderers = request.app[_RENDERERS]
    closing: list[asyncio.Task[None]] = []

    async def drop() -> None:
        try:
            async with asyncio.timeout(5.0):
                await ws.close(code=1013, message=f"too slow: over {limit} octets of events unsent".encode())
        except TimeoutError:  # it reads nothing, not even the close
            transport.abort()

    def listener(event: Event) -> None:
        if closing or ws.closed or transport.is_closing():  # no frame after the close frame
            return
        messages = _event_messages(event, renderers)
        size = sum(len(m) + 10 for m in messages)
        if transport.get_write_buffer_size() + size > limit:
            # A subscriber that does not keep up is cut off rather than made to hold the node's memory.
            remove()
            state.counters.subscribers_dropped += 1
            state.refused("slow", "API: closed an event subscriber that did not keep up (over %d octets unsent)",
                          limit)
            closing.append(asyncio.ensure_future(drop()))
            return
        # Whole frames, between aiohttp's own (pings, the close), in one write: one system call
        # an event, not two a message (a crowd joining makes a few events an admission).
        transport.writelines([part for m in messages for part in (_text_frame_head(len(m)), m)])

    remove = node.add_listener(listener)
    streams = state.sockets
    streams[ws] = transport
    try:
        async for msg in ws:  # we ignore what the client sends; this notices a close
            if msg.type == WSMsgType.ERROR:
                break
    finally:
        streams.pop(ws, None)
        remove()
        state.subscribers -= 1
        for task in closing:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
    return ws


async def _post_exclude(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    peer = node_id(request, path_text(request, "uuid"), "uuid")
    body = await _read_json(request) if request.body_exists else {}
    _only(body, {"reason"}, "an optional 'reason'")
    reason = body.get("reason", "excluded by hand")
    if not isinstance(reason, str) or not reason or len(reason) > 200 or bad_text(reason):
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
    """``{"to": NAME | UUID | PREFIX | "all", "text": STR}`` or ``"base64"``, or ``"texts": [...]`` for many in order.
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
    if any(p[:2] == b"\xaa\xc0" for p in payloads):  # control's orders (protocol.md 17)
        return _error(400, "an addressed message may not begin with the octets AA C0: they mark control orders")
    wait = body.get("wait", 10)
    if not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 <= wait <= 300:
        return _error(400, "'wait' must be 0..300 seconds")
    to = body.get("to")
    targets: list[NodeId]
    if to == "all":
        targets = node.mesh.alive_peers()
    elif isinstance(to, str):
        try:
            targets = [node_id(request, to, "to")]  # by name or prefix too (api/resolve.py)
        except Unknown:  # no member: a ZRE peer, as a WHISPER (docs/zre.md, "WHISPER and addressed messages")
            other = request.app.get(OTHER_PEERS_KEY)
            sent_to = None if other is None else other(to, payloads)
            if sent_to is None:
                raise
            return web.json_response({"sent": [{"peer": sent_to, "via": "zre"}]}, status=202)
    else:
        return _error(400, "'to' must be a peer's name, UUID, unique UUID prefix or \"all\"")
    sent: list[dict[str, Any]] = []
    try:
        for peer in targets:
            for payload in payloads:
                seq = await node.send_to_wait(peer, payload, float(wait))
                sent.append({"peer": str(peer), "seq": seq})
    except BufferFull as exc:  # its status from the table, and what went before it: a partial result
        return web.json_response({"error": f"{exc}; waited {wait} s", "sent": sent}, status=ERROR_STATUS[BufferFull])
    return web.json_response({"sent": sent}, status=202)


_STATIC = Path(__file__).parent / "static"


async def _get_status_page(request: web.Request) -> web.StreamResponse:
    return page_response(request, _STATIC / "status.html", "text/html")


async def _get_guest_js(request: web.Request) -> web.StreamResponse:
    return page_response(request, _STATIC / "guest.js", "text/javascript")


def _login_page(next_path: str, message: str = "", status: int = 200) -> web.Response:
    note = f'<p class="bad">{html.escape(message)}</p>' if message else ""
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>huddle: log in</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;max-width:28em;margin:3em auto;padding:0 1em}}
input{{width:100%;font:inherit;padding:.4em;box-sizing:border-box}}button{{font:inherit;margin-top:.6em}}
.bad{{color:#b00020}}</style></head>
<body><h1>huddle</h1>
<p>This node's API listens beyond loopback, so it asks for its token (the file <code>api-token</code> in the
node's data directory; the node showed it once, when it made it).</p>{note}
<form method="post" action="{_LOGIN}">
<input type="hidden" name="next" value="{html.escape(next_path)}">
<label for="token">API token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required autofocus>
<button type="submit">Log in</button></form></body></html>
"""
    return web.Response(text=body, status=status, content_type="text/html",
                        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY"})


async def _get_login(request: web.Request) -> web.Response:
    return _login_page(safe_next(request.query.get("next")))


async def _post_login(request: web.Request) -> web.StreamResponse:
    """The login form: the right token sets the cookie and goes on to ``next``."""
    state = request.app[STATE_KEY]
    raw = await read_body(request, _FORM_TYPES)
    try:
        form = parse_qs(raw.decode("utf-8"), max_num_fields=4)
    except (UnicodeDecodeError, ValueError):
        state.counters.bad_input += 1
        return _error(400, "the login form is not a form")
    target = safe_next((form.get("next") or ["/"])[0])
    given = (form.get("token") or [""])[0].strip()
    if state.token is None:
        raise web.HTTPSeeOther(target)  # nothing to log in to: the API requires no token
    if not token_matches(given, state.token):
        state.counters.unauthorized += 1
        state.refused("token", "API: a wrong token was given at the login page")
        return _login_page(target, "That is not this node's API token.", status=401)
    resp = web.HTTPSeeOther(target)
    resp.set_cookie(TOKEN_COOKIE, state.token, httponly=True, samesite="Strict", path="/")
    raise resp


# ------------------------------------------------------------------ connections


class _Gate(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection: refuses it when there are
    api.max-connections already, and tells the guard when it goes."""

    def __init__(self, inner: RequestHandler, state: ApiState) -> None:
        self.inner = inner
        self.state = state
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        state = self.state
        guard = state.guard
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        if not guard.open(self.inner, asyncio.get_running_loop().time(), address, proven=state.token is None):
            state.refused("connections", "API: refused a connection from %s: %d open (api.max-connections, "
                          "api.max-connections-per-address)", address, len(guard))
            transport.write(_BUSY)
            transport.close()
            return
        for key in guard.evicted:  # idle, and never showed the token: room for this one
            gone = state.transports.pop(key, None)
            if gone is not None:
                gone.abort()
        if guard.evicted:
            state.refused("unproven", "API: closed %d idle connection(s) that never showed the token, to make room",
                          len(guard.evicted))
            guard.evicted.clear()
        self.admitted = True
        state.transports[self.inner] = transport
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.state.guard.close(self.inner)
            self.state.transports.pop(self.inner, None)
            self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.inner.data_received(data)

    def eof_received(self) -> None:
        if self.admitted:
            self.inner.eof_received()

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()


async def _sweeper(app: web.Application) -> AsyncIterator[None]:
    """Closes the connections the guard finds idle or stalled, while the app runs."""
    state = app[STATE_KEY]

    def buffered(key: RequestHandler) -> int:
        transport = state.transports.get(key)
        return 0 if transport is None else transport.get_write_buffer_size()

    async def sweep() -> None:
        loop = asyncio.get_running_loop()
        interval = max(0.05, min(1.0, state.limits.idle_timeout / 4))
        while True:
            await asyncio.sleep(interval)
            closed = state.guard.sweep(loop.time(), buffered)
            for key in closed:
                transport = state.transports.pop(key, None)
                if transport is not None:
                    transport.abort()
            if closed:
                state.refused("idle", "API: closed %d connection(s) idle or not reading for %s s (api.idle-timeout)",
                              len(closed), state.limits.idle_timeout)

    task = asyncio.create_task(sweep())
    yield
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def make_app(node: ApiNode, limits: ApiLimits | None = None) -> web.Application:
    app = web.Application(middlewares=[_door, _errors], client_max_size=MAX_BODY + 4096)
    app[NODE_KEY] = node
    app[STATE_KEY] = ApiState(limits or ApiLimits())
    app[READ_JSON_KEY] = _read_json
    app[_RENDERERS] = {kind: fn for f in node.features for kind, fn in f.event_renderers.items()}
    app.cleanup_ctx.append(_sweeper)
    close_sockets_at_stop(app)
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
    app.router.add_get("/", _get_status_page)
    app.router.add_get("/guest.js", _get_guest_js)
    app.router.add_get(_LOGIN, _get_login)
    app.router.add_post(_LOGIN, _post_login)
    add_join_routes(app)
    add_monitor_routes(app)
    add_peer_join_routes(app)
    add_member_routes(app)
    for feature in node.features:  # each adds its routes, with its own port
        feature.routes(app)
    return app


async def start_api(node: ApiNode, address: str, limits: ApiLimits | None = None, *,
                    token_dir: Path | None = None, require_token: bool = False) -> tuple[web.AppRunner, str]:
    """Serve the API on ``HOST:PORT`` (port 0 picks one); returns the runner and URL.
    Warns (log, and ``GET /api/v1/node`` -> ``api.warning``) when it listens beyond loopback.
    Beyond loopback, or with ``require_token``, every request needs the token kept in
    ``token_dir`` (made there, and shown once in the log, when there is none)."""
    host, port = parse_hostport(address, "api")
    app = make_app(node, limits)
    state = app[STATE_KEY]
    state.exposed = not is_loopback(host)
    if token_required(host, require_token):
        if token_dir is None:
            raise ConfigError(f"an API on {address} requires a token, and there is no data directory to keep it in")
        token = load_or_create_token(token_dir)
        state.token = token.value
        if token.created:
            log.warning("API token (shown once): %s  -- kept in %s; send it as 'Authorization: Bearer TOKEN' "
                        "or log in at /login", token.value, token.path)
        else:
            log.info("the API requires its token (in %s)", token.path)
    runner = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=STOP_GRACE)
    await runner.setup()
    site = GatedSite(runner, host, port, lambda inner: _Gate(inner, state))
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
    if state.exposed:
        log.warning("API on %s: %s", address, state.warning())
    return runner, f"http://{shown}:{bound}"
