"""What the post service needs of the node it runs in: nothing more.

:class:`PostsHost` is a structural type (``typing.Protocol``): the node
satisfies it without naming it, and tests may pass a fake.  The service
never sees the node itself, so ``huddle.posts`` does not import
``huddle.node`` (tests/test_layers.py checks).
"""

from __future__ import annotations

from typing import Protocol

from ..ids import NodeId

__all__ = ["HostConfig", "HostMesh", "LivePeers", "PostsHost"]


class HostMesh(Protocol):
    """The mesh section of the node's configuration, as far as the service reads it."""

    @property
    def max_message(self) -> int:
        """The largest addressed message, in octets (a CHUNK-OK must fit in one)."""


class HostConfig(Protocol):
    """The two settings of the node the service reads."""

    @property
    def name(self) -> str:
        """The node's name, told to the peers it syncs with."""

    @property
    def mesh(self) -> HostMesh: ...


class LivePeers(Protocol):
    """The peers of the mesh that are admitted now."""

    def alive_peers(self) -> list[NodeId]: ...


class PostsHost(Protocol):
    """The node as the post service sees it: its id, its live peers, and three
    ways to send (addressed message, addressed message waiting for room, bulk)."""

    @property
    def uuid(self) -> NodeId | None:
        """The node's id; set once the node runs (the service starts after that)."""

    @property
    def config(self) -> HostConfig: ...

    @property
    def mesh(self) -> LivePeers: ...

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        """Send an addressed message; raises BufferFull when the peer's channel is full."""

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        """Send an addressed message, waiting up to ``timeout`` seconds for room."""

    def send_bulk(self, peer: NodeId, head: bytes, data: bytes | memoryview) -> bool:
        """Send a BULK now, outside the addressed-message channel; False if the peer is not admitted."""

    def queued_bulk(self, peer: NodeId) -> int:
        """Octets of BULKs queued towards ``peer`` and not yet on its connection."""
