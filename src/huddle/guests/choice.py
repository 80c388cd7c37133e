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

Pure: no clock, no I/O.  A stable hash (not Python's ``hash()``, which
changes per process), so every node of the group agrees.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

__all__ = ["chosen_host", "weight"]


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
