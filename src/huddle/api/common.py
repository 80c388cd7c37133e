"""What the API's modules share: the application keys, the door's state, reading a
request's body under its rules, the error answer.

:mod:`huddle.api.http` and the features' route modules (:mod:`huddle.api.posts_http`,
:mod:`huddle.api.doc_http`, ...) import this module, and it imports none of them, so
they need not import each other.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import Any, Final

from aiohttp import hdrs, web
from aiohttp.abc import AbstractStreamWriter
from aiohttp.web_protocol import RequestHandler

from ..gated import STOP_GRACE, going_away
from ..limits import ApiLimits
from ..ratelog import RateLog
from ..wire import MAX_BODY
from .guard import ApiCounters, BadInput, ConnectionGuard, parse_json
from .ports import ApiNode

__all__ = ["HOLD_WRITES", "NODE_KEY", "OTHER_PEERS_KEY", "READ_JSON_KEY", "STATE_KEY", "ApiState", "OtherPeers",
           "ReadJson", "close_sockets_at_stop",
           "error_response", "file_response", "page_response", "parse_strict", "read_body"]

log = logging.getLogger("huddle.api")

NODE_KEY: web.AppKey[ApiNode] = web.AppKey("node")


class ApiState:
    """The API's door: its limits, counters, connections and subscribers."""

    def __init__(self, limits: ApiLimits) -> None:
        self.limits = limits
        self.counters = ApiCounters()
        self.guard: ConnectionGuard[RequestHandler] = ConnectionGuard(limits, self.counters)
        self.transports: dict[RequestHandler, asyncio.Transport] = {}
        self.subscribers = 0
        # The open WebSockets (event stream, monitor), each with its connection: told "going
        # away" and closed as the API stops, not waited for (http.py _Streams).
        self.sockets: dict[web.WebSocketResponse, asyncio.Transport] = {}
        self.exposed = False  # listening beyond loopback
        self.token: str | None = None  # required on every request but the login page's, when set
        self.refusals_log = RateLog(log, period=60.0)

    def refused(self, kind: str, message: str, *args: object) -> None:
        """Log a refusal, at most once a minute per kind."""
        self.refusals_log.warning(kind, asyncio.get_running_loop().time(), message, *args)

    def warning(self) -> str | None:
        if not self.exposed:
            return None
        return ("the API listens beyond loopback: it requires its token, but speaks plain HTTP, so anyone on the "
                "path can read what it answers and the token itself; prefer a TLS proxy in front of "
                "--api 127.0.0.1:PORT")


STATE_KEY: web.AppKey[ApiState] = web.AppKey("api_state")
# Reads a request's JSON object under the door's rules (type, size, time, depth): a feature's routes use it.
ReadJson = Callable[[web.Request], Awaitable[dict[str, Any]]]
READ_JSON_KEY: web.AppKey[ReadJson] = web.AppKey("read_json")
# Sends payloads to a peer no mesh member answers to, by another protocol (ZRE's WHISPER, docs/zre.md):
# (to, payloads) -> the peer's id as sent to, or None when no such peer has entered.  Set by the
# ZRE feature's routes; ``POST /api/v1/messages`` tries it when ``to`` names no member.
OtherPeers = Callable[[str, list[bytes]], str | None]
OTHER_PEERS_KEY: web.AppKey[OtherPeers] = web.AppKey("other_peers")


# A write made while the node starts waits this long at most for its start-up window to end
# (protocol.md 12.1, "A restored log"; log.own-wait and log.own-quiet), then gets 503.
HOLD_WRITES: Final = 10.0


async def read_body(request: web.Request, types: frozenset[str]) -> bytes:
    """The whole body, if its content type is one of ``types``, it is not too large
    and it arrives within api.body-timeout; else an HTTP error (counted)."""
    state = request.app[STATE_KEY]
    if request.content_type not in types:
        state.counters.bad_content_type += 1
        raise web.HTTPUnsupportedMediaType(text=f"send the body as {' or '.join(sorted(types))}, "
                                                f"not {request.content_type}")
    if request.content_length is not None and request.content_length > MAX_BODY + 4096:
        state.counters.too_large += 1
        raise web.HTTPRequestEntityTooLarge(max_size=MAX_BODY, actual_size=request.content_length,
                                            text=f"request body larger than {MAX_BODY} octets")
    try:
        async with asyncio.timeout(state.limits.body_timeout):
            return await request.read()
    except TimeoutError:
        state.counters.body_timeouts += 1
        state.refused("body", "API: a request body did not arrive within %s s", state.limits.body_timeout)
        raise web.HTTPRequestTimeout(text=f"the request body did not arrive within {state.limits.body_timeout} s") \
            from None
    except web.HTTPRequestEntityTooLarge:
        state.counters.too_large += 1
        raise


def parse_strict(request: web.Request, raw: bytes) -> Any:
    """``raw`` as strict JSON (no duplicate keys, NaN or deep nesting), else a 400 (counted)."""
    state = request.app[STATE_KEY]
    try:
        return parse_json(raw, state.limits.max_json_depth)
    except BadInput as exc:
        state.counters.bad_input += 1
        raise web.HTTPBadRequest(text=str(exc)) from None


