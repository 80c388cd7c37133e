"""Orders as a peer service of the mesh (protocol/service.py), sans-I/O.

:class:`OrdersPeer` is the control feature's whole contact with the mesh: it is the
:class:`~huddle.protocol.service.PayloadTaker` of ``AA C0`` (control/orders.py), so addressed
delivery hands it those payloads (never announced to the applications), which it passes on as
:class:`OrderPayload` s to the order desk (control/remote.py) outside the mesh; and it answers
what the mesh knows of a target: admitted, excluded, or gone and why.  It claims no message
type of its own: orders ride on DMSG, so the channel's order, acknowledgement and re-sending
are theirs (docs/protocol.md 13).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from ..ids import NodeId
from ..protocol.events import Notify, Send, ServiceEvent
from ..protocol.service import DETACHED, MeshView, PeerFacts
from ..wire import Message
from .orders import PREFIX

__all__ = ["OrderPayload", "OrdersPeer"]


@dataclass(frozen=True, slots=True)
class OrderPayload(ServiceEvent):
    """An addressed message from ``peer`` whose payload starts with control's mark."""

    peer: NodeId
    payload: bytes


class OrdersPeer:
    """The orders peer service (module docstring)."""

    handles: tuple[type[Message], ...] = ()
    prefix: Final = PREFIX

    def __init__(self) -> None:
        self._mesh: MeshView = DETACHED
        self._admitted: set[NodeId] = set()
        self._actions: list[Send | Notify] = []

    def attach(self, mesh: MeshView) -> None:
        self._mesh = mesh

    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts) -> None:
        self._admitted.add(peer)

    def peer_down(self, peer: NodeId, now: float) -> None:
        self._admitted.discard(peer)

    def forget(self, peer: NodeId) -> None:
        self.peer_down(peer, math.nan)

    def receive(self, peer: NodeId, msg: Message, now: float) -> None:
        raise AssertionError("the orders service claims no message type")

    def take_payload(self, peer: NodeId, seq: int, payload: bytes) -> None:
        self._actions.append(Notify(OrderPayload(peer, payload)))

    def tick(self, now: float) -> None:
        """Nothing on a timer: the addressed channel resends an order until it is acknowledged."""

    def next_deadline(self, now: float) -> float:
        return math.inf

    def take_actions(self) -> list[Send | Notify]:
        actions, self._actions = self._actions, []
        return actions

    # what the desk asks ----------------------------------------------------------

    def admitted(self, peer: NodeId) -> bool:
        return peer in self._admitted

    def excluded(self, peer: NodeId) -> bool:
        return peer in self._mesh.excluded

    def gone(self, peer: NodeId) -> str | None:
        """Why ``peer`` left, while the mesh lists it gone and it is not back (None: it is not gone)."""
        return None if peer in self._admitted else self._mesh.departure(peer)
