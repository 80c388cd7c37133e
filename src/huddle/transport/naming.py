"""Naming brokers: discovery messages through well-known brokers, data peer to peer.

A broker binds an XPUB (``--pub``, where nodes' naming SUB sockets connect)
and an XSUB (``--sub``, where nodes' naming PUB sockets connect) and
forwards announcements from the one to the other; subscriptions travel the
other way, so each node's PUB sends only what some node subscribed to.
When a node subscribes to the welcome topic, the broker publishes a welcome
naming its ``--sub`` endpoint.  The node then connects its naming PUB there
and announces itself (UUID, group, endpoint) until it hears its own
announcement: proof that a broker forwarded it.  Data never passes through
a broker.  Frames and topics: docs/protocol.md, section 9.2.

Anyone who reaches a broker can publish through it, so what arrives is
checked whole by :func:`decode` (which returns a message or raises
:class:`DecodeError`, nothing else), and :class:`NamingState` (sans-I/O,
time passed in) decides what a message may make the node do, within
:class:`~huddle.limits.NamingLimits`: how many messages it handles per
second, how many peers it remembers, how many broker endpoints its PUB
connects to.  In a secured group (protocol.md 9.2) a node's announcements carry a
timestamp and a MAC (HMAC-SHA256 with the group's naming key, which the
broker does not hold), and an announcement without a valid MAC, or older
than ``naming.max-age``, is ignored and counted.  :class:`NamingClient` only moves bytes; an exception in
handling one message is counted and logged (rate-limited), and its receive
loop goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import json
import logging
import re
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

import zmq
import zmq.asyncio

from ..counters import Counters
from ..errors import ConfigError, DecodeError
from ..ids import NodeId
from ..limits import NamingLimits
from ..ratelog import RateLog

__all__ = [
    "AnnounceNow", "Announcement", "ConnectPub", "Heard", "NamingClient", "NamingState", "NamingStats",
    "PeerFound", "Welcome", "announcement_body", "announcement_topic", "decode", "run_broker",
]

log = logging.getLogger("huddle.naming")

WELCOME: Final = b"huddle.welcome"
MAX_NAMING_MESSAGE: Final = 4096
# ZeroMQ disconnects (and reconnects) a publisher sending a frame larger than this; frames up to
# it are received and those over MAX_NAMING_MESSAGE counted as malformed.
MAX_NAMING_FRAME: Final = 4 * MAX_NAMING_MESSAGE
MAX_ENDPOINT: Final = 300  # octets of an endpoint in a naming message
MAX_NAME: Final = 255  # characters of a node's name, or its group's, in an announcement
ANNOUNCE_GAP: Final = 0.1  # seconds between two announcements, however often prompted
LOG_EVERY: Final = 60.0  # seconds between two warnings about refused naming messages

_HOST = re.compile(r"(\[[0-9A-Fa-f:.]{2,45}\]|[A-Za-z0-9*][A-Za-z0-9.-]{0,252})\Z")
_PORT = re.compile(r"[0-9]{1,5}\Z")
_UUID = re.compile(r"[0-9A-Fa-f]{32}\Z")
_HEX = re.compile(r"[0-9a-f]*\Z")
_WILDCARD = ("*", "0.0.0.0")


def announcement_topic(group: str) -> bytes:
    """Fixed length per group, so a prefix filter for one group never matches another."""
    return b"huddle.ann." + hashlib.sha256(group.encode("utf-8")).hexdigest()[:16].encode() + b"."


def _host_port(endpoint: str) -> tuple[str, int]:
    rest = endpoint.split("://", 1)[-1]
    host, _, port = rest.rpartition(":")
    return host.strip("[]"), int(port)


# --------------------------------------------------------------------------- codec


@dataclass(frozen=True, slots=True)
class Welcome:
    """A broker's welcome: connect the naming PUB to ``host``:``port`` (its ``--sub``); a
    wildcard ``host`` means the host of the ``--naming`` endpoint whose port is ``pub_port``."""

    host: str
    port: int
    pub_port: int | None


@dataclass(frozen=True, slots=True)
class Announcement:
    uuid: NodeId
    group: str
    name: str
    endpoint: str
    ts: int | None = None  # milliseconds since the epoch, when it was made (a secured group's)
    mac: bytes = b""  # HMAC-SHA256 of ``signed`` with the naming key (empty: none)
    signed: bytes = b""  # the canonical form of the body without its "mac": what the MAC is of


def _canonical(fields: dict[str, Any]) -> bytes:
    """The octets an announcement's MAC is of: its fields (all but "mac") as compact JSON, keys sorted."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def _mac(key: bytes, signed: bytes) -> bytes:
    return hmac.new(key, signed, hashlib.sha256).digest()


