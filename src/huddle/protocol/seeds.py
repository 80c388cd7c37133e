"""Seeds: endpoints the operator named, dialled until a peer answers there (protocol.md 4.2, 8.5).

A seed is dialled with our HELO and BOUT, again after a back-off (doubling from the seed retry
to ``SEED_BACKOFF_MAX``), on the same connection until it answers: a second connection would
carry our identity too, and the seed's ROUTER would never read it while the first lingers
there.  Unanswered for ``seed_reopen_after``, the connection is closed and the next try opens a
fresh one.  The session that answers adopts the seed's connection; a seed that refuses us
(another group, a GBYE) is not tried again.

A seed silent for ``SEED_SILENT_AFTER`` seconds is said (:class:`SeedSilent`, which the node
logs): once, then at most every ``SEED_SAY_EVERY`` seconds while it stays silent, so that a
mistyped ``--seed`` does not leave a node running alone without a word.

A seed may also be added while the node runs (``huddle join``: :meth:`Seeds.add_runtime`), at
most ``mesh.max-runtime-seeds`` of them at once; one that answers stays a seed as ``--seed``'s do
(dialled again if its peer goes) until that room is needed for a newer one; one given up
(:meth:`Seeds.drop`: no answer in the join's time) is forgotten, its connection closed
(protocol.md 5.1, "Seeds added at runtime").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ..errors import LocalProtocolError
from ..ids import NodeId
from .events import SeedSilent
from .parts import Dialler
from .session import Session, Timing

__all__ = ["SEED_BACKOFF_MAX", "SEED_SAY_EVERY", "SEED_SILENT_AFTER", "JoinFailed", "Seed", "Seeds", "TooManySeeds"]

SEED_BACKOFF_MAX: Final = 10.0
SEED_SILENT_AFTER: Final = 3.0  # seconds unanswered before a seed is said silent
SEED_SAY_EVERY: Final = 60.0  # seconds between two sayings of one silent seed


class JoinFailed(LocalProtocolError):
    """A join at runtime (``huddle join``) that did not come about; ``status`` the API's answer."""

    status = 504  # no answer in time

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        if status is not None:
            self.status = status


class TooManySeeds(JoinFailed):
    """A seed to add at runtime past ``mesh.max-runtime-seeds``, none of them answered."""

    status = 429


@dataclass(slots=True)
class Seed:
    endpoint: str
    conn: int | None = None
    opened: float = 0.0
    next_try: float = 0.0
    backoff: float = 0.0
    peer: NodeId | None = None
    refused: str | None = None
    silent_since: float | None = None  # the first try since it last answered (None: not tried)
    tries: int = 0  # HELOs sent since then
    said: float = -SEED_SAY_EVERY  # when it was last said silent

    @property
    def awaited(self) -> bool:
        """Our HELO to it awaits its answer on an open connection."""
        return self.conn is not None and self.peer is None

    def answered(self, uuid: NodeId) -> None:
        """``uuid`` answered here: no longer silent (said again if it falls silent again)."""
        self.peer = uuid
        self.silent_since, self.tries, self.said = None, 0, -SEED_SAY_EVERY


