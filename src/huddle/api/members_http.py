"""Forgetting a member (docs/protocol.md 14.2, "Forgetting a member"): the picture keeps a
failed or left node listed until it returns or an operator forgets it.

    POST /api/v1/forget   {"node": NAME-OR-ID}  ->  {"forgotten", "name", "state", "seq"}

``node`` is a name or a unique id prefix (api/resolve.py).  Only a member the system picture
shows ``failed`` or ``left`` may be forgotten: any other is 409 (an alive or suspect member is
still there; a node the picture does not list has nothing to forget), nothing recorded.
Forgetting is the group's: a ``forget`` event goes into the log, and every node, seeing it,
stops naming that node in its reports (protocol/picture.py ``Reports.forget_event``).
"""

from __future__ import annotations

from aiohttp import web

from ..protocol.picture import FORGET_KIND
from .common import NODE_KEY, READ_JSON_KEY, STATE_KEY
from .common import error_response as _error
from .resolve import node_id

__all__ = ["add_member_routes"]


async def _post_forget(request: web.Request) -> web.Response:
    node = request.app[NODE_KEY]
    body = await request.app[READ_JSON_KEY](request)
    text = body.get("node")
    if set(body) != {"node"} or not isinstance(text, str):
        request.app[STATE_KEY].counters.bad_input += 1
        return _error(400, "expected {\"node\": a name or id}")
    peer = node_id(request, text, "node")
    name = next((str(m.get("name") or "") for m in node.system().get("members", ()) if m.get("uuid") == str(peer)), "")
    label = f"{name} ({peer.short})" if name else peer.short
    if peer == node.mesh.uuid:
        return _error(409, "a node cannot forget itself")
    state = node.members.departed_state(peer)
    if state is None:
        return _error(409, f"{label} is not failed or left in the system picture: only those can be forgotten")
    record = node.emit(FORGET_KIND, {"node": peer.hex(), "state": state})
    return web.json_response({"forgotten": str(peer), "name": name, "state": state, "seq": record.seq})


def add_member_routes(app: web.Application) -> None:
    app.router.add_post("/api/v1/forget", _post_forget)
