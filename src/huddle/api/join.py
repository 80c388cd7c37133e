"""The join panel (docs/security.md, "The join panel"): a secured group's join code, as text and as a QR code, and the
guests' room key, for the status page.

    GET /api/v1/join       {"group", "key_id", "join_code", "room_key", "uri"}
    GET /api/v1/join.svg   the QR code of ``uri`` (image/svg+xml)

Only for a node with a group secret (else 404), and only to a request that came from loopback
or passed the API token (the door, api/http.py, checks the token whenever the API requires it;
an API that requires none listens on loopback, and a request from elsewhere is refused here
all the same).  Never cached.  The QR code is made by ``segno`` (pure Python, no dependencies).
"""

from __future__ import annotations

import io
from urllib.parse import quote

from aiohttp import web

from ..security import GroupSecret
from .common import NODE_KEY, STATE_KEY
from .common import error_response as _error
from .guard import is_loopback

__all__ = ["add_join_routes", "join_uri"]

_NO_STORE = {"Cache-Control": "no-store"}


def join_uri(secret: GroupSecret) -> str:
    """What the QR code holds: ``huddle:join?group=NAME&code=CODE`` (the name percent-encoded)."""
    return f"huddle:join?group={quote(secret.group, safe='')}&code={secret.code}"


def join_svg(secret: GroupSecret) -> bytes:
    """The QR code of :func:`join_uri` as an SVG document (error correction M, 4 px a module)."""
    import segno  # noqa: PLC0415 - deferred: a node's start need not load the QR encoder

    out = io.BytesIO()
    segno.make(join_uri(secret), error="m", micro=False).save(out, kind="svg", scale=4, title="join code")
    return out.getvalue()


def _secret(request: web.Request) -> GroupSecret | web.Response:
    state = request.app[STATE_KEY]
    if state.token is None and not is_loopback(request.remote or ""):
        return _error(403, "the join code is shown only on loopback or with the API token")
    secret = request.app[NODE_KEY].group_secret
    if secret is None:
        return _error(404, "this node runs an open group: there is no join code (docs/security.md)")
    return secret


async def _get_join(request: web.Request) -> web.Response:
    secret = _secret(request)
    if isinstance(secret, web.Response):
        return secret
    return web.json_response({"group": secret.group, "key_id": secret.key_id, "join_code": secret.code,
                              "room_key": secret.room_key_text(), "uri": join_uri(secret)}, headers=_NO_STORE)


async def _get_join_svg(request: web.Request) -> web.Response:
    secret = _secret(request)
    if isinstance(secret, web.Response):
        return secret
    return web.Response(body=join_svg(secret), content_type="image/svg+xml", headers=_NO_STORE)


def add_join_routes(app: web.Application) -> None:
    app.router.add_get("/api/v1/join", _get_join)
    app.router.add_get("/api/v1/join.svg", _get_join_svg)
