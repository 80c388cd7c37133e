"""The ZRE node's I/O: beacons on UDP, a ROUTER for what peers say, a DEALER per peer.

Thin by design: what a beacon or a message means is decided by the codec
(:mod:`huddle.zre.codec`) and each peer's machine (:mod:`huddle.zre.peer`); this module
reads sockets, hands bytes over, and sends what the peers' machines ask for.

- Beacons: this node's beacon every ``interval`` to the interface's broadcast
  address on the ZRE port; a leaving beacon (port 0) as it stops.  A beacon heard from
  the interface's network (not this node's own) makes a peer: a DEALER with identity
  ``0x01`` + this node's UUID, connected to the beacon's address and port, that sends
  this node's HELLO at once.
- CURVE (``curve``: this node's keypair), as Zyre does with a secret key: the ROUTER is
  a CURVE server with that keypair, the beacons are v3 (its public key after the port),
  the HELLO carries the header ``X-PUBLICKEY`` (the key in Z85), and each DEALER is a
  CURVE client of the peer's key with this node's keypair.  Without it: v2 beacons, in
  clear.  A beacon of the other version is dropped either way (counted,
  ``beacon_other_version``): a CURVE node and a plain one cannot talk, as in Zyre.
- The ROUTER: each message's first frame names its sender (``0x01`` + UUID).  A HELLO
  from a peer not known yet makes one from the HELLO's endpoint (Zyre does the same; with
  CURVE, from its ``X-PUBLICKEY`` too).  With CURVE, two races Zyre leaves open are closed,
  since a CURVE node drops a HELLO from a peer whose key it has not heard yet: a HELLO
  without ``X-PUBLICKEY`` (``zre`` sends none) from a peer whose beacon has not come is
  parked until it comes (bounded, ``hello_parked``), and this node's HELLO to a peer made
  from its beacon waits until the peer says something (which proves it holds this node's
  key) or two beacon intervals have passed (this node's beacon has reached it).
  No ZAP handler judges the CURVE clients: like Zyre's, the ROUTER takes any client that
  knows its public key (which its beacons broadcast): CURVE here hides what is said from
  whoever only watches the network, it keeps no one out.
- Once a second: each peer's clock (PING the evasive, forget the expired).

Everything is bounded: peers (:class:`ZreLimits`), each message's frames and fields
(the codec's bounds), one frame's octets (the ROUTER's ``MAXMSGSIZE``), the queue to a
peer (its DEALER's high-water mark; a full queue drops, counted).  Every refusal is
counted in :attr:`ZreDriver.counters`.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import struct
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

import zmq
import zmq.asyncio
from zmq.utils import z85

from ..discovery.interfaces import Interface, resolve_interface
from ..errors import DecodeError
from .codec import BEACON_V2, BEACON_V3, Beacon, Bounds, MsgId, ZreMessage, decode, decode_beacon, encode, encode_beacon
from .peer import Heard, PeerState, Timeouts, ZrePeer

__all__ = ["PUBLIC_KEY_HEADER", "CurveKeys", "PeerChange", "Shout", "Whisper", "ZreDriver", "ZreLimits", "key_from_header"]

log = logging.getLogger("huddle.zre")

# A SHOUT a peer made to a group: the peer (its uuid, name, headers) and the content's frames.
Shout = Callable[[ZrePeer, str, tuple[bytes, ...]], None]
# A WHISPER a peer made to this node: the peer and the content's frames.
Whisper = Callable[[ZrePeer, tuple[bytes, ...]], None]
# A peer entered ("enter"), joined or left a group ("join", "leave": the group), went silent
# ("evasive") or was forgotten ("exit": any peer made, entered or not).
PeerChange = Callable[[ZrePeer, str, str], None]


@dataclass(frozen=True, slots=True)
class ZreLimits:
    peers: int = 256  # ZRE peers known at once; a beacon or HELLO past them is refused
    queue: int = 1000  # messages queued to one peer (its DEALER's high-water mark)
    bounds: Bounds = field(default_factory=Bounds)


_LIMITS, _TIMEOUTS = ZreLimits(), Timeouts()

PUBLIC_KEY_HEADER = "X-PUBLICKEY"  # a CURVE node's HELLO header: its public key in Z85 (Zyre's zyre_set_zcert)


class CurveKeys(Protocol):
    """A CURVE keypair, 32 octets each (huddle.security's CurveKeypair)."""

    @property
    def public(self) -> bytes: ...

    @property
    def secret(self) -> bytes: ...


def key_from_header(text: str) -> bytes | None:
    """The 32-octet key an ``X-PUBLICKEY`` header gives (40 characters of Z85), or None."""
    if len(text) != 40:
        return None
    try:
        return bytes(z85.decode(text.encode("ascii")))
    except (ValueError, KeyError, struct.error):  # not ASCII, not Z85's alphabet, past 32 bits a group
        return None


@dataclass(slots=True)
class _Link:
    peer: ZrePeer
    dealer: zmq.Socket[bytes]
    greet_at: float | None = None  # with CURVE, its HELLO waits (the module docstring): when it goes at the latest


class ZreDriver:
    """One ZRE node on one interface (the module docstring)."""

    def __init__(self, *, uuid: bytes, name: str, group: str, headers: dict[str, str], interface: Interface | str | None,
                 port: int, on_shout: Shout, on_whisper: Whisper | None = None, limits: ZreLimits = _LIMITS,
                 timeouts: Timeouts = _TIMEOUTS, interval: float = 1.0,
                 clock: Callable[[], float] = time.monotonic, on_peer: PeerChange | None = None,
                 curve: CurveKeys | None = None) -> None:
        self.uuid, self.name, self.group, self.headers = uuid, name, group, dict(headers)
        self.curve = curve  # this node's CURVE keypair: CURVE and v3 beacons (None: in clear, v2)
        self.beacon_version = BEACON_V2 if curve is None else BEACON_V3
        if curve is not None:
            self.headers[PUBLIC_KEY_HEADER] = z85.encode(curve.public).decode("ascii")
        self.groups: list[str] = [group] if group else []  # the groups its HELLO names (join, leave)
        self.status = 0  # its group status: one more at each JOIN or LEAVE (RFC 36), 8 bits
        # An interface, or its name or address (None: the default route's), as --interface takes it.
        self.interface = interface if isinstance(interface, Interface) else resolve_interface(interface)
        self.port, self.interval = port, interval
        self.limits, self.timeouts, self._clock, self._on_shout = limits, timeouts, clock, on_shout
        self._on_whisper, self._on_peer = on_whisper, on_peer
        self.links: dict[bytes, _Link] = {}
        self.counters: Counter[str] = Counter()
        self.endpoint = ""
        self._parked: dict[bytes, tuple[list[bytes], float]] = {}  # CURVE: HELLOs waiting for their peer's beacon
        self._ctx = zmq.Context()
        self._router: zmq.asyncio.Socket | None = None
        self._udp: socket.socket | None = None
        self._network = self.interface.network

    # ---- start and stop ----

    async def start(self) -> None:
        actx = zmq.asyncio.Context.shadow(self._ctx.underlying)
        router = actx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.setsockopt(zmq.MAXMSGSIZE, self.limits.bounds.frame_octets)  # a longer frame: the connection drops
        router.setsockopt(zmq.RCVHWM, self.limits.queue)
        if self.curve is not None:
            router.setsockopt(zmq.CURVE_SERVER, 1)
            router.setsockopt(zmq.CURVE_PUBLICKEY, self.curve.public)
            router.setsockopt(zmq.CURVE_SECRETKEY, self.curve.secret)
        port = router.bind_to_random_port(f"tcp://{self.interface.ip}")
        self._router, self.endpoint = router, f"tcp://{self.interface.ip}:{port}"
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        udp.bind((self.interface.broadcast, self.port))  # hears this network's beacons alone
        udp.setblocking(False)
        self._udp = udp
        asyncio.get_running_loop().add_reader(udp.fileno(), self._beacons_ready)
        log.info("ZRE node %s at %s, beacons on %s:%d, %s", self.uuid.hex(), self.endpoint, self.interface.broadcast,
                 self.port, "in clear (v2 beacons)" if self.curve is None else "CURVE (v3 beacons)")

    def close(self) -> None:
        """Say it is leaving (a beacon with port 0), then close everything."""
        if self._udp is not None:
            self._send_beacon(0)
            with contextlib.suppress(RuntimeError, ValueError):
                asyncio.get_running_loop().remove_reader(self._udp.fileno())
            self._udp.close()
            self._udp = None
        for uuid in list(self.links):
            self._forget(uuid, "")
        if self._router is not None:
            self._router.close(linger=0)
            self._router = None
        self._ctx.term()

    async def run(self) -> None:
        """Beacon, read the ROUTER and tick the peers until cancelled."""
        async with asyncio.TaskGroup() as tg:
            tg.create_task(self._beacon_loop())
            tg.create_task(self._router_loop())

    # ---- beacons ----

    def _send_beacon(self, port: int) -> None:
        if self._udp is None:
            return
        try:
            key = None if self.curve is None else self.curve.public
            self._udp.sendto(encode_beacon(Beacon(self.uuid, port, key)), (self.interface.broadcast, self.port))
        except OSError as exc:  # network down: the next one
            log.debug("ZRE beacon not sent: %s", exc)

    async def _beacon_loop(self) -> None:
        my_port = int(self.endpoint.rsplit(":", 1)[1])
        while True:
            self._send_beacon(my_port)
            self.tick()
            await asyncio.sleep(self.interval)

    def _beacons_ready(self) -> None:
        udp = self._udp
        for _ in range(64):  # a flood is read in bounded bites, between other work
            if udp is None:
                return
            try:
                data, (ip, _port) = udp.recvfrom(512)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            self.beacon(data, ip)

    def beacon(self, data: bytes, ip: str) -> None:
        """A datagram on the beacon port from ``ip``."""
        try:
            b = decode_beacon(data)
        except DecodeError:
            self.counters["beacon_malformed"] += 1
            return
        if b.uuid == self.uuid:
            return
        if not self._in_network(ip):
            self.counters["beacon_foreign"] += 1
            return
        if b.version != self.beacon_version:  # CURVE and clear do not mix (Zyre tosses these too)
            self.counters["beacon_other_version"] += 1
            return
        if b.port == 0:
            self._parked.pop(b.uuid, None)
            if b.uuid in self.links:
                self._forget(b.uuid, "left")
            return
        if b.uuid not in self.links:
            link = self._require(b.uuid, f"tcp://{ip}:{b.port}", b.public_key, greet=self.curve is None)
            parked = self._parked.pop(b.uuid, None)
            if link is not None and parked is not None:
                self.message(parked[0])  # its HELLO, heard before its beacon

    def _in_network(self, ip: str) -> bool:
        try:
            return ipaddress.IPv4Address(ip) in self._network
        except ValueError:
            return False

    # ---- peers ----

    def _require(self, uuid: bytes, endpoint: str, server_key: bytes | None = None, *, greet: bool = True) -> _Link | None:
        """A peer at ``endpoint`` (its CURVE key ``server_key`` with CURVE): connect to it and
        greet it with this node's HELLO, at once or (``greet`` false) when it says something
        or two beacon intervals have passed."""
        if len(self.links) >= self.limits.peers:
            self.counters["peers_full"] += 1
            return None
        dealer: zmq.Socket[bytes] = self._ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, b"\x01" + self.uuid)
        dealer.setsockopt(zmq.LINGER, 0)
        dealer.setsockopt(zmq.SNDHWM, self.limits.queue)
        dealer.setsockopt(zmq.SNDTIMEO, 0)
        if self.curve is not None and server_key is not None:  # the callers give a key with CURVE
            dealer.setsockopt(zmq.CURVE_SERVERKEY, server_key)
            dealer.setsockopt(zmq.CURVE_PUBLICKEY, self.curve.public)
            dealer.setsockopt(zmq.CURVE_SECRETKEY, self.curve.secret)
        dealer.connect(endpoint)
        link = _Link(ZrePeer(uuid, endpoint, self._clock(), self.timeouts), dealer)
        self.links[uuid] = link
        self.counters["peers_made"] += 1
        if greet:
            self._greet(link)
        else:
            link.greet_at = self._clock() + 2 * self.interval
        return link

    def _greet(self, link: _Link) -> None:
        link.greet_at = None
        self._send(link, ZreMessage(MsgId.HELLO, endpoint=self.endpoint, groups=tuple(self.groups), status=self.status,
                                    name=self.name, headers=tuple(self.headers.items())))

    def _send(self, link: _Link, msg: ZreMessage) -> None:
        frames = encode(replace(msg, sequence=link.peer.next_sequence()))
        try:
            link.dealer.send_multipart(frames, flags=zmq.NOBLOCK)
        except zmq.Again:
            self.counters["send_dropped"] += 1  # its queue is full: the peer sees a gap, and drops this node

    def _forget(self, uuid: bytes, why: str) -> None:
        link = self.links.pop(uuid, None)
        if link is None:
            return
        if link.peer.state is not PeerState.GONE:
            link.peer.leave()
        link.dealer.close(linger=0)
        if self._on_peer is not None:
            self._on_peer(link.peer, "exit", "")
        if why:
            self.counters[f"peers_{why}"] += 1
            log.info("ZRE peer %s (%s) %s", link.peer.name or "?", uuid.hex(), why)

    def tick(self) -> None:
        """Once a second: PING the evasive, forget the expired."""
        now = self._clock()
        for uuid, (_, since) in list(self._parked.items()):
            if now - since > self.timeouts.expired:
                del self._parked[uuid]
        for uuid, link in list(self.links.items()):
            if link.greet_at is not None and link.greet_at <= now:
                self._greet(link)
            if link.peer.tick(now):
                self._send(link, ZreMessage(MsgId.PING))
                if self._on_peer is not None:
                    self._on_peer(link.peer, "evasive", "")
            elif link.peer.state is PeerState.GONE:
                self._forget(uuid, "expired")

    # ---- messages ----

    async def _router_loop(self) -> None:
        router = self._router
        assert router is not None
        while True:
            for _ in range(64):  # a burst is taken in bounded bites: the loop's other work (recording) runs between
                frames = await router.recv_multipart()  # done at once while messages are queued: no yield
                self.message(frames)
            await asyncio.sleep(0)

    def message(self, frames: list[bytes]) -> None:
        """A message on the ROUTER: the sender's identity frame, then the message."""
        ident, rest = frames[0], frames[1:]
        if len(ident) != 17 or ident[0] != 1:
            self.counters["identity_malformed"] += 1
            return
        uuid = ident[1:]
        try:
            msg = decode(rest, self.limits.bounds)
        except DecodeError as exc:
            self.counters["message_malformed"] += 1
            log.debug("ZRE message from %s refused: %s", uuid.hex(), exc)
            return
        link = self.links.get(uuid)
        if link is None:
            if msg.id is not MsgId.HELLO or not self._endpoint_ok(msg.endpoint):
                self.counters["unknown_peer"] += 1
                return
            key = None
            if self.curve is not None:  # dial back only with the key its HELLO or its beacon gives (no downgrade)
                header = dict(msg.headers).get(PUBLIC_KEY_HEADER)
                key = None if header is None else key_from_header(header)
                if header is None:
                    self._park(uuid, frames)
                    return
                if key is None:
                    self.counters["hello_key_malformed"] += 1
                    return
            link = self._require(uuid, msg.endpoint, key)
            if link is None:
                return
        elif link.greet_at is not None:
            self._greet(link)  # it spoke: it holds this node's key, so this HELLO will be read
        heard = link.peer.received(msg, self._clock())
        if heard is Heard.LOST:
            self.counters["sequence_lost"] += 1
            self._forget(uuid, "lost")
            return
        if heard is Heard.ENTERED:
            log.info("ZRE peer %s (%s) entered, groups %s", msg.name, uuid.hex(), sorted(link.peer.groups))
            if self._on_peer is not None:
                self._on_peer(link.peer, "enter", "")
        elif heard is Heard.IGNORED:
            self.counters[f"ignored_{msg.id.name.lower()}"] += 1
        elif msg.id is MsgId.PING:
            self._send(link, ZreMessage(MsgId.PING_OK))
        elif msg.id is MsgId.SHOUT:
            self.counters["shouts_in"] += 1
            self._on_shout(link.peer, msg.group, msg.content)
        elif msg.id is MsgId.WHISPER:
            self.counters["whispers_in"] += 1
            if self._on_whisper is not None:
                self._on_whisper(link.peer, msg.content)
        elif msg.id in (MsgId.JOIN, MsgId.LEAVE) and self._on_peer is not None:
            self._on_peer(link.peer, msg.id.name.lower(), msg.group)

    def _park(self, uuid: bytes, frames: list[bytes]) -> None:
        """A HELLO without a key from a peer whose beacon has not come: kept until it comes."""
        if uuid not in self._parked and len(self._parked) + len(self.links) >= self.limits.peers:
            self.counters["peers_full"] += 1
            return
        self._parked[uuid] = (frames, self._clock())
        self.counters["hello_parked"] += 1

    def _endpoint_ok(self, endpoint: str) -> bool:
        """A HELLO's endpoint this node will dial: ``tcp://IP:PORT`` on the interface's network."""
        head, _, port = endpoint.removeprefix("tcp://").rpartition(":")
        return endpoint.startswith("tcp://") and port.isdigit() and 0 < int(port) < 65536 and self._in_network(head)

    def shout(self, group: str, content: list[bytes]) -> int:
        """SHOUT to every peer that entered and is in ``group``; how many it went to."""
        sent = 0
        for link in list(self.links.values()):
            if link.peer.state in (PeerState.READY, PeerState.EVASIVE) and group in link.peer.groups:
                self._send(link, ZreMessage(MsgId.SHOUT, group=group, content=tuple(content)))
                sent += 1
        self.counters["shouts_out"] += sent
        return sent

    def join(self, group: str) -> None:
        """Join ``group``: named in the HELLOs from now on, and a JOIN to every peer made (RFC 36)."""
        self._change(group, MsgId.JOIN)

    def leave(self, group: str) -> None:
        """Leave ``group``: a LEAVE to every peer made."""
        self._change(group, MsgId.LEAVE)

    def _change(self, group: str, what: MsgId) -> None:
        if (group in self.groups) == (what is MsgId.JOIN):
            return  # joined already, or not in it
        if what is MsgId.JOIN:
            self.groups.append(group)
        else:
            self.groups.remove(group)
        self.status = (self.status + 1) & 0xFF
        for link in list(self.links.values()):
            if link.greet_at is None:  # one not greeted yet will hear of it in the HELLO
                self._send(link, ZreMessage(what, group=group, status=self.status))

    def peer_named(self, who: str) -> ZrePeer | None:
        """The entered peer whose UUID (hex) or name is ``who``."""
        for link in self.links.values():
            peer = link.peer
            if peer.state in (PeerState.READY, PeerState.EVASIVE) and who in (peer.uuid.hex(), peer.name):
                return peer
        return None

    def whisper(self, uuid: bytes, content: list[bytes]) -> bool:
        """WHISPER to one entered peer; False if there is none of that UUID."""
        link = self.links.get(uuid)
        if link is None or link.peer.state not in (PeerState.READY, PeerState.EVASIVE):
            return False
        self._send(link, ZreMessage(MsgId.WHISPER, content=tuple(content)))
        self.counters["whispers_out"] += 1
        return True

    def describe(self) -> dict[str, object]:
        return {"uuid": self.uuid.hex(), "endpoint": self.endpoint, "port": self.port, "group": self.group,
                "beacon_address": self.interface.broadcast, "curve": self.curve is not None,
                "public_key": None if self.curve is None else self.curve.public.hex(),
                "peers": [lk.peer.describe() for lk in self.links.values()],
                "counters": dict(sorted(self.counters.items()))}
