"""The runtime join (docs/protocol.md 5.1, "Seeds added at runtime"): ``huddle join HOST:PORT``.

    POST /api/v1/peers/join  {"address": "HOST:PORT", "timeout": SECONDS (optional, default 5)}

answers once the peer there is admitted: ``200 {"uuid", "name", "endpoint", "state", "tags"}``;
``400`` a malformed address or timeout, a host name that does not resolve, this node's own
endpoint; ``409`` the peer refused us (another group, a GBYE); ``429`` too many seeds added at
runtime await an answer (``mesh.max-runtime-seeds``); ``504`` no answer within the timeout, "no
answer from HOST:PORT" (the seed is then dropped: the operator asks again).
"""

from __future__ import annotations

import math

from aiohttp import web

from ..errors import ConfigError
from ..protocol.seeds import JoinFailed
from .common import NODE_KEY, READ_JSON_KEY
from .common import error_response as _error

__all__ = ["MAX_TIMEOUT", "add_peer_join_routes"]

MAX_TIMEOUT = 60.0  # seconds a join may be told to wait
_EXPECTED = 'expected {"address": "HOST:PORT", "timeout": SECONDS (optional, 0.1..60)}'


def add_peer_join_routes(app: web.Application) -> None:
    """Add the route (after the API's own: it reads a JSON body as ``READ_JSON_KEY`` does)."""
    read_json = app[READ_JSON_KEY]

    async def post_join(request: web.Request) -> web.Response:
        body = await read_json(request)
        address, timeout = body.get("address"), body.get("timeout", 5.0)
        if (set(body) - {"address", "timeout"} or not isinstance(address, str) or isinstance(timeout, bool)
                or not isinstance(timeout, int | float) or not (math.isfinite(timeout) and 0.1 <= timeout <= MAX_TIMEOUT)):
            return _error(400, _EXPECTED)
        try:
            peer = await request.app[NODE_KEY].join(address, float(timeout))
        except ConfigError as exc:
            return _error(400, str(exc))
        except JoinFailed as exc:
            return _error(exc.status, str(exc))
        return web.json_response({"uuid": str(peer.uuid), "name": peer.name, "endpoint": peer.endpoint,
                                  "state": peer.state, "tags": peer.tags})

    app.router.add_post("/api/v1/peers/join", post_join)
