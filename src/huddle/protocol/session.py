"""A session with one peer: its phases and the one table of their moves, its record, its timing.

Every session starts CONNECTING and changes phase only through :func:`transition`, which
looks the move up in :data:`TRANSITIONS` and raises ``LocalProtocolError`` on any move not
in it (h11's ``_state.py`` is the model): a bug in the mesh that would move a session where
the protocol has no arrow fails loudly instead of leaving a session in a phase nobody
judges.  The inputs, as protocol.md section 5 names them:

- ``HELO``: its HELO passed the checks (we have its HELO, we wait for its BOUT);
- ``BOUT``: its BOUT names our group (admitted, protocol.md 4.8);
- ``SILENT``: silent for its suspect_after, or its send buffer full (section 6);
- ``HEARD``: a sign of life from a SUSPECT peer;
- ``END``: the session is removed: a timeout, a GBYE, a refusal either way, a restart, an
  eviction, an exclusion, a connection that failed, this node leaving.

The diagram the table draws (:func:`diagram`; protocol.md section 5 shows the same, and
``tests/test_mesh_session.py`` checks both)::

    stateDiagram-v2
        [*] --> CONNECTING
        CONNECTING --> HANDSHAKE: HELO
        CONNECTING --> [*]: END
        HANDSHAKE --> ALIVE: BOUT
        HANDSHAKE --> [*]: END
        ALIVE --> SUSPECT: SILENT
        ALIVE --> [*]: END
        SUSPECT --> ALIVE: HEARD
        SUSPECT --> [*]: END
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

from ..errors import LocalProtocolError
from ..ids import NodeId

__all__ = ["TRANSITIONS", "Move", "Phase", "Session", "Timing", "diagram", "transition"]


class Phase(enum.Enum):
    CONNECTING = "connecting"  # we sent HELO, have not heard theirs
    HANDSHAKE = "handshake"  # we have their HELO, wait for their BOUT
    ALIVE = "alive"
    SUSPECT = "suspect"


class Move(enum.Enum):
    """What moves a session from one phase to another (the module docstring says when)."""

    HELO = "helo"
    BOUT = "bout"
    SILENT = "silent"
    HEARD = "heard"
    END = "end"


# (phase, move) -> the next phase; None: the session is removed.  Nothing else moves a session.
TRANSITIONS: Final[Mapping[tuple[Phase, Move], Phase | None]] = MappingProxyType({
    (Phase.CONNECTING, Move.HELO): Phase.HANDSHAKE,
    (Phase.CONNECTING, Move.END): None,
    (Phase.HANDSHAKE, Move.BOUT): Phase.ALIVE,
    (Phase.HANDSHAKE, Move.END): None,
    (Phase.ALIVE, Move.SILENT): Phase.SUSPECT,
    (Phase.ALIVE, Move.END): None,
    (Phase.SUSPECT, Move.HEARD): Phase.ALIVE,
    (Phase.SUSPECT, Move.END): None,
})


def transition(phase: Phase, move: Move) -> Phase | None:
    """The phase ``move`` takes a session in ``phase`` to (None: removed); LocalProtocolError
    if the table has no such move: the mesh has a bug, not the peer."""
    try:
        return TRANSITIONS[phase, move]
    except KeyError:
        raise LocalProtocolError(f"no move {move.name} from a session in {phase.name}") from None


def diagram() -> str:
    """The table as a Mermaid state diagram, in the table's order: what the docs show."""
    lines = ["stateDiagram-v2", "    [*] --> CONNECTING"]
    for (phase, move), after in TRANSITIONS.items():
        lines.append(f"    {phase.name} --> {'[*]' if after is None else after.name}: {move.name}")
    return "\n".join(lines)


