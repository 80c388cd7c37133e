"""What the mesh's parts share: the counters they all count into (one dict in the API), and
the narrow ports through which they ask the mesh to act (it queues actions; a test records):
``Dialler`` (connections, our HELO, timers: seeds, member lists, moves, liveness), ``Opener``
(sessions opened or dialled afresh: introductions), ``Host`` (the sessions' lifecycle,
messages and events: the handshake)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ..counters import Counters
from ..ids import NodeId
from ..wire import Message
from .events import Event
from .session import Session

__all__ = ["Dialler", "Host", "Opener", "Stats"]


class Dialler(Protocol):
    """What a part of the mesh may ask of the mesh: connections opened and closed, our HELO and
    BOUT sent, its own timer noted.  The mesh queues each as actions; a test records them."""

    def connect(self, endpoint: str, conn: int | None = None) -> int:
        """A connection to ``endpoint``: a new one, or ``conn`` again (closed before: the
        services that send on it keep its number)."""

    def disconnect(self, conn: int, *, flush: bool = False) -> None:
        """Close ``conn`` (``flush``: after what is queued on it is sent)."""

    def send_hello(self, conn: int, *, reply: bool, to: NodeId | None, now: float, listed: int = 0) -> None: ...

    def note(self, when: float) -> None:
        """A timer is due at ``when``: the mesh ticks by then."""


class Opener(Dialler, Protocol):
    """And sessions opened or dialled afresh: what introductions ask of the mesh."""

    def open(self, uuid: NodeId, endpoint: str, now: float, introducer: NodeId | None, listed: int) -> Session:
        """A new session with ``uuid``, dialled at ``endpoint`` with our HELO and BOUT."""

    def redial(self, s: Session, now: float) -> None:
        """Our connection to ``s`` is stuck: closed now, a fresh one a heartbeat later."""


class Host(Dialler, Protocol):
    """And what the handshake asks of the mesh, which owns the sessions' lifecycle: a session
    on a connection opened, admitted, ended (``forget``: removed, no PeerLeft), heard from; room
    made; messages sent and events notified."""

    def new(self, uuid: NodeId, conn: int, endpoint: str, now: float) -> Session: ...

    def admit(self, s: Session, now: float) -> None: ...

    def end(self, s: Session, reason: str, now: float) -> None: ...

    def forget(self, s: Session, now: float) -> None: ...

    def heard(self, s: Session, now: float) -> None: ...

    def make_room(self, address: str, now: float) -> None: ...

    def send(self, conn: int, msg: Message) -> None: ...

    def notify(self, event: Event) -> None: ...


@dataclass(slots=True)
class Stats(Counters):
    received: int = 0
    decode_errors: int = 0
    dropped_unintroduced: int = 0
    refused: int = 0
    sent: int = 0
    chats_received: int = 0
    stale_time_replies: int = 0
    helos_refused: int = 0  # HELOs dropped past max-sessions / max-handshaking and max-waiting-helos, or expired waiting
    helos_waited: int = 0  # HELOs held until a handshake slot freed
    introductions_waited: int = 0  # PEERs held until a handshake slot freed
    introductions_refused: int = 0  # PEERs and discoveries not dialled: caps, back-off, introducer not ALIVE
    connect_failed: int = 0  # outgoing connections the driver could not open (EMFILE, ...)
    foreign_frames: int = 0  # frames under a session's UUID from another connection (or address) than the session's
    auto_excluded: int = 0  # sessions ended and their incarnation refused: undecodable messages, a stuck buffer
    endpoint_changes: int = 0  # this node's own endpoint changed (set_endpoint: its address moved)
    endpoints_followed: int = 0  # an admitted peer said HELO from a new endpoint: connected there instead
    lists_sent: int = 0  # member lists (MEMB) sent: on admission, periodically, in reply
    lists_received: int = 0  # member lists (MEMB) received from admitted peers
    lists_not_repeated: int = 0  # replies not sent: our last list to that peer named every member its list lacked
    members_probed: int = 0  # known members dialled at a new endpoint or incarnation that a list, PEER or discovery named
    restarts_followed: int = 0  # sessions replaced at once by a newer incarnation's HELO
    refused_identity: int = 0  # HELOs refused before any session state: key, id, signature or time do not hold
    helos_misaddressed: int = 0  # signed HELOs meant for another node (a stale endpoint, or a copy sent on)
    late_ticks: int = 0  # ticks LATE_TICK or more after their deadline: this node's loop was late
    backoffs_spared: int = 0  # introduced handshakes timed out while this node was late: not backed off
    seed_intros_skipped: int = 0  # introductions not dialled: a seed connection to that endpoint awaits its answer
    sessions_evicted: int = 0  # admitted sessions ended to make room for a HELO (silent ones, an address over its share)
    answers_redialled: int = 0  # fresh connections to a peer admitted on its HELO and BOUT that had not heard our answer
    joins: int = 0  # seeds added at runtime (huddle join), their address well formed and resolved
    joins_refused: int = 0  # runtime joins refused: a malformed or unresolvable address, this node's own, too many
    joins_timed_out: int = 0  # runtime joins whose seed did not answer in time (the seed is dropped)
    dialled_afresh: int = 0  # admitted peers that dialled us afresh (they lost our session: protocol.md 6)

