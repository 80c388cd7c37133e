"""What the API needs of the node it serves: nothing more.

:class:`ApiNode` is a structural type (``typing.Protocol``): the node
satisfies it without naming it, so ``huddle.api`` does not import
``huddle.node`` (tests/test_layers.py checks), and a test may serve a fake.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

from ..config import NodeType
from ..ids import NodeId
from ..log import SqliteStore
from ..ports import Feature
from ..protocol import PeerInfo
from ..security import GroupSecret
from ..wire import Departed, LogRecord

__all__ = ["ApiMembers", "ApiMesh", "ApiNode"]


class ApiMesh(Protocol):
    """What the API reads of the mesh: who this node is, who is admitted, who is excluded."""

    @property
    def uuid(self) -> NodeId: ...

    @property
    def name(self) -> str: ...

    @property
    def excluded(self) -> dict[NodeId, str]: ...

    def alive_peers(self) -> list[NodeId]: ...


class ApiMembers(Protocol):
    """What the API reads of the picture's failed and left members (docs/protocol.md 14.2)."""

    def lost_peers(self) -> dict[NodeId, Departed]:
        """The peers this node lost and still names in its reports (failed or left, since when)."""

    def departed_state(self, peer: NodeId) -> str | None:
        """``failed`` or ``left`` if the system picture shows ``peer`` so (None: it does not)."""


class ApiNode(Protocol):
    """The node as its HTTP + WebSocket API sees it."""

    @property
    def api_url(self) -> str | None: ...

    @property
    def node_type(self) -> NodeType: ...

    @property
    def mesh(self) -> ApiMesh: ...

    @property
    def store(self) -> SqliteStore: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def features(self) -> Sequence[Feature]:
        """The features it runs: the API serves their routes and streams their events."""

    @property
    def group_secret(self) -> GroupSecret | None:
        """The group's secret (None: an open group); the join panel shows its code."""

    def local_now(self) -> float: ...

    def info(self) -> dict[str, Any]: ...

    def system(self) -> dict[str, Any]: ...

    @property
    def members(self) -> ApiMembers:
        """The system picture's failed and left members (host/mesh.py ``Members``)."""

    def peers(self) -> list[PeerInfo]: ...

    def log_summary(self) -> dict[str, Any]: ...

    def add_listener(self, fn: Callable[[Any], None]) -> Callable[[], None]:
        """``fn`` hears every event: the core's (``Event``) and the features' own."""

    def emit(self, kind: str, body: Any) -> LogRecord: ...

    async def until_recording(self, timeout: float) -> None: ...

    def exclude(self, peer: NodeId, reason: str) -> bool: ...

    async def join(self, address: str, timeout: float) -> PeerInfo:
        """Dial ``address`` (HOST:PORT) at runtime; its peer once admitted (raises ConfigError,
        protocol.seeds.JoinFailed)."""

    async def send_chat(self, text: str, to: NodeId | None = None, timeout: float = 5.0) -> int: ...

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int: ...
