"""An aiohttp TCP site whose connections each pass through a wrapping protocol first,
and how its WebSockets are closed as the node stops.

The API's door (``api/http.py``) and the guests' WebSocket port (``guests/server.py``)
count a connection against their limits from the moment it is accepted, before aiohttp
holds anything for it: the wrapper refuses one too many at once, and tells its owner
when one goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from typing import Final

from aiohttp import WSCloseCode, web
from aiohttp.web_protocol import RequestHandler

__all__ = ["STOP_GRACE", "GatedSite", "going_away"]

# Seconds a node that stops gives the clients of its aiohttp servers: a WebSocket to take its
# close frame (else its connection is cut), a request in progress to end (else it is cancelled:
# the runner's shutdown timeout).  Stopping takes well under a second whatever clients are
# connected (docs/architecture.md, "Stopping").
STOP_GRACE: Final = 0.25


async def going_away(sockets: Mapping[web.WebSocketResponse, asyncio.Transport], message: bytes) -> int:
    """Send each WebSocket a close frame, code 1001 "going away" with ``message``, and close
    its connection; one whose close is not written within STOP_GRACE (it reads nothing) is cut
    off.  Returns how many were cut off."""
    closes = {asyncio.ensure_future(ws.close(code=WSCloseCode.GOING_AWAY, message=message)): ws for ws in sockets}
    if not closes:
        return 0
    _, late = await asyncio.wait(closes, timeout=STOP_GRACE)
    for task in late:
        task.cancel()
        sockets[closes[task]].abort()  # what it left unread is dropped: its handler ends now
    await asyncio.gather(*closes, return_exceptions=True)
    return len(late)


class GatedSite(web.TCPSite):
    """A TCP site whose connections are ``wrap(aiohttp's protocol for it)``."""

    __slots__ = ("_wrap",)

    def __init__(self, runner: web.AppRunner, host: str, port: int,
                 wrap: Callable[[RequestHandler], asyncio.Protocol], *, reuse_address: bool | None = None) -> None:
        super().__init__(runner, host, port, reuse_address=reuse_address)
        self._wrap = wrap

    async def start(self) -> None:
        await web.BaseSite.start(self)  # registers the site with its runner
        server = self._runner.server
        assert server is not None
        wrap = self._wrap
        self._server = await asyncio.get_running_loop().create_server(
            lambda: wrap(server()), self._host, self._port, backlog=self._backlog,
            reuse_address=self._reuse_address, reuse_port=self._reuse_port)
