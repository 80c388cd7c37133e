"""An aiohttp TCP site whose connections each pass through a wrapping protocol first.

The API's door (``api/http.py``) and the guests' WebSocket port (``guests/server.py``)
count a connection against their limits from the moment it is accepted, before aiohttp
holds anything for it: the wrapper refuses one too many at once, and tells its owner
when one goes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

__all__ = ["GatedSite"]


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
