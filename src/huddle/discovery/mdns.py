"""mDNS / DNS-SD discovery with python-zeroconf.

The node registers ``<name>-<uuid8>.<type>`` (default type
``_huddle._tcp.local.``; the source document's ``_nsode_derbyos_com._tcp``
can be chosen) with its ROUTER port, its IPv4 address and TXT records
``uuid``, ``group`` and ``name``, and browses the same type.  A service of
another group, our own, or one without a usable IPv4 address is ignored;
peers are kept by IPv4 octets, never by host name.  A service that goes away
is only advice: heartbeats decide when a peer is gone (a killed node's
record lingers for its TTL).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from zeroconf import IPVersion, ServiceStateChange
from zeroconf.asyncio import AsyncServiceBrowser, AsyncServiceInfo, AsyncZeroconf

from ..counters import Counters
from ..errors import ConfigError
from ..ids import NodeId
from ..mdnstype import normalise_mdns_type as normalise_type
from .interfaces import Interface

__all__ = ["MdnsCounters", "MdnsService"]

log = logging.getLogger("huddle.discovery")


@dataclass(slots=True)
class MdnsCounters(Counters):
    """What browsing found (``GET /api/v1/node`` -> ``stats`` -> ``mdns``)."""

    found: int = 0  # services of our group resolved to an IPv4 endpoint
    other_group: int = 0  # services of another group
    unusable: int = 0  # services that did not resolve, or had no UUID, IPv4 address or port
    removed: int = 0  # services that went away (advice only: heartbeats decide)


class MdnsService:
    def __init__(
        self,
        *,
        uuid: NodeId,
        name: str,
        group: str,
        router_port: int,
        interface: Interface,
        service_type: str,
        on_peer: Callable[[NodeId, str], None],
        door: int = 0,
    ) -> None:
        self.uuid = uuid
        self.group = group
        self.door = door  # the pairing door's port, TXT pair=PORT (0: none); taken at each registration
        self.interface = interface
        self.type = normalise_type(service_type)
        label = re.sub(r"[^A-Za-z0-9-]", "-", name)[:40].strip("-") or "huddle"
        self.instance = f"{label}-{uuid.short}.{self.type}"
        self.router_port = router_port
        self.on_peer = on_peer
        self._zc: AsyncZeroconf | None = None
        self._browser: AsyncServiceBrowser | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.counters = MdnsCounters()

    @property
    def stats(self) -> dict[str, int]:
        """The counters as the API shows them."""
        return self.counters.as_dict()

    async def start(self) -> None:
        try:
            self._zc = AsyncZeroconf(interfaces=[self.interface.ip], ip_version=IPVersion.V4Only)
        except OSError as exc:
            raise ConfigError(f"cannot open mDNS on {self.interface.ip}: {exc.strerror or exc}") from None
        info = AsyncServiceInfo(
            self.type, self.instance,
            addresses=[socket.inet_aton(self.interface.ip)], port=self.router_port,
            properties={"uuid": self.uuid.hex(), "group": self.group, "name": self.instance.split(".")[0]}
            | ({"pair": str(self.door)} if self.door else {}),
        )
        # Registration probes the name for ~1.7 s; browsing starts at once.
        # strict=False: the source's _nsode_derbyos_com is longer than DNS-SD's 15-octet limit for a
        # service name (RFC 6763), and must still work.
        await self._zc.async_register_service(info, allow_name_change=True, strict=False)
        self._browser = AsyncServiceBrowser(self._zc.zeroconf, [self.type], handlers=[self._changed])

    async def move(self, interface: Interface, router_port: int) -> None:
        """The interface's address changed (or came back): register again there."""
        with contextlib.suppress(Exception):  # the old address may be gone: its goodbye cannot be sent
            await asyncio.wait_for(self.close(), 3.0)
        self._zc, self._browser = None, None
        self.interface, self.router_port = interface, router_port
        await self.start()

    def _changed(self, zeroconf: Any, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        if state_change is ServiceStateChange.Removed:
            self.counters.removed += 1  # advice only: heartbeats decide
            log.debug("mDNS: %s went away", name)
            return
        if name == self.instance:
            return
        task = asyncio.ensure_future(self._resolve(service_type, name))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _resolve(self, service_type: str, name: str) -> None:
        if self._zc is None:
            return
        info = AsyncServiceInfo(service_type, name)
        if not await info.async_request(self._zc.zeroconf, 3000):
            self.counters.unusable += 1
            return
        props: dict[str, str] = {k.decode("utf-8", "replace"): (v or b"").decode("utf-8", "replace")
                                 for k, v in info.properties.items() if isinstance(k, bytes)}
        if props.get("group") != self.group:
            self.counters.other_group += 1
            return
        try:
            peer = NodeId.from_hex(props.get("uuid", ""))
        except ValueError:
            self.counters.unusable += 1
            return
        addresses = info.parsed_addresses(IPVersion.V4Only)
        if peer == self.uuid or not addresses or not info.port:
            if peer != self.uuid:
                self.counters.unusable += 1
            return
        self.counters.found += 1
        self.on_peer(peer, f"tcp://{addresses[0]}:{info.port}")

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        if self._browser is not None:
            await self._browser.async_cancel()
        if self._zc is not None:
            await self._zc.async_unregister_all_services()
            await self._zc.async_close()
