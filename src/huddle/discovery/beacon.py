"""UDP beacon discovery: announce our ROUTER port, hear others'.

Each node sends a 30-octet beacon (see :mod:`huddle.wire.beacon`) to a
broadcast address every interval and listens on the beacon port.  Beacons of
other groups, our own, and malformed datagrams are dropped before any
connection is made.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..counters import Counters
from ..errors import DecodeError
from ..ids import NodeId
from ..wire import Beacon, group_hash, pack, unpack
from .interfaces import Interface

__all__ = ["BeaconCounters", "BeaconService"]

log = logging.getLogger("huddle.discovery")


@dataclass(slots=True)
class BeaconCounters(Counters):
    """What the beacon sent and heard (``GET /api/v1/node`` -> ``stats`` -> ``beacons``)."""

    sent: int = 0
    received: int = 0  # datagrams on the beacon port, our own included
    malformed: int = 0  # ... that are not a beacon
    other_group: int = 0  # ... of another group
    foreign: int = 0  # ... from outside the interface's network


class _Receiver(asyncio.DatagramProtocol):
    def __init__(self, service: BeaconService) -> None:
        self.service = service

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.service.received(data, str(addr[0]))


class BeaconService:
    def __init__(
        self,
        *,
        uuid: NodeId,
        group: str,
        router_port: int,
        interface: Interface,
        address: str | None,
        port: int,
        interval: float,
        on_peer: Callable[[NodeId, str], None],
        door: int = 0,
    ) -> None:
        self.uuid = uuid
        self.interface = interface
        self._address = address  # None: the interface's broadcast address, whatever it is
        self.address = address or interface.broadcast
        self.port = port
        self.interval = interval
        self.on_peer = on_peer
        self._group_hash = group_hash(group)
        self.door = door  # the pairing door's port (docs/protocol.md 9; 0: none)
        self.router_port = router_port
        self._packet = pack(Beacon(uuid, router_port, self._group_hash, door))
        self._send_sock: socket.socket | None = None
        self._transport: asyncio.DatagramTransport | None = None
        self.counters = BeaconCounters()

    @property
    def stats(self) -> dict[str, int]:
        """The counters as the API shows them."""
        return self.counters.as_dict()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        recv = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        recv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        # Binding to the broadcast address hears only that network's beacons.
        bind_to = self.address if self.address == self.interface.broadcast else ""
        recv.bind((bind_to, self.port))
        recv.setblocking(False)
        transport, _ = await loop.create_datagram_endpoint(lambda: _Receiver(self), sock=recv)
        self._transport = transport
        send = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        send.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        send.bind((self.interface.ip, 0))
        send.setblocking(False)
        self._send_sock = send

    async def move(self, interface: Interface, router_port: int) -> None:
        """The interface's address changed (or came back): beacon from there, with
        ``router_port``, to its network's broadcast address (unless one was given)."""
        self.close()
        self._transport, self._send_sock = None, None
        self.interface = interface
        self.address = self._address or interface.broadcast
        self.router_port = router_port
        self._packet = pack(Beacon(self.uuid, router_port, self._group_hash, self.door))
        await self.start()
        self.send_once()

    def set_door(self, door: int) -> None:
        """Beacon the pairing door's port too (0: no longer)."""
        self.door = door
        self._packet = pack(Beacon(self.uuid, self.router_port, self._group_hash, door))

    async def run(self) -> None:
        """Send a beacon every interval until cancelled."""
        while True:
            self.send_once()
            await asyncio.sleep(self.interval)

    def send_once(self) -> None:
        if self._send_sock is None:
            return
        try:
            self._send_sock.sendto(self._packet, (self.address, self.port))
            self.counters.sent += 1
        except OSError as exc:  # network down, no route: try again next time
            log.debug("beacon not sent: %s", exc)

    def received(self, data: bytes, source_ip: str) -> None:
        self.counters.received += 1
        try:
            beacon = unpack(data)
        except DecodeError:
            self.counters.malformed += 1
            return
        if beacon.sender == self.uuid:
            return
        if beacon.group_hash != self._group_hash:
            self.counters.other_group += 1
            return
        if not self.interface.contains(source_ip):
            self.counters.foreign += 1
            return
        self.on_peer(beacon.sender, f"tcp://{source_ip}:{beacon.port}")

    def close(self) -> None:
        if self._transport is not None:
            self._transport.close()
        if self._send_sock is not None:
            self._send_sock.close()
