"""Watching the chosen interface: the pure decision of what a change means.

The driver looks at the machine's IPv4 interfaces about once a second (ifaddr)
and hands each look to :meth:`InterfaceWatch.observe`; no sockets here, so the
rules are tested with made-up lists of interfaces.  The rules:

- The interface is followed by name (``--interface wlan0``, or the default route's
  interface chosen at start-up); an ``--interface`` given as an address follows
  that address.  Loopback never changes and is not watched.
- While its address is still there, nothing happens, even if it gained others
  (a DHCP renewal that adds the new address before removing the old one).
- When it has an IPv4 address no more (link lost, lease expired, adapter
  unplugged): :class:`Lost`, once.  The node keeps its sockets and waits.
- When it has another address (or the same address on another network):
  :class:`Moved`: the node rebinds its ROUTER there, tells its peers (HELO),
  and re-announces itself through every discovery mode.
- When the same address comes back after :class:`Lost`: :class:`Back`: the node
  announces itself again (its beacon and mDNS sockets are opened afresh).
"""

from __future__ import annotations

from dataclasses import dataclass

from .interfaces import Interface

__all__ = ["Back", "InterfaceWatch", "Lost", "Moved", "WatchDecision", "pick"]


@dataclass(frozen=True, slots=True)
class Lost:
    """The interface has no IPv4 address now."""

    name: str


@dataclass(frozen=True, slots=True)
class Moved:
    """The interface has a new address: everything follows it."""

    old: Interface
    new: Interface


@dataclass(frozen=True, slots=True)
class Back:
    """The interface has its address again, after :class:`Lost`."""

    interface: Interface


WatchDecision = Lost | Moved | Back


def pick(spec: str, interfaces: list[Interface], prefer: str | None = None) -> Interface | None:
    """The interface ``spec`` (a name or an IPv4 address) among ``interfaces``;
    of several addresses on one interface, ``prefer`` if present, else the first."""
    found = [i for i in interfaces if spec in (i.name, i.ip)]
    for iface in found:
        if iface.ip == prefer:
            return iface
    return found[0] if found else None


class InterfaceWatch:
    """Follows one interface across successive looks at the machine's interfaces."""

    def __init__(self, spec: str, current: Interface) -> None:
        self.spec = spec  # a name, or an address
        self.current = current
        self.lost = False

    def observe(self, interfaces: list[Interface]) -> WatchDecision | None:
        """What changed since the previous look, if anything."""
        now = pick(self.spec, interfaces, prefer=self.current.ip)
        if now is None:
            if self.lost:
                return None
            self.lost = True
            return Lost(self.current.name)
        was_lost, self.lost = self.lost, False
        if now == self.current:
            return Back(now) if was_lost else None
        old, self.current = self.current, now
        return Moved(old, now)