class Seeds:
    """The seeds by endpoint, and their retries.  ``notify`` hears a :class:`SeedSilent`,
    timed by ``mesh_time`` (local time to the mesh's)."""

    def __init__(self, timing: Timing, port: Dialler, *, notify: Callable[[SeedSilent], None] | None = None,
                 mesh_time: Callable[[float], float] = float) -> None:
        self._timing = timing
        self._port = port
        self._notify = notify
        self._mesh_time = mesh_time
        self._by_endpoint: dict[str, Seed] = {}
        self._runtime: dict[str, None] = {}  # the endpoints added at runtime (add_runtime), oldest first

    def __contains__(self, endpoint: str) -> bool:
        return endpoint in self._by_endpoint

    def get(self, endpoint: str) -> Seed | None:
        return self._by_endpoint.get(endpoint)

    def add(self, endpoint: str, now: float) -> None:
        self._by_endpoint[endpoint] = Seed(endpoint=endpoint, next_try=now)
        self._port.note(now)

    def add_runtime(self, endpoint: str, now: float, limit: int) -> None:
        """A seed added while the node runs (``huddle join``), at most ``limit`` held at once:
        past it the oldest that was answered is no longer a seed (its session goes on), and with
        none answered (all awaited) TooManySeeds is raised.  A seed already held is dialled again
        at once if it refused us (the operator asks again), else left as it is."""
        seed = self._by_endpoint.get(endpoint)
        if seed is not None:
            if seed.refused is not None:
                seed.refused, seed.backoff, seed.next_try = None, 0.0, now
                self._port.note(now)
            return
        if len(self._runtime) >= limit:
            answered = next((e for e in self._runtime if self._by_endpoint[e].peer is not None), None)
            if answered is None:
                raise TooManySeeds(f"{len(self._runtime)} seeds added at runtime await an answer, the most there "
                                   f"may be (limit mesh.max-runtime-seeds={limit})")
            del self._runtime[answered], self._by_endpoint[answered]
        self._runtime[endpoint] = None
        self.add(endpoint, now)

    def drop(self, endpoint: str) -> None:
        """A seed added at runtime given up (its join had no answer in time): forgotten, its
        connection closed unless a session took it.  A seed given at start is kept."""
        if endpoint not in self._runtime:
            return
        del self._runtime[endpoint]
        seed = self._by_endpoint.pop(endpoint)
        if seed.conn is not None and seed.peer is None:
            self._port.disconnect(seed.conn)

    def retry(self, now: float, endpoint_known: Callable[[str], bool]) -> None:
        """Dial every seed that is due, not refused, unanswered and at no session's endpoint."""
        timing, port = self._timing, self._port
        for seed in self._by_endpoint.values():
            if seed.refused is not None or seed.peer is not None or now < seed.next_try:
                continue
            if endpoint_known(seed.endpoint):
                continue
            if seed.conn is not None and now - seed.opened >= timing.seed_reopen_after:
                # Unanswered this long: the seed is down or gone, not busy.  Drop the HELOs queued
                # for it; the next try, not this same turn, connects afresh.
                port.disconnect(seed.conn)
                seed.conn = None
                seed.next_try = now + timing.seed_retry
                port.note(seed.next_try)
                continue
            if seed.conn is None:
                # Kept until the seed answers (or seed_reopen_after), its retries on it: a new
                # connection would carry our identity while the old one may linger at the seed,
                # whose ROUTER would then never read it (protocol.md 8.5).
                seed.conn = port.connect(seed.endpoint)
                seed.opened = now
            port.send_hello(seed.conn, reply=False, to=None, now=now)
            self._tried(seed, now)
            seed.backoff = min(SEED_BACKOFF_MAX, max(timing.seed_retry, seed.backoff * 2))
            seed.next_try = now + seed.backoff
            port.note(seed.next_try)

    def _tried(self, seed: Seed, now: float) -> None:
        """One more HELO to an unanswered ``seed``: said silent once it has been for
        SEED_SILENT_AFTER, again SEED_SAY_EVERY later if it still is."""
        if seed.silent_since is None:
            seed.silent_since = now
        seed.tries += 1
        silent = now - seed.silent_since
        if silent >= SEED_SILENT_AFTER and now - seed.said >= SEED_SAY_EVERY:
            seed.said = now
            if self._notify is not None:
                self._notify(SeedSilent(seed.endpoint, silent, seed.tries, self._mesh_time(now)))

    def adopt(self, uuid: NodeId, endpoint: str) -> int | None:
        """The connection of our unanswered seed at ``endpoint``, for ``uuid``'s new session
        (its HELO answered there), or None."""
        seed = self._by_endpoint.get(endpoint)
        if seed is None or not seed.awaited:
            return None
        seed.answered(uuid)
        return seed.conn

    def admitted(self, s: Session) -> None:
        """``s`` was admitted: if it was not dialled as a seed but is at a seed's endpoint, it is
        that seed's answer (the seed's own connection, if another, is closed)."""
        if s.seed is not None:
            return
        for seed in self._by_endpoint.values():
            if seed.endpoint == s.endpoint and seed.peer is None:
                if seed.conn is not None and seed.conn != s.conn:
                    self._port.disconnect(seed.conn)
                seed.conn = s.conn
                seed.answered(s.uuid)
                s.seed = seed.endpoint

    def refused(self, s: Session, reason: str) -> bool:
        """``s``, dialled as a seed, refused us: that seed is not tried again.  False: ``s`` was
        no seed's."""
        seed = None if s.seed is None else self._by_endpoint.get(s.seed)
        if seed is None:
            return False
        seed.refused = reason
        return True

    def forgotten(self, s: Session, now: float) -> None:
        """``s`` is removed: the seed it answered is dialled again."""
        seed = None if s.seed is None else self._by_endpoint.get(s.seed)
        if seed is not None and seed.peer == s.uuid:
            seed.peer = None
            seed.conn = None
            seed.backoff = 0.0
            # Dialled again a retry interval on, not at once: a new connection that reaches the
            # seed before it saw the old one close is never read there (protocol.md 8.5).
            seed.next_try = now + self._timing.seed_retry
            self._port.note(seed.next_try)

    def moved(self, now: float) -> None:
        """This node's endpoint changed: the HELOs queued for unanswered seeds named the old one."""
        for seed in self._by_endpoint.values():
            if seed.conn is not None and seed.peer is None:
                self._port.disconnect(seed.conn)
                seed.conn = None
                seed.next_try = now
                self._port.note(now)

    def connect_failed(self, conn: int) -> None:
        for seed in self._by_endpoint.values():
            if seed.conn == conn:
                seed.conn = None  # dialled afresh at its next try (it keeps its back-off)

    def close(self) -> None:
        """This node leaves: the connections of unanswered seeds close (an answered one is its session's)."""
        for seed in self._by_endpoint.values():
            if seed.conn is not None and seed.peer is None:
                self._port.disconnect(seed.conn)
            seed.conn = None

    def due(self) -> float:
        """The soonest retry of a seed not refused nor answered (inf: none)."""
        return min((seed.next_try for seed in self._by_endpoint.values()
                    if seed.refused is None and seed.peer is None), default=float("inf"))
