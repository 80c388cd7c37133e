"""What the protocol core tells the outside world: actions for the driver to
perform and events for applications.  All frozen dataclasses but ``ChatReceived``,
an immutable NamedTuple (the commonest event, made once per chat line received)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from ..counters import Counters
from ..ids import NodeId
from ..wire import LogRecord, Message

__all__ = [
    "NOT_STATISTICS",
    "Action",
    "BufferSpace",
    "ChatReceived",
    "ClockSynced",
    "Commit",
    "Connect",
    "Counters",
    "Disconnect",
    "Event",
    "LogAppended",
    "MessageReceived",
    "Notify",
    "PeerExcluded",
    "PeerJoined",
    "PeerLeft",
    "PeerNew",
    "PeerRefused",
    "PeerStateChanged",
    "SeedSilent",
    "Send",
    "ServiceEvent",
    "json_row",
]


# ----------------------------------------------------------------------- actions


@dataclass(frozen=True, slots=True)
class Connect:
    """Open an outgoing connection (a DEALER) numbered ``conn`` to ``endpoint``."""

    conn: int
    endpoint: str


@dataclass(frozen=True, slots=True)
class Send:
    """Send ``message`` on connection ``conn``."""

    conn: int
    message: Message


@dataclass(frozen=True, slots=True)
class Disconnect:
    """Close connection ``conn``; with ``flush`` give queued messages a moment to leave."""

    conn: int
    flush: bool = False


class ServiceEvent:
    """The base of what a peer service hands to its own driver outside the mesh (the posts
    service's Hydra messages, BULKs and peers, posts/peer.py): carried by :class:`Notify`
    like an event, but the node routes it to that driver alone; it is not an event of
    the applications' stream and never a statistics row."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class Notify:
    """Hand ``event`` to the applications (a :class:`ServiceEvent`: to its service's driver)."""

    event: Event | ServiceEvent


class Durable(Protocol):
    """What a :class:`Commit` makes durable: a store that stages writes (the log's)."""

    def commit(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Commit:
    """Make what ``store`` staged durable, before any action that follows it is carried out:
    a node's own records are sent only once committed (log/store.py commits them with
    ``synchronous=FULL``).  If it fails, the actions after it are not carried out."""

    store: Durable


Action = Connect | Send | Disconnect | Notify | Commit


# ------------------------------------------------------------------------ events


@dataclass(frozen=True, slots=True)
class PeerJoined:
    peer: NodeId
    name: str
    endpoint: str
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "peer_joined", "peer": str(self.peer), "name": self.name,
                "endpoint": self.endpoint, "time": self.time}


@dataclass(frozen=True, slots=True)
class PeerLeft:
    peer: NodeId
    name: str
    reason: str
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "peer_left", "peer": str(self.peer), "name": self.name,
                "reason": self.reason, "time": self.time}


@dataclass(frozen=True, slots=True)
class PeerStateChanged:
    peer: NodeId
    name: str
    state: str
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "peer_state", "peer": str(self.peer), "name": self.name,
                "state": self.state, "time": self.time}


@dataclass(frozen=True, slots=True)
class PeerNew:
    """A node was seen for the first time (reported once per UUID), and is now included."""

    peer: NodeId
    name: str
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "peer_new", "peer": str(self.peer), "name": self.name, "time": self.time}


@dataclass(frozen=True, slots=True)
class PeerExcluded:
    """A node was excluded: it is never admitted again."""

    peer: NodeId
    name: str
    reason: str
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "peer_excluded", "peer": str(self.peer), "name": self.name, "reason": self.reason,
                "time": self.time}


@dataclass(frozen=True, slots=True)
class CutOff:
    """The node lost its last peer (``cut_off`` true), or, cut off, met one
    again (false).  A node alone from its start is not cut off."""

    cut_off: bool
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "cut_off" if self.cut_off else "reconnected", "time": self.time}


@dataclass(frozen=True, slots=True)
class PeerRefused:
    """A session was refused, by us or by them; ``reason`` says why."""

    peer: NodeId | None
    endpoint: str
    reason: str
    by_us: bool
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "peer_refused", "peer": None if self.peer is None else str(self.peer),
                "endpoint": self.endpoint, "reason": self.reason, "by_us": self.by_us,
                "time": self.time}


@dataclass(frozen=True, slots=True)
class SeedSilent:
    """A seed the operator named has not answered for ``silent`` seconds (``tries`` HELOs):
    said once, then at most once a minute while it stays silent (protocol/seeds.py)."""

    endpoint: str
    silent: float
    tries: int
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "seed_silent", "endpoint": self.endpoint, "silent_s": self.silent, "tries": self.tries,
                "time": self.time}


