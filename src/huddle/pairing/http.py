"""HTTP routes of pairing (docs/security.md, "Pairing"), added to the node's API app by the pairing
feature.  Token rules as every API call (loopback, or the API token).

    GET  /api/v1/pair           {"door": "HOST:PORT" or null, "pending": [{fingerprint, name, node,
                                address, public_key, age, expires_in}, ...], "stats": {...}}
    POST /api/v1/pair/accept    {"fingerprint": F}: the device gets the group secret at its next request
    POST /api/v1/pair/refuse    {"fingerprint": F}: its request goes; it is refused at once for a while

F is the whole fingerprint (``XXXX-XXXX-XXXX-XXXX``, typed as people type it); a prefix is
400.  No request of F pending: 404.  A node without a door (an open group): 409.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from ..api.common import READ_JSON_KEY
from ..api.common import error_response as _error
from .codec import BadFingerprint, normalise_fingerprint
from .requests import Request, Requests

__all__ = ["PAIR_KEY", "PairPort", "add_pair_routes"]


class PairPort(Protocol):
    """What these routes need of the pairing feature."""

    @property
    def requests(self) -> Requests: ...

    def describe(self) -> dict[str, object]: ...

    def accept(self, fp: str) -> Request | None: ...

    def refuse(self, fp: str) -> Request | None: ...


PAIR_KEY: web.AppKey[PairPort] = web.AppKey("pairing")
_NO_DOOR = "this node has no pairing door: an open group (anyone can join it), or not running"


def add_pair_routes(app: web.Application, pairing: PairPort) -> None:
    """Add the routes (after the API's own: they read a JSON body as ``READ_JSON_KEY`` does)."""
    app[PAIR_KEY] = pairing
    read_json = app[READ_JSON_KEY]

    async def get_pair(request: web.Request) -> web.Response:
        return web.json_response(request.app[PAIR_KEY].describe())

    async def answer(request: web.Request) -> web.Response:
        port = request.app[PAIR_KEY]
        if port.describe()["door"] is None:
            return _error(409, _NO_DOOR)
        body = await read_json(request)
        fp = body.get("fingerprint")
        if set(body) != {"fingerprint"} or not isinstance(fp, str):
            return _error(400, 'expected {"fingerprint": "XXXX-XXXX-XXXX-XXXX"}')
        try:
            fp = normalise_fingerprint(fp)
        except BadFingerprint as exc:
            return _error(400, str(exc))
        action = request.match_info["action"]
        done = port.accept(fp) if action == "accept" else port.refuse(fp)
        if done is None:
            return _error(404, f"no device with fingerprint {fp} asks to join this node (huddle pair list; a request "
                          "expires, and goes once a member answered it)")
        return web.json_response({"fingerprint": fp, "name": done.name, "node": done.node_id, "action": action})

    app.router.add_get("/api/v1/pair", get_pair)
    app.router.add_post(r"/api/v1/pair/{action:accept|refuse}", answer)