@dataclass(frozen=True, slots=True)
class Timing:
    """Liveness and retry timings, in seconds."""

    heartbeat_interval: float = 1.0
    suspect_after: float = 2.5
    gone_after: float = 5.0
    handshake_timeout: float = 5.0
    seed_retry: float = 1.0
    rtt_probe_interval: float = 5.0
    gone_retention: float = 60.0
    exclude_after_errors: int = 100  # undecodable messages from an admitted peer before it is excluded (0: never)
    exclude_slow_after: float = 60.0  # seconds a peer's send buffer may stay full before it is excluded (0: never)
    membership_interval: float = 3.0  # mean seconds between two member lists (MEMB) sent to one random peer
    # An unanswered seed DEALER is closed (and the next try connects afresh) only after this long:
    # long past any answer a busy seed is late with, so no second connection races the first
    # (protocol.md 8.5); the HELOs it queues while the seed is down stay few.
    seed_reopen_after: float = 30.0

    def __post_init__(self) -> None:
        if self.heartbeat_interval <= 0:
            raise ValueError("heartbeat interval must be positive")
        if not 0 < self.suspect_after <= self.gone_after:
            raise ValueError("suspect_after must be positive and not above gone_after")
        if self.gone_after <= self.heartbeat_interval:
            raise ValueError("gone_after must exceed the heartbeat interval")
        for name in ("handshake_timeout", "seed_retry", "rtt_probe_interval", "gone_retention", "membership_interval",
                     "seed_reopen_after"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive")
        if self.exclude_after_errors < 0 or self.exclude_slow_after < 0:
            raise ValueError("exclusion limits must be 0 (never) or positive")


@dataclass(slots=True)
class Session:
    """What the mesh knows of one peer it has a session with.  ``phase`` starts CONNECTING and
    changes only through :meth:`move`."""

    uuid: NodeId
    conn: int
    endpoint: str
    created: float
    last_heard: float
    phase: Phase = dataclasses.field(default=Phase.CONNECTING, init=False)
    name: str = ""
    incarnation: str | None = None
    introducer: NodeId | None = None
    helo_peers: int = 0
    rtt: float | None = None
    probe_t0: float | None = None
    sync_pending: bool = False
    probed: float = 0.0  # its next probe is due probe_in x the scaled interval after this
    probe_in: float = 1.0
    seed: str | None = None
    errors: int = 0  # undecodable messages from it while admitted
    suspect_after: float = 2.5  # from its HELO's beat and lost, else our own timing
    gone_after: float = 5.0
    node_type: str = ""
    tags: dict[str, str] = dataclasses.field(default_factory=dict)  # its HELO's tags
    rate: int = 0  # octets per second it accepts of addressed messages (0: no limit)
    # The connection its HELO came from: address and routing suffix (ids.CONN_MARK; "" not yet
    # known): its frames must come from there, or from one of ``proven``.
    source: str = ""
    proven: list[str] = dataclasses.field(default_factory=list)  # earlier connections from its address
    opened_by: str = ""  # "peer:<uuid>" (a PEER) or "addr:<ip>" (a HELO): whose handshake quota it uses
    guests: int = 0  # its HELO's marco port: it hosts Noam guests (0: it does not)
    deltas: bool = False  # its HELO says it understands RAWS deltas (protocol.md 14.1)
    joined: float = 0.0  # local clock when it was admitted (kept while it is SUSPECT)
    listed: frozenset[NodeId] = frozenset()  # the members named in the last list we sent it
    listed_at: float = -math.inf  # when we sent it
    key: bytes = b""  # the Ed25519 key its HELOs carry (b"": unsigned HELOs, a legacy id in open mode)
    verified: bool = False  # its id is the one its key gives (node_id_for)
    helo_at: int = 0  # the signed time of its last HELO we accepted (this incarnation)
    # It has shown that our HELO reached it: its HELO with reply true, or any message but the HELO and
    # BOUT it dials with (it beats only once it has admitted us); a HELO with reply false from it
    # since says it dials us afresh.  Admitted, but not answered, it is judged by the handshake
    # timeout and dialled afresh each suspect_after (protocol.md 6).
    answered: bool = False
    # When our connection to it is closed as stuck, if it has not answered by then (a dial of ours:
    # not before, and only when discovery shows it there); and when the fresh one opens, a
    # heartbeat after the close (protocol.md 6, 8.5).
    redial_at: float = math.inf
    reopen_at: float = math.inf

    @property
    def admitted(self) -> bool:
        phase = self.phase  # identity tests: hashing an Enum in a set is slow on hot paths
        return phase is Phase.ALIVE or phase is Phase.SUSPECT

    def move(self, move: Move) -> None:
        """Take ``move`` (:func:`transition`): the one place a session's phase changes.  An END
        keeps the last phase: what the session was is still read as it is removed."""
        after = transition(self.phase, move)
        if after is not None:
            self.phase = after
