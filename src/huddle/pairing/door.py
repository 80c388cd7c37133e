"""The pairing door: a member's second socket, where devices without the secret ask to join
(docs/security.md, "Pairing"; docs/protocol.md 16).

A ZeroMQ ROUTER, CurveZMQ server, in **its own context** with its own ZAP handler (ZAP is
per context: the mesh's handler is not touched).  Its server keypair is derived from the
group's *name* (:func:`door_keypair`), which is public: anyone may open a CURVE session to
it.  That session is encrypted with keys new for each connection (RFC 26), and it
authenticates the client's long-term key (the INITIATE's vouch is bound to this session's
server key): ZAP (domain ``huddle-pair``) admits any CURVE key, subject to a handshake rate
per source address, and gives it as the connection's ``User-Id``.  A PAIR must name the
Ed25519 key whose X25519 form that is, and the node id that key gives; the group file goes
only to a connection of the key a member accepted.

Bounds (the node stays up whatever comes): messages of at most 4 KiB (``MAXMSGSIZE``: a
larger one ends its connection); at most ``max_connections`` connections and
``per_address`` from one address (the others are closed as they are accepted, through the
descriptor the socket monitor names: transport/accepted.py); a connection silent for
``idle`` seconds is closed (a newcomer asks every 2 s); handshakes at ``handshake_rate`` a
second per address (a bucket of 4; the newest 256 addresses kept).  Every refusal is counted.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import zmq
from nacl.public import PrivateKey

from ..errors import DecodeError
from ..ratelog import RateLog
from ..security import CurveKeypair, GroupSecret, fingerprint, node_id_for
from ..security.trust import curve_public
from ..transport.accepted import monitor, monitor_events, peer_of, shut, silence_of
from ..transport.zap import ZAP_ENDPOINT
from .codec import MAX_MESSAGE, Accepted, Pair, Pending, Refused, decode, encode
from .requests import Answer, Requests

__all__ = ["ZAP_DOMAIN", "Door", "DoorStats", "door_keypair"]

log = logging.getLogger("huddle.pairing")

ZAP_DOMAIN = b"huddle-pair"
_FAILED = int(zmq.EVENT_HANDSHAKE_FAILED_PROTOCOL | zmq.EVENT_HANDSHAKE_FAILED_NO_DETAIL)  # not CURVE, or not ours
_EVENTS = int(zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED) | _FAILED


def door_keypair(group: str) -> CurveKeypair:
    """The door's CurveZMQ keypair: derived from the group's name, so every device that knows the name can
    open a session (the door proves nothing about itself; the session authenticates the client)."""
    private = PrivateKey(hashlib.blake2b(group.encode(), digest_size=32, person=b"huddle-pair-door").digest())
    return CurveKeypair(public=bytes(private.public_key), secret=bytes(private))


@dataclass(slots=True)
class DoorStats:
    """What the door refused before a request was read, and what it holds."""

    connections: int = 0  # open now
    refused_connections: int = 0  # past the caps, closed as accepted
    closed_idle: int = 0
    refused_handshakes: int = 0  # not CURVE (NULL, PLAIN, garbage), or past the handshake rate (ZAP)
    admitted_handshakes: int = 0

    def as_dict(self) -> dict[str, int]:
        return {"connections": self.connections, "refused_connections": self.refused_connections,
                "closed_idle": self.closed_idle, "refused_handshakes": self.refused_handshakes,
                "admitted_handshakes": self.admitted_handshakes}


class Door:
    """One node's pairing door (the module docstring).  ``secret()``: the group secret in use
    (what ACCEPTED carries); ``clock()``: the seconds the requests' times are in."""

    def __init__(self, group: str, requests: Requests, secret: Callable[[], GroupSecret], clock: Callable[[], float],
                 *, max_connections: int = 64, per_address: int = 8, idle: float = 10.0,
                 handshake_rate: float = 1.0) -> None:
        self.group, self.requests, self.secret, self.clock = group, requests, secret, clock
        self.max_connections, self.per_address, self.idle = max_connections, per_address, idle
        self.handshake_rate = handshake_rate
        self.stats = DoorStats()
        self.port = 0
        self._conns: dict[int, tuple[str, float]] = {}  # descriptor -> (address, opened)
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # address -> (tokens, at)
        self._warnings = RateLog(log, period=10.0)
        self._ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self._zap: zmq.Socket[bytes] = self._ctx.socket(zmq.REP)
        self._zap.setsockopt(zmq.LINGER, 0)
        self._zap.bind(ZAP_ENDPOINT)  # this context's handler, before the ROUTER binds
        self._router: zmq.Socket[bytes] = self._ctx.socket(zmq.ROUTER)
        sock = self._router
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.CURVE_SERVER, 1)
        sock.setsockopt(zmq.CURVE_SECRETKEY, door_keypair(group).secret)
        sock.setsockopt(zmq.ZAP_DOMAIN, ZAP_DOMAIN)
        sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
        sock.setsockopt(zmq.HANDSHAKE_IVL, 5000)
        sock.setsockopt(zmq.SNDHWM, 64)
        # No receive high-water mark: libzmq 4.3.5 aborts on a reset connection whose input stopped
        # at it (docs/security.md, "Known gaps"), and anyone completes a handshake here.  Memory
        # stays bounded: 64 connections, 4 KiB messages, read at every turn of the event loop.
        sock.setsockopt(zmq.RCVHWM, 0)
        self._monitor = monitor(self._ctx, sock, _EVENTS)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._fds: list[int] = []  # the descriptors the loop reads

    def bind(self, address: str, port: int = 0) -> int:
        """Listen on ``address`` (the mesh's interface), at ``port`` (0: any free one); the port."""
        host = f"[{address}]" if ":" in address else address
        if port:
            self._router.bind(f"tcp://{host}:{port}")
            self.port = port
        else:
            self.port = self._router.bind_to_random_port(f"tcp://{host}")
        return self.port

    def move(self, address: str) -> int:
        """The mesh's interface moved: listen on ``address`` instead, at the same port if it is free
        there (else any); the port.  The connections open stay until their peers leave."""
        old = self._router.getsockopt_string(zmq.LAST_ENDPOINT)
        with contextlib.suppress(zmq.ZMQError):
            self._router.unbind(old)
        try:
            return self.bind(address, self.port)
        except zmq.ZMQError:
            return self.bind(address)

    async def run(self) -> None:
        """Serve until cancelled (then close)."""
        loop = self._loop = asyncio.get_running_loop()
        readers = ((self._zap, self._zap_readable), (self._monitor, self._monitor_readable),
                   (self._router, self._router_readable))
        try:
            for sock, read in readers:
                fd = cast(int, sock.getsockopt(zmq.FD))
                loop.add_reader(fd, read)
                self._fds.append(fd)
                loop.call_soon(read)
            while True:
                await asyncio.sleep(1.0)
                for _, read in readers:  # against a missed edge (the descriptors are edge-triggered)
                    read()
                self.requests.expire(self.clock())
                self._sweep(time.monotonic())
        finally:
            self.close()

    def close(self) -> None:
        """Stop reading, close the sockets and the context (again: nothing)."""
        if self._ctx.closed:
            return
        if self._loop is not None:
            for fd in self._fds:
                with contextlib.suppress(ValueError, RuntimeError):  # a loop closed already
                    self._loop.remove_reader(fd)
        with contextlib.suppress(zmq.ZMQError):
            self._router.disable_monitor()
        for sock in (self._router, self._monitor, self._zap):
            sock.close(linger=0)
        self._ctx.term()

    # ------------------------------------------------------------------ ZAP

    def _zap_readable(self) -> None:
        while True:
            try:
                request = self._zap.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError:  # closed under us
                return
            self._zap.send_multipart(self._judge(request))

    def _judge(self, request: list[bytes]) -> list[bytes]:
        """A ZAP reply (RFC 27): any CURVE key, within the handshake rate of its address."""
        request_id = request[1] if len(request) > 1 else b""
        if len(request) != 7 or request[0] != b"1.0" or request[2] != ZAP_DOMAIN or request[5] != b"CURVE":
            self.stats.refused_handshakes += 1
            return [b"1.0", request_id, b"400", b"CURVE only", b"", b""]
        address = request[3].decode("utf-8", "replace")
        if not self._take(address, time.monotonic()):
            self.stats.refused_handshakes += 1
            self._warnings.warning("rate", time.monotonic(), "pairing door: %s opens sessions too fast (%d refused)",
                                   address, self.stats.refused_handshakes)
            return [b"1.0", request_id, b"400", b"too many handshakes", b"", b""]
        self.stats.admitted_handshakes += 1
        return [b"1.0", request_id, b"200", b"OK", request[6].hex().encode(), b""]

    def _take(self, address: str, now: float) -> bool:
        tokens, at = self._buckets.pop(address, (4.0, now))
        tokens = min(4.0, tokens + (now - at) * self.handshake_rate)
        ok = tokens >= 1.0
        self._buckets[address] = (tokens - 1.0 if ok else tokens, now)  # last: the newest address
        while len(self._buckets) > 256:
            self._buckets.popitem(last=False)
        return ok

    # ------------------------------------------------------------------ connections

    def _monitor_readable(self) -> None:
        ports = {self.port}
        for event, fd in monitor_events(self._monitor, "pairing door"):
            if event & _FAILED:  # its value is an error number, not a descriptor
                self.stats.refused_handshakes += 1
                continue
            if event != zmq.EVENT_ACCEPTED:
                self._conns.pop(fd, None)
                continue
            address = peer_of(fd, ports)
            if address is None:
                continue
            same = sum(a == address for a, _ in self._conns.values())
            if len(self._conns) >= self.max_connections or same >= self.per_address:
                if shut(fd, address, ports):
                    self.stats.refused_connections += 1
                continue
            self._conns[fd] = (address, time.monotonic())
        self.stats.connections = len(self._conns)

    def _sweep(self, now: float) -> None:
        """Close the connections silent for ``idle`` seconds."""
        ports = {self.port}
        for fd, (address, opened) in list(self._conns.items()):
            if silence_of(fd, now - opened) >= self.idle and shut(fd, address, ports):
                self._conns.pop(fd, None)
                self.stats.closed_idle += 1
        self.stats.connections = len(self._conns)

    # ------------------------------------------------------------------ requests

    def _router_readable(self) -> None:
        while True:
            try:
                frames = self._router.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            except zmq.ZMQError:
                return
            if len(frames) != 2:
                self.requests.stats.malformed += 1
                continue
            reply = self._answer(frames[1])
            with contextlib.suppress(zmq.ZMQError):  # a full or vanished peer: it asks again
                self._router.send_multipart([frames[0].bytes, encode(reply)], zmq.NOBLOCK)

    def _answer(self, frame: zmq.Frame) -> Pending | Refused | Accepted:
        """The answer to one message on an admitted connection (its ``User-Id``: the client's CURVE key)."""
        try:
            message = decode(frame.bytes)
            client = bytes.fromhex(str(frame.get("User-Id")))
            address = str(frame.get("Peer-Address"))
        except (DecodeError, ValueError, zmq.ZMQError) as exc:
            self.requests.stats.malformed += 1
            return Refused(f"malformed request: {exc}")
        if not isinstance(message, Pair):
            self.requests.stats.malformed += 1
            return Refused("expected PAIR")
        if message.group != self.group:
            self.requests.stats.malformed += 1
            return Refused(f"this is the door of group {self.group!r}")
        if curve_public(message.public_key) != client or node_id_for(message.public_key).hex() != message.node_id:
            self.requests.stats.malformed += 1
            self._warnings.warning("mismatch", time.monotonic(), "pairing door: %s named a key that is not its "
                                   "session's, or an id its key does not give (refused)", address)
            return Refused("the key named is not this session's key, or the node id is not the one it gives")
        fp = fingerprint(message.public_key)
        before = self.requests.stats.requests
        answer = self.requests.ask(self.clock(), message.public_key, message.name, message.node_id, address)
        if self.requests.stats.requests != before:
            log.info("%s (%s) at %s asks to join group %s: on this node, huddle pair accept %s (or refuse it)",
                     message.name, fp, address, self.group, fp)
        if answer is Answer.ACCEPTED and self.requests.accepted_key(fp) == message.public_key:
            log.info("pairing: gave the group secret to %s (%s) at %s", message.name, fp, address)
            return Accepted(self.secret().file_text())
        if answer is Answer.REFUSED:
            return Refused("a member refused this device")
        return Pending(fp)  # pending, or rate-limited (not listed yet: it asks again)
