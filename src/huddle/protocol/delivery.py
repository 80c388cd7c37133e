"""Addressed messages, sans-I/O: ordered, exactly once, across lost frames and reconnects.

Each pair of nodes has a channel in each direction.  A message is cut into
frames of at most ``mtu`` octets (DMSG); every frame of the channel has a
sequence number ``fseq`` (1, 2, ...), and the receiver acknowledges the
highest ``fseq`` up to which it holds everything (DACK).  The sender keeps
each frame until it is acknowledged and sends it again after
``retransmit_after`` seconds without progress; at most ``window`` frames
(and ``window_bytes``) are in flight.  The receiver delivers frames in ``fseq`` order, joins fragments,
drops duplicates and keeps a bounded number of early frames.

A channel outlives the connection: when a peer comes back with the same
incarnation, unacknowledged frames are simply sent again.  When it comes back
with a new incarnation (it restarted and forgot its side), every message not
fully acknowledged is cut again from ``fseq`` 1 and sent to the new
incarnation, and what we were receiving from the old one is discarded.

Each peer's channel has a bounded buffer (``buffer_bytes``): queued and
unacknowledged octets.  :meth:`Delivery.send` refuses a message that does not
fit (:class:`BufferFull`); the driver can wait for :class:`BufferSpace`.

A delivered message is announced (MessageReceived) unless its payload starts
with the prefix of a :class:`~huddle.protocol.service.PayloadTaker` given at
construction (the posts service's Hydra signature): then it is handed to that
service, and delivery knows nothing more of it.
Time is passed in; nothing here does I/O.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Final

from ..errors import LocalProtocolError, NoSuchPeer, TooLarge
from ..ids import NodeId
from ..wire import Dack, Dmsg, Message
from .events import BufferSpace, Counters, MessageReceived, Notify, Send
from .service import BUSY_POLL, DETACHED, MeshView, PayloadTaker, PeerFacts

__all__ = ["BufferFull", "Delivery", "DeliveryTiming", "MessageTooLarge", "NotIncluded"]


class BufferFull(LocalProtocolError):
    """The peer's send buffer is full: wait (BufferSpace) or try later."""


class MessageTooLarge(TooLarge):
    """The message is larger than the configured largest message."""


class NotIncluded(NoSuchPeer):
    """The node is not a peer we can send to."""


@dataclass(frozen=True, slots=True)
class DeliveryTiming:
    mtu: int = 60_000  # payload octets per frame
    max_message: int = 128 * 1024 * 1024
    window: int = 1024  # frames in flight per peer...
    window_bytes: int = 1024 * 1024  # ...and octets (at least one frame goes)
    buffer_bytes: int = 16 * 1024 * 1024  # queued + unacknowledged octets per peer
    retransmit_after: float = 0.5
    early_frames: int = 1024  # frames kept that arrived ahead of a gap (as many as a sender has in flight)...
    early_bytes: int = 4 * 1024 * 1024  # ...and their octets

    def __post_init__(self) -> None:
        if not 1 <= self.mtu <= 512 * 1024:
            raise ValueError("mtu must be 1..524288 octets")
        if (self.max_message < 1 or self.window < 1 or self.window_bytes < 1 or self.buffer_bytes < 1
                or self.retransmit_after <= 0):
            raise ValueError("max_message, window, window_bytes, buffer_bytes and retransmit_after must be positive")


@dataclass(slots=True)
class _Frame:
    fseq: int
    mseq: int
    index: int
    count: int
    payload: bytes
    sent_at: float = float("-inf")


@dataclass(slots=True)
class _Channel:
    conn: int | None
    incarnation: str
    # sending
    next_fseq: int = 1
    next_mseq: int = 1
    unacked: deque[_Frame] = field(default_factory=deque)  # in fseq order; the first `inflight` were sent
    inflight: int = 0
    inflight_bytes: int = 0  # octets of the first `inflight` frames
    buffered: int = 0
    progress_at: float = 0.0
    waiting: bool = False  # a send was refused: announce BufferSpace when there is room
    full_since: float | None = None  # when a send was first refused, while the buffer stays full
    # receiving
    expected: int = 1
    early: dict[int, Dmsg] = field(default_factory=dict)
    early_bytes: int = 0
    parts: list[bytes] = field(default_factory=list)
    ack_due: bool = False
    # pacing: the peer's node type may limit the octets per second sent to it
    rate: int = 0  # 0: no limit
    tokens: float = 0.0
    tokens_at: float = 0.0
    # per-peer counters, for the system picture
    frames_sent: int = 0  # every DMSG sent, first transmissions and repeats
    frames_resent: int = 0