def announcement_body(uuid: NodeId, group: str, name: str, endpoint: str, *, key: bytes | None = None,
                      wall: float = 0.0) -> bytes:
    """A node's announcement; with the group's naming ``key``, stamped (``wall``: seconds since
    the epoch) and MAC'd."""
    fields: dict[str, Any] = {"v": 1, "uuid": uuid.hex(), "group": group, "name": name, "endpoint": endpoint}
    if key is None:
        return json.dumps(fields).encode()
    fields["ts"] = int(wall * 1000)
    return json.dumps(fields | {"mac": _mac(key, _canonical(fields)).hex()}).encode()


NamingMessage = Welcome | Announcement


def _shown(value: object) -> str:
    """A received value for an error message (never the repr of a nested structure)."""
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return repr(value)[:60]
    return type(value).__name__


def _endpoint(value: object, what: str, wildcard: bool) -> tuple[str, int]:
    """``tcp://HOST:PORT`` -> (host, port), or DecodeError.  ``wildcard``: host may be ``*`` / 0.0.0.0."""
    if not isinstance(value, str) or len(value) > MAX_ENDPOINT or not value.startswith("tcp://"):
        raise DecodeError(f"naming {what} is not tcp://HOST:PORT: {_shown(value)}")
    host, sep, port_text = value[6:].rpartition(":")
    if not sep or not _HOST.match(host) or not _PORT.match(port_text) or not 1 <= int(port_text) <= 65535:
        raise DecodeError(f"naming {what} is not tcp://HOST:PORT (port 1..65535): {value[:60]!r}")
    host = host.strip("[]")
    if (host in _WILDCARD and not wildcard) or ("*" in host and host != "*"):
        raise DecodeError(f"naming {what} has no host to connect to: {value[:60]!r}")
    return host, int(port_text)


def _text(msg: dict[str, Any], key: str, limit: int, default: str | None = None) -> str:
    value = msg.get(key, default)
    if not isinstance(value, str) or len(value) > limit:
        raise DecodeError(f"naming field {key!r} is not a string of at most {limit} characters")
    return value


