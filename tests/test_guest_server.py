"""The guest server and the Python guest in one process, on 127.0.0.1: what happens in the
moments between a guest's registration and the host's connection back to the guest's port."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from huddle.guest_client import Guest, GuestError
from huddle.guests.room import Room
from huddle.guests.server import GuestServer, GuestSettings


def serve(on_change: Callable[[GuestServer, str, bool], None] = lambda s, g, j: None) -> GuestServer:
    said: list[tuple[str, str, Any]] = []
    server: GuestServer

    def changed(guest: str, joined: bool, reason: str) -> None:
        on_change(server, guest, joined)

    server = GuestServer(Room("test"), GuestSettings(host="127.0.0.1", marco_port=0, tcp_port=0, ws_port=0),
                         on_event=lambda g, t, v: said.append((g, t, v)), on_change=changed)
    return server


async def register_and_await_firing(server: GuestServer, name: str, port: int, changes: list[tuple[str, bool]],
                                    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Register ``name`` (hearing "score", its own port ``port``) from a raw connection, then
    wait until the room reports it gone; returns the registration connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.tcp_port)
    msg = json.dumps(["register", name, port, ["score"], [], "raw", "0.1", {}]).encode()
    writer.write(b"%06d" % len(msg) + msg)
    deadline = time.monotonic() + 10
    while (name, False) not in changes:
        assert time.monotonic() < deadline, f"{name} was not fired: {changes}"
        await asyncio.sleep(0.02)
    return reader, writer


def run(body: Callable[[GuestServer], Awaitable[None]], server: GuestServer) -> None:
    async def main() -> None:
        await server.start()
        try:
            await body(server)
        finally:
            await server.close()

    asyncio.run(main())


def test_an_event_between_registration_and_the_connection_back_is_kept_and_sent() -> None:
    # The node hands the room a group event in the same turn of the loop as the registration,
    # before the host could connect back to the guest's port (what a busy node does).
    def on_change(server: GuestServer, guest: str, joined: bool) -> None:
        if joined:
            server.deliver("keeper", "score", {"points": 4}, local_speaker=False)
            server.deliver("keeper", "score", {"points": 5}, local_speaker=False)

    async def body(server: GuestServer) -> None:
        async with Guest("board", hears=["score"], host=("127.0.0.1", server.tcp_port), listen="127.0.0.1") as g:
            first = await g.next_event(5)
            second = await g.next_event(5)
        assert [(e.guest, e.topic, e.value) for e in (first, second)] == [
            ("keeper", "score", {"points": 4}), ("keeper", "score", {"points": 5})]

    run(body, serve(on_change))


def test_the_python_guest_starts_only_once_the_host_can_reach_it() -> None:
    async def body(server: GuestServer) -> None:
        async with Guest("board", hears=["score"], host=("127.0.0.1", server.tcp_port), listen="127.0.0.1") as g:
            assert g.connected_back.is_set()
            # No wait here: the event is said right after start() returned.
            server.deliver("keeper", "score", 1, local_speaker=False)
            e = await g.next_event(5)
        assert (e.guest, e.topic, e.value) == ("keeper", "score", 1)

    run(body, serve())


def test_a_guest_whose_port_cannot_be_reached_is_fired_and_what_waited_for_it_dropped() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead_port = s.getsockname()[1]
    changes: list[tuple[str, bool]] = []

    def on_change(server: GuestServer, guest: str, joined: bool) -> None:
        changes.append((guest, joined))
        if joined:
            server.deliver("keeper", "score", "lost", local_speaker=False)

    async def body(server: GuestServer) -> None:
        reader, writer = await register_and_await_firing(server, "ghost", dead_port, changes)
        assert "ghost" not in server.room.guests
        assert server._pending == {} and server._back == {}
        assert await asyncio.wait_for(reader.read(), 5) == b""  # its registration connection was closed
        writer.close()

    run(body, serve(on_change))


def test_a_host_that_never_connects_back_makes_start_fail_clearly() -> None:
    async def main() -> None:
        async def mute(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # takes the registration, never connects back
            writer.close()

        host = await asyncio.start_server(mute, "127.0.0.1", 0)
        port = host.sockets[0].getsockname()[1]
        g = Guest("lonely", host=("127.0.0.1", port), listen="127.0.0.1")
        with pytest.raises(GuestError, match=r"did not connect back to our port 127\.0\.0\.1:"):
            await g.start(timeout=0.5)
        host.close()

    asyncio.run(main())


def test_too_much_waiting_for_the_connection_back_fires_the_guest(monkeypatch: pytest.MonkeyPatch) -> None:
    import huddle.guests.server as server_module

    monkeypatch.setattr(server_module, "WRITE_LIMIT", 200)
    changes: list[tuple[str, bool]] = []

    def on_change(server: GuestServer, guest: str, joined: bool) -> None:
        changes.append((guest, joined))
        if joined:
            for n in range(5):  # about 60 octets each: the third goes past 200
                server.deliver("keeper", "score", {"n": n, "pad": "x" * 20}, local_speaker=False)

    async def body(server: GuestServer) -> None:
        listener = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
        port = listener.sockets[0].getsockname()[1]
        _, writer = await register_and_await_firing(server, "slow", port, changes)
        assert changes == [("slow", True), ("slow", False)]
        assert server._pending == {} and "slow" not in server.room.guests
        writer.close()
        listener.close()

    run(body, serve(on_change))


def test_a_python_guest_whose_name_is_taken_is_told_so_and_does_not_hammer_the_host() -> None:
    async def body(server: GuestServer) -> None:
        host = ("127.0.0.1", server.tcp_port)
        async with Guest("board", hears=["score"], host=host, listen="127.0.0.1") as first:
            second = Guest("board", hears=["score"], host=host, listen="127.0.0.1", marco_interval=0.5)
            with pytest.raises(GuestError, match="refused us: the name 'board' is taken"):
                await second.start(timeout=2.0)
            assert 1 <= server.room.counters.names_taken <= 5, "it waits between tries"
            server.deliver("keeper", "score", 1, local_speaker=False)
            assert (await first.next_event(5)).value == 1, "the first guest is untouched"

    run(body, serve())


def test_the_guest_doors_log_within_a_budget_and_count_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    from huddle.limits import GuestLimits

    now = [0.0]
    server = GuestServer(Room("test", limits=GuestLimits(log_lines_per_minute=2)),
                         GuestSettings(host="127.0.0.1"), on_event=lambda g, t, v: None, clock=lambda: now[0])
    with caplog.at_level("INFO", logger="huddle.guests"):
        for i in range(5):
            server._info("refused %d", i)
        assert [r.getMessage() for r in caplog.records] == ["refused 0", "refused 1"]
        assert server.counters.log_lines_left_out == 3 and server.stats["log_lines_left_out"] == 3
        now[0] = 61.0
        server._info("refused %d", 5)
    assert [r.getMessage() for r in caplog.records][2:] == ["refused 5 (3 more like this left out before)"]


def test_after_an_address_change_the_doors_listen_on_the_new_address_and_old_connections_are_closed() -> None:
    """move(): the TCP and WebSocket doors listen on the new address, on the same ports; every
    connection made to the old address (a registered guest's, one that never registered) is
    closed, and the old address takes no more.  127.0.0.2 is this machine's too (all of 127/8)."""

    async def http_status(host: str, port: int) -> bytes:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(b"GET / HTTP/1.0\r\n\r\n")
        line = await asyncio.wait_for(reader.readline(), 5)
        writer.close()
        return line

    async def body(server: GuestServer) -> None:
        tcp, ws = server.tcp_port, server.ws_port
        async with Guest("board", hears=["score"], host=("127.0.0.1", tcp), listen="127.0.0.1", reconnect=False) as g:
            idle_reader, _ = await asyncio.open_connection("127.0.0.1", tcp)  # never registers
            await server.move("127.0.0.2")
            assert server.ports() == {"host": "127.0.0.2", "marco_port": 0, "tcp_port": tcp, "ws_port": ws}
            assert server.room.tcp_port == tcp  # what polos give
            assert await asyncio.wait_for(idle_reader.read(100), 5) == b""
            deadline = time.monotonic() + 5
            while g.registered.is_set():
                assert time.monotonic() < deadline, "the registered guest's connection was not closed"
                await asyncio.sleep(0.02)
            assert "board" not in server.room.guests
            assert server.room.counters.closed_address_changed == 2
            with pytest.raises(OSError):
                await asyncio.open_connection("127.0.0.1", tcp)
            assert (await http_status("127.0.0.2", ws)).split()[1] == b"400"  # the WebSocket door
            with pytest.raises(OSError):
                await http_status("127.0.0.1", ws)
        async with Guest("board", hears=["score"], host=("127.0.0.2", tcp), listen="127.0.0.1") as g2:
            server.deliver("keeper", "score", 7, local_speaker=False)
            assert (await g2.next_event(5)).value == 7
        await server.move("127.0.0.2")  # the same address again: nothing to do
        assert server.room.counters.closed_address_changed == 2

    run(body, serve())
