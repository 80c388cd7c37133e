"""The API's own pages (``/``, ``/bout``, ``/guest.js``) are served from memory: a client that
leaves in the middle of a page load is a closed connection, never a traceback in the node's log
(aiohttp's sendfile path asserted on a transport the client had already closed)."""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from pathlib import Path

import aiohttp
import pytest
from test_api_errors import FakeNode

from huddle.api.common import STATE_KEY
from huddle.api.http import start_api

_STATIC = Path(__file__).parent.parent / "src" / "huddle" / "api" / "static"
_PAGES = {"/": "status.html", "/bout": "bout.html", "/guest.js": "guest.js"}


async def _leave_early(host: str, port: int, path: str) -> None:
    """Ask for ``path`` and reset the connection before reading the answer (SO_LINGER 0: an RST)."""
    sock = socket.create_connection((host, port))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: {host}\r\n\r\n".encode())
    sock.close()
    await asyncio.sleep(0)


async def _many_leave_early() -> dict[str, bytes]:
    node = FakeNode()
    runner, url = await start_api(node, "127.0.0.1:0")  # type: ignore[arg-type]
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        for _ in range(60):
            for path in _PAGES:
                await _leave_early(host, int(port), path)
        state = runner.app[STATE_KEY]
        deadline = asyncio.get_running_loop().time() + 10
        while state.transports:  # the server's side of every reset connection handled and closed
            assert asyncio.get_running_loop().time() < deadline, f"{len(state.transports)} connections still open"
            await asyncio.sleep(0.01)
        got = {}
        async with aiohttp.ClientSession() as session:
            for path in _PAGES:  # and the node still answers in full
                async with session.get(url + path) as resp:
                    assert resp.status == 200
                    assert resp.headers["Cache-Control"] == "no-cache"
                    got[path] = await resp.read()
        return got
    finally:
        await runner.cleanup()


def test_clients_leaving_a_page_load_early_log_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    got = asyncio.run(_many_leave_early())
    for path, name in _PAGES.items():
        assert got[path] == (_STATIC / name).read_bytes()
    bad = [r for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]
    assert not bad, [r.getMessage() for r in bad[:3]]
