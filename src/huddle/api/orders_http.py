"""HTTP routes of orders to any node (huddle/control/orders_feature.py; docs/control.md,
"Orders from any node"):

    GET  /api/v1/apps?node=NODE                       NODE's apps, as it answers them
    GET  /api/v1/apps/{name}/logs?node=NODE[&after=N]  a chunk of the app's output on NODE (``more``: ask again)
    POST /api/v1/apps/{name}/{start|stop|restart}?node=NODE   the order, carried to NODE; its result
    POST /api/v1/control/{stop|shutdown|reboot}       {"node": NODE} or {"all": true}; each node's result
    GET  /api/v1/control                              what the order desk counted

NODE is a name or a unique id prefix (api/resolve.py; unknown: 404).  The call waits for the
target's result (``timeout`` in the query or the body, 0.1..60 s, default 10) and answers with
its status: 200 done, 404 the target runs no such app, 409 the target refuses (an excluded
node; a shutdown without a command), 410 the target is gone, 504 no answer in time.  The app
routes without ``node`` stay the node's own (api/apps_http.py), which hands them here when a
``node`` is given.
"""

from __future__ import annotations

import asyncio
import math
from typing import TYPE_CHECKING, Any, Final, Protocol

from aiohttp import web

from ..control.orders import NODE_ACTIONS
from ..control.section import APP_NAME
from .apps_http import APPS_KEY, REMOTE_KEY
from .common import READ_JSON_KEY
from .common import error_response as _error
from .resolve import node_id

if TYPE_CHECKING:
    from ..control.remote import OrderDesk

__all__ = ["ORDERS_KEY", "OrdersPort", "add_order_routes"]

DEFAULT_TIMEOUT: Final = 10.0
MAX_TIMEOUT: Final = 60.0


class OrdersPort(Protocol):
    """What these routes read of the control feature."""

    @property
    def desk(self) -> OrderDesk: ...


ORDERS_KEY: web.AppKey[OrdersPort] = web.AppKey("orders")


def _timeout(value: object) -> float | None:
    """A timeout given as text or a number, or None when it is not one (0.1..60 s)."""
    try:
        t = float(value) if isinstance(value, (str, int, float)) and not isinstance(value, bool) else math.nan
    except ValueError:
        return None
    return t if 0.1 <= t <= MAX_TIMEOUT else None


def _answer(status: int, answer: dict[str, Any]) -> web.Response:
    return web.json_response(answer, status=status)


async def _remote(request: web.Request, name: str | None, order: str | None) -> web.Response:
    """An app route given ``node``: the list (``name`` None) or an order, carried to that node."""
    desk = request.app[ORDERS_KEY].desk
    timeout = _timeout(request.query.get("timeout", DEFAULT_TIMEOUT))
    if timeout is None:
        request.app[APPS_KEY].counters.bad_order += 1
        return _error(400, f"timeout is 0.1..{MAX_TIMEOUT:g} seconds")
    target = node_id(request, request.query["node"], "node")
    if name is None:
        return _answer(*await desk.ask(target, "apps", "", timeout))
    assert order is not None
    after = request.query.get("after") if order == "logs" else None  # checked by the logs route already
    return _answer(*await desk.ask(target, order, name, timeout, None if after is None else int(after)))


async def _post_node_order(request: web.Request) -> web.Response:
    desk = request.app[ORDERS_KEY].desk
    order = request.match_info["order"]
    if order not in NODE_ACTIONS:
        return _error(400, f"a node's order is stop, shutdown or reboot, not {order[:40]!r}")
    body = await request.app[READ_JSON_KEY](request)
    if not set(body) <= {"node", "all", "timeout"} or ("node" in body) == (body.get("all") is True) \
            or ("all" in body and body["all"] is not True) or ("node" in body and not isinstance(body["node"], str)):
        return _error(400, 'expected {"node": a name or id} or {"all": true}, and "timeout" (seconds) at most')
    timeout = _timeout(body.get("timeout", DEFAULT_TIMEOUT))
    if timeout is None:
        return _error(400, f"timeout is 0.1..{MAX_TIMEOUT:g} seconds")
    if "node" in body:
        return _answer(*await desk.ask(node_id(request, body["node"], "node"), order, "", timeout))
    # Every member: the others together, then this node (which stops once it answered itself).
    others = await asyncio.gather(*(desk.ask(peer, order, "", timeout) for peer in desk.members()))
    results = [{"status": s, **a} for s, a in others]
    status, answer = await desk.ask(desk.me, order, "", timeout)
    results.append({"status": status, **answer})
    return web.json_response({"results": results})


async def _get_control(request: web.Request) -> web.Response:
    return web.json_response({"stats": request.app[ORDERS_KEY].desk.stats()})


def add_order_routes(app: web.Application, orders: OrdersPort) -> None:
    app[ORDERS_KEY] = orders

    async def remote(request: web.Request, name: str | None, order: str | None) -> web.Response:
        if name is not None and not APP_NAME.match(name):
            request.app[APPS_KEY].counters.bad_name += 1
            return _error(400, "an app's name is 1..32 of a-z 0-9 _ - starting with a letter")
        return await _remote(request, name, order)

    app[REMOTE_KEY] = remote
    app.router.add_post("/api/v1/control/{order}", _post_node_order)
    app.router.add_get("/api/v1/control", _get_control)
