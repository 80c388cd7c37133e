"""How a peer service rides on the mesh: the one way to add one.

A *peer service* is a sans-I/O state machine that speaks to admitted peers over
the mesh's connections (replication, addressed delivery, the system picture's
reports).  :class:`~huddle.protocol.mesh.Mesh` takes its services at
construction, builds a table *message type -> service* from their ``handles``
(two services claiming one type is a ``ValueError``) and then, for each one:

* ``attach(view)`` once, at construction: the narrow :class:`MeshView` it may
  read (mesh time, its own node's facts, what the mesh measured of each peer)
  and the one thing it may ask of the mesh (end a peer's incarnation);
* ``peer_up(peer, conn, now, facts)`` when a peer is admitted on ``conn``, and
  ``peer_down(peer, now)`` when its session ends (the service may keep state for
  a return); ``forget(peer)`` when the peer is excluded: drop everything of it;
* ``receive(peer, msg, now)`` for every message of a type it handles from an
  admitted peer (membership, HELO/BOUT/GBYE/TIME/BEAT/CHAT/PEER/MEMB, stays
  the mesh's own);
* ``tick(now)`` on every mesh tick, ``next_deadline(now)`` for the driver's timer: the
  latest time by which the service must be ticked again, asked after every input, so it
  must be cheap (no loop over peers); the mesh ticks at least on every heartbeat, so an
  idle service returns ``math.inf`` and one with work in flight at most ``BUSY_POLL`` away;
* ``take_actions()``: what it wants sent or announced, collected with the mesh's.

A service that rides on addressed messages rather than on a message type of its
own (posts: Hydra's payloads start ``AA A0``) is also a :class:`PayloadTaker`:
addressed delivery, given it at construction, hands it every delivered payload
that starts with its ``prefix`` instead of announcing it to the applications.

Pure: nothing here does I/O.  docs/architecture.md, "where do I add X".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple, Protocol, cast

from ..errors import LocalProtocolError
from ..ids import NodeId
from ..wire import Message
from .events import Action

__all__ = ["BUSY_POLL", "DETACHED", "MeshView", "PayloadTaker", "PeerFacts", "PeerSeen", "PeerService", "group_scale"]

# How often a service's timers run while it has work in flight (an ask, a frame not yet
# acknowledged, a change not yet gossiped): its next_deadline is at most this far away
# then.  An idle service has no deadline of its own and rides on the mesh's heartbeats.
BUSY_POLL: Final = 0.1


def group_scale(members: int) -> float:
    """How much longer than its configured interval a message that every member sends
    every other is apart in a group of ``members`` nodes: 1 up to 10 nodes, then
    members / 10 (as RTCP scales its reports), so such traffic grows with the group,
    not with its square.  The picture's reports, TIME probes and idle GSIPs use it
    (protocol.md 4.6, 12.3, 14)."""
    return members / 10 if members > 10 else 1.0


@dataclass(frozen=True, slots=True)
class PeerFacts:
    """What a peer's HELO said of it, given to services when it is admitted."""

    incarnation: str = ""
    rate: int = 0  # octets per second it accepts of addressed messages (0: no limit)
    name: str = ""
    node_type: str = ""
    deltas: bool = False  # it understands RAWS deltas (protocol.md 14.1)
    address: str = ""  # the address its session came from ("": not known)


class PeerSeen(NamedTuple):
    """What the mesh measured of one node it heard from (a session or not), for reports."""

    uuid: NodeId
    heard: float | None  # local clock of its last message (None: never)
    rtt: float | None  # the round trip, when it is admitted
    state: str  # its session's phase, or "none"
    msgs_in: int
    bytes_in: int
    conn: int | None  # its session's connection (None: no session)


class MeshView(Protocol):
    """The part of a mesh a service may see (the mesh itself implements it)."""

    @property
    def uuid(self) -> NodeId: ...
    @property
    def name(self) -> str: ...
    @property
    def node_type(self) -> str: ...
    @property
    def tags(self) -> Mapping[str, str]: ...
    @property
    def beat(self) -> float: ...
    @property
    def lost(self) -> int: ...
    @property
    def cut_off(self) -> bool: ...
    @property
    def excluded(self) -> Mapping[NodeId, str]: ...
    @property
    def exclude_slow_after(self) -> float: ...
    @property
    def dialled_afresh(self) -> int:
        """How many times an admitted peer dialled us afresh: it lost our session, and holds none of our reports."""
        ...
    @property
    def phase_changes(self) -> int:
        """How many times a session went SUSPECT or was heard again (a report row's state changed)."""
        ...

    def mesh_time(self, now: float) -> float: ...

    def heartbeat_after(self, when: float) -> float:
        """The first of this node's heartbeat moments at or after ``when`` (local clock): a
        service whose periodic message may go then saves the peers a wake-up, and the BEAT."""
        ...

    def seen(self, now: float, keep: float) -> list[PeerSeen]:
        """Every node heard from within ``keep`` seconds or with a session, by UUID,
        the excluded left out."""
        ...

    def departure(self, peer: NodeId) -> str | None:
        """Why ``peer``'s last admitted session ended (``timeout``, ``left``, ``left: why``...),
        while the mesh lists it gone; None: it does not."""
        ...

    def end_incarnation(self, peer: NodeId, reason: str, now: float) -> bool:
        """End ``peer``'s session and refuse its incarnation until it restarts (an
        automatic exclusion).  False if there is no session with it."""
        ...


class PeerService(Protocol):
    """A service the mesh hosts (module docstring)."""

    @property
    def handles(self) -> tuple[type[Message], ...]: ...

    def attach(self, mesh: MeshView) -> None: ...
    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts) -> None: ...
    def peer_down(self, peer: NodeId, now: float) -> None: ...
    def forget(self, peer: NodeId) -> None: ...
    def receive(self, peer: NodeId, msg: Message, now: float) -> None: ...
    def tick(self, now: float) -> None: ...
    def next_deadline(self, now: float) -> float: ...
    def take_actions(self) -> Sequence[Action]: ...


class PayloadTaker(Protocol):
    """A service that takes the addressed messages whose payload starts with ``prefix``
    (module docstring): given to :class:`~huddle.protocol.delivery.Delivery` at construction."""

    @property
    def prefix(self) -> bytes: ...

    def take_payload(self, peer: NodeId, seq: int, payload: bytes) -> None:
        """A whole addressed message from ``peer``, in its order, once (as MessageReceived would say)."""
        ...


class _Detached:
    """The view of a service not (yet) hosted by a mesh: any use is a local error."""

    def __getattr__(self, name: str) -> object:
        raise LocalProtocolError(f"a peer service used the mesh ({name}) before a Mesh took it")


# What a service holds until Mesh.attach gives it its view (a service driven by hand in a
# test, as the replicator's are, never reads it).
DETACHED: Final = cast("MeshView", _Detached())
