"""HTTP routes of the group secret's rotation (docs/security.md, "Rotating the group secret"),
added to the node's API app by the rotation feature (security/features.py).  Token rules as every API call.

    GET  /api/v1/group/keys     the key in use, each key held (key id, state, port), the retired key ids
    POST /api/v1/group/keys     {"file": TEXT}: install the group file TEXT beside the key in use
    POST /api/v1/group/switch   {"key_id": ID}: use the held key ID from now on
    POST /api/v1/group/retire   {"key_id": ID}: drop the held key ID (not the one in use)

Never a secret in an answer.  400: not a group file of this group; 404: no such key held;
409: an open group, or a step out of order (retiring the key in use, a third key).
"""

from __future__ import annotations

from typing import Protocol

from aiohttp import web

from ..ports import RotationPort
from ..security import KeyringError
from .common import READ_JSON_KEY
from .common import error_response as _error

__all__ = ["ROTATION_KEY", "RotationFacts", "add_group_routes"]


class RotationFacts(Protocol):
    """What these routes read of the rotation feature: the rotation, in a group with a secret."""

    @property
    def rotation(self) -> RotationPort | None: ...


ROTATION_KEY: web.AppKey[RotationFacts] = web.AppKey("rotation")
_OPEN = "this node runs an open group (no group secret): there is no key to rotate"
MAX_KEY_ID = 64  # far beyond a key id's 8 hex digits


def _rotation(request: web.Request) -> RotationPort:
    rotation = request.app[ROTATION_KEY].rotation
    if rotation is None:
        raise web.HTTPConflict(text=_OPEN)
    return rotation


async def _get_keys(request: web.Request) -> web.Response:
    return web.json_response(_rotation(request).describe())


def add_group_routes(app: web.Application, rotation: RotationFacts) -> None:
    """Add the routes (after the API's own: they read a JSON body as ``READ_JSON_KEY`` does)."""
    app[ROTATION_KEY] = rotation
    read_json = app[READ_JSON_KEY]

    async def install(request: web.Request) -> web.Response:
        rotation = _rotation(request)
        body = await read_json(request)
        text = body.get("file")
        if set(body) != {"file"} or not isinstance(text, str):
            return _error(400, "expected {\"file\": the group file's text (huddle group new NAME --out FILE)}")
        try:
            return web.json_response(await rotation.install(text))
        except KeyringError as exc:
            return _error(exc.status, str(exc))

    async def key_step(request: web.Request, switch: bool) -> web.Response:
        rotation = _rotation(request)
        body = await read_json(request)
        key_id = body.get("key_id")
        if set(body) != {"key_id"} or not isinstance(key_id, str) or not 0 < len(key_id) <= MAX_KEY_ID:
            return _error(400, "expected {\"key_id\": ID} (the key ids: GET /api/v1/group/keys)")
        try:
            return web.json_response(await rotation.switch(key_id) if switch else rotation.retire(key_id))
        except KeyringError as exc:
            return _error(exc.status, str(exc))

    async def switch(request: web.Request) -> web.Response:
        return await key_step(request, True)

    async def retire(request: web.Request) -> web.Response:
        return await key_step(request, False)

    app.router.add_get("/api/v1/group/keys", _get_keys)
    app.router.add_post("/api/v1/group/keys", install)
    app.router.add_post("/api/v1/group/switch", switch)
    app.router.add_post("/api/v1/group/retire", retire)
