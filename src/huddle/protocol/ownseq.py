"""This node's own sequence after a restore, sans-I/O (docs/protocol.md 12.1, "A restored log").

A node that signs may start on a log restored from an older copy: its peers may hold
records in its name that it lost.  So it records nothing during a start-up window
(:class:`StartWindow`) while its peers show what they hold of its source: what is
signed with its key and continues its chain is taken back as its own; a record that
differs from its own of that number means this identity's sequence was reused, and it
records no more under it (:class:`IdentityRetired`: the node takes a new identity).
:class:`OwnSequence` keeps that state for the replicator (protocol/replication.py),
which compares the records and takes them back.
"""

from __future__ import annotations

import logging
from collections.abc import Container
from dataclasses import dataclass

from ..ids import NodeId
from .events import ServiceEvent

__all__ = ["IdentityRetired", "OwnSequence", "StartWindow"]

log = logging.getLogger("huddle.replication")


@dataclass(frozen=True, slots=True)
class IdentityRetired(ServiceEvent):
    """This node's identity records nothing more (:attr:`OwnSequence.retired`): the node
    takes a new one.  ``since``: the own sequence it held at start (what it recorded
    after it was recorded under numbers its peers hold with other content)."""

    reason: str
    since: int


@dataclass(slots=True)
class StartWindow:
    """The start-up window (:meth:`OwnSequence.hold`): nothing is recorded until it ends."""

    until: float  # no peer admitted by then: it ends
    quiet: float  # after the first admission, it ends this long after it unless a peer claims more of ours
    wait: float  # ... and a claim keeps it open until this long without a record of ours taken back
    moved: float  # the first admission, or the last record of ours taken back
    peer_at: float | None = None

    def admitted(self, now: float) -> None:
        """A peer was admitted: the first one starts the quiet time."""
        if self.peer_at is None:
            self.peer_at = self.moved = now

    def over(self, now: float, claimed: bool) -> bool:
        """Is the window over at ``now``?  ``claimed``: a peer up claims more of ours than we hold."""
        if claimed:
            return now - self.moved >= self.wait  # it shows them: wait while records come
        return now >= self.until or (self.peer_at is not None and now >= self.peer_at + self.quiet)


class OwnSequence:
    """The state of this node's own source the replicator keeps beside its records: the
    start-up window while it lasts, the peers' claims to hold more of it, and why this
    identity records no more (None: it records).  ``start_top``: our records at start."""

    def __init__(self, start_top: int) -> None:
        self.start_top = start_top
        self.window: StartWindow | None = None
        self.claims: dict[NodeId, int] = {}  # peers that claim more of our source than we hold
        # A peer showed a record in our name, signed with our key, that differs from ours.
        self.retired: str | None = None

    def hold(self, now: float, wait: float, quiet: float) -> None:
        """Open the start-up window at ``now`` (:meth:`Replicator.hold_own`)."""
        self.window = StartWindow(until=now + wait, quiet=quiet, wait=wait, moved=now)

    @property
    def recording(self) -> bool:
        return self.window is None and self.retired is None

    def why_not_recording(self) -> str:
        if self.retired is not None:
            return f"{self.retired}; this identity records nothing more, nothing was recorded"
        return ("this node is starting: it records nothing until its peers have shown what they hold in its "
                "name (a few seconds at most); nothing was recorded")

    def settle(self, now: float, top: int, up: Container[NodeId], taken_back: int) -> None:
        """End the start-up window when it is due: ``top``, our records held; ``up``, the
        peers admitted; ``taken_back``, how many of ours were taken back (for the log)."""
        window = self.window
        assert window is not None
        claimed = max((q for peer, q in self.claims.items() if peer in up), default=0)
        if not window.over(now, claimed > top):
            return
        self.window = None
        log.info("recording from sequence %d (%d of this node's records taken back from its peers)%s", top + 1,
                 taken_back, f"; a claim of {claimed} went unproven" if claimed > top else "")

    def retire(self, peer: NodeId, seq: int) -> IdentityRetired | None:
        """``peer`` holds a record ``seq`` in our name, signed with our key, that is not
        ours: this identity's sequence was reused and records nothing more.  The event
        to hand the node the first time (None after)."""
        if self.retired is not None:
            return None
        self.retired = (f"peer {peer.short} holds a record {seq} in this node's name, signed with its key, that "
                        "differs from its own: this identity's sequence numbers were reused (a log restored "
                        "from an older copy recorded before its peers could show what it had lost)")
        self.window = None
        self.claims.clear()
        log.error("%s; this identity records nothing more", self.retired)
        return IdentityRetired(self.retired, self.start_top)
