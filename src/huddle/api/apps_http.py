"""HTTP routes of a node's apps, added to the node's API app by the apps feature
(huddle/control/feature.py; docs/control.md):

    GET  /api/v1/apps                          each app: state, pid, restarts, uptime, last exit
    POST /api/v1/apps/{name}/{start|stop|restart}   an order; the app's status after it

    GET  /api/v1/apps/{name}/logs[?after=N]    its output: the log file's tail, or what came after N

Given ``?node=NODE``, the list, the orders and the output are another node's (api/orders_http.py).

A node that runs no app answers an empty list, and 404 for any name.  Orders take no body.
Refusals are counted (``stats``): a name that cannot be an app's, an unknown app, an unknown
order, a body.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Final, Protocol

from aiohttp import web

from ..control.counters import AppsCounters
from ..control.section import APP_NAME
from .common import error_response as _error

if TYPE_CHECKING:  # the driver loads only on a node that runs apps
    from ..control.supervisor import Supervisor

__all__ = ["APPS_KEY", "REMOTE_KEY", "AppsPort", "add_app_routes"]

ORDERS: Final = ("start", "stop", "restart")
MAX_ORDER_BODY: Final = 1024  # octets an order may carry (they carry none: "{}" is accepted)


class AppsPort(Protocol):
    """What these routes read of the apps feature."""

    @property
    def supervisor(self) -> Supervisor | None: ...

    @property
    def counters(self) -> AppsCounters: ...


APPS_KEY: web.AppKey[AppsPort] = web.AppKey("apps")
# Another node's apps (``?node=NODE``): the list (name None) or an order, carried there by the
# control feature's routes (api/orders_http.py), which set it.
Remote = Callable[[web.Request, str | None, str | None], Awaitable[web.Response]]
REMOTE_KEY: web.AppKey[Remote] = web.AppKey("apps_remote")


def _remote(request: web.Request) -> Remote | None:
    """The handler of another node's apps, when the request names a node (None: this node's)."""
    return request.app.get(REMOTE_KEY) if "node" in request.query else None


def _named(request: web.Request) -> tuple[Supervisor | None, str, web.Response | None]:
    """The supervisor and the app's name, or the refusal (counted)."""
    port = request.app[APPS_KEY]
    name = request.match_info["name"]
    if not APP_NAME.match(name):
        port.counters.bad_name += 1
        return None, name, _error(400, "an app's name is 1..32 of a-z 0-9 _ - starting with a letter")
    supervisor = port.supervisor
    if supervisor is None or name not in supervisor.apps:
        port.counters.unknown_app += 1
        known = ", ".join(supervisor.apps) if supervisor is not None else ""
        return None, name, _error(404, f"no app {name!r} on this node (apps: {known or 'none'})")
    return supervisor, name, None


async def _get_apps(request: web.Request) -> web.Response:
    if (remote := _remote(request)) is not None:
        return await remote(request, None, None)
    port = request.app[APPS_KEY]
    apps = [] if port.supervisor is None else port.supervisor.statuses()
    return web.json_response({"apps": apps, "stats": port.counters.as_dict()})


async def _post_order(request: web.Request) -> web.Response:
    port = request.app[APPS_KEY]
    if request.content_length is not None and request.content_length > MAX_ORDER_BODY:
        port.counters.bad_body += 1
        return _error(413, f"an order takes no body (at most {MAX_ORDER_BODY} octets are read)")
    if request.body_exists:
        body = await request.content.read(MAX_ORDER_BODY + 1)
        if len(body) > MAX_ORDER_BODY or body.strip() not in (b"", b"{}"):
            port.counters.bad_body += 1
            return _error(413 if len(body) > MAX_ORDER_BODY else 400, "an order takes no body")
    order = request.match_info["order"]
    if order not in ORDERS:
        port.counters.bad_order += 1
        return _error(400, f"an app's order is start, stop or restart, not {order[:40]!r}")
    if (remote := _remote(request)) is not None:
        return await remote(request, request.match_info["name"], order)
    supervisor, name, refused = _named(request)
    if refused is not None:
        return refused
    assert supervisor is not None
    return web.json_response(supervisor.order(name, order))


async def _get_logs(request: web.Request) -> web.Response:
    port = request.app[APPS_KEY]
    text = request.query.get("after")
    after: int | None = None
    if text is not None:
        if not text.isdigit() or len(text) > 18:
            port.counters.bad_order += 1
            return _error(400, "after is an offset: 0 or more octets, as 'next' gave it")
        after = int(text)
    if (remote := _remote(request)) is not None:
        return await remote(request, request.match_info["name"], "logs")
    supervisor, name, refused = _named(request)
    if refused is not None:
        return refused
    assert supervisor is not None
    return web.json_response(supervisor.output(name, after))


def add_app_routes(app: web.Application, apps: AppsPort) -> None:
    app[APPS_KEY] = apps
    app.router.add_get("/api/v1/apps", _get_apps)
    app.router.add_post("/api/v1/apps/{name}/{order}", _post_order)
    app.router.add_get("/api/v1/apps/{name}/logs", _get_logs)