@dataclass(slots=True)
class DeliveryStats(Counters):
    messages_sent: int = 0
    messages_received: int = 0
    frames_sent: int = 0
    frames_resent: int = 0
    frames_received: int = 0
    duplicates: int = 0
    dropped_early: int = 0
    acks_sent: int = 0


class Delivery:
    """Addressed delivery as a peer service (protocol/service.py): DMSG and DACK.  A peer
    whose buffer stays full for the mesh's ``exclude_slow_after`` is excluded until it restarts.
    ``takers`` get the payloads that start with their prefix (module docstring); two whose
    prefixes overlap (one starts the other) are a ``ValueError``."""

    handles: tuple[type[Message], ...] = (Dmsg, Dack)

    def __init__(self, uuid: NodeId, *, timing: DeliveryTiming | None = None,
                 takers: Iterable[PayloadTaker] = ()) -> None:
        self.uuid: Final = uuid
        self.timing: Final = timing or DeliveryTiming()
        self._takers: Final[tuple[tuple[bytes, Callable[[NodeId, int, bytes], None]], ...]] = tuple(
            (t.prefix, t.take_payload) for t in takers)
        for i, (a, _) in enumerate(self._takers):
            if not a:
                raise ValueError("a payload taker needs a prefix")
            for b, _ in self._takers[i + 1:]:
                if a.startswith(b) or b.startswith(a):
                    raise ValueError(f"two payload takers' prefixes overlap: {a.hex()} and {b.hex()}")
        self.stats = DeliveryStats()
        self._mesh: MeshView = DETACHED
        self._channels: dict[NodeId, _Channel] = {}
        self._actions: list[Send | Notify] = []
        # Channels that owe their peer a DACK: take_actions reads these, not every channel (it
        # runs after each received message batch; scanning all channels cost O(peers) a batch).
        self._acks_due: list[tuple[NodeId, _Channel]] = []
        # Some channel has frames not yet acknowledged, or a buffer that refused a send: the
        # timers (retransmission, pacing, exclusion) then run every BUSY_POLL; else none is due.
        self._busy = False

    # ------------------------------------------------------------- queries

    def free(self, peer: NodeId) -> int:
        ch = self._channels.get(peer)
        return 0 if ch is None else self.timing.buffer_bytes - ch.buffered

    def queued(self, peer: NodeId) -> int:
        """Octets queued or unacknowledged for ``peer``."""
        ch = self._channels.get(peer)
        return 0 if ch is None else ch.buffered

    def stuck(self, now: float, after: float) -> list[NodeId]:
        """Peers whose buffer has refused sends, with no acknowledgement since, for ``after`` seconds."""
        return [p for p, ch in self._channels.items() if ch.full_since is not None and now - ch.full_since >= after]

    def peers(self) -> list[NodeId]:
        return [p for p, ch in self._channels.items() if ch.conn is not None]

    def counters(self, peer: NodeId) -> tuple[int, int, int]:
        """Frames sent (first transmissions), frames sent again, and octets
        queued or unacknowledged for ``peer``."""
        ch = self._channels.get(peer)
        if ch is None:
            return 0, 0, 0
        return ch.frames_sent - ch.frames_resent, ch.frames_resent, ch.buffered

    # ------------------------------------------------------------ commands

    def send(self, peer: NodeId, payload: bytes, now: float) -> int:
        """Queue ``payload`` for ``peer``; returns its message sequence.  Raises
        NotIncluded, MessageTooLarge or BufferFull (then nothing is queued)."""
        t = self.timing
        ch = self._channels.get(peer)
        if ch is None:
            raise NotIncluded(f"{peer.short} is not a peer of this node")
        if len(payload) > t.max_message:
            raise MessageTooLarge(f"message of {len(payload)} octets is larger than the largest allowed, {t.max_message}")
        self._busy = True  # queued, or a full buffer to time: the timers run every BUSY_POLL
        if ch.buffered + len(payload) > t.buffer_bytes:
            ch.waiting = True
            if ch.full_since is None:
                ch.full_since = now
            raise BufferFull(f"send buffer for {peer.short} is full ({ch.buffered} of {t.buffer_bytes} octets queued)")
        mseq = ch.next_mseq
        ch.next_mseq += 1
        self._cut(ch, mseq, payload)
        ch.buffered += len(payload)
        self.stats.messages_sent += 1
        self._pump(ch, now)
        return mseq

    def _cut(self, ch: _Channel, mseq: int, payload: bytes) -> None:
        mtu = self.timing.mtu
        count = max(1, -(-len(payload) // mtu))
        for i in range(count):
            ch.unacked.append(_Frame(ch.next_fseq, mseq, i, count, payload[i * mtu : (i + 1) * mtu]))
            ch.next_fseq += 1

    def attach(self, mesh: MeshView) -> None:
        self._mesh = mesh

    def receive(self, peer: NodeId, msg: Message, now: float) -> None:
        if isinstance(msg, Dmsg):
            self.on_dmsg(peer, msg, now)
        else:
            assert isinstance(msg, Dack)
            self.on_dack(peer, msg, now)

    def next_deadline(self, now: float) -> float:
        return now + BUSY_POLL if self._busy else math.inf

    def peer_up(self, peer: NodeId, conn: int, now: float, facts: PeerFacts) -> None:
        """``peer`` is admitted on ``conn``; ``facts.rate`` is the most octets per
        second it accepts (its node type's send rate; 0: no limit)."""
        incarnation, rate = facts.incarnation, facts.rate
        ch = self._channels.get(peer)
        if ch is None:
            self._channels[peer] = _Channel(conn, incarnation, progress_at=now, rate=rate, tokens_at=now)
            return
        ch.rate, ch.tokens, ch.tokens_at = rate, 0.0, now
        ch.conn = conn
        if ch.incarnation != incarnation:  # it restarted: it knows nothing of this channel
            self._reset(ch, incarnation)
        ch.inflight = ch.inflight_bytes = 0  # what was in flight may be lost with the old connection: send again
        ch.progress_at = now
        self._busy = self._busy or bool(ch.unacked)
        self._pump(ch, now)

    def _reset(self, ch: _Channel, incarnation: str) -> None:
        pending: dict[int, list[_Frame]] = {}
        for f in ch.unacked:
            pending.setdefault(f.mseq, []).append(f)
        ch.incarnation = incarnation
        ch.unacked.clear()
        ch.next_fseq = 1
        ch.buffered = 0
        for mseq, frames in pending.items():
            if frames[0].index != 0:
                continue  # its first fragments went to the old incarnation, which is gone with them
            payload = b"".join(f.payload for f in frames)
            self._cut(ch, mseq, payload)
            ch.buffered += len(payload)
        ch.expected, ch.early, ch.early_bytes, ch.parts, ch.ack_due = 1, {}, 0, [], False

    def peer_down(self, peer: NodeId, now: float) -> None:
        """The connection is gone; the channel stays for a return of the same incarnation."""
        ch = self._channels.get(peer)
        if ch is not None:
            ch.conn = None
            ch.inflight = ch.inflight_bytes = 0

    def forget(self, peer: NodeId) -> None:
        """Drop the channel (the node was excluded)."""
        self._channels.pop(peer, None)

    # ------------------------------------------------------------- receive

    def on_dmsg(self, peer: NodeId, msg: Dmsg, now: float) -> None:
        ch = self._channels.get(peer)
        if ch is None:
            return
        self.stats.frames_received += 1
        if not ch.ack_due:
            ch.ack_due = True
            self._acks_due.append((peer, ch))
        if msg.fseq < ch.expected or msg.fseq in ch.early:
            self.stats.duplicates += 1
            return
        if msg.fseq > ch.expected:
            if len(ch.early) >= self.timing.early_frames or ch.early_bytes >= self.timing.early_bytes:
                self.stats.dropped_early += 1  # it will be sent again
                return
            ch.early[msg.fseq] = msg
            ch.early_bytes += len(msg.payload)
            return
        self._accept(ch, peer, msg)
        while ch.expected in ch.early:
            early = ch.early.pop(ch.expected)
            ch.early_bytes -= len(early.payload)
            self._accept(ch, peer, early)

    def _accept(self, ch: _Channel, peer: NodeId, msg: Dmsg) -> None:
        ch.expected = msg.fseq + 1
        if msg.index == 0:
            ch.parts = []
        elif len(ch.parts) != msg.index:
            return  # a fragment of a message whose start went to an old incarnation
        ch.parts.append(msg.payload)
        if msg.index == msg.count - 1:
            payload = ch.parts[0] if len(ch.parts) == 1 else b"".join(ch.parts)
            ch.parts = []
            self.stats.messages_received += 1
            for prefix, take in self._takers:
                if payload.startswith(prefix):
                    take(peer, msg.mseq, payload)
                    return
            self._actions.append(Notify(MessageReceived(peer, msg.mseq, payload)))

    def on_dack(self, peer: NodeId, msg: Dack, now: float) -> None:
        ch = self._channels.get(peer)
        if ch is None:
            return
        freed = 0
        while ch.unacked and ch.unacked[0].fseq <= msg.upto:
            f = ch.unacked.popleft()
            freed += len(f.payload)
            if ch.inflight:
                ch.inflight -= 1
                ch.inflight_bytes -= len(f.payload)
        if freed:
            ch.buffered -= freed
            ch.progress_at = now
            ch.full_since = None
            if ch.waiting:
                ch.waiting = False
                self._actions.append(Notify(BufferSpace(peer, self.timing.buffer_bytes - ch.buffered)))
        self._pump(ch, now)

    # ---------------------------------------------------------------- time

    def tick(self, now: float) -> None:
        t = self.timing
        for ch in self._channels.values():
            if ch.rate and ch.conn is not None and ch.inflight < len(ch.unacked):
                self._pump(ch, now)  # paced: what waited for tokens may go now
            if ch.conn is None or not ch.inflight:
                continue
            if now - ch.progress_at >= t.retransmit_after:
                # No progress: send the window again from the first unacknowledged frame.
                self.stats.frames_resent += ch.inflight
                ch.frames_resent += ch.inflight
                ch.inflight = ch.inflight_bytes = 0
                ch.progress_at = now
                self._pump(ch, now)
        after = self._mesh.exclude_slow_after
        if after:
            for peer in self.stuck(now, after):
                self._mesh.end_incarnation(peer, f"its send buffer stayed full for {after:g} s", now)
        self._busy = any(ch.unacked or ch.full_since is not None for ch in self._channels.values())

    def take_actions(self) -> list[Send | Notify]:
        if self._acks_due:
            due, self._acks_due = self._acks_due, []
            for peer, ch in due:
                if not ch.ack_due or self._channels.get(peer) is not ch:
                    continue  # reset, or forgotten, since
                if ch.conn is None:
                    self._acks_due.append((peer, ch))  # owed when its peer is back
                    continue
                ch.ack_due = False
                self.stats.acks_sent += 1
                self._actions.append(Send(ch.conn, Dack(self.uuid, ch.expected - 1)))
        actions, self._actions = self._actions, []
        return actions

    # ----------------------------------------------------------- internals

    def _pump(self, ch: _Channel, now: float) -> None:
        """Send queued frames while the window has room."""
        if ch.conn is None:
            return
        window = self.timing.window
        rate = ch.rate
        if rate:
            # A token bucket that holds a tenth of a second's worth: sending may
            # run into debt by one frame, so frames larger than the bucket still go.
            ch.tokens = min(rate / 10, ch.tokens + (now - ch.tokens_at) * rate)
            ch.tokens_at = now
        window_bytes = self.timing.window_bytes
        while ch.inflight < min(window, len(ch.unacked)) and (not ch.inflight or ch.inflight_bytes < window_bytes):
            f = ch.unacked[ch.inflight]
            if rate:
                if ch.tokens <= 0:
                    return
                ch.tokens -= len(f.payload)
            ch.inflight += 1
            ch.inflight_bytes += len(f.payload)
            f.sent_at = now
            ch.frames_sent += 1
            self.stats.frames_sent += 1
            self._actions.append(Send(ch.conn, Dmsg(self.uuid, f.fseq, f.mseq, f.index, f.count, f.payload)))
