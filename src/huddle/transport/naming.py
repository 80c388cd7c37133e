"""Naming brokers: discovery messages through well-known brokers, data peer to peer.

A broker binds an XPUB (``--pub``, where nodes' naming SUB sockets connect)
and an XSUB (``--sub``, where nodes' naming PUB sockets connect) and
forwards announcements from the one to the other; subscriptions travel the
other way, so each node's PUB sends only what some node subscribed to.
When a node subscribes to the welcome topic, the broker publishes a welcome
naming its ``--sub`` endpoint.  The node then connects its naming PUB there
and announces itself (UUID, group, endpoint) until it hears its own
announcement: proof that a broker forwarded it.  Data never passes through
a broker.  Frames and topics: docs/protocol.md, section 13.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import signal
from collections.abc import Callable
from typing import Any, Final

import zmq
import zmq.asyncio

from ..errors import ConfigError
from ..ids import NodeId

__all__ = ["NamingClient", "announcement_topic", "run_broker"]

log = logging.getLogger("huddle.naming")

WELCOME: Final = b"huddle.welcome"
MAX_NAMING_MESSAGE: Final = 4096


def announcement_topic(group: str) -> bytes:
    """Fixed length per group, so a prefix filter for one group never matches another."""
    return b"huddle.ann." + hashlib.sha256(group.encode("utf-8")).hexdigest()[:16].encode() + b"."


def _host_port(endpoint: str) -> tuple[str, int]:
    rest = endpoint.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- node side


class NamingClient:
    def __init__(
        self,
        *,
        uuid: NodeId,
        name: str,
        group: str,
        endpoint: str,
        brokers: tuple[str, ...],
        interval: float,
        timeout: float,
        on_peer: Callable[[NodeId, str], None],
    ) -> None:
        self.uuid, self.name, self.group, self.endpoint = uuid, name, group, endpoint
        self.brokers = brokers
        self.interval, self.timeout = interval, timeout
        self.on_peer = on_peer
        self.topic = announcement_topic(group)
        self._ctx = zmq.asyncio.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._pub = self._ctx.socket(zmq.PUB)
        for s in (self._sub, self._pub):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RECONNECT_IVL, 100)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        self._sub.setsockopt(zmq.MAXMSGSIZE, MAX_NAMING_MESSAGE)
        self._pub_connected: set[str] = set()
        self._seen: set[NodeId] = set()
        self._heard = asyncio.Event()
        self._announce_now = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._body = json.dumps({"v": 1, "uuid": uuid.hex(), "group": group, "name": name,
                                 "endpoint": endpoint}).encode()
        self.stats = {"announced": 0, "heard": 0, "found": 0, "welcomes": 0, "malformed": 0, "other_group": 0}

    async def start(self) -> None:
        """Connect to the brokers; return once one forwarded our announcement, or raise ConfigError."""
        for broker in self.brokers:
            self._sub.connect(broker)
        self._sub.subscribe(WELCOME)
        self._sub.subscribe(self.topic)
        self._tasks = [asyncio.ensure_future(self._receive()), asyncio.ensure_future(self._announce())]
        try:
            await asyncio.wait_for(self._heard.wait(), self.timeout)
        except TimeoutError:
            await self.close()
            raise ConfigError(
                f"no naming broker forwarded our announcement within {self.timeout:g} s "
                f"(tried {', '.join(self.brokers)}); is one running there? "
                "Start one with: huddle broker --pub tcp://*:PORT1 --sub tcp://*:PORT2"
            ) from None

    async def _receive(self) -> None:
        while True:
            frames = await self._sub.recv_multipart()
            if len(frames) != 2:
                self.stats["malformed"] += 1
                continue
            topic, body = frames
            try:
                msg = json.loads(body)
                if not isinstance(msg, dict):
                    raise ValueError("not an object")
                if topic == WELCOME:
                    self._welcome(msg)
                elif topic == self.topic:
                    self._announcement(msg)
            except (ValueError, KeyError, TypeError) as exc:
                self.stats["malformed"] += 1
                log.debug("naming: malformed message on %r: %s", topic[:40], exc)

    def _welcome(self, msg: dict[str, Any]) -> None:
        self.stats["welcomes"] += 1
        host, port = _host_port(str(msg["sub"]))
        if host in ("*", "0.0.0.0", ""):  # the broker bound every interface: use the host we reached it at
            pub_port = int(msg["pub_port"])
            matches = [b for b in self.brokers if _host_port(b)[1] == pub_port]
            host = _host_port(matches[0])[0] if matches else _host_port(self.brokers[0])[0]
        sub_endpoint = f"tcp://{host}:{port}"
        if sub_endpoint not in self._pub_connected:
            self._pub.connect(sub_endpoint)
            self._pub_connected.add(sub_endpoint)
            log.info("naming: publishing to broker %s", sub_endpoint)
        self._announce_now.set()  # a broker (re)started: tell it who we are

    def _announcement(self, msg: dict[str, Any]) -> None:
        peer = NodeId.from_hex(str(msg["uuid"]))
        if peer == self.uuid:
            self.stats["heard"] += 1
            self._heard.set()
            return
        if msg.get("group") != self.group:
            self.stats["other_group"] += 1
            return
        endpoint = str(msg["endpoint"])
        if not endpoint.startswith("tcp://"):
            raise ValueError(f"endpoint {endpoint!r}")
        _host_port(endpoint)
        self.stats["found"] += 1
        self.on_peer(peer, endpoint)
        if peer not in self._seen:
            self._seen.add(peer)
            self._announce_now.set()  # a late joiner: make sure it hears of us

    async def _announce(self) -> None:
        while True:
            if self._pub_connected:
                await self._pub.send_multipart([self.topic, self._body])
                self.stats["announced"] += 1
            if not self._heard.is_set():
                wait: float | None = 0.1  # until a broker proves it forwarded us
            else:
                wait = self.interval or None
            self._announce_now.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._announce_now.wait(), wait)

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._sub.close(0)
        self._pub.close(0)
        self._ctx.term()


# --------------------------------------------------------------------------- broker


def run_broker(pub: str, sub: str, on_ready: Callable[[str, str], None] | None = None) -> None:
    """Run a naming broker until SIGINT / SIGTERM."""
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    xpub = ctx.socket(zmq.XPUB)
    xsub = ctx.socket(zmq.XSUB)
    xpub.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, so each newcomer gets a welcome
    for s in (xpub, xsub):
        s.setsockopt(zmq.LINGER, 0)
    xsub.setsockopt(zmq.MAXMSGSIZE, MAX_NAMING_MESSAGE)
    try:
        xpub.bind(pub)
        xsub.bind(sub)
    except zmq.ZMQError as exc:
        ctx.destroy(0)
        raise ConfigError(f"cannot bind the broker on {pub} / {sub}: {exc}") from None
    pub_bound = str(xpub.getsockopt_string(zmq.LAST_ENDPOINT))
    sub_bound = str(xsub.getsockopt_string(zmq.LAST_ENDPOINT))
    welcome = json.dumps({"v": 1, "sub": sub_bound, "pub_port": _host_port(pub_bound)[1]}).encode()
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    if on_ready is not None:
        on_ready(pub_bound, sub_bound)
    poller = zmq.Poller()
    poller.register(xpub, zmq.POLLIN)
    poller.register(xsub, zmq.POLLIN)
    forwarded = welcomes = 0
    try:
        while not stopping:
            for sock, _ in poller.poll(200):
                if sock is xsub:  # an announcement: forward to the subscribers
                    frames = xsub.recv_multipart()
                    if len(frames) == 2:
                        xpub.send_multipart(frames)
                        forwarded += 1
                else:  # a (un)subscription: pass it upstream; welcome a newcomer
                    frame = xpub.recv()
                    xsub.send(frame)
                    if frame[:1] == b"\x01" and frame[1:] == WELCOME:
                        xpub.send_multipart([WELCOME, welcome])
                        welcomes += 1
    finally:
        log.info("broker stopping: %d announcements forwarded, %d welcomes", forwarded, welcomes)
        ctx.destroy(0)
