"""``/WS``: CRG ScoreBoard's WebSocket on the node's API, so screens and announcer tools written
for CRG follow a huddle bout live (docs/crg.md, "/WS").

It speaks as CRG's WS.java does: on connect, ``{"state": {"WS.Device.Id": ..., ...}}``; then
per message, ``{"action": "Register", "paths": [...]}`` answers with the state the new paths
cover at once and pushes their changes after; ``{"action": "Ping"}`` answers
``{"Pong": ""}``; ``{"action": "Set", ...}`` (and CRG's ``StartNewGame``) answers
``{"authorization": "Not authorized for Set"}``: the bout is written by its officials'
devices, and this door is read-only, unless ``[crg] ws-writable`` is on: then a Set of what
the document holds is recorded as operations (crg/writes.py), checked by the bout's rules,
and one that does not fit is answered ``{"error": reason}``; anything else, ``{"error": reason}``.

Its bounds (docs/limits.md, "CRG's WebSocket"): a message's size, the paths one connection
registers, the connections at once, the replies waiting for a client that does not read.
Each refusal is counted by kind (``GET /api/v1/crg``); the connection that broke a bound of
size or pace is closed, the others carry on.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, Final

from aiohttp import WSCloseCode, WSMsgType, web

from ..api.common import STATE_KEY, error_response
from ..doc import bout_summary
from ..doc.model import Element
from ..errors import HuddleError
from .paths import MAX_KEY
from .state import Paths, changed, ws_state
from .writes import ops_of_set

__all__ = ["CRG_KEY", "MAX_CONNECTIONS", "MAX_MESSAGE", "MAX_PATHS", "MAX_REPLIES", "PUSH_INTERVAL", "CrgHub",
           "add_crg_routes"]

MAX_MESSAGE: Final = 64 * 1024  # octets of one client message (a Register of hundreds of paths fits)
MAX_PATHS: Final = 256  # paths one connection registers (CRG's screens register a few dozen)
MAX_CONNECTIONS: Final = 32  # /WS connections at once (each also counts in api.max-connections)
MAX_REPLIES: Final = 64  # answers queued for a client that does not read them: past it, it is closed
PUSH_INTERVAL: Final = 0.1  # seconds: changes that come closer together go in one push
REFUSALS: Final = ("malformed", "oversized", "binary", "paths", "connections", "set", "slow")


class _Client:
    """One connection: its paths and what waits to be sent to it, in order (state pushes that
    follow each other unsent are merged into one)."""

    __slots__ = ("outbox", "paths", "ready", "ws")

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws
        self.paths = Paths()
        self.outbox: deque[dict[str, Any]] = deque()
        self.ready = asyncio.Event()

    def send(self, message: dict[str, Any]) -> bool:
        """Queue a message; False when the client already has MAX_REPLIES waiting (it does not read)."""
        if len(self.outbox) >= MAX_REPLIES:
            return False
        self.outbox.append(message)
        self.ready.set()
        return True

    def push(self, updates: dict[str, Any]) -> None:
        if not updates:
            return
        last = self.outbox[-1] if self.outbox else None
        if last is not None and set(last) == {"state"}:
            last["state"].update(updates)
        else:
            self.outbox.append({"state": updates})
        self.ready.set()


class CrgHub:
    """The state CRG's clients see, its connections and its refusals.  ``source`` gives the
    bout's document and a token that changes when it does (the feature's, once it runs)."""

    def __init__(self) -> None:
        self.source: Callable[[], tuple[Element, object]] | None = None
        # With [crg] ws-writable: records operations as the API's writes do (the desk's apply_ops).
        self.write: Callable[[list[dict[str, Any]]], object] | None = None
        # The clocks' seam: the document -> GET /api/v1/bout/clocks's answer (doc/clocks.py's
        # clocks(document, now) at the node's mesh time); None: what the jams say (clocks_of_jams).
        self.clocks: Callable[[Element], dict[str, Any]] | None = None
        self.clients: set[_Client] = set()
        self.refused: dict[str, int] = dict.fromkeys(REFUSALS, 0)
        self.pushes = 0  # state pushes made (a push goes to every client whose paths it touches)
        self._state: dict[str, Any] = {}
        self._token: object = None
        self._dirty = asyncio.Event()

    def state(self) -> dict[str, Any]:
        """The state now: made again only when the document changed since it was last made."""
        if self.source is not None:
            root, token = self.source()
            if token != self._token:
                clocks = None if self.clocks is None else self.clocks(root)
                self._state, self._token = ws_state(root, bout_summary(root), clocks), token
        return self._state

    def changed(self) -> None:
        """The log took records: the pusher looks whether the document changed (if anyone listens)."""
        if self.clients:
            self._dirty.set()

    async def run(self) -> None:
        """Push what changed to the clients it concerns, at most every PUSH_INTERVAL."""
        while True:
            await self._dirty.wait()
            await asyncio.sleep(PUSH_INTERVAL)
            self._dirty.clear()
            before = self._state
            updates = changed(before, self.state()) if before else self.state()
            if not updates:
                continue
            self.pushes += 1
            for client in self.clients:
                client.push(client.paths.select(updates))

    def handle(self, client: _Client, text: str) -> None:
        """One text message of a client: CRG's actions (the module docstring)."""
        try:
            message = json.loads(text)
        except ValueError:
            self._error(client, "malformed", "not JSON")
            return
        action = message.get("action") if isinstance(message, dict) else None
        if not isinstance(action, str):
            self._error(client, "malformed", 'expected {"action": "Register|Set|Ping", ...}')
            return
        if action == "Ping":
            client.send({"Pong": ""})
        elif action == "Register":
            self._register(client, message.get("paths"))
        elif action == "Set" and self.write is not None:
            self._set(client, message)
        elif action in ("Set", "StartNewGame"):
            self.refused["set"] += 1
            client.send({"authorization": f"Not authorized for {action}"})
        else:
            self._error(client, "malformed", f"Unknown Action '{action[:40]}'")

    def _set(self, client: _Client, message: dict[str, Any]) -> None:
        """A Set, writable: its operations recorded, or the reason they are not (CRG answers a
        Set that worked with nothing but the state's change)."""
        assert self.write is not None and self.source is not None
        try:
            ops = ops_of_set(self.source()[0], message.get("key"), message.get("value"), message.get("flag"))
            if ops:
                self.write(ops)
        except HuddleError as exc:  # CrgError: not a path it takes; OperationError: the rules; read-only, ...
            self._error(client, "set", str(exc))

    def _register(self, client: _Client, paths: Any) -> None:
        if paths is None:
            return  # CRG ignores a Register without paths
        if not isinstance(paths, list) or not all(isinstance(p, str) and 0 < len(p) <= MAX_KEY for p in paths):
            self._error(client, "malformed", f"'paths' must be a list of paths of 1..{MAX_KEY} characters")
            return
        if client.paths.count + len(paths) > MAX_PATHS:
            self._error(client, "paths", f"at most {MAX_PATHS} paths per connection: "
                        f"{client.paths.count} registered already")
            return
        new = Paths()
        for p in paths:
            new.add(p)
            client.paths.add(p)
        client.push(new.select(self.state()))

    def _error(self, client: _Client, kind: str, reason: str) -> None:
        self.refused[kind] += 1
        client.send({"error": reason})

    def facts(self) -> dict[str, object] | None:
        """Its clients and refusals; None (nothing to say) while it has had neither."""
        refused = sum(self.refused.values())
        return {"ws": len(self.clients), "ws_refused": refused} if self.clients or refused else None


