"""Address moves (protocol.md 8.8): this node's own, told to every peer, and a peer's, followed.

When this node's address changes (a DHCP renewal, another Wi-Fi) every admitted peer is told
with a HELO on a fresh connection (from the new address), again each heartbeat until it
answers with a HELO: a peer accepts it once it finds the old address silent (SUSPECT), and its
stale connection from the old address must be gone first (section 2.1).  When an admitted
peer says HELO from a new endpoint, we connect there instead.  Either way the connection keeps
its number, so the services sending on it keep it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from ..ids import NodeId
from .parts import Dialler, Stats
from .session import Session

__all__ = ["Moves"]


class Moves:
    """The peers not yet told of this node's new endpoint, and when to tell them again."""

    def __init__(self, beat: float, stats: Stats, port: Dialler) -> None:
        self._beat = beat
        self.stats = stats
        self._port = port
        self.moving: dict[NodeId, float] = {}  # peer -> when to say HELO again

    def moved(self, sessions: Mapping[NodeId, Session], now: float) -> None:
        """This node's endpoint changed: every admitted peer is to be told (:meth:`tell`), now
        and each heartbeat until it answers."""
        self.stats.endpoint_changes += 1
        for s in sessions.values():
            if s.admitted:
                self.moving[s.uuid] = now

    def tell(self, sessions: Mapping[NodeId, Session], now: float) -> None:
        """Our HELO, on a fresh connection, to each peer due to hear of our move."""
        moving = self.moving
        for uuid, due in list(moving.items()):
            s = sessions.get(uuid)
            if s is None or not s.admitted:
                del moving[uuid]
            elif due <= now:
                self._port.disconnect(s.conn)
                self._port.connect(s.endpoint, s.conn)  # same conn: replication and delivery keep it
                s.reopen_at = math.inf  # open again now
                self._port.send_hello(s.conn, reply=False, to=uuid, now=now)
                moving[uuid] = now + self._beat
                self._port.note(now + self._beat)

    def answered(self, uuid: NodeId) -> None:
        """``uuid`` answered a HELO of ours: it knows our endpoint."""
        self.moving.pop(uuid, None)

    def follow(self, s: Session, endpoint: str) -> None:
        """The admitted peer of ``s`` says HELO from a new endpoint (its address changed):
        connect there instead, under the same conn."""
        self._port.disconnect(s.conn)
        self._port.connect(endpoint, s.conn)
        s.reopen_at = math.inf  # open again now
        s.endpoint = endpoint
        self.stats.endpoints_followed += 1

    def due(self) -> float:
        return min(self.moving.values(), default=math.inf)
