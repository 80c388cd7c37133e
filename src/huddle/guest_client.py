"""A Python guest ("lemma") for huddle's rooms, speaking the Noam protocol.

A guest does not run a node: it finds a host by broadcasting ``marco`` until
a node of its room answers ``polo``, registers over TCP, then speaks and
hears events.  Events it speaks become events of the node's group and reach
every guest, on any node of the group, that hears their topic::

    import asyncio
    from huddle.guest_client import Guest

    async def main():
        async with Guest("scoreboard", room="derby", hears=["score"]) as g:
            await g.speak("hello", {"from": "the scoreboard"})
            async for event in g.events():
                print(event.guest, event.topic, event.value)

    asyncio.run(main())

As the Noam document describes, the guest serves a TCP port of its own and
the host connects to it to send events and heartbeat acknowledgements; the
guest sends on the connection it opened.  With ``heartbeat`` P it sends a
heartbeat P seconds after its last message; a host that hears nothing for 2 P
fires it.  When the host closes the connection or fires it, the guest goes
back to discovery (``reconnect=True``, the default) and registers again.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import json
import logging
import os
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator
from types import TracebackType
from typing import Any

from . import __version__
from .guests.codec import (
    Error,
    Event,
    FrameError,
    FrameReader,
    Heartbeat,
    HeartbeatAck,
    Marco,
    Polo,
    Register,
    decode_datagram,
    encode,
    encode_datagram,
)
from .guests.room import ROOM_KEY_OPTION

__all__ = ["Guest", "GuestError"]

log = logging.getLogger("huddle.guest")

LAN_BROADCAST = "255.255.255.255"  # marcos with no node named: every host of the LAN the route leaves by
LOOPBACK_BROADCAST = "127.255.255.255"  # marcos to the nodes of this machine that listen on loopback


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def _node_url(node: str) -> str:
    url = node if "://" in node else "http://" + node
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise GuestError(f"node={node!r} is not a node's API: give HOST:PORT or http://HOST:PORT")
    return url.rstrip("/")


_ROOM_ANSWER_MAX = 1 << 20  # octets of GET /api/v1/guests read; a room's answer is far smaller


def _room_of(url: str, token: str) -> dict[str, Any]:
    """``GET /api/v1/guests`` of the node at ``url``: its room's name and ports (blocking)."""
    request = urllib.request.Request(url + "/api/v1/guests",  # noqa: S310 - http(s) only: _node_url
                                     headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=5) as resp:  # noqa: S310 - the node the caller named
            raw = resp.read(_ROOM_ANSWER_MAX + 1)
    except urllib.error.HTTPError as exc:
        if exc.code == 409:
            raise GuestError(f"the node at {url} does not host guests: start it with --guests") from None
        raise GuestError(f"the node at {url} answered {exc.code} for its room") from None
    except (OSError, ValueError) as exc:  # refused, timed out, not HTTP
        raise GuestError(f"no huddle node answers at {url} ({exc})") from None
    try:
        room = json.loads(raw) if len(raw) <= _ROOM_ANSWER_MAX else None
    except ValueError:
        room = None
    if not (isinstance(room, dict) and isinstance(room.get("room"), str) and type(room.get("marco_port")) is int
            and 0 < room["marco_port"] < 65536):
        raise GuestError(f"the node at {url} answered something that is not a room (is it a huddle node's API?)")
    return room


class GuestError(Exception):
    """The guest cannot reach a host, or the host refused it."""


class _PoloProtocol(asyncio.DatagramProtocol):
    def __init__(self, room: str) -> None:
        self.room = room
        self.found: asyncio.Future[tuple[str, int]] = asyncio.get_running_loop().create_future()

    def datagram_received(self, data: bytes, addr: tuple[str | Any, int]) -> None:
        with contextlib.suppress(FrameError):
            m = decode_datagram(data)
            if isinstance(m, Polo) and not self.found.done():
                self.found.set_result((str(addr[0]), m.port))


