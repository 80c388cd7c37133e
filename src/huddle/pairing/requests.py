"""The pairing door's requests: who asks to join, and what each is answered (docs/security.md, "Pairing").

Pure: no sockets, no clock (every call is given ``now``, in seconds).  The door
(:mod:`huddle.pairing.door`) asks :meth:`Requests.ask` at each PAIR it reads; a member's
operator accepts or refuses by fingerprint.  A request moves through one table,
:data:`TRANSITIONS`; a move not in it raises :class:`~huddle.errors.LocalProtocolError`.

    (new) --ask--> pending --accept--> accepted --expire--> (gone)
                      |  \\--refuse--> (gone; its fingerprint remembered as refused)
                      |   \\--expire--> (gone)
                      \\--elsewhere--> (gone; another member accepted it)

Bounds: at most ``max_pending`` requests pending, ``per_address`` of one source address,
and new requests at ``rate`` a second (a bucket of ``burst``); a request past them is
answered REFUSED-for-now (``rate_limited``) and not kept.  A refused or expired request is
removed whole: what is left are the counters, and the refused fingerprint in a bounded
memory (``memory`` entries, each for ``ttl``), so that a refused device asking again within
the TTL is refused at once rather than listed again.  Fingerprints another member accepted
are remembered the same way, and answered PENDING without being listed.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from ..errors import LocalProtocolError
from ..security import fingerprint

__all__ = ["TRANSITIONS", "Answer", "PairingStats", "Request", "Requests", "State"]


class State(enum.Enum):
    NEW = "new"
    PENDING = "pending"
    ACCEPTED = "accepted"
    GONE = "gone"


class Answer(enum.Enum):
    """What the door answers one PAIR."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    REFUSED = "refused"
    LIMITED = "rate-limited"  # not kept: ask again later


# (state, move) -> the state it leads to; anything else is refused.
TRANSITIONS: Final[dict[tuple[State, str], State]] = {
    (State.NEW, "ask"): State.PENDING,
    (State.PENDING, "ask"): State.PENDING,
    (State.PENDING, "accept"): State.ACCEPTED,
    (State.PENDING, "refuse"): State.GONE,
    (State.PENDING, "expire"): State.GONE,
    (State.PENDING, "elsewhere"): State.GONE,
    (State.ACCEPTED, "ask"): State.ACCEPTED,
    (State.ACCEPTED, "expire"): State.GONE,
}


def transition(state: State, move: str) -> State:
    """The state ``move`` leads to from ``state``; LocalProtocolError if the table has no such move."""
    try:
        return TRANSITIONS[state, move]
    except KeyError:
        raise LocalProtocolError(f"a pairing request cannot {move} when {state.value}") from None


@dataclass(slots=True)
class Request:
    """One device asking to join: its Ed25519 key, what it says it is, where it asks from."""

    public_key: bytes
    name: str
    node_id: str  # 32 hex digits: the id its key gives
    address: str  # the source IP address the door saw
    first_seen: float
    last_seen: float
    expires: float
    state: State = State.PENDING

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.public_key)

    def as_dict(self, now: float) -> dict[str, object]:
        return {"fingerprint": self.fingerprint, "name": self.name, "node": self.node_id, "address": self.address,
                "public_key": self.public_key.hex(), "age": round(max(0.0, now - self.first_seen), 1),
                "expires_in": round(max(0.0, self.expires - now), 1)}


@dataclass(slots=True)
class PairingStats:
    """The ``pairing`` counters (``pending`` is a gauge)."""

    requests: int = 0  # new requests listed
    pending: int = 0
    accepted: int = 0
    refused: int = 0  # by an operator, and asks of a refused fingerprint
    expired: int = 0
    rate_limited: int = 0  # new requests past the rate or the caps
    malformed: int = 0  # PAIRs that did not parse or did not match their connection's key (the door counts them)

    def as_dict(self) -> dict[str, int]:
        return {"requests": self.requests, "pending": self.pending, "accepted": self.accepted,
                "refused": self.refused, "expired": self.expired, "rate_limited": self.rate_limited,
                "malformed": self.malformed}


@dataclass(slots=True)
class _Bucket:
    rate: float
    burst: float
    tokens: float
    at: float = 0.0

    def take(self, now: float) -> bool:
        self.tokens = min(self.burst, self.tokens + max(0.0, now - self.at) * self.rate)
        self.at = now
        if self.tokens < 1.0:
            return False
        self.tokens -= 1.0
        return True