def decode(frames: Sequence[bytes], topic: bytes) -> NamingMessage:
    """Two frames (a topic, a UTF-8 JSON object) -> a message; raises DecodeError for anything
    else.  ``topic`` is the announcement topic subscribed to (a welcome's is ``WELCOME``)."""
    if len(frames) != 2:
        raise DecodeError(f"a naming message is 2 frames, not {len(frames)}")
    kind, body = frames
    if kind not in (WELCOME, topic):
        raise DecodeError(f"naming topic {bytes(kind[:40])!r} not subscribed to")
    if len(body) > MAX_NAMING_MESSAGE:
        raise DecodeError(f"naming message of {len(body)} octets (at most {MAX_NAMING_MESSAGE})")
    try:
        msg = json.loads(bytes(body).decode("utf-8"))
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, nested too deep
        raise DecodeError(f"naming message is not UTF-8 JSON: {str(exc)[:80]}") from None
    if not isinstance(msg, dict):
        raise DecodeError("naming message is not a JSON object")
    if msg.get("v") != 1 or isinstance(msg.get("v"), bool):
        raise DecodeError(f"naming message version {_shown(msg.get('v'))}, not 1")
    if kind == WELCOME:
        host, port = _endpoint(msg.get("sub"), "welcome's sub", wildcard=True)
        pub_port = msg.get("pub_port")
        if pub_port is not None and (not isinstance(pub_port, int) or isinstance(pub_port, bool)
                                     or not 1 <= pub_port <= 65535):
            raise DecodeError(f"naming welcome's pub_port {_shown(pub_port)} is not 1..65535")
        if host in _WILDCARD and pub_port is None:
            raise DecodeError("naming welcome names every interface and no pub_port")
        return Welcome(host, port, pub_port)
    uuid = msg.get("uuid")
    if not isinstance(uuid, str) or not _UUID.match(uuid):
        raise DecodeError(f"naming announcement's uuid {_shown(uuid)} is not 32 hex digits")
    endpoint = msg.get("endpoint")
    _endpoint(endpoint, "announcement's endpoint", wildcard=False)
    assert isinstance(endpoint, str)
    ts, mac = msg.get("ts"), msg.pop("mac", None)
    if ts is not None and (not isinstance(ts, int) or isinstance(ts, bool) or not 0 <= ts < 2**53):
        raise DecodeError(f"naming announcement's ts {_shown(ts)} is not milliseconds since the epoch")
    if mac is not None and (not isinstance(mac, str) or len(mac) != 64 or not _HEX.match(mac)):
        raise DecodeError(f"naming announcement's mac {_shown(mac)} is not 64 hex digits")
    try:
        signed = b"" if mac is None else _canonical(msg)
    except (ValueError, RecursionError):  # members nested too deep to write out again
        raise DecodeError("naming announcement cannot be written out again to check its mac") from None
    return Announcement(NodeId(bytes.fromhex(uuid)), _text(msg, "group", MAX_NAME),
                        _text(msg, "name", MAX_NAME, default=""), endpoint, ts,
                        b"" if mac is None else bytes.fromhex(mac), signed)


# --------------------------------------------------------------------------- state (sans-I/O)


@dataclass(frozen=True, slots=True)
class ConnectPub:
    """Connect the naming PUB socket to a broker's ``--sub`` endpoint."""

    endpoint: str


@dataclass(frozen=True, slots=True)
class AnnounceNow:
    """Announce at once (a broker (re)started, or a peer is heard for the first time)."""


@dataclass(frozen=True, slots=True)
class Heard:
    """Our own announcement came back: a broker forwards it."""


@dataclass(frozen=True, slots=True)
class PeerFound:
    uuid: NodeId
    endpoint: str


NamingAction = ConnectPub | AnnounceNow | Heard | PeerFound


@dataclass(slots=True)
class NamingStats(Counters):
    announced: int = 0
    heard: int = 0
    found: int = 0
    welcomes: int = 0
    malformed: int = 0  # not two frames, not a subscribed topic, over 4096 octets, not UTF-8 JSON, bad fields
    other_group: int = 0
    rate_limited: int = 0  # over naming.messages-per-second: dropped unread
    peers_refused: int = 0  # a new peer while naming.max-peers are remembered
    welcomes_refused: int = 0  # a new broker endpoint while naming.max-brokers are connected
    errors: int = 0  # an unexpected exception handling one message (counted; the loop goes on)
    unauthenticated: int = 0  # a secured group's: announcements without a valid MAC (ignored)
    stale: int = 0  # a secured group's: announcements stamped more than naming.max-age from now (ignored)


