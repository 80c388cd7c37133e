"""What the node says in its log as the mesh changes: one line at INFO per peer joined,
suspect, failed or left, per seed that does not answer, per refusal (docs/configuration.md,
"What a node logs").

:class:`Narrator` subscribes to the mesh's events (host/events.py) and consumes none.  Lines a
peer can cause (joins, departures, refusals) are rate-limited per kind (huddle/ratelog.py): a
peer that comes and goes in a loop, or a flood of refused HELOs, writes a bounded number of
lines, the rest counted.  A seed's silence is rate-limited by the core (protocol/seeds.py).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

from ..ids import NodeId
from ..ports import Subscriber
from ..protocol.events import CutOff, PeerJoined, PeerLeft, PeerRefused, PeerStateChanged, SeedSilent
from ..ratelog import RateLog

__all__ = ["PEER_LINES", "Narrator", "say_stopped"]

log = logging.getLogger("huddle.node")

PEER_LINES = 20  # lines of one kind per minute (joins, state changes, departures, refusals)


class Narrator:
    """The mesh's events as log lines.  ``clock``: monotonic seconds, for the rate limits."""

    def __init__(self, logger: logging.Logger = log, *, clock: Callable[[], float] = time.monotonic,
                 burst: int = PEER_LINES) -> None:
        self._log = logger
        self._clock = clock
        self._lines = RateLog(logger, period=60.0, burst=burst)
        self._where: dict[NodeId, str] = {}  # an admitted peer's endpoint, for its later lines

    @property
    def left_out(self) -> int:
        """Lines left out by the rate limits, every kind."""
        return self._lines.left_out

    def subscriptions(self) -> list[tuple[tuple[type, ...], Subscriber]]:
        return [((PeerJoined,), self.joined), ((PeerStateChanged,), self.state), ((PeerLeft,), self.left),
                ((PeerRefused,), self.refused), ((SeedSilent,), self.seed_silent), ((CutOff,), self.cut_off)]

    def _who(self, peer: NodeId, name: str) -> str:
        where = self._where.get(peer)
        return f"{name} ({peer.short})" + (f" at {where}" if where else "")

    def joined(self, e: PeerJoined) -> bool:
        self._where[e.peer] = e.endpoint
        self._lines.info("peer", self._clock(), "peer %s joined", self._who(e.peer, e.name))
        return False

    def state(self, e: PeerStateChanged) -> bool:
        said = {"suspect": "is suspect (missed heartbeats)", "alive": "is back"}.get(e.state, f"is {e.state}")
        self._lines.info("peer", self._clock(), "peer %s %s", self._who(e.peer, e.name), said)
        return False

    def left(self, e: PeerLeft) -> bool:
        who = self._who(e.peer, e.name)
        self._where.pop(e.peer, None)
        if e.reason == "timeout":
            self._lines.info("peer", self._clock(), "peer %s failed: gone silent (timeout)", who)
        elif e.reason == "left" or e.reason.startswith("left: "):  # its GBYE, with its reason if it gave one
            said = e.reason.removeprefix("left").removeprefix(": ") or "no reason given"
            self._lines.info("peer", self._clock(), "peer %s left (said goodbye: %s)", who, said)
        else:
            self._lines.info("peer", self._clock(), "peer %s is gone: %s", who, e.reason)
        return False

    def refused(self, e: PeerRefused) -> bool:
        who = "a node" if e.peer is None else f"node {e.peer.short}"
        if e.by_us:
            self._lines.info("refused", self._clock(), "refused %s at %s: %s", who, e.endpoint, e.reason)
        else:
            self._lines.info("refused-us", self._clock(), "%s at %s refused us: %s", who, e.endpoint, e.reason)
        return False

    def seed_silent(self, e: SeedSilent) -> bool:
        self._log.info("seed %s does not answer (%d tries in %.0f s); still trying", e.endpoint, e.tries, e.silent)
        return False

    def cut_off(self, e: CutOff) -> bool:
        if e.cut_off:
            self._lines.info("peer", self._clock(), "cut off: no peer left (the node keeps looking for its group)")
        else:
            self._lines.info("peer", self._clock(), "reconnected to the group")
        return False


def say_stopped(node: NodeId | None, name: str, started_at: float, retired: bool, data_dir: Path) -> None:
    """The node's last line, once everything is closed: how it stopped and that its data
    directory is free (docs/configuration.md, "What a node logs")."""
    if started_at and node is not None:
        why = "its identity was retired, starting again under a new one" if retired else "cleanly"
        log.info("node %s (%s) stopped %s after %.0f s; data directory %s released", node.short, name, why,
                 time.time() - started_at, data_dir)
