"""Which node of a group answers a guest's marco: one host per guest.

The Noam document has one host per room; a huddle group has as many as it has
nodes started with ``--guests``, and all of them hear a broadcast marco.  If
each answered, a guest would get several polos — IDEO's JavaScript lemma then
opens one WebSocket per polo and never registers.  So each node answers only
the marcos of the guests it is *chosen* for:

- the hosts are this node and every admitted peer that said in its HELO that
  it hosts guests (docs/protocol.md 4.1, ``guests``);
- the chosen host of guest NAME is the one with the highest weight
  ``blake2b(node UUID || 0x00 || NAME as UTF-8)`` (rendezvous hashing): every
  node with the same view of the hosts chooses the same one, guests spread
  evenly over hosts, and a host leaving moves only its own guests (to the
  host each of them ranks next) while a host joining takes only the guests it
  now ranks first.

Takeover within a heartbeat interval: the mesh drops a crashed host from
the guest hosts only once it is SUSPECT (half its gone time, 2.5 s with the
standard timing).  :class:`HostLinks` is the guest hosts' own, faster notion of
a host being there: a host whose connection from this node dropped (its process
died and its kernel closed its sockets; the transport reports it at once) is
left out of the choice until the connection is back.  It changes nothing in the
mesh (the peer is not made SUSPECT; its heartbeats decide that).  A short drop
only moves the host's guests' marcos for as long as it lasts.

Pure: no clock, no I/O.  A stable hash (not Python's ``hash()``, which
changes per process), so every node of the group agrees.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

from ..counters import Counters

__all__ = ["HostLinks", "LinkCounters", "chosen_host", "per_address", "weight"]


def weight(host: bytes, guest: str) -> bytes:
    """The rendezvous weight of ``host`` for ``guest`` (compared as bytes: big-endian)."""
    return hashlib.blake2b(host + b"\x00" + guest.encode("utf-8", "surrogatepass"), digest_size=16).digest()


def chosen_host(guest: str, hosts: Iterable[bytes]) -> bytes | None:
    """The host, among ``hosts`` (node UUIDs), that answers ``guest``'s marcos;
    None when there is none.  Ties (never seen: 128-bit weights) go to the larger UUID."""
    best: tuple[bytes, bytes] | None = None
    for h in hosts:
        key = (weight(h, guest), h)
        if best is None or key > best:
            best = key
    return None if best is None else best[1]


def per_address(hosts: Iterable[tuple[bytes, str]], cap: int, own: str = "") -> list[bytes]:
    """Of ``hosts`` (UUID, the address its HELO came from), at most ``cap`` from one address:
    announcing guest hosts costs a member one HELO each, so the hosts behind one address
    count as at most ``cap`` in the choice — those with the lowest UUIDs, so that every node
    that sees the same hosts keeps the same ones (not the ones seen answering: then each
    host found out would let the next one behind that address in, to be found out in turn).
    The hosts at ``own`` (this node's address: it cannot tell whether the others keep it
    among them) are all kept, and so are those whose address is not known ("")."""
    listed = list(hosts)
    kept: set[bytes] = set()
    by_address: dict[str, list[bytes]] = {}
    for h, address in listed:
        if address in ("", own):
            kept.add(h)
        else:
            by_address.setdefault(address, []).append(h)
    for group in by_address.values():
        kept.update(sorted(group)[:cap])
    return [h for h, _ in listed if h in kept]


@dataclass(slots=True)
class LinkCounters(Counters):
    """Served with the guest doors' counters (``GET /api/v1/guests`` -> ``stats``)."""

    host_links_lost: int = 0  # a connection to a peer dropped: as a guest host, it is left out until it is back
    host_links_back: int = 0  # ... and came back


class HostLinks:
    """Which of this node's connections to its peers are down, by connection number
    (the transport's): a host is a guest host only while its current connection is
    not.  A connection closed for good is forgotten (``forget``), so this holds at
    most one entry per open connection; a host that comes back on a new connection
    (a restart, a new address) counts from that one."""

    def __init__(self) -> None:
        self.down: set[int] = set()
        self.counters = LinkCounters()

    def changed(self, conn: int, up: bool) -> None:
        if up:
            if conn in self.down:
                self.down.discard(conn)
                self.counters.host_links_back += 1
        elif conn not in self.down:
            self.down.add(conn)
            self.counters.host_links_lost += 1

    def forget(self, conn: int) -> None:
        self.down.discard(conn)

    def live(self, hosts: Iterable[tuple[bytes, int | None]]) -> list[bytes]:
        """Of ``hosts`` (UUID, its current connection), those whose connection is not down."""
        down = self.down
        return [h for h, conn in hosts if conn is None or conn not in down]