class ChatReceived(NamedTuple):
    """A chat line from ``peer``.  The one event that is not a dataclass: it is built for
    every CHAT received, on the round trip's path, and a NamedTuple (immutable, compared
    and hashed by its fields as the frozen dataclasses are) costs a third as much to make."""

    peer: NodeId
    name: str
    text: str
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "chat", "from": str(self.peer), "name": self.name,
                "text": self.text, "time": self.time}


@dataclass(frozen=True, slots=True)
class ClockSynced:
    peer: NodeId
    offset: float
    rtt: float
    time: float

    def to_json(self) -> dict[str, Any]:
        return {"type": "clock_synced", "peer": str(self.peer), "offset": self.offset,
                "rtt_ms": self.rtt * 1000.0, "time": self.time}


@dataclass(frozen=True, slots=True)
class LogAppended:
    """Records newly held by this node, in runs: its own (``None``) or received
    from a peer (as received: the hop to this node is not yet counted in ``hops``)."""

    runs: tuple[tuple[Sequence[LogRecord], NodeId | None], ...]

    @property
    def records(self) -> Iterator[tuple[LogRecord, NodeId | None]]:
        """Each record with the peer it came from."""
        for run, frm in self.runs:
            for r in run:
                yield r, frm

    def count(self) -> int:
        return sum(len(run) for run, _ in self.runs)

    def to_json(self) -> dict[str, Any]:
        return {"type": "log", "events": [record_json(r, f, arriving=True) for r, f in self.records]}


@dataclass(frozen=True, slots=True)
class MessageReceived:
    """An addressed message, delivered in the sender's order, once."""

    peer: NodeId
    seq: int
    payload: bytes

    def to_json(self) -> dict[str, Any]:
        """Up to 1 MiB, the payload is included: as ``text`` if it is UTF-8, else as ``base64``."""
        out: dict[str, Any] = {"type": "message", "peer": str(self.peer), "seq": self.seq, "size": len(self.payload)}
        if len(self.payload) <= 1024 * 1024:
            try:
                out["text"] = self.payload.decode("utf-8")
            except UnicodeDecodeError:
                out["base64"] = base64.b64encode(self.payload).decode("ascii")
        return out


@dataclass(frozen=True, slots=True)
class BufferSpace:
    """A peer's send buffer has room again after a refused send."""

    peer: NodeId
    free: int

    def to_json(self) -> dict[str, Any]:
        return {"type": "buffer_space", "peer": str(self.peer), "free": self.free}


# The events that are not statistics (the log's, chat's, addressed messages'): no row.
NOT_STATISTICS: tuple[type, ...] = (LogAppended, ChatReceived, MessageReceived, BufferSpace)


def stat_row(event: Event) -> tuple[float, str, NodeId | None, str] | None:
    """A membership or clock event as a statistics row ``(time, type, peer,
    detail JSON)``, as the node stores it and ``huddle export`` writes it;
    ``None`` for the log's and chat's events (``NOT_STATISTICS``)."""
    if isinstance(event, NOT_STATISTICS):
        return None
    return json_row(event.to_json(), getattr(event, "peer", None))


def json_row(detail: dict[str, Any], peer: NodeId | None) -> tuple[float, str, NodeId | None, str]:
    """An event's JSON (``type``, ``time`` and the rest: taken apart) as a statistics row;
    a feature's events are rendered by the feature (huddle/ports.py) and made rows here."""
    return float(detail.pop("time")), str(detail.pop("type")), peer, json.dumps(detail, ensure_ascii=False)


def record_json(r: LogRecord, received_from: NodeId | None = None, *, arriving: bool = False) -> dict[str, Any]:
    """A record for the API.  ``arriving``: as received, before the store
    counted the hop to this node."""
    return {
        "type": "event",
        "source": str(r.source),
        "seq": r.seq,
        "timestamp": r.timestamp,
        "kind": r.kind,
        "body": json.loads(r.body),
        "hops": r.hops + (1 if arriving and received_from is not None else 0),
        "received_from": None if received_from is None else str(received_from),
    }


Event = (PeerJoined | PeerLeft | PeerStateChanged | PeerRefused | ChatReceived | ClockSynced | LogAppended
         | MessageReceived | BufferSpace | PeerNew | PeerExcluded | CutOff | SeedSilent)
