"""The driver's counters: the octets of the mesh's messages by type, and the
failures the driver survived (both in ``stats`` of ``GET /api/v1/node``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..counters import Counters
from ..wire import TAGS

__all__ = ["OTHER_TRAFFIC", "TRAFFIC_TYPES", "DriverStats", "TrafficStats"]


@dataclass(slots=True)
class DriverStats(Counters):
    """Failures the driver survived: an action it could not carry out (encode,
    send, connect), a received message whose handling raised, a turn of the
    timer loop that raised.  Each is counted, logged (rarely), and the node goes on."""

    action_failures: int = 0
    receive_failures: int = 0
    tick_failures: int = 0
    network_failures: int = 0  # following the interface failed (a bind, a discovery socket): retried
    address_changes: int = 0  # the interface's address changed: rebound, peers told, re-announced
    interface_lost: int = 0  # the interface had no IPv4 address any more
    interface_back: int = 0  # ... and then had the same one again


# The message types counted one by one in TrafficStats: every type of the wire's table
# (wire/framing.py SPECS; docs/protocol.md 3); a received frame of any other type
# (malformed: it is dropped) is counted under OTHER_TRAFFIC.
TRAFFIC_TYPES = TAGS
OTHER_TRAFFIC = b"other"


def _by_type() -> dict[bytes, int]:
    return dict.fromkeys((*TRAFFIC_TYPES, OTHER_TRAFFIC), 0)


@dataclass(slots=True)
class TrafficStats:
    """Octets of the mesh's messages, sent and received, by message type: what the
    heartbeats, the membership gossip and the log's replication each cost.  A message's
    octets are those of its frames after the sender's identity (type, body, and a BULK's
    head and data); sent counts what the transport accepted (the driver adds to
    ``sent`` itself, with a message's size worked out once however many peers it goes
    to).  Received types are a fixed set: an unknown type a peer sends is counted under
    ``other``, so a flood of made-up types cannot grow the table.  One dict increment
    per message."""

    sent: dict[bytes, int] = field(default_factory=_by_type)
    received: dict[bytes, int] = field(default_factory=_by_type)

    def count_received(self, frames: list[bytes]) -> None:
        """``frames`` as the ROUTER handed them over: the sender's identity first."""
        kind = frames[1] if len(frames) > 1 else b""
        octets = sum(map(len, frames)) - len(frames[0])
        received = self.received
        if kind in received:
            received[kind] += octets
        else:
            received[OTHER_TRAFFIC] += octets

    def as_dict(self) -> dict[str, dict[str, int]]:
        return {"sent": {k.decode(): v for k, v in self.sent.items()},
                "received": {k.decode(): v for k, v in self.received.items()}}
