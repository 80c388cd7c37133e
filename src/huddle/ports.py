"""The contracts between the node and the capabilities that plug into it, in one place.

A *feature* is a capability with I/O of its own (posts, the bout document; see
docs/architecture.md, "The feature unit"): one package that implements :class:`Feature`,
the one way to add one.  :class:`~huddle.node.Node` takes a list of them (the default list is
:func:`huddle.features.default_features`) and loops over it:

1. ``links(config)`` before it makes its transport: a watcher of its connections' links
   (up, down, closed for good), or None (watching costs a monitor per connection); then
   ``peer_services(uuid)`` and ``payload_takers()`` before it builds the mesh: the
   sans-I/O services the feature adds (protocol/service.py), and which of them take
   addressed payloads by prefix (addressed delivery hands them over);
2. ``start(stack, spawn, host)`` once the mesh and the log are made, before the
   transport reads, the finders look and the API serves:
   the feature's driver, given the node's exit stack (its closers go there, and run in
   reverse order as the node stops), ``spawn`` for its long tasks (run in the node's
   task group, cancelled as it stops) and a narrow :class:`FeatureHost`, never the node;
3. ``subscriptions()``: the events it consumes, ahead of the node's own subscribers
   (a subscriber that returns True consumed the event: the ones after it do not see it);
4. ``event_renderers``: its own event classes (what it hands ``host.publish``), each
   with its JSON for the API's event stream and the statistics rows; the protocol
   core's :data:`~huddle.protocol.events.Event` union names none of them;
5. ``routes(app)``: its HTTP routes, each reading the feature's own narrow port from the
   application (aiohttp is imported there, when a node serves, not with the feature);
6. ``commands(sub, client_options, epilog)``: its ``huddle`` subcommands, each a parser
   and a handler that talks to a node through :class:`~huddle.client.ApiClient`;
7. ``facts()``: small JSON about it, shown in ``GET /api/v1/node`` under
   ``features: {name: facts}`` (None: nothing to say), and carried to every node in the
   node's RAWS reports (the system picture's ``ext``, docs/protocol.md 14.1).

Structural types (``typing.Protocol``): a feature satisfies :class:`Feature` without
naming it, the node satisfies :class:`FeatureHost`, and tests may pass fakes of either.
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping, Sequence
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from .config import NodeConfig
from .ids import NodeId
from .protocol.service import PayloadTaker, PeerService
from .security import GroupSecret, NodeIdentity
from .security.trust import TrustedKey
from .wire import LogRecord

if TYPE_CHECKING:  # aiohttp and the client load when a node serves or a command calls one, not with the contract
    from aiohttp import web

    from .client import ApiClient

__all__ = ["ApiHandler", "ClientOptions", "Feature", "FeatureBase", "FeatureHost", "LinkWatcher", "MeshFacts", "Renderer",
           "RotationPort", "Shown", "Spawn", "Subscriber", "TrustPort"]

# An event subscriber: True when it consumed the event (the subscribers after it do not see it).
Subscriber = Callable[[Any], bool | None]
# A feature's event as JSON ({"type": ..., "time": ..., ...}), for the API's stream and the statistics rows.
Renderer = Callable[[Any], dict[str, Any]]
# Runs a long task of a feature's driver in the node's task group (cancelled as the node stops).
Spawn = Callable[[Coroutine[Any, Any, None]], None]
# What a command's node answered (printed by --json) and the text for a person; None: it printed already.
Shown = tuple[Any, str] | None
ApiHandler = Callable[["ApiClient", argparse.Namespace], Awaitable[Shown]]
# Adds the options every command that calls a node takes (--api, --json, --token).
ClientOptions = Callable[[argparse.ArgumentParser], None]


class MeshFacts(Protocol):
    """What a feature reads of the mesh: its admitted peers, the peers hosting guests, and
    the connection and address each one's session has."""

    def alive_peers(self) -> list[NodeId]: ...

    def guest_hosts(self) -> list[NodeId]: ...

    def conn_of(self, peer: NodeId) -> int | None: ...

    def source_of(self, peer: NodeId) -> str: ...

    @property
    def endpoint(self) -> str:
        """The node's mesh endpoint now (``tcp://IP:PORT``)."""


class LinkWatcher(Protocol):
    """Told of the node's connections to its peers: a link down or back, a connection closed for good."""

    def changed(self, conn: int, up: bool) -> None: ...

    def forget(self, conn: int) -> None: ...


class TrustPort(Protocol):
    """Allow-list mode's keys, as the trust feature changes them (transport/zap.py AllowList)."""

    def listed(self) -> list[dict[str, str]]: ...

    def add(self, text: str, name: str = "") -> TrustedKey: ...

    def remove(self, text: str) -> TrustedKey | None: ...


class RotationPort(Protocol):
    """The group secret's rotation, as the rotation feature steps it (transport/rotation.py KeyRotation).
    Each step raises security.KeyringError (its ``status``: 400, 404 or 409) when it cannot be taken."""

    def describe(self) -> dict[str, object]: ...

    async def install(self, text: str) -> dict[str, object]: ...

    async def switch(self, key_id: str) -> dict[str, object]: ...

    def retire(self, key_id: str) -> dict[str, object]: ...