class Guest:
    def __init__(
        self,
        name: str,
        room: str = "",
        *,
        hears: list[str] | tuple[str, ...] = (),
        speaks: list[str] | tuple[str, ...] = (),
        heartbeat: float = 2.0,
        heartbeat_ack: bool = False,
        host: tuple[str, int] | None = None,
        node: str | None = None,
        marco_address: str | None = None,
        marco_port: int | None = None,
        marco_interval: float = 1.0,
        listen: str | None = None,
        reconnect: bool = True,
        dialect: str = "python",
        version: str = __version__,
        room_key: str = "",
        token: str | None = None,
    ) -> None:
        """``host`` (IP, TCP port) skips discovery; otherwise marcos go to
        ``marco_address``:``marco_port`` every ``marco_interval`` seconds.
        ``listen`` is where the guest's own TCP server listens (port chosen
        by the system).

        ``node``: the API (HOST:PORT or its URL) of a node of the room; the defaults follow
        it: the room and the marco port are the node's own (``GET /api/v1/guests``, with
        ``token`` or $HUDDLE_TOKEN where its API wants one), and for a node on loopback the
        marcos go to 127.255.255.255 and the guest listens on 127.0.0.1.  Without it (or
        ``host``, on loopback, which sets ``listen`` alike) marcos go to 255.255.255.255,
        port 1030, and the guest listens on every address: a LAN's devices.
        ``room_key``: a keyed room's key (a secured group's: ``huddle group show``,
        the status page), sent in register's options; a keyed room refuses a guest
        without it (its ``error`` lands in :attr:`errors`)."""
        self.name = name
        self.room = room
        self.hears = tuple(hears)
        self.speaks = tuple(speaks)
        self.heartbeat = heartbeat
        self.heartbeat_ack = heartbeat_ack
        self.fixed_host = host
        self.node = node
        self.token = token
        near_host = host[0] if host is not None else None if node is None else urllib.parse.urlsplit(
            _node_url(node)).hostname
        near = near_host is not None and _is_loopback(near_host)  # a node on this machine, on loopback
        self.marco_address = marco_address or (LOOPBACK_BROADCAST if near else LAN_BROADCAST)
        self.marco_port = marco_port or 1030  # or the node's own, read as the guest starts
        self._marco_port_given = marco_port is not None
        self.marco_interval = marco_interval
        self.listen = listen or ("127.0.0.1" if near else "0.0.0.0")
        self.reconnect = reconnect
        self.dialect = dialect
        self.version = version
        self.room_key = room_key
        self.host: tuple[str, int] | None = None  # the host we are registered with
        self.port = 0  # our own TCP port
        self.acks = 0  # heartbeat_acks received
        self.errors: list[str] = []  # what hosts said in "error" messages
        self.registrations = 0
        self.registered = asyncio.Event()
        self.connected_back = asyncio.Event()  # the host connected to our port: it has our registration
        self._events: asyncio.Queue[Event] = asyncio.Queue()
        self._writer: asyncio.StreamWriter | None = None
        self._server: asyncio.Server | None = None
        self._runner: asyncio.Task[None] | None = None
        self._last_sent = 0.0
        self._closed = False
        self._lost = asyncio.Event()
        self._refused = asyncio.Event()  # the host sent an error on the connection we opened
        self._tasks: set[asyncio.Task[Any]] = set()

    # ------------------------------------------------------------------ public

    async def start(self, timeout: float = 30.0) -> None:
        """Open our server, find a host, register; returns once the host has
        connected back to our port, which it does after it took in the
        registration: every event said in the room after that reaches us."""
        if self.node is not None and self.fixed_host is None:
            url = _node_url(self.node)
            room = await asyncio.to_thread(_room_of, url, self.token or os.environ.get("HUDDLE_TOKEN", ""))
            self.room = self.room or str(room["room"])
            if not self._marco_port_given:
                self.marco_port = int(room["marco_port"])
        self._server = await asyncio.start_server(self._host_connected, self.listen, 0)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._runner = asyncio.create_task(self._run())
        deadline = time.monotonic() + timeout
        try:
            await asyncio.wait_for(self.registered.wait(), timeout)
        except TimeoutError:
            await self.close()
            raise GuestError(f"no host of room {self.room!r} answered within {timeout} s (marcos sent to "
                             f"{self.marco_address}:{self.marco_port}; a node on this machine: pass "
                             "node='HOST:PORT', its API)") from None
        back = asyncio.ensure_future(self.connected_back.wait())
        refused = asyncio.ensure_future(self._refused.wait())  # an error on our connection: it is closed
        _, pending = await asyncio.wait((back, refused), timeout=max(0.0, deadline - time.monotonic()),
                                        return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        if not self.connected_back.is_set():
            await self.close()
            if self.errors:  # e.g. our name is a guest's still connected there
                raise GuestError(f"the host {self.host} refused us: {self.errors[-1]}")
            raise GuestError(f"the host {self.host} took our registration but did not connect back to our port "
                             f"{self.listen}:{self.port} within {timeout} s (a firewall? pass listen= an "
                             "address the host can reach)")

    async def speak(self, topic: str, value: Any) -> None:
        """Say an event on ``topic`` (any JSON value)."""
        await self.registered.wait()
        self._write(encode(Event(self.name, topic, value)))

    async def next_event(self, timeout: float | None = None) -> Event:
        return await asyncio.wait_for(self._events.get(), timeout)

    async def events(self) -> AsyncIterator[Event]:
        while True:
            yield await self._events.get()

    async def close(self) -> None:
        self._closed = True
        if self._runner is not None:
            self._runner.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._runner
        if self._writer is not None:
            self._writer.close()
        if self._server is not None:
            self._server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> Guest:
        await self.start()
        return self

    async def __aexit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.close()

    # ---------------------------------------------------------------- internals

    def _write(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            raise GuestError("not connected to a host")
        self._writer.write(data)
        self._last_sent = time.monotonic()

    async def _run(self) -> None:
        while not self._closed:
            try:
                host = self.fixed_host or await self._discover()
                reader, writer = await asyncio.open_connection(*host)
            except OSError as exc:
                log.info("cannot reach a host: %s", exc)
                await asyncio.sleep(self.marco_interval)
                continue
            self._writer, self.host = writer, host
            self._lost.clear()
            options = {ROOM_KEY_OPTION: self.room_key} if self.room_key else {}
            self._write(encode(Register(self.name, self.port, self.hears, self.speaks, self.dialect, self.version,
                                        heartbeat=self.heartbeat, heartbeat_ack=self.heartbeat_ack,
                                        options=options)))
            self.registrations += 1
            self.registered.set()
            beats = asyncio.create_task(self._beat())
            reading = asyncio.create_task(self._read(reader, own=True))
            await self._lost.wait()
            beats.cancel()
            reading.cancel()
            writer.close()
            self.registered.clear()
            self.connected_back.clear()
            self._writer = None
            if not self.reconnect:
                return
            if self.fixed_host:  # no discovery round to wait on: do not hammer a host that refused us
                await asyncio.sleep(self.marco_interval)

    async def _discover(self) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        sock.bind(("", 0))
        sock.setblocking(False)
        transport, proto = await loop.create_datagram_endpoint(lambda: _PoloProtocol(self.room), sock=sock)
        marco = encode_datagram(Marco(self.name, self.room, self.dialect, self.version))
        try:
            while True:
                transport.sendto(marco, (self.marco_address, self.marco_port))
                with contextlib.suppress(TimeoutError):
                    return await asyncio.wait_for(asyncio.shield(proto.found), self.marco_interval)
        finally:
            transport.close()

    async def _beat(self) -> None:
        if not self.heartbeat:
            return
        while True:
            due = self._last_sent + self.heartbeat - time.monotonic()
            if due > 0:
                await asyncio.sleep(due)
                continue
            try:
                self._write(encode(Heartbeat(self.name)))
            except GuestError:
                self._lost.set()
                return

    async def _host_connected(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """The host connected back to our port: its events come here."""
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
        self.connected_back.set()
        try:
            await self._read(reader, own=False)
        except asyncio.CancelledError:
            pass  # close() ended it; asyncio would report a stream callback ending cancelled as an error
        finally:
            writer.close()
            if task is not None:
                self._tasks.discard(task)

    async def _read(self, reader: asyncio.StreamReader, *, own: bool) -> None:
        frames = FrameReader()
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                for m in frames.feed(data):
                    if isinstance(m, Event):
                        await self._events.put(m)
                    elif isinstance(m, HeartbeatAck):
                        self.acks += 1
                    elif isinstance(m, Error):
                        self.errors.append(m.reason)
                        log.warning("the host says: %s", m.reason)
                        if own:
                            self._refused.set()
        except (FrameError, ConnectionError, OSError) as exc:
            log.info("lost the host: %s", exc)
        if own:
            self._lost.set()  # the host closed our connection (it fired us, or stopped): discover again
