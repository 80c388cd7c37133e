"""HTTP routes of allow-list mode (docs/security.md, "Allow-list mode"), added to the node's API app
by the trust feature (security/features.py).

    GET    /api/v1/trust          the trusted keys: {"keys": [{public_key, fingerprint, name}, ...]}
    POST   /api/v1/trust          {"key": HEX, "name": STR}: trust a key, now and in the file
    DELETE /api/v1/trust/{key}    stop trusting a key (hex or fingerprint): it is cut off at once

A node not in allow-list mode answers 409.
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from ..errors import ConfigError
from ..ports import TrustPort
from .common import READ_JSON_KEY
from .common import error_response as _error

__all__ = ["TRUST_KEY", "TrustFacts", "add_trust_routes"]


class TrustFacts(Protocol):
    """What these routes read of the trust feature: the trusted keys, in allow-list mode."""

    @property
    def allow_list(self) -> TrustPort | None: ...


TRUST_KEY: web.AppKey[TrustFacts] = web.AppKey("trust")
_NOT_ALLOW_LIST = "this node is not in allow-list mode: start it with --group-key FILE --allow-list"


def _allow_list(request: web.Request) -> TrustPort:
    allow = request.app[TRUST_KEY].allow_list
    if allow is None:
        raise web.HTTPConflict(text=_NOT_ALLOW_LIST)
    return allow


async def _get_trust(request: web.Request) -> web.Response:
    return web.json_response({"keys": _allow_list(request).listed()})


def add_trust_routes(app: web.Application, trust: TrustFacts) -> None:
    """Add the routes (after the API's own: they read a JSON body as ``READ_JSON_KEY`` does)."""
    app[TRUST_KEY] = trust
    read_json = app[READ_JSON_KEY]

    async def post_trust(request: web.Request) -> web.Response:
        allow = _allow_list(request)
        body = await read_json(request)
        unknown = set(body) - {"key", "name"}
        key, name = body.get("key"), body.get("name", "")
        if unknown or not isinstance(key, str) or not isinstance(name, str):
            return _error(400, "expected {\"key\": HEX, \"name\": STR (optional)}")
        try:
            added = allow.add(key, name)
        except ConfigError as exc:
            return _error(400, str(exc))
        return web.json_response(added.as_dict())

    async def delete_trust(request: web.Request) -> web.Response:
        allow = _allow_list(request)
        removed = allow.remove(request.match_info["key"])
        if removed is None:
            return _error(404, "no trusted key is named so (give its hex or its fingerprint: huddle trust list)")
        return web.json_response(removed.as_dict())

    app.router.add_get("/api/v1/trust", _get_trust)
    app.router.add_post("/api/v1/trust", post_trust)
    app.router.add_delete("/api/v1/trust/{key}", delete_trust)
