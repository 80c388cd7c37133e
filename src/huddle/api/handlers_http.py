"""The HTTP route of a node's event handlers, added to the node's API app by the apps feature
(huddle/control/feature.py; docs/control.md, "Handlers"):

    GET  /api/v1/handlers    each handler (on, command, timeout), how many run and wait now,
                             the counts (started, succeeded, failed, timed out, dropped) and the latest runs

A node with no handler answers an empty list and zero counts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from aiohttp import web

if TYPE_CHECKING:  # the driver loads only on a node that runs handlers
    from ..control.handler_runner import HandlerRunner

__all__ = ["HANDLERS_KEY", "HandlersPort", "add_handler_routes"]


class HandlersPort(Protocol):
    """What this route reads of the apps feature."""

    @property
    def handlers(self) -> HandlerRunner | None: ...


HANDLERS_KEY: web.AppKey[HandlersPort] = web.AppKey("handlers")
_NONE = {"handlers": [], "running": 0, "queued": 0, "stats": {}, "recent": []}


async def _get_handlers(request: web.Request) -> web.Response:
    runner = request.app[HANDLERS_KEY].handlers
    return web.json_response(_NONE if runner is None else runner.status())


def add_handler_routes(app: web.Application, port: HandlersPort) -> None:
    app[HANDLERS_KEY] = port
    app.router.add_get("/api/v1/handlers", _get_handlers)
