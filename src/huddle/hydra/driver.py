"""The Hydra server's I/O: a ROUTER bound on the node's interface, one frame per message.

Thin by design: what a frame means is the codec's (:mod:`huddle.hydra.wire`) and the
session machine's (:mod:`huddle.hydra.server`); this module reads the ROUTER, hands the
frame over and sends the reply.  Before META or CHUNK of a post whose content changed since
its digest was checked (every post after a restart), the digest is checked in a thread, so a
large post does not hold the node's loop.

Everything is bounded: a client's frame (``MAXMSGSIZE``: a client's largest command, HELLO,
is 515 octets), the replies queued to one client (``SNDHWM``: 4, of at most ``MAX_CHUNK``
each; past it a reply is dropped after a moment and counted, ``send_dropped``: Hydra's client
asks one thing at a time), the sessions (the server's).  A message of more or fewer than one
frame after the routing id is answered by ERROR and counted (``frames_malformed``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Final

import zmq
import zmq.asyncio

from ..discovery.interfaces import Interface, resolve_interface
from ..posts.model import CorruptContent, UnknownPost
from ..posts.store import PostStore, digest_file
from .server import HydraServer
from .wire import SIGNATURE, HydraMsg, MsgId, Status, encode

__all__ = ["HydraDriver"]

log = logging.getLogger("huddle.hydra")

MAX_FRAME: Final = 4096  # octets of one frame from a client (its largest command is 515)
SEND_QUEUE: Final = 4  # replies queued to one client at most
SEND_TRIES: Final = 10  # a reply to a full queue is tried again for about 0.2 s, then dropped


class HydraDriver:
    """One Hydra ROUTER over the node's post store (the module docstring)."""

    def __init__(self, server: HydraServer, store: PostStore, interface: Interface | str | None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.server, self.store, self._clock = server, store, clock
        # An interface, or its name or address (None: the default route's), as --interface takes it.
        self.interface = interface if isinstance(interface, Interface) else resolve_interface(interface)
        self.counters = server.counters
        self.endpoint = ""
        self._ctx = zmq.asyncio.Context()
        self._router: zmq.asyncio.Socket | None = None
        self._tx: zmq.Socket[bytes] | None = None  # the ROUTER, for sends that fail at once (not in a future)

    def start(self) -> str:
        """Bind the ROUTER on the interface's address (a free port); its endpoint."""
        router = self._ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.MAXMSGSIZE, MAX_FRAME)  # a longer frame: the connection drops
        router.setsockopt(zmq.SNDHWM, SEND_QUEUE)
        router.setsockopt(zmq.ROUTER_MANDATORY, 1)  # a full queue or a client gone raises, not drops unseen
        port = router.bind_to_random_port(f"tcp://{self.interface.ip}")
        self._router, self.endpoint = router, f"tcp://{self.interface.ip}:{port}"
        self._tx = zmq.Socket.shadow(router.underlying)
        log.info("Hydra server at %s", self.endpoint)
        return self.endpoint

    def close(self) -> None:
        if self._router is not None:
            self._router.close(linger=0)
            self._router = self._tx = None
        self._ctx.term()

    async def run(self) -> None:
        """Answer the clients until cancelled; close the silent sessions once a second."""
        router = self._router
        assert router is not None, "start() comes before run()"
        while True:
            if await router.poll(1000):
                for _ in range(64):  # at most 64 between other work
                    try:
                        frames = await router.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    await self._answer(frames)
            self.server.expire(self._clock())

    async def _answer(self, frames: list[bytes]) -> None:
        client = frames[0]
        if len(frames) != 2:  # Hydra's messages are one frame each
            self.counters["frames_malformed"] += 1
            await self._send(client, HydraMsg(MsgId.ERROR, status=Status.COMMAND_INVALID,
                                              reason=f"a Hydra message is one frame, not {len(frames) - 1}"))
            return
        frame = frames[1]
        pid = self.server.current(client)
        if pid is not None and frame[:2] == SIGNATURE and frame[2:3] in (bytes([MsgId.META]), bytes([MsgId.CHUNK])):
            await self._check(pid)
        await self._send(client, self.server.receive(client, frame, self._clock()))

    async def _check(self, pid: str) -> None:
        """The content of ``pid`` hashed in a thread when it changed since last checked; a
        post whose content does not match is dropped (the server then answers 404)."""
        todo = self.store.unchecked(pid)
        if todo is None:
            return
        path, stamp = todo
        try:
            digest, size = await asyncio.get_running_loop().run_in_executor(None, digest_file, path)
            self.store.checked(pid, stamp, digest, size)
        except (CorruptContent, UnknownPost, OSError) as exc:
            self.counters["corrupt_refused"] += 1
            log.warning("not serving post %s to Hydra clients: %s", pid, exc)

    async def _send(self, client: bytes, reply: HydraMsg) -> None:
        """Send a reply; a client whose queue stays full (it asks and does not read) has it
        dropped, counted.  ZeroMQ learns that the queue drained only when the socket processes
        its commands: reading its events makes it, before each retry."""
        if reply.id is MsgId.ERROR:
            self.counters["errors_sent"] += 1
        frames = [client, encode(reply)]
        for attempt in range(SEND_TRIES):
            tx = self._tx
            if tx is None:
                return
            try:
                tx.send_multipart(frames, zmq.NOBLOCK, copy=False)
                return
            except zmq.Again:
                tx.getsockopt(zmq.EVENTS)
                if attempt:
                    await asyncio.sleep(0.02)
            except zmq.ZMQError as exc:  # EHOSTUNREACH: it is gone
                self.counters["send_failed"] += 1
                log.debug("Hydra reply not sent: %s", exc)
                return
        self.counters["send_dropped"] += 1