def error_response(status: int, message: str) -> web.Response:
    """Every error the API gives: JSON ``{"error": message}`` with ``status``."""
    return web.json_response({"error": message}, status=status)


def _range_satisfiable(request: web.BaseRequest, size: int) -> bool:
    """Would aiohttp's file answer take this request's ``Range`` (none, or one range that
    starts inside ``size`` octets)?  Its own 416 path fails after the head is out (an
    AssertionError in the log, the connection cut), so a bad one is answered here first."""
    if hdrs.RANGE not in request.headers:
        return True
    try:
        rng = request.http_range
    except ValueError:  # not "bytes=FIRST-LAST", several ranges, last before first, ...
        return False
    start = rng.start
    if start is None:
        return True
    if start < 0 and rng.stop is None:  # the last -start octets: any suffix is satisfiable
        return True
    return bool(start < size)


class _File(web.FileResponse):
    """A file answer that the API's door may write before aiohttp does: aiohttp prepares
    a handler's answer again once the handler returns, and a FileResponse prepared twice
    opens its file again and, for a range (206), fails as it sets its status a second time."""

    async def prepare(self, request: web.BaseRequest) -> AbstractStreamWriter | None:
        if self.prepared:
            return None
        return await super().prepare(request)


@functools.cache
def _page(path: Path) -> bytes:
    return path.read_bytes()


def _bad_range(request: web.Request, size: int) -> web.Response:
    request.app[STATE_KEY].counters.bad_range += 1
    resp = error_response(416, f"the Range {request.headers[hdrs.RANGE][:100]!r} is not one range of "
                               f"bytes within the {size} octets here")
    resp.headers[hdrs.CONTENT_RANGE] = f"bytes */{size}"
    return resp


def page_response(request: web.Request, path: Path, content_type: str) -> web.Response:
    """One of the API's own pages (a file that ships with the package), read once and answered
    from memory with ``Cache-Control: no-cache``; a ``Range`` as :func:`file_response` takes it.
    Not a FileResponse: a client that leaves before the page is out (a browser reloading) is then
    a closed connection, never aiohttp's sendfile path failing on it."""
    body = _page(path)
    size = len(body)
    headers = {"Cache-Control": "no-cache", hdrs.ACCEPT_RANGES: "bytes"}
    if hdrs.RANGE not in request.headers or request.if_range is not None:  # If-Range: the whole page, always fresh
        return web.Response(body=body, content_type=content_type, charset="utf-8", headers=headers)
    if not _range_satisfiable(request, size):
        return _bad_range(request, size)
    rng = request.http_range
    first, stop, _ = rng.indices(size)
    headers[hdrs.CONTENT_RANGE] = f"bytes {first}-{stop - 1}/{size}"
    return web.Response(status=206, body=body[first:stop], content_type=content_type, charset="utf-8",
                        headers=headers)


def file_response(request: web.Request, path: Path, headers: Mapping[str, str]) -> web.StreamResponse:
    """``path`` as aiohttp serves files (206 for a range), but a ``Range`` header that is
    malformed or starts past the end gets a plain 416 with ``Content-Range: bytes */SIZE``
    (counted: ``bad_range``), never a traceback."""
    st = os.stat(path)
    size = st.st_size
    if_range = request.if_range
    if (if_range is None or st.st_mtime <= if_range.timestamp()) and not _range_satisfiable(request, size):
        return _bad_range(request, size)
    return _File(path, headers=headers)


class _Sockets:
    """The API's open WebSockets (``ApiState.sockets``: the event stream's, the monitor's),
    each told "going away" (code 1001) and closed as the node stops.  Without this, each
    stream's handler runs until its client goes, and aiohttp's stop waits for every handler."""

    def __init__(self) -> None:
        self._closing: asyncio.Task[None] | None = None

    async def going_away(self, app: web.Application) -> None:
        """The app's shutdown: the closes start, and are not waited for here, so that aiohttp's
        wait for the requests in progress runs meanwhile (STOP_GRACE for both, not twice)."""
        sockets = app[STATE_KEY].sockets
        if sockets:
            self._closing = asyncio.create_task(self._close(dict(sockets)))

    async def closed(self, app: web.Application) -> None:
        """The app's cleanup, after aiohttp's wait: the closes are over."""
        if self._closing is not None:
            await self._closing

    @staticmethod
    async def _close(streams: dict[web.WebSocketResponse, asyncio.Transport]) -> None:
        late = await going_away(streams, b"the node is stopping")
        log.info("API: told %d subscriber(s) the node is going away, and closed them%s", len(streams),
                 f" ({late} cut off, the close not written within {STOP_GRACE} s)" if late else "")


def close_sockets_at_stop(app: web.Application) -> None:
    """As ``app`` stops, its open WebSockets (``ApiState.sockets``) are told "going away" and
    closed (``_Sockets``), while aiohttp waits for the requests in progress."""
    sockets = _Sockets()
    app.on_shutdown.append(sockets.going_away)
    app.on_cleanup.append(sockets.closed)
