"""HTTP route of ZRE (docs/zre.md), added to the node's API app by the ZRE feature (zre/feature.py).

    GET  /api/v1/zre/peers    {uuid, endpoint, port, group, beacon_address, peers: [...], counters: {...}};
                              each peer {uuid, name, endpoint, state, groups, headers, proto: "zre"}
    POST /api/v1/zre/whisper  {"to": UUID-HEX or NAME, "text": STR}: a WHISPER of one frame to an entered
                              peer: 202 {"sent_to": UUID-HEX}, 404 no such peer, 400 a malformed body

A node started without ``--zre`` answers 409.

And ``POST /api/v1/messages`` (the addressed messages' route) whose ``to`` names no mesh member
but an entered ZRE peer sends each message to it as a WHISPER of one frame (``OTHER_PEERS_KEY``):
202 ``{"sent": [{"peer": UUID-HEX, "via": "zre"}]}``; a message over 64 KiB is a 413.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from aiohttp import web

from ..errors import TooLarge
from .common import OTHER_PEERS_KEY, READ_JSON_KEY
from .common import error_response as _error

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


MAX_WHISPER = 64 * 1024  # octets of a WHISPER's text


def add_zre_routes(app: web.Application, zre: ZreFacts) -> None:
    """Add the routes (after the API's own: they read a JSON body as ``READ_JSON_KEY`` does)."""
    app[ZRE_KEY] = zre
    read_json = app[READ_JSON_KEY]

    def whisper_to(to: str, payloads: list[bytes]) -> str | None:
        """An addressed message to a ZRE peer: a WHISPER each (None: no such peer, or no ZRE)."""
        driver = zre.driver
        peer = None if driver is None else driver.peer_named(to)
        if driver is None or peer is None:
            return None
        if any(len(p) > MAX_WHISPER for p in payloads):
            raise TooLarge(f"a WHISPER is at most {MAX_WHISPER} octets")
        if not all(driver.whisper(peer.uuid, [p]) for p in payloads):
            return None
        return peer.uuid.hex()

    app[OTHER_PEERS_KEY] = whisper_to

    async def post_whisper(request: web.Request) -> web.Response:
        driver = request.app[ZRE_KEY].driver
        if driver is None:
            raise web.HTTPConflict(text="this node does not speak ZRE: start it with --zre")
        body = await read_json(request)
        to, text = body.get("to"), body.get("text")
        if set(body) != {"to", "text"} or not isinstance(to, str) or not isinstance(text, str):
            return _error(400, "expected {\"to\": UUID-HEX or NAME, \"text\": STR}")
        raw = text.encode()
        if len(raw) > MAX_WHISPER:
            return _error(400, f"a WHISPER's text is at most {MAX_WHISPER} octets")
        peer = driver.peer_named(to)
        if peer is None or not driver.whisper(peer.uuid, [raw]):
            return _error(404, f"no ZRE peer {to!r} has entered")
        return web.json_response({"sent_to": peer.uuid.hex()}, status=202)

    app.router.add_get("/api/v1/zre/peers", _get_peers)
    app.router.add_post("/api/v1/zre/whisper", post_whisper)