@dataclass
class Requests:
    """The requests one door holds (the module docstring)."""

    ttl: float = 600.0
    max_pending: int = 16
    per_address: int = 2
    rate: float = 0.5  # new requests a second, after a burst of ``burst``
    burst: int = 8
    memory: int = 64  # fingerprints remembered as refused (or accepted elsewhere)
    stats: PairingStats = field(default_factory=PairingStats)

    def __post_init__(self) -> None:
        self._requests: dict[str, Request] = {}  # fingerprint -> its request (pending or accepted)
        self._refused: OrderedDict[str, float] = OrderedDict()  # fingerprint -> until
        self._elsewhere: OrderedDict[str, float] = OrderedDict()
        self._bucket = _Bucket(self.rate, float(self.burst), float(self.burst))

    # ------------------------------------------------------------------ the door's side

    def ask(self, now: float, public_key: bytes, name: str, node_id: str, address: str) -> Answer:
        """A PAIR from a device whose key the door authenticated: what to answer it."""
        self.expire(now)
        fp = fingerprint(public_key)
        if fp in self._refused:
            self.stats.refused += 1
            return Answer.REFUSED
        if fp in self._elsewhere:
            return Answer.PENDING
        request = self._requests.get(fp)
        if request is not None:
            request.state = transition(request.state, "ask")
            request.last_seen = now
            request.address = address
            return Answer.ACCEPTED if request.state is State.ACCEPTED else Answer.PENDING
        pending = [r for r in self._requests.values() if r.state is State.PENDING]
        if (len(pending) >= self.max_pending or sum(r.address == address for r in pending) >= self.per_address
                or not self._bucket.take(now)):
            self.stats.rate_limited += 1
            return Answer.LIMITED
        self._requests[fp] = Request(public_key, name, node_id, address, now, now, now + self.ttl,
                                     transition(State.NEW, "ask"))
        self.stats.requests += 1
        self._count()
        return Answer.PENDING

    def accepted_key(self, fp: str) -> bytes | None:
        """The key of an accepted request (the only key that may be given the secret)."""
        request = self._requests.get(fp)
        return request.public_key if request is not None and request.state is State.ACCEPTED else None

    # ------------------------------------------------------------------ the operator's side

    def pending(self, now: float) -> list[Request]:
        """The requests waiting for an answer, oldest first."""
        self.expire(now)
        return sorted((r for r in self._requests.values() if r.state is State.PENDING), key=lambda r: r.first_seen)

    def accept(self, now: float, fp: str) -> Request | None:
        """Accept the pending request of ``fp`` (None: none pending); its device gets the secret at its next PAIR."""
        request = self._pending(now, fp)
        if request is None:
            return None
        request.state = transition(request.state, "accept")
        request.expires = now + self.ttl
        self.stats.accepted += 1
        self._count()
        return request

    def refuse(self, now: float, fp: str) -> Request | None:
        """Refuse the pending request of ``fp`` (None: none pending): removed, its fingerprint refused for a TTL."""
        request = self._pending(now, fp)
        if request is None:
            return None
        transition(request.state, "refuse")
        del self._requests[fp]
        self._remember(self._refused, fp, now)
        self.stats.refused += 1
        self._count()
        return request

    def elsewhere(self, now: float, fp: str) -> None:
        """Another member accepted ``fp``: its request here (if pending) goes, and it is not listed again."""
        request = self._requests.get(fp)
        if request is not None and request.state is State.PENDING:
            transition(request.state, "elsewhere")
            del self._requests[fp]
            self._count()
        if request is None or request.state is State.PENDING:
            self._remember(self._elsewhere, fp, now)

    def expire(self, now: float) -> None:
        """Remove the requests and memories whose time is up."""
        for fp in [fp for fp, r in self._requests.items() if r.expires <= now]:
            transition(self._requests.pop(fp).state, "expire")
            self.stats.expired += 1
        for memory in (self._refused, self._elsewhere):
            while memory and next(iter(memory.values())) <= now:
                memory.popitem(last=False)
        self._count()

    # ------------------------------------------------------------------ inside

    def _pending(self, now: float, fp: str) -> Request | None:
        self.expire(now)
        request = self._requests.get(fp)
        return request if request is not None and request.state is State.PENDING else None

    def _remember(self, memory: OrderedDict[str, float], fp: str, now: float) -> None:
        memory.pop(fp, None)
        memory[fp] = now + self.ttl  # in order of expiry: every entry gets the same TTL
        while len(memory) > self.memory:
            memory.popitem(last=False)

    def _count(self) -> None:
        self.stats.pending = sum(r.state is State.PENDING for r in self._requests.values())
