"""The guest bridge: between a node's Noam guests and the group's event log.

- What a guest of this node says becomes the group's event (kind = the topic,
  body ``{"noam_guest": name, "value": value}``, GUEST_KEY; with ``"keyless": true``
  beside them when the guest was taken into a keyed room without its key, KEYLESS_KEY).
- Every event new in the log that the room hears is spoken to the guests: a
  guest's event under the guest's name, a node's own event under the node's.
- One host per guest (docs/guests.md): the hosts are the mesh's live guest
  hosts whose connection from this node is up (:class:`HostLinks`, fed by the
  transport's link changes).

The node makes the bridge before its transport (the links are the transport's
``on_link``), and starts the guest server once the mesh runs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import ConfigError
from ..ids import NodeId
from ..limits import GuestLimits
from ..security import GroupSecret
from .choice import HostLinks, per_address
from .room import Room, room_key_for

if TYPE_CHECKING:
    from .server import GuestServer

__all__ = ["GUEST_KEY", "KEYLESS_KEY", "BridgeSettings", "GuestBridge", "GuestHosts", "Spoken", "room_key_of"]

GUEST_KEY = "noam_guest"  # a guest's event in the log: {"noam_guest": name, "value": value}
KEYLESS_KEY = "keyless"  # ... and "keyless": true beside them when its guest gave no room key (Room.keyless)


def room_key_of(group: GroupSecret | None) -> str:
    """The room key of a node's group: a secured group's (room.room_key_for); "" for an open group."""
    return "" if group is None else room_key_for(group)


class GuestHosts(Protocol):
    """What the bridge reads of the mesh: the peers hosting guests, and their connections."""

    def guest_hosts(self) -> list[NodeId]: ...

    def conn_of(self, peer: NodeId) -> int | None: ...

    def source_of(self, peer: NodeId) -> str: ...


class Spoken(Protocol):
    """An event of the log, as the bridge reads it (a ``LogRecord``)."""

    @property
    def source(self) -> NodeId: ...

    @property
    def kind(self) -> str: ...

    @property
    def body(self) -> str: ...


@dataclass(frozen=True, slots=True)
class BridgeSettings:
    group: str
    me: NodeId
    marco_port: int
    tcp_port: int
    ws_port: int
    max_frame: int
    limits: GuestLimits
    room_key: str = ""  # a secured group's room key (room.room_key_for): guests must give it
    keyless: bool = False  # ... or not, in a room then marked keyless (docs/guests.md, "Keyless guests")


class GuestBridge:
    """A node's guests and the log, both ways (see the module's docstring)."""

    def __init__(self) -> None:
        self.links = HostLinks()  # which connections to peers are down: a host whose connection drops
        self.server: GuestServer | None = None  # ... stops answering its guests' marcos at once

    async def start(self, settings: BridgeSettings, host: str, mesh: GuestHosts, *,
                    emit: Callable[[str, Any], object], clock: Callable[[], float]) -> None:
        """Open the guest ports on ``host``; ``emit(kind, body)`` records a guest's event."""
        from .server import GuestServer, GuestSettings  # noqa: PLC0415 - aiohttp: only with --guests

        links = self.links
        s = settings
        room = Room(s.group, me=s.me, limits=s.limits, room_key=s.room_key, keyless=s.keyless)

        def hosts() -> list[bytes]:  # one host per guest (docs/guests.md): ALIVE and still connected,
            live = links.live((p, mesh.conn_of(p)) for p in mesh.guest_hosts())  # a few per address
            own = self.server.host if self.server is not None else host
            return per_address(((h, mesh.source_of(NodeId(h))) for h in live), s.limits.max_hosts_per_address, own)

        def said(guest: str, topic: str, value: Any) -> None:  # a guest of ours spoke: the group's event
            body = {GUEST_KEY: guest, "value": value}
            emit(topic, (body | {KEYLESS_KEY: True}) if room.keyless_guest(guest) else body)

        server = GuestServer(
            room,
            GuestSettings(host=host, marco_port=s.marco_port, tcp_port=s.tcp_port, ws_port=s.ws_port,
                          max_frame=s.max_frame),
            on_event=said, clock=clock, hosts=hosts, links=links,
        )
        try:
            await server.start()
        except OSError as exc:
            await server.close()
            raise ConfigError(
                f"cannot open the guest ports (marco UDP {s.marco_port}, TCP {s.tcp_port}, "
                f"WebSocket {s.ws_port}) on {host}: {exc.strerror or exc}; "
                "pick others with --guest-port / --guest-ws-port (0: a free one)") from None
        self.server = server

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()

    def forget(self, conn: int) -> None:
        """A connection to a peer is closed for good."""
        self.links.forget(conn)

    def speak(self, records: Iterable[Spoken], me: NodeId, name_of: Callable[[NodeId], str]) -> None:
        """Events new in the log: those the room hears go to the guests."""
        server = self.server
        if server is None:
            return
        room = server.room
        for record in records:
            if not room.hears(record.kind):
                continue
            body = json.loads(record.body)
            if isinstance(body, dict) and set(body) - {KEYLESS_KEY} == {GUEST_KEY, "value"} \
                    and isinstance(body[GUEST_KEY], str):
                server.deliver(body[GUEST_KEY], record.kind, body["value"], local_speaker=record.source == me)
            else:  # a node's own event: the node speaks it, under its name
                server.deliver(name_of(record.source), record.kind, body, local_speaker=False)
