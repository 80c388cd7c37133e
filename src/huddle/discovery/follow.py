"""Following the node's network interface: the loop around :mod:`.watch`.

The pure rules (what a change means: :class:`~.watch.Lost`, :class:`~.watch.Moved`,
:class:`~.watch.Back`) are in :mod:`.watch`; here is the driver side.  Every
``INTERFACE_POLL`` seconds :class:`NetworkFollower` looks at the machine's IPv4
interfaces (ifaddr, when the kernel's address table changed or every
``FULL_LOOK_EVERY`` looks) and, on a change, carries it out through narrow callbacks the node
gives it at wiring time (:class:`Followers`), so it knows no mesh, transport or
guest server:

- :class:`~.watch.Moved`: bind the ROUTER on the new address (its old port, or
  another if that is taken there), unbind the old one, tell the new endpoint to
  whoever keeps one (the mesh, which says HELO to its peers; the naming client),
  then re-announce;
- :class:`~.watch.Back`: re-announce (beacon and mDNS sockets opened afresh, the
  guest servers on the address);
- :class:`~.watch.Lost`: count it, say so, wait.

A re-announcement that fails (a socket that cannot be opened yet) is tried again
at the next look.  :func:`wait_interface` waits at start-up for an
``--interface`` that has no IPv4 address yet.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Protocol

from .interfaces import Interface, InterfaceAbsent, address_table, ipv4_interfaces, resolve_interface
from .watch import Back, InterfaceWatch, Lost, Moved, WatchDecision

__all__ = ["INTERFACE_POLL", "Announce", "FollowCounts", "Followers", "NetworkFollower", "Router", "advertise",
           "wait_interface"]

log = logging.getLogger("huddle.node")  # the node's lines, as before this module was split out

# A full look at the interfaces (ifaddr) at least every this many looks, changed or not.
FULL_LOOK_EVERY = 10
# How often the node looks at its interface's addresses (ifaddr), and at an --interface not there yet.
INTERFACE_POLL = 1.0

# Announce the node from an interface, with the ROUTER's port (beacon, mDNS, guest servers).
Announce = Callable[[Interface, int], Awaitable[None]]


class Router(Protocol):
    """The ROUTER socket's binding (the transport)."""

    def bind(self, host: str, port: int, port_range: tuple[int, int]) -> int: ...

    def unbind(self, host: str, port: int) -> None: ...


class FollowCounts(Protocol):
    """Where the follower counts what it saw (the driver's counters)."""

    address_changes: int
    interface_lost: int
    interface_back: int


@dataclass(slots=True)
class Followers:
    """Who follows the interface, given by the node at wiring time."""

    router: Router
    port_range: tuple[int, int]
    # Told the new endpoint (tcp://IP:PORT) after a move, in this order.
    endpoint: list[Callable[[str], None]] = field(default_factory=list)
    # Re-announce the node from the interface, in this order, after a move or a return.
    announce: list[Announce] = field(default_factory=list)


async def advertise(followers: Followers, iface: Interface, port: int, delay: float = 0.0) -> None:
    """Make the ROUTER's port ``port`` on ``iface`` the node's endpoint: tell it (the mesh's HELO
    to its peers), then, ``delay`` seconds later, announce it (the group key switched to the one
    that port listens with: docs/security.md).  The delay lets the peers follow the HELO on the
    connection they have before a beacon has them probe the new endpoint with a second one: the
    ROUTER reads only one connection per peer id."""
    endpoint = f"tcp://{iface.ip}:{port}"
    for tell in followers.endpoint:
        tell(endpoint)
    if delay > 0:
        await asyncio.sleep(delay)
    for announce in followers.announce:
        await announce(iface, port)


async def wait_interface(spec: str | None, stop: asyncio.Event, poll: float = INTERFACE_POLL) -> Interface | None:
    """The interface to use; ``--interface NAME`` with no IPv4 address yet is waited
    for (no time limit: a node started before the Wi-Fi joins comes up when it does),
    with one log line.  None if ``stop`` is set while it waits."""
    try:
        return resolve_interface(spec)
    except InterfaceAbsent as exc:
        log.warning("%s: waiting for it (the node starts when it has an address)", exc)
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), poll)
        try:
            iface = resolve_interface(spec)
        except InterfaceAbsent:
            continue
        log.warning("interface %s is here, with %s: starting", iface.name, iface.ip)
        return iface
    return None


class NetworkFollower:
    """Follows one interface (``spec``: a name or an address) from ``current``, with the
    ROUTER bound at ``port`` there (see the module).  A look that raises is handed to
    ``failed`` (counted and logged by the node) and the next look tries again."""

    def __init__(self, spec: str, current: Interface, port: int, followers: Followers, *, counts: FollowCounts,
                 failed: Callable[[Exception], None], poll: float = INTERFACE_POLL) -> None:
        self._watch = InterfaceWatch(spec, current)
        self.interface = current
        self.port = port  # the ROUTER's
        self._followers = followers
        self._counts = counts
        self._failed = failed
        self._poll = poll
        self._announce_due = False  # a re-announcement failed: try again at the next look

    async def run(self) -> None:
        """Look every ``poll`` seconds and follow, until cancelled.  The full look (ifaddr)
        is taken when the kernel's address table changed, a re-announcement is due, or
        FULL_LOOK_EVERY looks went by without one (what the table may not show: an address
        that moved to another interface); the others cost an idle node next to nothing."""
        seen: bytes | None = None
        skipped = 0
        while True:
            await asyncio.sleep(self._poll)
            table = address_table()
            if table is not None and table == seen and not self._announce_due and skipped < FULL_LOOK_EVERY:
                skipped += 1
                continue
            seen, skipped = table, 0
            await self.look(ipv4_interfaces())

    async def look(self, interfaces: list[Interface]) -> None:
        """Follow one look at the machine's interfaces."""
        watch = self._watch
        try:
            change = watch.observe(interfaces)
            if change is not None:
                await self.changed(change)
            elif self._announce_due and not watch.lost:
                await self.announce(watch.current)
        except Exception as exc:  # a socket that cannot be opened now: the next look tries again
            self._failed(exc)

    async def changed(self, change: WatchDecision) -> None:
        counts = self._counts
        if isinstance(change, Lost):
            counts.interface_lost += 1
            log.warning("interface %s has no IPv4 address now: waiting for it (peers will find this node "
                        "silent and take it back when it returns)", change.name)
            return
        if isinstance(change, Back):
            counts.interface_back += 1
            log.warning("interface %s has its address %s again", change.interface.name, change.interface.ip)
            await self.announce(change.interface)
            return
        assert isinstance(change, Moved)
        old, new, f = change.old, change.new, self._followers
        try:
            port = f.router.bind(new.ip, self.port, f.port_range)
        except Exception:  # the port is taken on the new address: another one
            port = f.router.bind(new.ip, 0, f.port_range)
        f.router.unbind(old.ip, self.port)  # also closes peers' stale connections to the old address
        self.port, self.interface = port, new
        endpoint = f"tcp://{new.ip}:{port}"
        counts.address_changes += 1
        log.warning("interface %s moved from %s to %s: now at %s; telling the peers", new.name, old.ip, new.ip,
                    endpoint)
        for tell in f.endpoint:
            tell(endpoint)
        await self.announce(new)

    async def announce(self, iface: Interface) -> None:
        """Announce the node from ``iface`` afresh, with the ROUTER's port (docs/guests.md,
        "Address changes" for the guest servers)."""
        self._announce_due = True
        for announce in self._followers.announce:
            await announce(iface, self.port)
        self._announce_due = False
