"""The mesh's driver: the thin I/O side of :class:`~huddle.protocol.Mesh`.

It turns what happens outside the state machine into calls on it: frames the
transport received, a connection that failed or stalled, a peer that discovery
saw, the clock (:meth:`MeshDriver.run`, the timer loop).  After each call it
carries out the actions the mesh returns (:meth:`MeshDriver.execute`): send on
the transport (a live XMSG to every peer encoded once; the octets sent counted
by type), commit the log's staged records, publish an event, connect, disconnect, in
the order given: a :class:`~huddle.protocol.events.Commit` before the sends that follow it
(this node's own records leave only once durable).  A failure it survives (an
action that cannot be carried out, a message whose handling raised, a turn of
the timer loop that raised) is counted in :class:`~huddle.transport.stats.DriverStats`
and logged at most once a minute per kind; the node goes on.

It also holds the senders' side of back-pressure: an addressed message waits
for room in a full buffer (:meth:`MeshDriver.send_to_wait`), a chat line for a
peer's long send queue to drain.

The node (node.py) makes one driver, gives it the mesh, the transport and the mesh's
services once they exist (:meth:`MeshDriver.attach`), and routes the events it publishes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from typing import Any

from .errors import LocalProtocolError, NotRunning
from .ids import NodeId
from .protocol import Action, Commit, Connect, Disconnect, Event, Mesh, Notify, Send
from .protocol.core import CoreServices
from .protocol.delivery import BufferFull
from .protocol.events import BufferSpace, ServiceEvent
from .ratelog import RateLog
from .transport.stats import DriverStats, TrafficStats
from .transport.zmq_transport import ZmqTransport
from .wire import TAG_CHAT, encode_parts

__all__ = ["BACKPRESSURE", "FAILURE_LOG_EVERY", "TICK_RETRY", "MeshDriver"]

log = logging.getLogger("huddle.driver")

# A sender waits (async) while a peer's overflow queue is above this many messages.
BACKPRESSURE = 20_000
# After a turn of the timer loop failed, the next comes this much later (no busy loop).
TICK_RETRY = 0.05
# The driver logs a failure it survived at most this often, per kind (the rest are counted).
FAILURE_LOG_EVERY = 60.0

_CHAT_TYPE_OCTETS = len(TAG_CHAT)  # a CHAT's octets counted in TrafficStats: its type and its body

Publish = Callable[[Event | ServiceEvent], None]


def _wake(sleeper: asyncio.Future[None]) -> None:
    if not sleeper.done():
        sleeper.set_result(None)


class MeshDriver:
    """Carries the mesh's actions out on the transport and feeds it what happens."""

    def __init__(self, clock: Callable[[], float], publish: Publish) -> None:
        self.clock = clock  # the node's local clock
        self.publish = publish  # where a Notify's event goes (the node's subscribers)
        self.mesh: Mesh | None = None
        self.transport: ZmqTransport | None = None
        self.services: CoreServices | None = None  # what the mesh hosts (delivery for send_to; counters)
        self.on_disconnect: list[Callable[[int], None]] = []  # told of each connection closed
        self.stats = DriverStats()
        self.traffic = TrafficStats()
        self._failures = RateLog(log, period=FAILURE_LOG_EVERY)  # per DriverStats counter
        self._space: dict[NodeId, asyncio.Event] = {}  # set when a full send buffer has room again
        # The timer loop sleeps on this future until ``_due`` (the mesh's next deadline); an input
        # that brings a deadline forward (a report due sooner, a frame to retransmit) wakes it.
        self._sleeper: asyncio.Future[None] | None = None
        self._timer: asyncio.TimerHandle | None = None  # sets the sleeper's result at _due
        self._due = math.inf
        self._depth = 0  # execute() calls under way: one runs inside another when a listener sends

    def attach(self, mesh: Mesh, transport: ZmqTransport, services: CoreServices | None = None) -> None:
        """Drive ``mesh`` on ``transport``; ``services``: the ones it hosts (None: none)."""
        self.mesh, self.transport, self.services = mesh, transport, services

    def running(self) -> Mesh:
        if self.mesh is None:
            raise NotRunning("the node is not running")
        return self.mesh

    # ------------------------------------------------------- into the mesh

    def on_frames(self, batch: list[list[bytes]], sources: list[str]) -> None:
        mesh = self.mesh
        if mesh is None:
            return
        now = self.clock()
        count, received = self.traffic.count_received, self.traffic.received
        chat, publish, chat_tag = mesh.receive_chat, self.publish, TAG_CHAT
        general = False  # a message went through Mesh.receive: its actions are carried out after the batch
        for frames, source in zip(batch, sources, strict=True):
            try:
                # CHAT's fast path (docs/architecture.md): the mesh decides and counts as receive()
                # would, and hands the event back instead of queuing a Notify; anything it does not
                # take goes to the general path.  It queues no action and moves no deadline.
                if len(frames) == 3 and frames[1] == chat_tag:
                    received[chat_tag] += _CHAT_TYPE_OCTETS + len(frames[2])  # what count() adds for it
                    event = chat(frames, now, source)
                    if event is not None:
                        if general:  # what the messages before it queued comes first, as it always did
                            general = False
                            self.execute()
                        publish(event)
                        continue
                else:
                    count(frames)
                general = True
                mesh.receive(frames, now, source)
            except Exception as exc:  # one message must not cost the others of the batch
                self.survived("receive_failures", "handling a received message", exc)
        if general:
            self.execute()

    def on_connect_failed(self, conn: int) -> None:
        if self.mesh is not None:
            self.mesh.connect_failed(conn, self.clock())
            self.execute()

    def on_stalled(self, conn: int) -> None:
        if self.mesh is not None:
            self.mesh.not_responding(conn, self.clock())
            self.execute()

    def discovered(self, peer: NodeId, endpoint: str) -> None:
        if self.mesh is not None:
            self.mesh.discovered(peer, endpoint, self.clock())
            self.execute()

    async def run(self, every: float, on_interval: Callable[[float], None]) -> None:
        """The timer loop: poll the transport, tick the mesh, carry out its actions, sleep
        until its next deadline; ``on_interval(now)`` every ``every`` seconds.

        An idle node wakes only when a timer is due (its heartbeats, mostly), not at a fixed
        rate: each wake-up of an idle process is what a group of many nodes on one machine
        pays for.  Whatever is handed in between (frames, a send) is followed by
        :meth:`execute`, which wakes the loop sooner if that brought a deadline forward."""
        mesh, transport = self.mesh, self.transport
        assert mesh is not None and transport is not None
        loop = asyncio.get_running_loop()
        next_interval = self.clock()
        while True:
            now = self.clock()
            try:
                if now >= next_interval:
                    next_interval = now + every
                    on_interval(now)
                transport.poll()
                mesh.tick(now)
                self.execute()
                due = min(mesh.next_deadline(now), next_interval)
            except Exception as exc:  # a bug or a bad input must not stop the node's clock
                self.survived("tick_failures", "a turn of the timer loop", exc)
                due = self.clock() + TICK_RETRY
            sleeper = loop.create_future()
            self._sleeper, self._due = sleeper, due
            self._timer = loop.call_later(max(0.0, due - self.clock()), _wake, sleeper)
            try:
                await sleeper
            finally:
                if self._timer is not None:
                    self._timer.cancel()
                self._sleeper, self._timer, self._due = None, None, math.inf

    # ------------------------------------------------------- out of the mesh

    def execute(self) -> None:
        mesh = self.mesh
        transport = self.transport
        if mesh is None or transport is None:
            return
        try:
            actions = mesh.take_actions()
        except Exception as exc:
            self.survived("action_failures", "taking the protocol's actions", exc)
            return
        self._depth += 1
        try:
            self._carry_out(actions, transport)
        finally:
            self._depth -= 1
        sleeper = self._sleeper
        # The timer loop sleeps: bring its wake-up forward if a deadline came sooner.  Not from
        # inside another execute() (a listener that answered an event): that one asks after.
        if sleeper is not None and not self._depth:
            try:
                now = self.clock()
                due = mesh.next_deadline(now)
                if due < self._due:
                    if self._timer is not None:
                        self._timer.cancel()
                    self._due = due
                    self._timer = asyncio.get_running_loop().call_later(max(0.0, due - now), _wake, sleeper)
            except Exception as exc:
                self.survived("tick_failures", "a turn of the timer loop", exc)
                _wake(sleeper)

    def _carry_out(self, actions: list[Action], transport: ZmqTransport) -> None:
        last_msg: object = None
        frames: list[bytes] = []
        octets = 0
        sent = self.traffic.sent
        for action in actions:
            try:
                if isinstance(action, Send):
                    if action.message is not last_msg:  # a live XMSG goes to every peer: encode it once
                        frames = encode_parts(action.message)
                        octets = sum(map(len, frames))
                        last_msg = action.message
                    if transport.send(action.conn, frames):
                        kind = frames[0]  # one of TRAFFIC_TYPES (we encoded it), or a type added since
                        sent[kind] = sent.get(kind, 0) + octets
                elif isinstance(action, Notify):
                    self.publish(action.event)
                elif isinstance(action, Commit):
                    action.store.commit()
                elif isinstance(action, Connect):
                    transport.connect(action.conn, action.endpoint)
                elif isinstance(action, Disconnect):
                    transport.disconnect(action.conn, action.flush)
                    for forget in self.on_disconnect:
                        forget(action.conn)
            except Exception as exc:  # one action that cannot be carried out must not stop the others ...
                self.survived("action_failures", f"an action ({type(action).__name__})", exc)
                if isinstance(action, Commit):
                    break  # ... but a commit: what follows may send records that are not durable

    def survived(self, counter: str, what: str, exc: Exception) -> None:
        """Count a failure the driver survived; log it at most once a minute per counter
        (ratelog.py), the first one with its traceback."""
        n = getattr(self.stats, counter) + 1
        setattr(self.stats, counter, n)
        left_out = self._failures.due(counter, self.clock())
        if left_out is not None:
            log.error("survived a failure of %s (%d so far, %d not logged since the last line): %r", what, n,
                      left_out, exc, exc_info=exc if n == 1 else None)

    def counters(self, discovery: dict[str, Any]) -> dict[str, Any]:
        """The node's counters as ``GET /api/v1/node`` shows them (``stats``): the mesh's,
        the transport's, ``discovery``'s (by finder), the peer services', the driver's."""
        mesh = self.running()
        stats: dict[str, Any] = dict(mesh.stats.as_dict())
        if self.transport is not None:
            stats["send_dropped"] = self.transport.send_dropped
            stats["mesh_connections"] = self.transport.accepted.stats.as_dict()
        stats["foreign_by_address"] = dict(mesh.blamed)
        stats.update(discovery)
        services = self.services
        if services is not None:
            stats.update(services.reports.stats.as_dict())
            if services.delivery is not None:
                stats["delivery"] = services.delivery.stats.as_dict()
        stats["driver"] = self.stats.as_dict()
        stats["traffic"] = self.traffic.as_dict()
        return stats

    # ------------------------------------------------------- senders

    def send_chat(self, text: str, to: NodeId | None = None) -> int:
        """Send a chat line now, to ``to`` or every admitted peer: CHAT's fast path out
        (:meth:`Mesh.chat_frames`: the frames encoded once, straight to the transport, no
        actions); returns how many peers.  Raises LocalProtocolError as :meth:`Mesh.chat` does."""
        mesh, transport = self.mesh, self.transport
        if mesh is None:
            raise NotRunning("the node is not running")
        frames, conns = mesh.chat_frames(text, to)
        if transport is not None:
            octets = len(frames[0]) + len(frames[1])
            sent = 0
            for conn in conns:
                if transport.send(conn, frames):
                    sent += octets
            if sent:
                traffic = self.traffic.sent
                traffic[TAG_CHAT] = traffic.get(TAG_CHAT, 0) + sent
        return len(conns)

    def send_to(self, peer: NodeId, payload: bytes) -> int:
        """Queue an addressed message; returns its sequence.  Raises NotIncluded,
        MessageTooLarge or BufferFull (nothing queued) at once."""
        self.running()
        delivery = None if self.services is None else self.services.delivery
        if delivery is None:
            raise LocalProtocolError("this node's mesh hosts no addressed delivery")
        seq = delivery.send(peer, payload, self.clock())  # a peer that is away gets it when it returns
        self.execute()
        return seq

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        """As :meth:`send_to`, but wait up to ``timeout`` seconds for room in a full buffer."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                return self.send_to(peer, payload)
            except BufferFull:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise
                event = self._space.setdefault(peer, asyncio.Event())
                event.clear()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(event.wait(), min(left, 0.5))

    def wake_sender(self, event: BufferSpace) -> bool:
        """An event subscriber: a full buffer has room again (never consumes the event)."""
        space = self._space.get(event.peer)
        if space is not None:
            space.set()
        return False

    async def wait_drained(self, to: NodeId | None, timeout: float) -> None:
        """Wait while the send queue of ``to`` (of every live peer if None) is long;
        a peer that stays full for ``timeout`` is skipped."""
        transport = self.transport
        if transport is not None and transport.any_backlog():
            mesh = self.running()
            for peer in [to] if to is not None else mesh.alive_peers():
                conn = mesh.conn_of(peer)
                if conn is not None and transport.backlog(conn) >= BACKPRESSURE:
                    await transport.wait_drained(conn, BACKPRESSURE // 2, timeout)

    def queued_bulk(self, peer: NodeId) -> int:
        """Octets of BULK data sent to ``peer`` that are not yet on its connection (0 if
        it is not admitted): a peer that asks for content and does not read it grows this."""
        conn = self.running().conn_of(peer)
        transport = self.transport
        return 0 if conn is None or transport is None else transport.queued_large(conn)