class FeatureHost(Protocol):
    """The node as a feature's driver sees it: its settings and identity, its clocks,
    the log (recording, reading one kind of record), the statistics rows, the event
    stream, and ways to reach its peers."""

    @property
    def config(self) -> NodeConfig:
        """The node's settings: a feature reads its own in ``start``, in one place."""

    @property
    def uuid(self) -> NodeId | None:
        """The node's id; set before any feature starts."""

    @property
    def identity(self) -> NodeIdentity | None:
        """The node's keypair; loaded before any feature starts."""

    @property
    def read_only(self) -> bool:
        """True while a read-only node type is cut off: nothing may be recorded or added."""

    @property
    def address(self) -> str:
        """The address the node listens on now (its interface's; it follows a move)."""

    @property
    def mesh(self) -> MeshFacts: ...

    @property
    def api_url(self) -> str | None:
        """The API's URL (``http://HOST:PORT``) once it serves; None before."""

    @property
    def allow_list(self) -> TrustPort | None:
        """Allow-list mode's trusted keys (None in the other modes): the mesh's security holds them."""

    @property
    def rotation(self) -> RotationPort | None:
        """The group secret's rotation (None: an open group); made once the transport listens."""

    def name_of(self, uuid: NodeId) -> str:
        """A node's name as this node knows it (its short id if it knows none)."""

    def system(self) -> dict[str, Any]:
        """The system picture as this node computes it (``GET /api/v1/system``): its ``members``,
        each with its features' facts in ``ext`` (docs/protocol.md 14.2)."""

    def local_now(self) -> float: ...

    def mesh_time(self) -> float: ...

    def check_writable(self) -> None:
        """Raise CutOffReadOnly while a read-only node type is cut off: nothing may be recorded."""

    def next_seq(self) -> int:
        """The sequence number this node's next event gets."""

    def records_of(self, kind: str) -> Iterable[list[LogRecord]]:
        """The log's records of one kind, in batches (no order promised)."""

    def stat_row(self, kind: str, detail: dict[str, Any]) -> None:
        """Add a statistics row of the feature's (``kind``, its detail as JSON) at the mesh time now."""

    def emit(self, kind: str, body: Any) -> LogRecord:
        """Record an event in the log (persisted, then sent to every peer)."""

    def emit_many(self, events: list[tuple[str, Any]]) -> list[LogRecord]: ...

    def record_soon(self, kind: str, body: Any) -> LogRecord | None:
        """Record an event now, or, while the node starts (protocol.md 12.1), once its
        start-up window ends (None then)."""

    def follow_address(self, moved: Callable[[str], Awaitable[None]]) -> None:
        """Call ``moved(address)`` when the node's interface moves to a new address, after the
        node follows it (its ROUTER, its peers told), in the order the features asked."""

    def advertise_door(self, port: int) -> None:
        """Carry the pairing door's port in the node's beacons (docs/protocol.md 9)."""

    def watch_keys(self, changed: Callable[[GroupSecret], None]) -> None:
        """Call ``changed(secret)`` with the group secret in use at each step of its rotation."""

    def stop(self) -> None:
        """Ask the node to stop (its apps, then itself) as SIGTERM would: an operator's node order."""

    def publish(self, event: object) -> None:
        """Hand an event to the node's subscribers: the statistics rows and the API's stream
        (an event class of the feature's ``event_renderers``), or a feature's own inputs."""

    def execute(self) -> None:
        """Carry out what the mesh and its services want done now (after a service was asked to send)."""

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        """Queue an addressed message; raises BufferFull when the peer's channel is full."""

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        """Queue an addressed message, waiting up to ``timeout`` seconds for room."""

    def queued_bulk(self, peer: NodeId) -> int:
        """Octets of BULKs queued towards ``peer`` and not yet on its connection."""


class Feature(Protocol):
    """A capability that plugs into the node (the module docstring lists the steps)."""

    @property
    def name(self) -> str:
        """Its name: the key of its facts in ``GET /api/v1/node`` ("posts")."""

    @property
    def event_renderers(self) -> Mapping[type, Renderer]: ...

    def links(self, config: NodeConfig) -> LinkWatcher | None: ...

    def peer_services(self, uuid: NodeId) -> Sequence[PeerService]: ...

    def payload_takers(self) -> Sequence[PayloadTaker]: ...

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None: ...

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]: ...

    def routes(self, app: web.Application) -> None: ...

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        """Add its subcommands' parsers to ``sub`` (argparse's subparsers); returns each command's handler."""

    def facts(self) -> dict[str, object] | None:
        """Its state for the system picture, or None: a flat object of facts named
        ``[a-z][a-z0-9_-]{0,31}``, each a string, number, boolean or null, all features'
        together within 2 KiB as JSON (docs/protocol.md 14.1; facts that do not fit are left
        out of the reports).  Slowly changing state (counts, modes, a key id), never a counter
        that ticks every second: a report whose facts changed is sent to every member, one
        whose facts did not is not (14), so a ticking fact would make every report go."""


class FeatureBase:
    """A feature that adds nothing: a new feature subclasses it and overrides only the parts it
    has (its ``name`` at least), so the no-op steps are written once, here."""

    name = ""
    event_renderers: Mapping[type, Renderer] = MappingProxyType({})  # its own event classes: none

    def links(self, config: NodeConfig) -> LinkWatcher | None:
        return None

    def peer_services(self, uuid: NodeId) -> Sequence[PeerService]:
        return []

    def payload_takers(self) -> Sequence[PayloadTaker]:
        return []

    async def start(self, stack: contextlib.AsyncExitStack, spawn: Spawn, host: FeatureHost) -> None:
        return None

    def subscriptions(self) -> Sequence[tuple[tuple[type, ...], Subscriber]]:
        return []

    def routes(self, app: web.Application) -> None:
        return None

    def commands(self, sub: Any, client_options: ClientOptions, epilog: str) -> dict[str, ApiHandler]:
        return {}

    def facts(self) -> dict[str, object] | None:
        return None
