"""Posts as a peer service of the mesh (protocol/service.py), sans-I/O.

The mesh hosts :class:`PostsPeer` like its other services; it is the posts
service's whole contact with the mesh:

* it claims BULK (docs/protocol.md 13.1: only Hydra sends BULKs) and sends
  them (:meth:`PostsPeer.send_bulk`) on the connection of an admitted peer;
* it is the :class:`~huddle.protocol.service.PayloadTaker` of the Hydra
  signature ``AA A0``: addressed delivery hands it those payloads and does
  not announce them to the applications (15.1);
* it hears peers come and go (``peer_up``, ``peer_down``, ``forget``).

It decides nothing about posts: what it got goes out as
:class:`~huddle.protocol.events.ServiceEvent` s (:data:`PostsInput`) in
:class:`~huddle.protocol.events.Notify` actions, which the node routes to the
asyncio driver (posts/service.py, file I/O and threads) alone, outside the mesh.
"""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass
from typing import Final

from ..ids import NodeId
from ..protocol.events import Notify, Send, ServiceEvent
from ..protocol.service import DETACHED, MeshView, PeerFacts
from ..wire import Bulk, Message
from .codec import SIGNATURE

__all__ = ["POSTS_INPUTS", "HydraBulk", "HydraPayload", "PostsInput", "PostsPeer", "PostsPeerDown", "PostsPeerUp"]


@dataclass(frozen=True, slots=True)
class HydraPayload(ServiceEvent):
    """An addressed message from ``peer`` whose payload starts with the Hydra signature."""

    peer: NodeId
    payload: bytes


@dataclass(frozen=True, slots=True)
class HydraBulk(ServiceEvent):
    """A BULK from the admitted ``peer`` (a CONTENT, if it is what it should be)."""

    peer: NodeId
    head: bytes
    data: bytes | memoryview


@dataclass(frozen=True, slots=True)
class PostsPeerUp(ServiceEvent):
    """``peer`` is admitted: posts may be offered to it."""

    peer: NodeId


@dataclass(frozen=True, slots=True)
class PostsPeerDown(ServiceEvent):
    """``peer``'s session ended (or it was excluded): what runs with it stops."""

    peer: NodeId


PostsInput = HydraPayload | HydraBulk | PostsPeerUp | PostsPeerDown
POSTS_INPUTS: Final[tuple[type[PostsInput], ...]] = typing.get_args(PostsInput)


class PostsPeer:
    """The posts peer service (module docstring)."""

    handles: tuple[type[Message], ...] = (Bulk,)
    prefix: Final = SIGNATURE

    def __init__(self, uuid: NodeId) -> None:
        self.uuid: Final = uuid
        self._mesh: MeshView = DETACHED
        self._conns: dict[NodeId, int] = {}  # admitted peers -> their session's connection
        self._actions: list[Send | Notify] = []

    def attach(self, mesh: MeshView) -> None:
        self._mesh = mesh

    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts) -> None:
        self._conns[peer] = conn
        self._actions.append(Notify(PostsPeerUp(peer)))

    def peer_down(self, peer: NodeId, now: float) -> None:
        if self._conns.pop(peer, None) is not None:  # admitted (a handshake that failed never was)
            self._actions.append(Notify(PostsPeerDown(peer)))

    def forget(self, peer: NodeId) -> None:
        self.peer_down(peer, math.nan)

    def receive(self, peer: NodeId, msg: Message, now: float) -> None:
        assert isinstance(msg, Bulk)
        self._actions.append(Notify(HydraBulk(peer, msg.head, msg.data)))

    def take_payload(self, peer: NodeId, seq: int, payload: bytes) -> None:
        self._actions.append(Notify(HydraPayload(peer, payload)))

    def tick(self, now: float) -> None:
        pass  # the driver runs the sessions' timers

    def next_deadline(self, now: float) -> float:
        return math.inf

    def take_actions(self) -> list[Send | Notify]:
        actions, self._actions = self._actions, []
        return actions

    def send_bulk(self, peer: NodeId, head: bytes, data: bytes | memoryview) -> bool:
        """Send a BULK to an admitted peer now (no channel: not acknowledged, not
        re-sent).  False, and nothing sent, if ``peer`` is not admitted."""
        conn = self._conns.get(peer)
        if conn is None:
            return False
        self._actions.append(Send(conn, Bulk(sender=self.uuid, head=head, data=data)))
        return True
