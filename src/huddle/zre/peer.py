"""A ZRE peer as this node knows it, sans I/O: the time is passed in, the answers are returned.

A peer is made when its beacon (or its HELLO) is heard.  Its states and the only moves
between them are :data:`TRANSITIONS` (h11's habit: one table, one :meth:`ZrePeer.move`,
``LocalProtocolError`` on any move not in it):

    KNOWN    its beacon was heard, this node's HELLO sent; its own HELLO not yet received
    READY    its HELLO received (the peer has entered)
    EVASIVE  READY, and silent for ``evasive`` seconds: this node sent it a PING
    GONE     expired (silent ``expired`` seconds), lost (a sequence gap), or leaving (port 0)

Sequences are 16 bits: a HELLO is 1, each message after it one more, 65 535 wraps to 0.
A message whose sequence is not the one expected means messages were lost: the peer is
GONE (RFC 36), and comes back as new when it is heard again.  zeromq-pyre 0.3.4 wraps at
65 535 (after 65 534 it sends 0); that one gap is let through (docs/zre.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Final

from ..errors import LocalProtocolError
from .codec import MsgId, ZreMessage

__all__ = ["TRANSITIONS", "Heard", "PeerState", "Timeouts", "ZrePeer"]


class PeerState(Enum):
    KNOWN = "known"
    READY = "ready"
    EVASIVE = "evasive"
    GONE = "gone"


# (from, to): why; the only moves a peer makes.
TRANSITIONS: Final[dict[tuple[PeerState, PeerState], str]] = {
    (PeerState.KNOWN, PeerState.READY): "its HELLO",
    (PeerState.KNOWN, PeerState.GONE): "no HELLO in time, a leaving beacon, or a message out of sequence",
    (PeerState.READY, PeerState.EVASIVE): "silent past the evasive timeout: pinged",
    (PeerState.READY, PeerState.GONE): "a leaving beacon, or a message out of sequence",
    (PeerState.EVASIVE, PeerState.READY): "a message from it",
    (PeerState.EVASIVE, PeerState.GONE): "silent past the expired timeout, a leaving beacon, or out of sequence",
}


@dataclass(frozen=True, slots=True)
class Timeouts:
    evasive: float = 5.0  # silent this long: PING it (Zyre's evasive timeout)
    expired: float = 30.0  # silent this long: it is gone (Zyre's expired timeout)


class Heard(Enum):
    """What a received message means for the node."""

    ENTERED = "entered"  # its HELLO: tell the application, it has its groups and headers now
    MESSAGE = "message"  # in sequence: act on it (WHISPER, SHOUT, JOIN, LEAVE, PING...)
    IGNORED = "ignored"  # in sequence, but nothing to act on (ELECT, LEADER, GOODBYE, a second HELLO)
    LOST = "lost"  # out of sequence or before its HELLO: the peer is GONE


@dataclass(slots=True)
class ZrePeer:
    uuid: bytes
    endpoint: str
    now: float
    timeouts: Timeouts = field(default_factory=Timeouts)
    state: PeerState = PeerState.KNOWN
    name: str = ""
    groups: set[str] = field(default_factory=set)
    headers: dict[str, str] = field(default_factory=dict)
    status: int = 0
    sent: int = 0  # the sequence of the last message sent to it
    wanted: int = 0  # the sequence of the last message received from it
    heard_at: float = 0.0

    def __post_init__(self) -> None:
        self.heard_at = self.now

    def move(self, to: PeerState) -> None:
        if (self.state, to) not in TRANSITIONS:
            raise LocalProtocolError(f"a ZRE peer cannot go from {self.state.value} to {to.value}")
        self.state = to

    def next_sequence(self) -> int:
        """The sequence of the next message to it (HELLO, the first, is 1)."""
        self.sent = (self.sent + 1) & 0xFFFF
        return self.sent

    def received(self, msg: ZreMessage, now: float) -> Heard:
        """Check a message's sequence and take what it says of the peer."""
        if self.state is PeerState.GONE:
            return Heard.LOST
        if msg.id is MsgId.HELLO:
            expected = 1
        else:
            expected = (self.wanted + 1) & 0xFFFF
            if self.wanted == 0xFFFE and msg.sequence == 0:
                expected = 0  # zeromq-pyre 0.3.4 wraps at 65 535 (docs/zre.md)
        if msg.sequence != expected or (self.state is PeerState.KNOWN and msg.id is not MsgId.HELLO):
            self.move(PeerState.GONE)
            return Heard.LOST
        self.wanted, self.heard_at = msg.sequence, now
        if self.state is PeerState.EVASIVE:
            self.move(PeerState.READY)
        if msg.id is MsgId.HELLO:
            if self.state is not PeerState.KNOWN:
                return Heard.IGNORED  # HELLO is its greeting, once (a second one resets nothing)
            self.name, self.status = msg.name, msg.status
            self.groups, self.headers = set(msg.groups), dict(msg.headers)
            self.move(PeerState.READY)
            return Heard.ENTERED
        if msg.id is MsgId.JOIN:
            self.groups.add(msg.group)
            self.status = msg.status
        elif msg.id is MsgId.LEAVE:
            self.groups.discard(msg.group)
            self.status = msg.status
        elif msg.id in (MsgId.ELECT, MsgId.LEADER, MsgId.GOODBYE):
            return Heard.IGNORED
        return Heard.MESSAGE

    def tick(self, now: float) -> bool:
        """Once a second: True when it should be PINGed now (it just became evasive).
        A peer silent past the expired timeout (or, KNOWN, past it with no HELLO) is GONE."""
        if self.state is PeerState.GONE:
            return False
        if now - self.heard_at >= self.timeouts.expired:
            self.move(PeerState.GONE)
            return False
        if self.state is PeerState.READY and now - self.heard_at >= self.timeouts.evasive:
            self.move(PeerState.EVASIVE)
            return True
        return False

    def leave(self) -> None:
        """Its beacon says it is leaving (port 0)."""
        if self.state is not PeerState.GONE:
            self.move(PeerState.GONE)

    def describe(self) -> dict[str, object]:
        return {"uuid": self.uuid.hex(), "name": self.name, "endpoint": self.endpoint, "state": self.state.value,
                "groups": sorted(self.groups), "headers": dict(self.headers), "proto": "zre"}
