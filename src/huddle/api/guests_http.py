"""HTTP routes of a node's guests (the Noam protocol), added to the node's API app by the
guests feature (huddle/guests_feature.py).

    GET  /api/v1/guests                         the room: guests, free ones, others, hosts, counters
    POST /api/v1/guests/{name}/{grab|fire}      take a free guest in, or remove a guest

Both answer 409 on a node started without ``--guests``.  The guest servers are not
imported here: this module loads with every node's API, the guests' side only with
``--guests``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from .common import NODE_KEY
from .common import error_response as _error
from .guard import bad_text

if TYPE_CHECKING:  # the guest servers load only with --guests
    from ..guests.server import GuestServer

__all__ = ["GUESTS_KEY", "GuestsPort", "add_guest_routes"]


class GuestsPort(Protocol):
    """What these routes read of the guests feature: its guest servers, when it hosts guests."""

    @property
    def server(self) -> GuestServer | None: ...


GUESTS_KEY: web.AppKey[GuestsPort] = web.AppKey("guests")


def _guest_server(request: web.Request) -> GuestServer:
    guests = request.app[GUESTS_KEY].server
    if guests is None:
        raise web.HTTPConflict(text="this node does not host guests: start it with --guests")
    return guests


async def _get_guests(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    guests = _guest_server(request)
    room = guests.room
    now = node.local_now()
    return web.json_response({
        "room": room.room, **guests.ports(), "keyless": room.is_keyless,
        "guests": [g.as_dict(now) for g in room.guests.values()],
        "free": [x.as_dict(now) for x in room.free.values()],
        "others": [x.as_dict(now) for x in room.others.values()],
        "grabbed": sorted(room.grabbed),
        "hosts": guests.host_ids(),
        "stats": dict(guests.stats) | {"fired": room.fired, "errors": room.errors},
    })


async def _post_guest_action(request: web.Request) -> web.Response:
    guests = _guest_server(request)
    name = request.match_info["name"]
    if bad_text(name):
        return _error(400, "a guest's name must be text that can be encoded as UTF-8")
    if request.match_info["action"] == "grab":
        guests.grab(name)
        return web.json_response({"grabbed": name}, status=201)
    if not guests.fire(name, "fired by hand"):
        return _error(404, f"no guest {name!r} in this room")
    return web.json_response({"fired": name})


def add_guest_routes(app: web.Application, guests: GuestsPort) -> None:
    app[GUESTS_KEY] = guests
    app.router.add_get("/api/v1/guests", _get_guests)
    app.router.add_post("/api/v1/guests/{name}/{action:grab|fire}", _post_guest_action)