CRG_KEY: web.AppKey[CrgHub] = web.AppKey("crg")


async def _sender(client: _Client) -> None:
    """Send what waits for the client, in order (one that lets MAX_REPLIES wait is closed by _ws)."""
    ws = client.ws
    while not ws.closed:
        await client.ready.wait()
        client.ready.clear()
        while client.outbox and not ws.closed:
            message = client.outbox.popleft()
            await ws.send_str(json.dumps(message, ensure_ascii=False))


async def _ws(request: web.Request) -> web.StreamResponse:
    hub = request.app[CRG_KEY]
    api = request.app[STATE_KEY]
    ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=MAX_MESSAGE)
    if not ws.can_prepare(request).ok:
        return error_response(400, "this endpoint speaks CRG ScoreBoard's WebSocket: connect with a WebSocket client")
    if len(hub.clients) >= MAX_CONNECTIONS:
        hub.refused["connections"] += 1
        return error_response(503, f"this node already serves {len(hub.clients)} CRG WebSocket clients")
    client = _Client(ws)
    hub.clients.add(client)  # before the handshake's await: two arriving together cannot both take the last place
    sender: asyncio.Task[None] | None = None
    try:
        await ws.prepare(request)
        if request.transport is not None:  # closed with the API's other WebSockets as it stops
            api.sockets[ws] = request.transport
        client.send({"state": {"WS.Device.Id": str(uuid.uuid4()), "WS.Device.Name": "huddle",
                               "WS.Client.Id": str(uuid.uuid4()), "WS.Client.RemoteAddress": request.remote or ""}})
        sender = asyncio.create_task(_sender(client))
        async for msg in ws:
            if msg.type == WSMsgType.TEXT:
                hub.handle(client, msg.data)
            elif msg.type == WSMsgType.BINARY:
                hub.refused["binary"] += 1
                client.send({"error": "CRG's WebSocket speaks JSON text, not binary frames"})
            elif msg.type == WSMsgType.ERROR:  # aiohttp closes: 1009 for a message over MAX_MESSAGE
                too_big = getattr(msg.data, "code", None) == WSCloseCode.MESSAGE_TOO_BIG
                hub.refused["oversized" if too_big else "malformed"] += 1
                break
            if len(client.outbox) >= MAX_REPLIES:  # it sends and does not read: cut off
                hub.refused["slow"] += 1
                await ws.close(code=1013, message=b"too slow: answers are waiting unread")
                break
    finally:
        hub.clients.discard(client)
        api.sockets.pop(ws, None)
        if sender is not None:
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await sender
    return ws


async def _get_crg(request: web.Request) -> web.Response:
    hub = request.app[CRG_KEY]
    return web.json_response({"connections": len(hub.clients), "pushes": hub.pushes, "refused": hub.refused,
                              "limits": {"message": MAX_MESSAGE, "paths": MAX_PATHS, "connections": MAX_CONNECTIONS}})


def add_crg_routes(app: web.Application, hub: CrgHub) -> None:
    """``/WS`` (and ``/WS/``) and ``GET /api/v1/crg`` (its connections and refusals)."""
    app[CRG_KEY] = hub
    app.router.add_get("/WS", _ws)
    app.router.add_get("/WS/", _ws)  # where CRG's own pages connect (its WS.js: /WS/?source=...&platform=...)
    app.router.add_get("/api/v1/crg", _get_crg)
