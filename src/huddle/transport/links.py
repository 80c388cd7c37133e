"""Whether each outgoing connection is up, as ZeroMQ sees it (socket monitor events).

A peer whose process dies has its TCP connections closed by its kernel at once;
ZeroMQ's DEALER then reports ``EVENT_DISCONNECTED`` within milliseconds, long
before the peer's heartbeats are missed.  When the connection is back (ZeroMQ
reconnects on its own), it reports ``EVENT_HANDSHAKE_SUCCEEDED``.  This module
turns those two events into ``on_change(conn, up)`` calls; what they mean is the
caller's business (the guest hosts use them: docs/guests.md, "One host per guest").

Each watched socket costs one inproc PAIR socket of ours and one of ZeroMQ's (a
descriptor each, no TCP); the transport watches only when asked to (a node that
hosts guests).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import Callable
from typing import cast

import zmq

__all__ = ["LinkMonitor"]

log = logging.getLogger("huddle.transport")

WATCHED = int(zmq.EVENT_DISCONNECTED | zmq.EVENT_HANDSHAKE_SUCCEEDED)
# A handshake the peer refused (CurveZMQ: a server key it does not have, a client key it does not admit).
FAILED = int(zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL | zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_AUTH)


class LinkMonitor:
    """Monitor sockets for the transport's DEALERs.  Call from the asyncio thread."""

    def __init__(self, on_change: Callable[[int, bool], None], on_failed: Callable[[int], None] | None = None) -> None:
        """``on_failed(conn)``: told when a handshake of ``conn`` fails (None: not watched)."""
        self._on_change = on_change
        self._on_failed = on_failed
        self._events = WATCHED if on_failed is None else WATCHED | FAILED
        # conn -> (the watched socket, our end of its monitor, that end's FD, the loop reading it)
        self._monitors: dict[int, tuple[zmq.Socket[bytes], zmq.Socket[bytes], int, asyncio.AbstractEventLoop]] = {}
        self.events = 0  # monitor events read (any kind): a test's and a profile's figure

    def watch(self, conn: int, sock: zmq.Socket[bytes], loop: asyncio.AbstractEventLoop) -> None:
        """Report ``sock``'s connection going down and coming back as ``conn``'s.
        Call before ``sock.connect`` so that no event is missed.  Raises zmq.ZMQError
        (out of descriptors): the caller treats it as the connection failing."""
        self.unwatch(conn)
        pair = sock.get_monitor_socket(self._events)
        try:
            pair.setsockopt(zmq.LINGER, 0)
            fd = cast(int, pair.getsockopt(zmq.FD))
            loop.add_reader(fd, self._readable, conn)
        except BaseException:
            with contextlib.suppress(zmq.ZMQError):
                sock.disable_monitor()
            pair.close(linger=0)
            raise
        self._monitors[conn] = (sock, pair, fd, loop)
        loop.call_soon(self._readable, conn)  # the FD is edge-triggered: read what came before add_reader

    def unwatch(self, conn: int) -> None:
        """Stop watching ``conn`` (before its socket is closed)."""
        entry = self._monitors.pop(conn, None)
        if entry is None:
            return
        sock, pair, fd, loop = entry
        with contextlib.suppress(ValueError, RuntimeError):  # the loop is closed already
            loop.remove_reader(fd)
        with contextlib.suppress(zmq.ZMQError):
            sock.disable_monitor()
        pair.close(linger=0)

    def close(self) -> None:
        for conn in list(self._monitors):
            self.unwatch(conn)

    def _readable(self, conn: int) -> None:
        entry = self._monitors.get(conn)
        if entry is None:
            return
        pair = entry[1]
        while True:
            try:
                frames = pair.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:  # closed under us: nothing more to read
                log.debug("monitor of connection %d: %s", conn, exc)
                return
            self.events += 1
            if len(frames) != 2 or len(frames[0]) != 6:
                continue  # not a monitor event (libzmq's format: 16-bit event, 32-bit value; the endpoint)
            event = struct.unpack_from("=H", frames[0])[0]
            if event == zmq.EVENT_DISCONNECTED:
                self._on_change(conn, False)
            elif event == zmq.EVENT_HANDSHAKE_SUCCEEDED:
                self._on_change(conn, True)
            elif event & FAILED and self._on_failed is not None:
                self._on_failed(conn)
            if conn not in self._monitors:  # the callback stopped watching it
                return
