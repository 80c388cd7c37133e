"""The node's own log over the API: ``GET /api/v1/monitor``, a WebSocket of text lines
(``huddle monitor``; Serf's ``serf monitor``).

    GET /api/v1/monitor[?level=info|warning|error]   the recent lines, then each new one

:class:`LogRing` is a logging handler on the ``huddle`` logger while the API runs: it keeps
the last ``RING_LINES`` lines (a client sees them first: what happened just before it
connected) and hands each new line to every client's own queue.  Both are bounded, so a
client that does not read cannot grow the node's memory: past ``CLIENT_LINES`` waiting, its
new lines are left out and counted, and it is told how many before the next one it gets.
Lines are cut at ``LINE_CHARS``.  Monitor clients count as event subscribers
(api.max-subscribers, docs/limits.md): one over is refused with 503.  The token rules are the
door's, as for every route (api/http.py).  As the API stops, each client is closed (1001).

A process that runs several nodes (tests) has one ``huddle`` logger: each node's monitor
then shows the lines of all of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections import deque
from dataclasses import dataclass, field
from typing import Final

from aiohttp import WSMsgType, web

from .common import STATE_KEY
from .common import error_response as _error

__all__ = ["CLIENT_LINES", "LINE_CHARS", "MONITOR_KEY", "RING_LINES", "LogRing", "add_monitor_routes"]

RING_LINES: Final = 200  # the recent lines a client sees first
CLIENT_LINES: Final = 1000  # lines waiting for one client before its new ones are left out
LINE_CHARS: Final = 2000  # a longer line is cut here
LEVELS: Final = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
FORMAT: Final = "%(asctime)s %(levelname)s %(name)s: %(message)s"  # as the node writes it (cli/commands.py)


@dataclass(slots=True, eq=False)
class MonitorClient:
    """One client's lines waiting to be sent, bounded; ``left_out``: new lines it missed since
    the last one sent (it did not keep up)."""

    level: int
    waiting: deque[tuple[int, str]] = field(default_factory=deque)
    left_out: int = 0
    wake: asyncio.Event = field(default_factory=asyncio.Event)


class LogRing(logging.Handler):
    """The recent lines and each client's queue (see the module)."""

    def __init__(self, *, ring: int = RING_LINES, per_client: int = CLIENT_LINES) -> None:
        super().__init__(logging.INFO)
        self.setFormatter(logging.Formatter(FORMAT))
        self.recent: deque[tuple[int, str]] = deque(maxlen=ring)
        self.per_client = per_client
        self.clients: set[MonitorClient] = set()
        self.left_out = 0  # lines left out, every client
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread = 0

    def attach(self, logger: logging.Logger) -> None:
        """Hear ``logger`` from now on, on the running loop's thread."""
        self._loop, self._thread = asyncio.get_running_loop(), threading.get_ident()
        logger.addHandler(self)

    def detach(self, logger: logging.Logger) -> None:
        logger.removeHandler(self)

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)[:LINE_CHARS]
        except Exception:  # a bad format argument in someone's line must not break the logging
            self.handleError(record)
            return
        if threading.get_ident() == self._thread:
            self._hand(record.levelno, line)
        elif self._loop is not None:  # a line logged from another thread: handed out on the loop's
            with contextlib.suppress(RuntimeError):  # the loop closed
                self._loop.call_soon_threadsafe(self._hand, record.levelno, line)

    def _hand(self, level: int, line: str) -> None:
        self.recent.append((level, line))
        for client in self.clients:
            if level < client.level:
                continue
            if len(client.waiting) >= self.per_client:
                client.left_out += 1
                self.left_out += 1
                continue
            client.waiting.append((level, line))
            client.wake.set()

    def join(self, level: int) -> MonitorClient:
        """A new client, the recent lines of ``level`` and above waiting for it."""
        client = MonitorClient(level)
        client.waiting.extend(x for x in self.recent if x[0] >= level)
        client.wake.set()
        self.clients.add(client)
        return client


MONITOR_KEY: web.AppKey[LogRing] = web.AppKey("monitor")


async def _send_lines(ws: web.WebSocketResponse, client: MonitorClient) -> None:
    """Send the client's lines as they come (a client that does not read blocks this on the
    socket's buffer; its queue, not the node's memory, then fills)."""
    while True:
        await client.wake.wait()
        client.wake.clear()
        while client.waiting:
            if client.left_out:
                n, client.left_out = client.left_out, 0
                await ws.send_str(f"({n} lines left out: this client did not keep up)")
            await ws.send_str(client.waiting.popleft()[1])


async def _monitor(request: web.Request) -> web.StreamResponse:
    state = request.app[STATE_KEY]
    ring = request.app[MONITOR_KEY]
    ws = web.WebSocketResponse(heartbeat=20.0, max_msg_size=4096)
    if not ws.can_prepare(request).ok:
        return _error(400, "this endpoint speaks WebSocket: connect with a WebSocket client (huddle monitor)")
    level = LEVELS.get(request.query.get("level", "info").lower())
    if level is None:
        return _error(400, f"'level' must be one of {', '.join(LEVELS)}")
    if state.subscribers >= state.limits.max_subscribers:
        state.counters.subscribers_refused += 1
        state.refused("subscribers", "API: refused a monitor client: %d subscribers already (api.max-subscribers)",
                      state.subscribers)
        return _error(503, f"this node already streams to {state.subscribers} subscribers (api.max-subscribers)")
    await ws.prepare(request)
    state.subscribers += 1
    client = ring.join(level)
    if request.transport is not None:  # closed with the event streams as the API stops (http.py _Streams)
        state.sockets[ws] = request.transport
    sender = asyncio.create_task(_send_lines(ws, client))
    try:
        async for msg in ws:  # what the client sends is ignored; this notices a close
            if msg.type == WSMsgType.ERROR:
                break
    finally:
        ring.clients.discard(client)
        state.sockets.pop(ws, None)
        state.subscribers -= 1
        sender.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await sender
    return ws


def add_monitor_routes(app: web.Application) -> None:
    """The monitor's route, and its ring on the ``huddle`` logger while the app runs."""
    ring = app[MONITOR_KEY] = LogRing()
    logger = logging.getLogger("huddle")

    async def start(app: web.Application) -> None:
        ring.attach(logger)

    async def shut(app: web.Application) -> None:
        """The API stops: the ring stops hearing (its clients are closed with the API's other
        WebSockets, ApiState.sockets)."""
        ring.detach(logger)

    app.on_startup.append(start)
    app.on_shutdown.append(shut)
    app.router.add_get("/api/v1/monitor", _monitor)
