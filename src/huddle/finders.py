"""How a node finds its peers and is found: the UDP beacon, mDNS, the naming brokers.

:class:`Finders` starts the ones the configuration asks for (each closed on the
node's exit stack, in reverse), reports what each saw to one callback ("peer
seen at endpoint"), shows their counters, and tells the node which of them
follow an address change.  The finders themselves live in
:mod:`huddle.discovery` (beacon, mDNS) and :mod:`huddle.transport.naming` (the
naming client speaks ZeroMQ); this module only starts and gathers them, so it
sits beside the composition root (node.py), which calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

from .config import NodeConfig
from .discovery import BeaconService, Interface
from .discovery.follow import Followers
from .errors import ConfigError
from .ids import NodeId

if TYPE_CHECKING:  # each loads only when configured (--mdns, --naming)
    from .discovery.mdns import MdnsService
    from .transport.naming import NamingClient

__all__ = ["Finders"]


class Finders:
    """The beacon, mDNS and naming client of one node, each None unless configured."""

    def __init__(self, on_peer: Callable[[NodeId, str], None]) -> None:
        self.on_peer = on_peer
        self.beacon: BeaconService | None = None
        self.mdns: MdnsService | None = None
        self.naming: NamingClient | None = None
        self.door = 0  # the pairing door's port, carried in beacons (0: none)

    def advertise_door(self, port: int) -> None:
        """Carry the pairing door's ``port`` in the beacons (docs/protocol.md 9) from now on."""
        self.door = port
        if self.beacon is not None:
            self.beacon.set_door(port)
        if self.mdns is not None:
            self.mdns.door = port  # in the TXT record from its next registration (a move)

    async def start(self, stack: contextlib.AsyncExitStack, cfg: NodeConfig, *, uuid: NodeId, iface: Interface,
                    port: int, endpoint: str) -> None:
        if cfg.discovery.beacon:
            self.beacon = BeaconService(
                uuid=uuid, group=cfg.group, router_port=port, interface=iface,
                address=cfg.discovery.beacon_address, port=cfg.discovery.beacon_port, interval=cfg.discovery.beacon_interval,
                on_peer=self.on_peer, door=self.door,
            )
            stack.callback(self.beacon.close)
            try:
                await self.beacon.start()
            except OSError as exc:
                raise ConfigError(f"cannot open the beacon socket on port {cfg.discovery.beacon_port}: {exc.strerror}") from None
        if cfg.discovery.mdns:
            from .discovery.mdns import MdnsService  # noqa: PLC0415 - zeroconf: only with --mdns

            mdns = self.mdns = MdnsService(
                uuid=uuid, name=cfg.name, group=cfg.group, router_port=port, interface=iface,
                service_type=cfg.discovery.mdns_type, on_peer=self.on_peer, door=self.door,
            )
            stack.push_async_callback(_close_quietly, mdns.close)
            await mdns.start()
        if cfg.discovery.naming:
            from .transport.naming import NamingClient  # noqa: PLC0415 - only with --naming

            naming = NamingClient(
                uuid=uuid, name=cfg.name, group=cfg.group, endpoint=endpoint, brokers=cfg.discovery.naming,
                interval=cfg.discovery.naming_interval, timeout=cfg.discovery.naming_timeout, on_peer=self.on_peer,
                limits=cfg.limits.naming, key=None if cfg.group_secret is None else cfg.group_secret.naming_key(),
            )
            await naming.start()  # closes itself if no broker answers
            self.naming = naming
            stack.push_async_callback(naming.close)

    def tasks(self) -> list[Coroutine[Any, Any, None]]:
        """What runs beside the node's timer loop while it serves."""
        return [] if self.beacon is None else [self.beacon.run()]

    def stats(self) -> dict[str, Any]:
        """Their counters, as ``GET /api/v1/node`` shows them under ``stats``."""
        stats: dict[str, Any] = {}
        if self.beacon is not None:
            stats["beacons"] = dict(self.beacon.stats)
        if self.mdns is not None:
            stats["mdns"] = dict(self.mdns.stats)
        if self.naming is not None:
            stats["naming"] = self.naming.stats.as_dict()
        return stats

    def follow(self, follow: Followers) -> None:
        """After an address change: the naming client takes the new endpoint; the beacon and
        mDNS announce afresh (after the ROUTER and the mesh, which ``follow`` has already)."""
        if self.naming is not None:
            follow.endpoint.append(self.naming.set_endpoint)
        if self.beacon is not None:
            follow.announce.append(self.beacon.move)
        if self.mdns is not None:
            follow.announce.append(self.mdns.move)


async def _close_quietly(close: Callable[[], Awaitable[None]]) -> None:
    """Leaving: a failing goodbye (mDNS) must not hide the real exit, nor hold it past 3 s."""
    with contextlib.suppress(Exception):
        await asyncio.wait_for(close(), 3.0)