class NamingState:
    """What naming messages make a node do, sans-I/O.  Rules:

    - at most ``messages_per_second`` messages are handled per second (a token bucket that
      holds as many); the others are dropped unread (``rate_limited``);
    - a message :func:`decode` refuses is counted (``malformed``) and changes nothing;
    - a welcome connects the naming PUB to its endpoint, at most ``max_brokers`` distinct ones
      (``welcomes_refused``), and prompts an announcement;
    - our own announcement is proof a broker forwards us (``heard``);
    - with the group's naming ``key`` (a secured group), an announcement without a valid MAC
      is ignored (``unauthenticated``), as is one stamped more than ``max_age`` seconds
      before or after the wall clock (``stale``), ours included;
    - another group's is counted (``other_group``);
    - another node's is a peer found (fed to the mesh); a node not remembered yet prompts an
      announcement (late joiners), unless ``max_peers`` are remembered (``peers_refused``); a
      peer is forgotten ``peer_expiry`` seconds after its last announcement.
    """

    def __init__(self, uuid: NodeId, group: str, brokers: tuple[str, ...], limits: NamingLimits,
                 key: bytes | None = None) -> None:
        self.uuid, self.group, self.brokers, self.limits = uuid, group, brokers, limits
        self.key = key  # the group's naming key: announcements must carry its MAC (None: open group)
        self.also_accepted: tuple[bytes, ...] = ()  # during a rotation: the other secret's naming key
        self.topic = announcement_topic(group)
        self.stats = NamingStats()
        self.pub_endpoints: set[str] = set()
        self._peers: dict[NodeId, float] = {}  # -> when last heard, least recently heard first
        self._tokens = float(limits.messages_per_second)
        self._refilled: float | None = None

    @property
    def peers(self) -> int:
        return len(self._peers)

    def receive(self, frames: Sequence[bytes], now: float, wall: float = 0.0) -> list[NamingAction]:
        """One received message (its first two frames, or all if fewer; more make it malformed:
        give ``frames`` a third element then) -> actions.  ``now`` is monotonic; ``wall`` the
        seconds since the epoch (a secured group's announcements are stamped with it)."""
        if not self._admit(now):
            self.stats.rate_limited += 1
            return []
        try:
            msg = decode(frames, self.topic)
        except DecodeError:
            self.stats.malformed += 1
            return []
        if isinstance(msg, Welcome):
            return self._welcome(msg)
        if self.key is not None:
            if not msg.mac or not any(hmac.compare_digest(_mac(k, msg.signed), msg.mac)
                                      for k in (self.key, *self.also_accepted)):
                self.stats.unauthenticated += 1
                return []
            if msg.ts is None or abs(wall * 1000 - msg.ts) > self.limits.max_age * 1000:
                self.stats.stale += 1
                return []
        return self._announcement(msg, now)

    def _admit(self, now: float) -> bool:
        rate = self.limits.messages_per_second
        if self._refilled is not None:
            self._tokens = min(float(rate), self._tokens + (now - self._refilled) * rate)
        self._refilled = now
        if self._tokens < 1.0:
            return False
        self._tokens -= 1.0
        return True

    def _welcome(self, msg: Welcome) -> list[NamingAction]:
        host = msg.host
        if host in _WILDCARD:  # the broker bound every interface: use the host we reached it at
            matches = [b for b in self.brokers if _host_port(b)[1] == msg.pub_port]
            host = _host_port(matches[0] if matches else self.brokers[0])[0]
        endpoint = f"tcp://[{host}]:{msg.port}" if ":" in host else f"tcp://{host}:{msg.port}"
        actions: list[NamingAction] = []
        if endpoint not in self.pub_endpoints:
            if len(self.pub_endpoints) >= self.limits.max_brokers:
                self.stats.welcomes_refused += 1
                return []
            self.pub_endpoints.add(endpoint)
            actions.append(ConnectPub(endpoint))
        self.stats.welcomes += 1
        actions.append(AnnounceNow())  # a broker (re)started: tell it who we are
        return actions

    def _announcement(self, msg: Announcement, now: float) -> list[NamingAction]:
        if msg.uuid == self.uuid:
            self.stats.heard += 1
            return [Heard()]
        if msg.group != self.group:
            self.stats.other_group += 1
            return []
        peers = self._peers
        expiry = self.limits.peer_expiry
        while peers:  # forget those not heard for peer_expiry (the least recently heard come first)
            oldest = next(iter(peers))
            if now - peers[oldest] <= expiry:
                break
            del peers[oldest]
        new = msg.uuid not in peers
        if new and len(peers) >= self.limits.max_peers:
            self.stats.peers_refused += 1
            return []
        peers.pop(msg.uuid, None)
        peers[msg.uuid] = now
        self.stats.found += 1
        found: list[NamingAction] = [PeerFound(msg.uuid, msg.endpoint)]
        return [*found, AnnounceNow()] if new else found  # a late joiner: make sure it hears of us


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
        limits: NamingLimits | None = None,
        key: bytes | None = None,
    ) -> None:
        self.uuid, self.name, self.group, self.endpoint = uuid, name, group, endpoint
        self.brokers = brokers
        self.interval, self.timeout = interval, timeout
        self.on_peer = on_peer
        self.state = NamingState(uuid, group, brokers, limits or NamingLimits(), key)
        self.key = key  # the group's naming key: announcements are stamped and MAC'd (None: open group)
        self.topic = self.state.topic
        self._ctx = zmq.asyncio.Context()
        self._sub = self._ctx.socket(zmq.SUB)
        self._pub = self._ctx.socket(zmq.PUB)
        for s in (self._sub, self._pub):
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RECONNECT_IVL, 100)
            s.setsockopt(zmq.RECONNECT_IVL_MAX, 2000)
        self._sub.setsockopt(zmq.MAXMSGSIZE, MAX_NAMING_FRAME)
        self._heard = asyncio.Event()
        self._announce_now = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._warnings = RateLog(log, period=LOG_EVERY)  # per what is warned about
        self._refusals = 0  # refused messages when last warned about

    def set_endpoint(self, endpoint: str) -> None:
        """This node's endpoint changed (its address moved): announce the new one now."""
        self.endpoint = endpoint
        self._announce_now.set()

    @property
    def stats(self) -> NamingStats:
        return self.state.stats

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

    def _warn(self, what: str, text: str, *args: object) -> None:
        """Log ``text`` at most once per LOG_EVERY seconds for each ``what``."""
        self._warnings.warning(what, time.monotonic(), text, *args)

    async def _recv(self) -> list[bytes]:
        """One message: its first two frames, and an empty third when it had more (not kept)."""
        frames = [await self._sub.recv()]
        more = False
        while self._sub.getsockopt(zmq.RCVMORE):
            frame = await self._sub.recv()
            if len(frames) < 2:
                frames.append(frame)
            else:
                more = True
        return [*frames, b""] if more else frames

    async def _receive(self) -> None:
        while True:
            try:
                frames = await self._recv()
            except zmq.ZMQError as exc:  # not expected; must not end discovery, nor spin
                self.stats.errors += 1
                self._warn("recv", "naming: cannot receive: %s", exc)
                await asyncio.sleep(0.1)
                continue
            try:
                for action in self.state.receive(frames, time.monotonic(), time.time()):
                    self._do(action)
            except Exception as exc:  # one message must never end the loop
                self.stats.errors += 1
                self._warn("error", "naming: error handling a message on %r (counted in 'errors'): %r",
                           frames[0][:40], exc)
            s = self.stats
            refused = (s.malformed + s.rate_limited + s.peers_refused + s.welcomes_refused + s.unauthenticated
                       + s.stale)
            if refused != self._refusals:
                self._refusals = refused
                self._warn("refused", "naming: refusing messages through the brokers (malformed %d, "
                           "rate-limited %d, peers refused %d, welcomes refused %d, unauthenticated %d, "
                           "stale %d so far)", s.malformed, s.rate_limited, s.peers_refused, s.welcomes_refused,
                           s.unauthenticated, s.stale)

    def _do(self, action: NamingAction) -> None:
        if isinstance(action, ConnectPub):
            self._pub.connect(action.endpoint)
            log.info("naming: publishing to broker %s", action.endpoint)
        elif isinstance(action, AnnounceNow):
            self._announce_now.set()
        elif isinstance(action, Heard):
            self._heard.set()
        else:
            self.on_peer(action.uuid, action.endpoint)

    async def _announce(self) -> None:
        while True:
            if self.state.pub_endpoints:
                try:
                    body = announcement_body(self.uuid, self.group, self.name, self.endpoint, key=self.key,
                                             wall=time.time())
                    await self._pub.send_multipart([self.topic, body])
                    self.stats.announced += 1
                except zmq.ZMQError as exc:
                    self.stats.errors += 1
                    self._warn("send", "naming: cannot announce: %s", exc)
            if not self._heard.is_set():
                wait: float | None = 0.1  # until a broker proves it forwarded us
            else:
                wait = self.interval or None
            self._announce_now.clear()
            await asyncio.sleep(ANNOUNCE_GAP)  # however often prompted (a flood of new peers)
            if wait is not None:
                wait = max(0.0, wait - ANNOUNCE_GAP)
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
