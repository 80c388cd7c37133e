"""HTTP route of ZRE (docs/zre.md), added to the node's API app by the ZRE feature (zre/feature.py).

    GET /api/v1/zre/peers   {uuid, endpoint, port, group, beacon_address, peers: [...], counters: {...}};
                            each peer {uuid, name, endpoint, state, groups, headers, proto: "zre"}

A node started without ``--zre`` answers 409.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from aiohttp import web

if TYPE_CHECKING:  # the driver loads with --zre alone
    from ..zre.driver import ZreDriver

__all__ = ["ZRE_KEY", "ZreFacts", "add_zre_routes"]


class ZreFacts(Protocol):
    """What this route reads of the ZRE feature: its driver, with --zre."""

    @property
    def driver(self) -> ZreDriver | None: ...


ZRE_KEY: web.AppKey[ZreFacts] = web.AppKey("zre")


async def _get_peers(request: web.Request) -> web.Response:
    driver = request.app[ZRE_KEY].driver
    if driver is None:
        raise web.HTTPConflict(text="this node does not speak ZRE: start it with --zre")
    return web.json_response(driver.describe())


def add_zre_routes(app: web.Application, zre: ZreFacts) -> None:
    app[ZRE_KEY] = zre
    app.router.add_get("/api/v1/zre/peers", _get_peers)
