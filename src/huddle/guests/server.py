"""The asyncio driver of a node's room: UDP marco / polo, the guests' TCP and
WebSocket connections, the host's connections back to guests, heartbeats.

Everything the guests say goes through :class:`~huddle.guests.room.Room`;
this module only moves bytes and carries out the room's actions.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any, cast

from aiohttp import WSMsgType, web

from ..counters import Counters
from ..gated import STOP_GRACE, GatedSite, going_away
from ..ratelog import RateLog
from .choice import HostLinks
from .codec import (
    PREFIX,
    Error,
    FrameError,
    FrameReader,
    Marco,
    Message,
    TextError,
    decode_datagram,
    decode_payload,
    encode,
    encode_datagram,
)
from .room import Action, Changed, Close, Emit, Room, SendTo

__all__ = ["GuestServer", "GuestSettings"]

log = logging.getLogger("huddle.guests")

WRITE_LIMIT = 8 * 1024 * 1024  # octets waiting for one guest before it is fired as too slow
JS_LEMMA_PORT = 8089  # noam-io/lemma-javascript dials ws://HOST:8089/websocket, whatever port its polo names


@dataclass(frozen=True, slots=True)
class GuestSettings:
    host: str  # the IP the TCP and WebSocket servers listen on
    marco_port: int = 1030  # UDP; several nodes on one machine share it (SO_REUSEADDR / SO_REUSEPORT)
    tcp_port: int = 0  # 0: a free port
    ws_port: int = 8089  # 0: a free port
    max_frame: int = 999_999


@dataclass(slots=True)
class ServerCounters(Counters):
    """What the guest doors saw (served, with the room's counters, in ``GET /api/v1/guests`` -> ``stats``)."""

    marcos: int = 0  # datagrams on the marco port
    polos: int = 0
    bad_datagrams: int = 0
    bad_frames: int = 0  # connections closed for bytes that are not a Noam message
    bad_text: int = 0  # of those: JSON that cannot be written back out (a lone surrogate, NaN, 1e999)
    lengths_in_characters: int = 0  # messages whose length prefix counted characters, not octets (lemmas do)
    connections: int = 0  # TCP and WebSocket connections taken in (refused ones too)
    log_lines_left_out: int = 0  # lines about guests not written: past limits.guests.log_lines_per_minute


class _Marco(asyncio.DatagramProtocol):
    def __init__(self, server: GuestServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        self.server.counters.marcos += 1
        try:
            m = decode_datagram(data)
        except FrameError as exc:
            self.server.counters.bad_datagrams += 1
            log.debug("dropped a datagram from %s: %s", addr, exc)
            return
        if not isinstance(m, Marco):  # a polo from another host: not for us
            return
        room = self.server.room
        hosts = self.server.hosts() if m.room == room.room else ()
        polo = room.marco(m, str(addr[0]), self.server.clock(), hosts)
        if polo is not None and self.transport is not None:
            self.server.counters.polos += 1
            self.transport.sendto(encode_datagram(polo), addr)


# What an HTTP connection to the WebSocket port is told when it is refused before its upgrade
# (the host, or its address, has as many guest connections as it takes; or no upgrade in time).
def _http_refusal(data: bytes) -> bytes:
    body = data[PREFIX:] + b"\n"  # the Noam error, as JSON text
    return (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: close\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


class _WsGate(asyncio.Protocol):
    """Wraps aiohttp's protocol for one connection to the WebSocket port: the connection
    counts against the guest connection limits from the moment it is accepted (not from
    its upgrade), so one over them is closed before aiohttp holds anything for it, and one
    that does not upgrade within register_timeout is closed by the room like any other."""

    def __init__(self, inner: asyncio.Protocol, server: GuestServer) -> None:
        self.inner = inner
        self.server = server
        self.conn: int | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        server = self.server
        peer = transport.get_extra_info("peername")

        accepting = True

        def write(data: bytes) -> bool:  # refused as it is accepted: an HTTP answer says why
            if not accepting or transport.is_closing():
                return False  # later (no upgrade in time), aiohttp may be answering: closed without a word
            transport.write(_http_refusal(data))
            return True

        conn = server._conn(write, transport.close, str(peer[0]) if peer else "")
        accepting = False
        if conn not in server._writers:
            return  # refused: closed already, aiohttp never sees it
        self.conn = conn
        server._ws_conns[transport] = conn
        self.inner.connection_made(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is None:
            return
        server = self.server
        for transport, conn in list(server._ws_conns.items()):
            if conn == self.conn:
                del server._ws_conns[transport]
        server._forget(self.conn)
        server._run(server.room.closed(self.conn))
        self.inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.conn is not None:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.conn is not None else None

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.inner.resume_writing()


class GuestServer:
    def __init__(
        self,
        room: Room,
        settings: GuestSettings,
        *,
        on_event: Callable[[str, str, Any], None],
        on_change: Callable[[str, bool, str], None] = lambda guest, joined, reason: None,
        clock: Callable[[], float] = time.monotonic,
        hosts: Callable[[], Collection[bytes]] = lambda: (),
        links: HostLinks | None = None,
    ) -> None:
        """``hosts``: the UUIDs of the group's other live nodes that host guests
        (the room answers a marco only when it is the one chosen among them and itself);
        ``links``: the connections to them that are down (served in ``stats``)."""
        self.room = room
        self.hosts = hosts
        self.links = links or HostLinks()
        self.settings = settings
        self.on_event = on_event
        self.on_change = on_change
        self.clock = clock
        self.host = settings.host  # where the TCP and WebSocket servers listen now (move() changes it)
        self.tcp_port = 0
        self.ws_port = 0
        self.counters = ServerCounters()
        # Lines about guests (joins, leaves, refusals): limits.guests.log_lines_per_minute a minute in all.
        self._lines = RateLog(log, period=60.0, burst=room.limits.log_lines_per_minute)
        self._next_conn = 0
        self._writers: dict[int, Callable[[bytes], bool]] = {}  # registration connection -> write
        self._closers: dict[int, Callable[[], None]] = {}
        self._back: dict[str, asyncio.StreamWriter] = {}  # guest -> the host's connection to its own port
        self._ws_conns: dict[asyncio.BaseTransport, int] = {}  # a connection to the WebSocket port -> its number
        self._ws_open: dict[web.WebSocketResponse, asyncio.Transport] = {}  # told "going away" as the host stops
        # guest -> (what came for it while the host was still connecting back to its port, octets)
        self._pending: dict[str, tuple[list[bytes], int]] = {}
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._ws: web.AppRunner | None = None
        self._site: web.TCPSite | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ start/stop

    async def start(self) -> None:
        s = self.settings
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if hasattr(socket, "SO_REUSEPORT"):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.bind(("", s.marco_port))  # broadcasts arrive on the wildcard address only
        sock.setblocking(False)
        transport, _ = await loop.create_datagram_endpoint(lambda: _Marco(self), sock=sock)
        self._udp = transport
        self._tcp = await self._listen_tcp(s.host, s.tcp_port)
        self.room.tcp_port = self.tcp_port
        app = web.Application()
        app.router.add_get("/", self._ws_guest)
        app.router.add_get("/{tail:.*}", self._ws_guest)
        # An HTTP connection counts as a guest connection from its accept (_WsGate): one that has not
        # upgraded within register_timeout is closed by the room, counted (register_timeouts).
        self._ws = web.AppRunner(app, access_log=None, handle_signals=False, shutdown_timeout=STOP_GRACE)
        await self._ws.setup()
        self._site = await self._listen_ws(s.host, s.ws_port)
        if self.ws_port != JS_LEMMA_PORT:
            log.info("guests' WebSocket on port %d: IDEO's JavaScript lemma connects to port %d only, whatever "
                     "the polo says (docs/guests.md, \"What real lemmas forced\")", self.ws_port, JS_LEMMA_PORT)
        self._ticker = asyncio.create_task(self._tick())

    async def _listen_tcp(self, host: str, port: int) -> asyncio.Server:
        server = await asyncio.start_server(self._tcp_guest, host, port, reuse_address=True)
        self.tcp_port = int(server.sockets[0].getsockname()[1])
        return server

    async def _listen_ws(self, host: str, port: int) -> web.TCPSite:
        assert self._ws is not None
        site = GatedSite(self._ws, host, port, lambda inner: _WsGate(inner, self), reuse_address=True)
        await site.start()
        # Every site's address; this one's is on ``host`` (port 0: the one the system chose).
        bound = [int(a[1]) for a in self._ws.addresses if a[0] == host] or [int(a[1]) for a in self._ws.addresses]
        self.ws_port = bound[0] if port == 0 or port not in bound else port
        return site

    async def move(self, host: str) -> None:
        """The node's address moved to ``host``: listen there for TCP and WebSocket
        guests (on the same ports, or free ones if those are taken there), stop
        listening on the old address, and close every guest connection, all made to
        the old address: the guests find this host again by marco (the marco port is
        bound to the wildcard address and hears the new network's broadcasts as it is).
        Raises OSError if it cannot listen on ``host``; the old servers then stay."""
        if host == self.host or self._tcp is None or self._site is None:
            return
        old_tcp, old_site, old_ports = self._tcp, self._site, (self.tcp_port, self.ws_port)
        try:
            tcp = await self._listen_tcp(host, self.tcp_port)
        except OSError:  # the port is taken on the new address: another one
            tcp = await self._listen_tcp(host, 0)
        try:
            try:
                site = await self._listen_ws(host, self.ws_port)
            except OSError:
                site = await self._listen_ws(host, 0)
        except OSError:
            tcp.close()
            self.tcp_port, self.ws_port = old_ports
            raise
        old_tcp.close()
        await old_site.stop()
        self._tcp, self._site, self.host = tcp, site, host
        self.room.tcp_port = self.tcp_port  # the port polos give
        self._run(self.room.moved(f"the host's address changed to {host}: find it again"))

    async def close(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
        for name in list(self.room.guests):
            self._run(self.room.fire(name, "the host is stopping"))
        if self._udp is not None:
            self._udp.close()
        if self._tcp is not None:
            self._tcp.close()
        # The fired guests' closes go first (their tasks were made first); the others, not
        # registered yet, are told "going away": else each handler waits for its client.
        await going_away(dict(self._ws_open), b"the host is stopping")
        if self._ws is not None:
            await self._ws.cleanup()
        for w in self._back.values():
            w.close()
        for task in list(self._tasks):
            task.cancel()

    @property
    def stats(self) -> dict[str, int]:
        """Every counter of the doors and the room, by name."""
        return self.counters.as_dict() | self.room.counters.as_dict() | self.links.counters.as_dict()

    def host_ids(self) -> list[str]:
        """This node and the group's other live guest hosts, as the marco choice sees them."""
        return sorted(h.hex() for h in {self.room.me, *self.hosts()})

    def ports(self) -> dict[str, int | str]:
        return {"host": self.host, "marco_port": self.settings.marco_port, "tcp_port": self.tcp_port,
                "ws_port": self.ws_port}

    # -------------------------------------------------------------- group events

    def deliver(self, speaker: str, topic: str, value: Any, *, local_speaker: bool) -> None:
        self._run(self.room.deliver(speaker, topic, value, local_speaker=local_speaker))

    def grab(self, name: str) -> None:
        self.room.grab(name)

    def fire(self, name: str, reason: str) -> bool:
        actions = self.room.fire(name, reason)
        self._run(actions)
        return bool(actions)

    # ----------------------------------------------------------------- internals

    def _conn(self, write: Callable[[bytes], bool], close: Callable[[], None], address: str) -> int:
        """A new connection's number; if the room refuses it, it is closed already
        (``conn not in self._writers``)."""
        self._next_conn += 1
        conn = self._next_conn
        self.counters.connections += 1
        self._writers[conn] = write
        self._closers[conn] = close
        self._run(self.room.opened(conn, address, self.clock()))
        return conn

    def _forget(self, conn: int) -> None:
        self._writers.pop(conn, None)
        self._closers.pop(conn, None)

    def _received(self, conn: int, msg: Message, transport: str, address: str) -> None:
        self._run(self.room.received(conn, msg, self.clock(), transport=transport, address=address))

    def _bad(self, conn: int, exc: FrameError | str) -> None:
        self.counters.bad_frames += 1
        if isinstance(exc, TextError):
            self.counters.bad_text += 1
        self._run(self.room.bad(conn, str(exc)))

    def _run(self, actions: list[Action]) -> None:
        for a in actions:
            if isinstance(a, SendTo):
                self._send(a.guest, encode(a.message))
            elif isinstance(a, Emit):
                try:
                    self.on_event(a.guest, a.topic, a.value)
                except Exception as exc:  # e.g. a read-only node cut off: tell the guest
                    g = self.room.guests.get(a.guest)
                    if g is not None:
                        self._send(a.guest, encode(Error(f"event not recorded: {exc}")))
            elif isinstance(a, Close):
                write = self._writers.get(a.conn)
                if a.error and write is not None:
                    self._info("guest connection %d refused: %s", a.conn, a.reason)
                    write(encode(Error(a.reason)))
                close = self._closers.get(a.conn)
                self._forget(a.conn)
                if close is not None:
                    close()
            elif isinstance(a, Changed):
                if not a.joined:
                    self._pending.pop(a.guest, None)
                    back = self._back.pop(a.guest, None)
                    if back is not None:
                        back.close()
                g = self.room.guests.get(a.guest) if a.joined else None
                if g is not None and g.port:
                    self._pending[a.guest] = ([], 0)  # events from now on wait for the connection back
                self._info("guest %s %s", a.guest, "joined" if a.joined else f"left ({a.reason})")
                self.on_change(a.guest, a.joined, a.reason)
                if g is not None and g.port:
                    self._spawn(self._connect_back(a.guest, g.address, g.port, g.conn))

    def _info(self, msg: str, *args: object) -> None:
        """A line about guests, within the budget; the lines left out are counted."""
        if not self._lines.info("guests", self.clock(), msg, *args):
            self.counters.log_lines_left_out += 1

    def _send(self, guest: str, data: bytes) -> None:
        g = self.room.guests.get(guest)
        if g is None:
            return
        back = self._back.get(guest)
        if g.port:
            if back is None:
                pending = self._pending.get(guest)
                if pending is None:
                    return  # the connection back failed; the guest is being fired
                held, size = pending
                if size + len(data) > WRITE_LIMIT:
                    self._run(self.room.fire(guest, "cannot keep up"))
                    return
                held.append(data)  # still connecting back: sent once connected
                self._pending[guest] = (held, size + len(data))
                return
            if back.transport.get_write_buffer_size() > WRITE_LIMIT:
                self._run(self.room.fire(guest, "cannot keep up"))
                return
            back.write(data)
            return
        write = self._writers.get(g.conn)
        if write is not None and not write(data):
            self._run(self.room.fire(guest, "cannot keep up"))

    async def _connect_back(self, guest: str, address: str, port: int, conn: int) -> None:
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(address, port), 5.0)
        except (OSError, TimeoutError) as exc:
            log.info("cannot connect back to guest %s at %s:%d: %s", guest, address, port, exc)
            g = self.room.guests.get(guest)
            if g is not None and g.conn == conn:
                self._pending.pop(guest, None)
                self._run(self.room.send_failed(guest))
            return
        g = self.room.guests.get(guest)
        if g is None or g.conn != conn:
            writer.close()
            return
        self._back[guest] = writer
        held, _ = self._pending.pop(guest, ([], 0))
        for data in held:
            writer.write(data)
        self._spawn(self._watch_back(guest, reader, writer))

    async def _watch_back(self, guest: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The guest's own server closed our connection: it is gone."""
        try:
            while await reader.read(65536):
                pass  # a guest has nothing to say here; its messages come on its own connection
        except (OSError, ConnectionError):
            pass
        if self._back.get(guest) is writer:
            self._run(self.room.send_failed(guest))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _tick(self) -> None:
        while True:
            self._run(self.room.tick(self.clock()))
            await asyncio.sleep(0.1)

    # --------------------------------------------------------------- TCP guests

    async def _tcp_guest(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        address = str(peer[0]) if peer else ""

        def write(data: bytes) -> bool:
            if writer.is_closing():
                return False
            if writer.transport.get_write_buffer_size() > WRITE_LIMIT:
                return False
            writer.write(data)
            return True

        conn = self._conn(write, writer.close, address)
        frames = FrameReader(self.settings.max_frame)
        try:
            while conn in self._writers:
                data = await reader.read(65536)
                if not data:
                    break
                counted = frames.by_characters
                try:
                    messages = frames.feed(data)
                except FrameError as exc:
                    self._bad(conn, exc)
                    break
                self.counters.lengths_in_characters += frames.by_characters - counted
                for msg in messages:
                    self._received(conn, msg, "tcp", address)
                    if conn not in self._writers:
                        break
                self._run(self.room.partial(conn, frames.pending, self.clock()))
        except (ConnectionError, OSError):
            pass
        finally:
            self._forget(conn)
            self._run(self.room.closed(conn))
            with contextlib.suppress(Exception):
                await writer.drain()
            writer.close()

    # --------------------------------------------------------- WebSocket guests

    async def _ws_guest(self, request: web.Request) -> web.StreamResponse:
        ws = web.WebSocketResponse(heartbeat=30.0, max_msg_size=self.settings.max_frame + PREFIX)
        if not ws.can_prepare(request).ok:
            return web.Response(status=400, text="a Noam guest connects here with a WebSocket\n")
        await ws.prepare(request)
        closing: list[bool] = []

        def write(data: bytes) -> bool:
            if ws.closed or closing:
                return False
            self._spawn(ws.send_str(in_code_units(data)))
            return True

        def close() -> None:
            closing.append(True)
            self._spawn(ws.close())

        address = request.remote or ""
        conn = self._ws_conns.get(cast(asyncio.BaseTransport, request.transport), -1)
        if conn not in self._writers:  # closed (timed out, or the host moved) while it upgraded
            await ws.close()
            return ws
        self._writers[conn], self._closers[conn] = write, close  # from now on, Noam messages on the WebSocket
        transport = request.transport
        if transport is not None:
            self._ws_open[ws] = transport
        length = b""  # a length sent as a WebSocket message of its own, as the Noam host sends it
        try:
            async for msg in ws:
                if conn not in self._writers:
                    break
                if msg.type != WSMsgType.TEXT:
                    if msg.type == WSMsgType.BINARY:
                        self._bad(conn, "send text messages: a Noam message is JSON text")
                    break
                text: str = msg.data
                data = text.encode("utf-8")
                if len(data) == PREFIX and data.isdigit() and not length:
                    length = data  # its message is the next WebSocket message
                    continue
                try:
                    messages = self._ws_messages(length + data if length else data)
                except FrameError as exc:
                    self._bad(conn, exc)
                    break
                length = b""
                for m in messages:
                    self._received(conn, m, "ws", address)
                if conn not in self._writers:
                    break
        finally:
            self._ws_open.pop(ws, None)
            self._forget(conn)
            self._run(self.room.closed(conn))
            await asyncio.sleep(0)  # let a queued error message go out first
            await ws.close()
        return ws

    def _ws_messages(self, data: bytes) -> list[Message]:
        """A WebSocket message holds one Noam message, with its length prefix
        (as the document writes every message; in octets or in characters, as the
        JavaScript lemma counts) or without it (the frame has a length)."""
        if data[:1] == b"[":
            if len(data) > self.settings.max_frame:
                raise FrameError(f"a message of {len(data)} octets is over this host's limit of {self.settings.max_frame}")
            return [decode_payload(data)]
        frames = FrameReader(self.settings.max_frame)
        out = frames.feed(data)
        if frames.pending or len(out) != 1:
            raise FrameError("the length prefix does not match the message")
        self.counters.lengths_in_characters += frames.by_characters
        return out


def in_code_units(data: bytes) -> str:
    """An encoded message (its prefix counts octets) as the text of one WebSocket
    message whose prefix counts UTF-16 code units, as JavaScript's ``String.length``
    does: the JavaScript lemma reads the prefix so (its TcpReader slices a string),
    and huddle's ``/guest.js`` skips it.  The same for ASCII text; never longer."""
    text = data[PREFIX:].decode("utf-8")
    return f"{len(text.encode('utf-16-le')) // 2:06d}{text}"
