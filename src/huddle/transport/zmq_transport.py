"""The only module that imports zmq: one ROUTER inbox, one DEALER per connection.

Sending never blocks the node.  Each DEALER has a send high-water mark and a
zero send timeout; when ZeroMQ's queue is full, messages wait in a bounded
overflow queue of our own and are flushed when the socket becomes writable.
When that overflow is full too, the peer is "not responding": further
messages to it are dropped and counted, and the other peers are unaffected.

Frames after a message's third (a BULK's data: docs/protocol.md 2.2) are
received without a copy, as a memoryview on ZeroMQ's own buffer.

Receiving is bounded in bytes as well as messages: ZeroMQ queues at most
``receive_hwm`` messages per incoming connection (each at most MAXMSGSIZE),
and the driver hands over batches of at most ``receive_batch_bytes`` octets
(and RECV_BATCH messages) before it lets the event loop run again.  Each
message is handed over with the address it came from (``Peer-Address``), so
that the mesh can tie a session to its connection.  Each DEALER's identity is
the node's UUID followed by a random suffix of its own (``CONN_SUFFIX`` octets,
kept when ZeroMQ reconnects it or a key rotation re-opens it), so no two
connections share a routing identity: a connection opened under another node's
UUID holds nothing of that node's (docs/protocol.md 2.1).  The receiving side
hands the UUID on as the sender frame and the suffix with the address, as
``<address>#<suffix hex>`` (a bare UUID, an older node's, with the address alone).
The ROUTER does not hand an identity over to a second connection (the first
keeps it: a reconnect of the same DEALER); TCP keep-alive frees the identity of
a connection that went dead within seconds.

No ZeroMQ heartbeats (ZMTP PING/PONG) on the ROUTER: with them, libzmq 4.3.5
aborts the whole process (``Assertion failed: !_io_error
(src/stream_engine_base.cpp:310)``).  A connection whose input ZeroMQ stopped at
the receive high-water mark and whose peer then resets it (a peer that closed
or died, answering a PING with an RST) is marked failed while it waits for the
node to read on; the heartbeat timer, re-armed unconditionally, then writes a
PING on it and trips the assert (zeromq/libzmq #4364, #3937, #4841).  Without
heartbeats nothing writes on an incoming connection (a node never sends on its
ROUTER), so our own peers cannot reach that assert.  bench/zmq_abort.py
reproduces it; docs/protocol.md 2.1 says what replaces the heartbeats.

In a group with a secret, both ends speak CurveZMQ and a ZAP handler judges each
incoming connection before its first message (transport/zap.py: ``curve``); messages
of a key removed from the allow-list are dropped as they are read.  Open mode (no
``curve``): the wire is as it always was.

Incoming connections that have sent no verified HELO are bounded, per address and in
total, and closed after the handshake timeout (transport/accepted.py: a monitor of the
ROUTER reports each connection's descriptor; the mesh says how many sessions it bound to
each address, and the driver's timer loop sweeps through :meth:`ZmqTransport.poll`).

Opening a connection can fail (out of descriptors: EMFILE); that is logged
(rate-limited), counted and reported through ``on_connect_failed``, never
raised into the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import cast

import zmq
import zmq.backend

from ..ids import CONN_MARK, CONN_SUFFIX, NodeId
from ..limits import MeshLimits
from ..ratelog import RateLog
from ..security import CurveKeypair
from ..wire import MAX_BODY
from .accepted import EVENTS, AcceptedConns, monitor, monitor_events, peer_of, shut, silence_of
from .links import LinkMonitor
from .zap import CurveGuard, CurveSetup, DialKey

__all__ = ["Conn", "ZmqTransport"]

log = logging.getLogger("huddle.transport")

_NOBODY: frozenset[str] = frozenset()  # no revoked key: the receive loop reads no User-Id
RECV_BATCH = 4096
# Plain ints: pyzmq's send_multipart / recv_multipart cost ~2 us more per message.
_NB = int(zmq.NOBLOCK)
_MORE_NB = int(zmq.SNDMORE | zmq.NOBLOCK)
# pyzmq's Socket.send is a Python wrapper (for routing ids and groups) around the compiled send of
# its base class: plain frames are handed to the compiled one directly (~0.4 us less a frame).
_send_frame: Callable[..., object] = (zmq.backend.Socket.send if issubclass(zmq.Socket, zmq.backend.Socket)
                                      else zmq.Socket.send)
_POLLIN = int(zmq.POLLIN)
ZERO_COPY_AFTER = 3  # frames of a message received as bytes; later ones as memoryviews, not copied
ZERO_COPY_SEND = 256 * 1024  # a message's last frame this large is sent without a copy (a BULK's data)
HANDSHAKE_IVL_MS = 5000  # a connection must finish ZeroMQ's greeting within this long
# TCP keep-alive on the ROUTER's connections, in place of ZMTP heartbeats (see above):
KEEPALIVE_IDLE_S = 1  # the kernel probes an incoming connection silent this long ...
KEEPALIVE_INTVL_S = 1  # ... then this often ...
KEEPALIVE_CNT = 3  # ... and resets it after this many unanswered probes: ~4 s of silence
MAX_PARTS = 4  # frames of the longest message (a BULK: sender, type, head, data); more are not kept
LOG_EVERY = 10.0  # seconds between two warnings of one kind of failure
# During a key rotation, messages handed to a connection before its handshake succeeded are
# kept (references) so that a connection refused with one key and re-opened with the other
# sends them again; beyond this many, or this many octets, the rest are left to the mesh's own
# recovery (anti-entropy, HELO again each heartbeat).  Only for the milliseconds of a handshake.
MAX_UNCONFIRMED = 1024
MAX_UNCONFIRMED_OCTETS = 1 << 20
_UUID = 16  # octets of a node's UUID, the start of a DEALER's routing identity
_ROUTING_ID = _UUID + CONN_SUFFIX  # a DEALER's identity: its node's UUID and its own suffix


def _send_parts(sock: zmq.Socket[bytes], frames: list[bytes]) -> zmq.MessageTracker | None:
    """Send a multipart message without blocking.  Raises zmq.Again if it cannot
    be queued: the high-water mark applies to a message's first part only, so a
    message is queued whole or not at all.  A last frame of ZERO_COPY_SEND octets
    or more is not copied: ZeroMQ holds the object until its I/O thread has
    written it to the connection, which the returned tracker tells."""
    last = frames[-1]
    if len(frames) == 2 and len(last) < ZERO_COPY_SEND:  # type and body: nearly every message
        _send_frame(sock, frames[0], _MORE_NB)
        _send_frame(sock, last, _NB)
        return None
    send = sock.send
    for f in frames[:-1]:
        send(f, _MORE_NB)
    if len(last) >= ZERO_COPY_SEND:
        return send(last, _NB, copy=False, track=True)
    send(last, _NB)
    return None


def _written(c: Conn) -> None:
    """Forget the large frames ZeroMQ has written (one socket writes its messages in order)."""
    q = c.large
    while q and q[0][0].done:
        c.large_octets -= q.popleft()[1]


def _track(c: Conn, tracker: zmq.MessageTracker, octets: int) -> None:
    """A large frame handed to ZeroMQ (its octets already counted in ``large_octets``).
    Written ones are forgotten here too, so that a connection whose count nobody asks
    for (large log batches, no posts) keeps only the trackers of frames still queued."""
    _written(c)
    c.large.append((tracker, octets))


def _has_input(items: list[tuple[zmq.Socket[bytes], int]]) -> bool:
    """Whether the socket of ``items`` (``[(sock, POLLIN)]``) has a message to read: zmq_poll
    without waiting reads the socket's ZMQ_EVENTS (so it re-arms the edge-triggered FD as
    asking them does) and costs ~0.7 us less than pyzmq's getsockopt, which looks the
    option up in an enum on every call."""
    return bool(zmq.zmq_poll(items, 0))


@dataclass(slots=True)
class Conn:
    sock: zmq.Socket[bytes]
    endpoint: str
    overflow: deque[list[bytes]] = field(default_factory=deque)
    dropped: int = 0
    msgs: int = 0  # messages accepted for sending on this connection
    octets: int = 0  # ... and their frames' octets
    responding: bool = True
    drained: asyncio.Event = field(default_factory=asyncio.Event)
    # Large last frames (BULK data) accepted and not yet written to the connection by
    # ZeroMQ: those handed to it, oldest first, with their trackers; their octets and
    # those of large frames still in ``overflow``.
    large: deque[tuple[zmq.MessageTracker, int]] = field(default_factory=deque)
    large_octets: int = 0
    # CurveZMQ: the group secret's key id it dials with, those tried, whether a handshake
    # succeeded, and (during a rotation, until then) the messages handed to ZeroMQ.
    key_id: str = ""
    tried: list[str] = field(default_factory=list)
    confirmed: bool = False
    unconfirmed: list[list[bytes]] | None = None
    unconfirmed_octets: int = 0
    suffix: bytes = b""  # the random end of its routing identity (after our UUID): kept by a re-dial


class ZmqTransport:
    """Owns the ZeroMQ context and sockets.  Call from one asyncio thread."""

    def __init__(
        self,
        identity: NodeId,
        *,
        sndhwm: int = 10_000,
        overflow_limit: int = 100_000,
        on_frames: Callable[[list[list[bytes]], list[str]], None],
        on_stalled: Callable[[int], None] = lambda conn: None,
        on_connect_failed: Callable[[int], None] = lambda conn: None,
        limits: MeshLimits | None = None,
        on_link: Callable[[int, bool], None] | None = None,
        curve: CurveSetup | None = None,
    ) -> None:
        """``on_link(conn, up)``: told when a connection drops and when it is back
        (ZeroMQ socket monitors, transport/links.py); None: not watched.
        ``curve``: the mesh's CurveZMQ keys (a group with a secret); None: open mode."""
        self.identity = identity
        self.sndhwm = sndhwm
        self.overflow_limit = overflow_limit
        self._on_frames = on_frames
        self._on_stalled = on_stalled
        self._on_connect_failed = on_connect_failed
        self.limits = limits = limits or MeshLimits()
        self.ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        # The ZAP handler is bound before the ROUTER exists, so no handshake goes unjudged.
        self.guard = None if curve is None else CurveGuard(self.ctx, curve,
                                                             max_addresses=limits.max_blamed_addresses)
        self.router: zmq.Socket[bytes] = self.ctx.socket(zmq.ROUTER)
        # Its accepted connections, watched from before it binds (transport/accepted.py): in a
        # secure group through the guard's monitor (a socket has one), else through our own.
        self.accepted = AcceptedConns(limits)
        # The sessions the mesh bound to each source address (the node sets it: Mesh.bound_by_address).
        self.bound_by_address: Callable[[], Mapping[str, int]] = dict
        self._ports: set[int] = set()  # the ROUTER's ports: a descriptor accepted elsewhere is not ours
        self._monitor: zmq.Socket[bytes] | None = None
        if self.guard is not None:
            self.guard.secure_router(self.router, EVENTS, self._conn_event)
        else:
            self._monitor = monitor(self.ctx, self.router, EVENTS)
        self.router.setsockopt(zmq.LINGER, 0)
        self.router.setsockopt(zmq.RCVHWM, limits.receive_hwm)
        # A peer sending a frame far beyond the codec's limit is disconnected by
        # ZeroMQ before the frame is buffered; up to twice the limit reaches the
        # codec, which rejects and counts it.
        self.router.setsockopt(zmq.MAXMSGSIZE, 2 * MAX_BODY)
        # No ROUTER_HANDOVER: a second connection claiming a connected identity
        # (anyone can, UUIDs are public) must not take it over.  A dead connection
        # gives its identity up when TCP keep-alive resets it: its peer's kernel did not
        # answer KEEPALIVE_CNT probes (a frozen peer's kernel does: its connection stays).
        self.router.setsockopt(zmq.ROUTER_HANDOVER, 0)
        # No HEARTBEAT_IVL (ZMTP heartbeats abort libzmq 4.3.5 under back-pressure: above).
        self.router.setsockopt(zmq.TCP_KEEPALIVE, 1)
        self.router.setsockopt(zmq.TCP_KEEPALIVE_IDLE, KEEPALIVE_IDLE_S)
        self.router.setsockopt(zmq.TCP_KEEPALIVE_INTVL, KEEPALIVE_INTVL_S)
        self.router.setsockopt(zmq.TCP_KEEPALIVE_CNT, KEEPALIVE_CNT)
        # A connection that has not finished ZeroMQ's greeting after this long is closed
        # (libzmq's default is 30 s): opening TCP connections and saying nothing pins
        # the node's descriptors for seconds, not half a minute.
        self.router.setsockopt(zmq.HANDSHAKE_IVL, HANDSHAKE_IVL_MS)
        self.connect_failed = 0  # connections that could not be opened
        self._warnings = RateLog(log, period=LOG_EVERY)  # per kind of failure
        self.read_errors = 0  # ZeroMQ errors while reading or handing over a batch (not at close)
        self._closing = False
        self._fd = cast(int, self.router.getsockopt(zmq.FD))
        self._poll_in = [(self.router, _POLLIN)]  # for _has_input
        self.conns: dict[int, Conn] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._flush_scheduled = False
        self.send_dropped = 0
        # DEALERs are watched for the guests' links (on_link) and, during a key rotation, for
        # handshakes refused by a peer holding only the other secret (then re-dialled with it).
        self._on_link = on_link
        self.links = None if on_link is None and curve is None else LinkMonitor(
            self._link_changed, None if curve is None else self._handshake_failed)
        self._last_closed: tuple[int, str, str] | None = None  # (conn, endpoint, key id) last disconnected
        self.key_redials = 0  # connections re-opened with another key after a refused handshake

    # ----------------------------------------------------------------- inbox

    def bind(self, host: str, port: int, port_range: tuple[int, int]) -> int:
        """Bind the ROUTER; ``port`` 0 picks a free port in ``port_range``."""
        if port:
            self.router.bind(f"tcp://{host}:{port}")
            self._ports.add(port)
            return port
        lo, hi = port_range
        rng = random.SystemRandom()
        last: zmq.ZMQError | None = None
        for _ in range(200):
            candidate = rng.randint(lo, hi)
            try:
                self.router.bind(f"tcp://{host}:{candidate}")
                self._ports.add(candidate)
                return candidate
            except zmq.ZMQError as exc:  # in use: try another
                last = exc
        raise zmq.ZMQError(msg=f"no free port in {lo}-{hi} after 200 tries ({last})")

    def unbind(self, host: str, port: int) -> None:
        """Stop listening on ``host:port`` (an address this machine no longer has).  The
        connections accepted there close with it: a peer's stale connection from before an
        address change would otherwise keep its identity and its new connection unread."""
        with contextlib.suppress(zmq.ZMQError):
            self.router.unbind(f"tcp://{host}:{port}")

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        if self.guard is not None:
            self.guard.start(loop)
        loop.add_reader(self._fd, self._readable)
        loop.call_soon(self._readable)
        if self._monitor is not None:
            loop.add_reader(cast(int, self._monitor.getsockopt(zmq.FD)), self._monitor_readable)
            loop.call_soon(self._monitor_readable)

    def _readable(self) -> None:
        """Drain the ROUTER (its FD is edge-triggered: read until EAGAIN).

        The first message is handed over as soon as it is read, so a lone
        request or reply does not wait for the failing read that ends the
        drain; whatever else is queued is then read and handed over in batches.
        After the first message the socket's events are asked before reading
        on: a lone message then costs no failing read (a system call and a
        zmq.Again raised and caught, ~3-5 us), and the events asked last leave
        the edge-triggered FD armed for the next message."""
        router = self.router
        recv = router.recv
        guard = self.guard
        revoked = _NOBODY if guard is None else guard.revoked
        max_octets = max(1, self.limits.receive_batch_bytes)
        first = True
        total = 0
        octets = 0  # held in the batch being read
        try:
            while total < RECV_BATCH:
                batch: list[list[bytes]] = []
                sources: list[str] = []
                octets = 0
                limit = 1 if first else RECV_BATCH - total
                while len(batch) < limit and octets < max_octets:
                    try:
                        head = recv(_NB, copy=False)
                    except zmq.Again:
                        break
                    if revoked and head.get("User-Id") in revoked:
                        self._drop_rest(head.more)  # a key removed from the allow-list: nothing it sends counts
                        assert guard is not None
                        guard.stats.dropped_messages += 1
                        continue
                    # The address the message came from (~0.5 us a message, the head's own
                    # "more" flag saving the getsockopt it would otherwise take), and the
                    # connection: the routing identity's suffix after the sender's UUID.
                    address = cast(str, head.get("Peer-Address"))
                    rid = head.bytes
                    if len(rid) == _ROUTING_ID:
                        sources.append(address + CONN_MARK + rid[_UUID:].hex())
                        parts = [rid[:_UUID]]
                    else:  # an older node's bare UUID (or a malformed one, which decoding refuses)
                        sources.append(address)
                        parts = [rid]
                    more: object = head.more
                    while more:
                        # Each frame as a zmq.Frame: its own "more" flag saves a getsockopt(RCVMORE)
                        # (~1 us: pyzmq looks the option up in an enum on every call).
                        frame = recv(_NB, copy=False)
                        more = frame.more
                        if len(parts) < ZERO_COPY_AFTER:
                            part = frame.bytes
                        elif len(parts) < MAX_PARTS:  # typed as bytes: decoders take both
                            part = cast(bytes, frame.buffer)
                        else:  # more frames than any message has: let go, keep one marker
                            if len(parts) == MAX_PARTS:
                                parts.append(b"")
                            continue
                        octets += len(part)
                        parts.append(part)
                    batch.append(parts)
                if not batch:
                    break
                total += len(batch)
                self._on_frames(batch, sources)
                del batch, sources  # not held while the next batch is read
                if octets >= max_octets:
                    break  # a batch's worth of octets: let the loop run, then read on
                if first:
                    first = False
                    if not _has_input(self._poll_in):
                        return  # nothing else queued (and the FD re-armed by asking)
        except zmq.ZMQError as exc:
            if not self._closing:  # else: the socket was closed under us during shutdown
                self.read_errors += 1
                if self.read_errors == 1 or self.read_errors % 1000 == 0:
                    log.warning("error while receiving (%d so far): %s", self.read_errors, exc)
            return
        if total >= RECV_BATCH or octets >= max_octets or _has_input(self._poll_in):
            assert self._loop is not None
            self._loop.call_soon(self._readable)

    def _drop_rest(self, more: object) -> None:
        while more:
            more = self.router.recv(_NB, copy=False).more

    def poll(self) -> None:
        """Safety net against a missed edge; called from the node's timer."""
        if _has_input(self._poll_in):
            self._readable()
        if self.guard is not None:
            self.guard.poll()
        self._monitor_readable()
        self._sweep(time.monotonic())
        self._flush()

    # ------------------------------------------------- incoming connections (transport/accepted.py)

    def _monitor_readable(self) -> None:
        for event, value in monitor_events(self._monitor, "ROUTER"):
            self._conn_event(event, value)

    def _conn_event(self, event: int, fd: int) -> None:
        """A monitor event of the ROUTER: a connection accepted (closed at once if over a cap), or ended."""
        if event != zmq.EVENT_ACCEPTED:
            self.accepted.gone(fd)
            return
        address = peer_of(fd, self._ports)
        if address is None:  # ended (and its number perhaps reused) before we read the event
            self.accepted.stats.stale += 1
            return
        now = time.monotonic()
        if not self.accepted.accepted(fd, address, now, self.bound_by_address()):
            shut(fd, address, self._ports)
            stats = self.accepted.stats
            self._warnings.warning("unproven", now, "closed a mesh connection from %s at once: too many connections "
                                   "without a verified HELO (%d refused, %d closed idle so far)", address,
                                   stats.refused, stats.closed_idle)

    def _sweep(self, now: float) -> None:
        """Close the connections unproven past the handshake timeout (a turn of the timer loop)."""
        accepted = self.accepted
        if not accepted.due(now):
            return
        closed = 0
        for fd in accepted.to_close(now, self.bound_by_address(), silence_of):
            address = accepted.address_of(fd)
            accepted.gone(fd)
            if address is not None and shut(fd, address, self._ports):
                closed += 1
            else:
                accepted.stats.stale += 1
        if closed:
            accepted.stats.closed_idle += closed
            self._warnings.warning("idle", now, "closed %d mesh connections without a verified HELO after %.0f s "
                                   "(%d closed idle, %d refused so far)", closed, accepted.grace,
                                   accepted.stats.closed_idle, accepted.stats.refused)

    # ---------------------------------------------------------------- outbox

    def connect(self, conn: int, endpoint: str) -> bool:
        """Open connection ``conn`` to ``endpoint``.  False if it cannot be opened
        (no descriptor left: EMFILE; a bad endpoint; ...): then it is logged
        (rate-limited), counted, and reported through ``on_connect_failed``."""
        key = None
        if self.guard is not None:
            key = self.guard.dial[0]
            last = self._last_closed
            if last is not None and last[:2] == (conn, endpoint):  # re-opened (a HELO from a new endpoint)
                key = self.guard.dial_key(last[2]) or key  # with the key that worked there
        suffix = os.urandom(CONN_SUFFIX)
        try:
            sock = self._dealer(conn, endpoint, key, suffix)
        except zmq.ZMQError as exc:
            self._failed(conn, endpoint, exc)
            return False
        c = self.conns[conn] = Conn(sock=sock, endpoint=endpoint, suffix=suffix)
        if key is not None:
            c.key_id, c.tried = key.key_id, [key.key_id]
            if self._rotating():
                c.unconfirmed = []
        return True

    def _dealer(self, conn: int, endpoint: str, key: DialKey | None, suffix: bytes) -> zmq.Socket[bytes]:
        sock: zmq.Socket[bytes] | None = None
        try:
            sock = self.ctx.socket(zmq.DEALER)
            sock.setsockopt(zmq.IDENTITY, bytes(self.identity) + suffix)
            sock.setsockopt(zmq.SNDHWM, self.sndhwm)
            sock.setsockopt(zmq.SNDTIMEO, 0)
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.RECONNECT_IVL, 100)
            sock.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
            sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
            if self.guard is not None:
                self.guard.secure_dealer(sock, key)
            if self.links is not None and self._loop is not None and (self._on_link is not None or self._rotating()):
                self.links.watch(conn, sock, self._loop)
            sock.connect(endpoint)
        except zmq.ZMQError:
            if sock is not None:
                if self.links is not None:
                    self.links.unwatch(conn)
                sock.close(linger=0)
            raise
        return sock

    def _failed(self, conn: int, endpoint: str, exc: zmq.ZMQError) -> None:
        self.connect_failed += 1
        self._warnings.warning("connect", time.monotonic(), "cannot connect to %s: %s (%d connections failed)",
                               endpoint, exc, self.connect_failed)
        self._on_connect_failed(conn)

    # ------------------------------------------------------- key rotation (docs/security.md)

    def _rotating(self) -> bool:
        return self.guard is not None and len(self.guard.dial) > 1

    def listen(self, server: CurveKeypair, host: str, port_range: tuple[int, int]) -> int:
        """Bind the ROUTER once more, on a free port of ``port_range``, as a CURVE server with
        ``server`` (a second group secret, installed): a listener keeps the key it was bound with."""
        assert self.guard is not None
        self.router.setsockopt(zmq.CURVE_SECRETKEY, server.secret)
        try:
            return self.bind(host, 0, port_range)
        finally:
            self.router.setsockopt(zmq.CURVE_SECRETKEY, self.guard.server.secret)

    def use_server(self, server: CurveKeypair) -> None:
        """Bind with ``server`` from now on (the secret switched to; an address change re-binds)."""
        assert self.guard is not None
        self.guard.server = server
        self.router.setsockopt(zmq.CURVE_SECRETKEY, server.secret)

    def redial_key(self, key_id: str) -> int:
        """Re-open every connection dialled with ``key_id`` (a retired secret) with the key in use;
        how many."""
        assert self.guard is not None
        moved = [(conn, c) for conn, c in self.conns.items() if c.key_id == key_id]
        for conn, c in moved:
            c.tried = []
            self._redial(conn, c, self.guard.dial[0])
        return len(moved)

    def _link_changed(self, conn: int, up: bool) -> None:
        if up:
            c = self.conns.get(conn)
            if c is not None:
                c.confirmed, c.unconfirmed = True, None
        if self._on_link is not None:
            self._on_link(conn, up)

    def _handshake_failed(self, conn: int) -> None:
        """The peer refused a handshake of ``conn``: dial with a key not tried yet, if any (else
        ZeroMQ tries again with the same one, and the peer counts its refusals)."""
        c = self.conns.get(conn)
        if c is None or c.confirmed or self.guard is None:
            return
        untried = [k for k in self.guard.dial if k.key_id not in c.tried]
        if untried:
            self._redial(conn, c, untried[0])

    def _redial(self, conn: int, c: Conn, key: DialKey) -> None:
        if self.links is not None:
            self.links.unwatch(conn)
        c.sock.close(linger=0)
        try:
            c.sock = self._dealer(conn, c.endpoint, key, c.suffix)
        except zmq.ZMQError as exc:
            self.conns.pop(conn, None)
            self._failed(conn, c.endpoint, exc)
            return
        self.key_redials += 1
        replay = c.unconfirmed or []
        c.key_id, c.confirmed = key.key_id, False
        c.tried.append(key.key_id)
        c.unconfirmed, c.unconfirmed_octets = ([] if self._rotating() else None), 0
        for frames in reversed(replay):  # never delivered: sent again, before what waits
            c.overflow.appendleft(frames)
            if len(frames[-1]) >= ZERO_COPY_SEND:
                c.large_octets += len(frames[-1])
        if c.overflow:
            self._schedule_flush()

    def _remember(self, c: Conn, frames: list[bytes]) -> None:
        q = c.unconfirmed
        if q is not None:
            c.unconfirmed_octets += sum(map(len, frames))
            if len(q) < MAX_UNCONFIRMED and c.unconfirmed_octets <= MAX_UNCONFIRMED_OCTETS:
                q.append(frames)
            else:
                c.unconfirmed = None

    def send(self, conn: int, frames: list[bytes]) -> bool:
        """Queue ``frames`` (type and body; the identity is implicit) on ``conn``.

        Returns False if the message was dropped because the peer is not
        responding (its queues are full) or the connection is closed.
        """
        c = self.conns.get(conn)
        if c is None:
            return False
        if not c.overflow:
            try:
                tracker = _send_parts(c.sock, frames)
                if c.unconfirmed is not None:
                    self._remember(c, frames)
                c.msgs += 1
                c.octets += sum(map(len, frames))
                if tracker is not None:
                    c.large_octets += len(frames[-1])
                    _track(c, tracker, len(frames[-1]))
                return True
            except zmq.Again:
                pass
        if len(c.overflow) >= self.overflow_limit:
            c.dropped += 1
            self.send_dropped += 1
            if c.dropped == 1 or c.dropped % 10_000 == 0:
                log.warning("peer at %s is not responding: %d messages dropped", c.endpoint, c.dropped)
            if c.responding:
                c.responding = False
                self._on_stalled(conn)
            return False
        c.overflow.append(frames)
        c.msgs += 1
        c.octets += sum(map(len, frames))
        if len(frames[-1]) >= ZERO_COPY_SEND:
            c.large_octets += len(frames[-1])
        c.drained.clear()
        self._schedule_flush()
        return True

    def any_backlog(self) -> bool:
        if not self._flush_scheduled and self._loop is not None:
            return False  # a running transport schedules a flush for every overflow it fills: none waits
        return any(c.overflow for c in self.conns.values())

    def counters(self, conn: int) -> tuple[int, int]:
        """Messages and octets accepted for sending on ``conn`` since it was opened."""
        c = self.conns.get(conn)
        return (0, 0) if c is None else (c.msgs, c.octets)

    def queued_large(self, conn: int) -> int:
        """Octets of large frames (BULK data) accepted for ``conn`` that ZeroMQ has not
        yet written to the connection: what a peer that does not read makes us hold."""
        c = self.conns.get(conn)
        if c is None:
            return 0
        _written(c)
        return c.large_octets

    def backlog(self, conn: int) -> int:
        c = self.conns.get(conn)
        return 0 if c is None else len(c.overflow)

    async def wait_drained(self, conn: int, below: int, timeout: float) -> bool:
        """Wait until ``conn``'s overflow is below ``below`` messages."""
        c = self.conns.get(conn)
        if c is None or len(c.overflow) < below:
            return True
        try:
            async with asyncio.timeout(timeout):
                while conn in self.conns and len(c.overflow) >= below:
                    c.drained.clear()
                    await c.drained.wait()
        except TimeoutError:
            return False
        return True

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._loop is not None:
            self._flush_scheduled = True
            self._loop.call_later(0.0005, self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        pending = False
        for c in self.conns.values():
            q = c.overflow
            while q:
                try:
                    tracker = _send_parts(c.sock, q[0])
                except zmq.Again:
                    break
                frames = q.popleft()
                if c.unconfirmed is not None:
                    self._remember(c, frames)
                if tracker is not None:
                    _track(c, tracker, len(frames[-1]))
            if q:
                pending = True
            else:
                c.responding = True
            if len(q) < self.overflow_limit // 2:
                c.drained.set()
        if pending:
            self._schedule_flush()

    def disconnect(self, conn: int, flush: bool = False) -> None:
        c = self.conns.pop(conn, None)
        if c is None:
            return
        self._last_closed = (conn, c.endpoint, c.key_id) if c.confirmed else None
        if flush:
            for frames in c.overflow:
                try:
                    c.sock.send_multipart(frames, zmq.NOBLOCK)
                except zmq.Again:
                    break
            c.sock.setsockopt(zmq.LINGER, 500)
        c.drained.set()
        if self.links is not None:
            self.links.unwatch(conn)
        c.sock.close()

    def close(self) -> None:
        self._closing = True
        if self._loop is not None:
            with contextlib.suppress(zmq.ZMQError, ValueError):
                self._loop.remove_reader(self._fd)
        for conn in list(self.conns):
            self.disconnect(conn)
        if self.links is not None:
            self.links.close()
        if self.guard is not None:
            self.guard.close()
        if self._monitor is not None:
            if self._loop is not None:
                with contextlib.suppress(zmq.ZMQError, ValueError, RuntimeError):
                    self._loop.remove_reader(cast(int, self._monitor.getsockopt(zmq.FD)))
            with contextlib.suppress(zmq.ZMQError):
                self.router.disable_monitor()
            self._monitor.close(linger=0)
        self.router.close(linger=0)
        self.ctx.term()
