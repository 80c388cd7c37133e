"""``GET /api/v1/monitor`` and ``huddle monitor`` (api/monitor_http.py): the node's own log lines,
the recent ones first; bounded for a client that never reads, capped in clients, closed at
once as the API stops; and a real node's monitor shows a peer joining."""

from __future__ import annotations

import asyncio
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web
from conftest import Cluster, wait_for

from huddle.api.common import STATE_KEY, ApiState, close_sockets_at_stop
from huddle.api.monitor_http import CLIENT_LINES, LINE_CHARS, MONITOR_KEY, RING_LINES, LogRing, add_monitor_routes
from huddle.limits import ApiLimits

log = logging.getLogger("huddle.test_monitor")


def test_the_ring_and_a_client_that_never_reads_are_bounded() -> None:
    async def run() -> None:
        ring = LogRing(ring=10, per_client=5)
        ring.attach(log)
        try:
            log.warning("before")
            client = ring.join(logging.INFO)
            only_errors = ring.join(logging.ERROR)
            for k in range(10_000):
                log.warning("line %d", k)
            log.error("x" * (LINE_CHARS * 3))
        finally:
            ring.detach(log)
        assert len(ring.recent) == 10 and len(ring.recent[-1][1]) == LINE_CHARS  # long lines cut
        assert [line.split(": ", 1)[1] for _, line in client.waiting] == ["before", "line 0", "line 1", "line 2",
                                                                         "line 3"]
        assert client.left_out == 10_000 + 1 - 4  # the rest left out, counted
        assert len(only_errors.waiting) == 1 and only_errors.left_out == 0  # its level only
        assert ring.left_out == client.left_out

    asyncio.run(run())


def test_a_line_from_another_thread_is_handed_out_on_the_loop() -> None:
    async def run() -> list[str]:
        ring = LogRing()
        ring.attach(log)
        client = ring.join(logging.INFO)
        try:
            await asyncio.to_thread(log.warning, "from a thread")
            await asyncio.wait_for(client.wake.wait(), 5)
        finally:
            ring.detach(log)
        return [line for _, line in client.waiting]

    assert asyncio.run(run())[-1].endswith("huddle.test_monitor: from a thread")


@asynccontextmanager
async def api(limits: ApiLimits) -> AsyncIterator[tuple[web.AppRunner, str]]:
    """The monitor's route alone on a loopback port, as the node's API serves it."""
    app = web.Application()
    app[STATE_KEY] = ApiState(limits)
    close_sockets_at_stop(app)  # as the node's API does (make_app)
    add_monitor_routes(app)
    runner = web.AppRunner(app, shutdown_timeout=30.0)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield runner, f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()


def test_monitor_streams_recent_and_new_lines_caps_clients_and_survives_a_stuck_one(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, "huddle")  # as a node sets it (cli/commands.py)

    async def run() -> None:
        async with api(ApiLimits(max_subscribers=3)) as (runner, url), aiohttp.ClientSession() as http:
            ring = runner.app[MONITOR_KEY]
            logging.getLogger("huddle.test").warning("said before anyone listened")
            ws = await http.ws_connect(f"{url}/api/v1/monitor")
            first = await ws.receive_str(timeout=5)
            assert first.endswith("WARNING huddle.test: said before anyone listened")  # the recent lines first
            logging.getLogger("huddle.test").info("peer bob (35c9e1d4) joined")
            while not (await ws.receive_str(timeout=5)).endswith("peer bob (35c9e1d4) joined"):
                pass
            with pytest.raises(aiohttp.WSServerHandshakeError) as bad:
                await http.ws_connect(f"{url}/api/v1/monitor?level=loud")
            assert bad.value.status == 400
            async with http.get(f"{url}/api/v1/monitor") as plain:  # not a WebSocket: told so
                assert plain.status == 400 and "WebSocket" in (await plain.json())["error"]
            # A client that never reads: a tiny receive buffer, the upgrade sent, nothing read after.
            stuck = socket.socket()
            stuck.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            stuck.connect(("127.0.0.1", int(url.rsplit(":", 1)[1])))
            stuck.sendall(b"GET /api/v1/monitor HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\n"
                          b"Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                          b"Sec-WebSocket-Version: 13\r\n\r\n")
            for _ in range(200):
                if len(ring.clients) == 2:
                    break
                await asyncio.sleep(0.01)
            assert len(ring.clients) == 2
            # Lines until the stuck client's queue overflows: its socket's buffers (which the kernel
            # may grow to megabytes) fill first, then its queue; a deadline, not a fixed count.
            deadline = time.monotonic() + 30
            k = 0
            while ring.left_out == 0 and time.monotonic() < deadline:
                for _ in range(500):
                    logging.getLogger("huddle.test").warning("flood %d %s", k, "y" * 100)
                    k += 1
                await asyncio.sleep(0)  # the sender runs, fills the socket, then blocks
            assert all(len(c.waiting) <= CLIENT_LINES for c in ring.clients)
            assert ring.left_out > 0  # the stuck client's overflow, counted
            assert len(ring.recent) == RING_LINES
            # The honest client still gets lines, told what it missed if it fell behind.
            logging.getLogger("huddle.test").warning("the end")
            got = ""
            while not got.endswith("the end"):
                got = await ws.receive_str(timeout=10)
            # Capped: clients over api.max-subscribers are refused.
            extra = await http.ws_connect(f"{url}/api/v1/monitor")
            with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                await http.ws_connect(f"{url}/api/v1/monitor")
            assert refused.value.status == 503
            # Stopping: every client, the stuck one too, closed at once (not after shutdown_timeout).
            t0 = time.monotonic()
            await runner.cleanup()
            assert time.monotonic() - t0 < 3.0
            msg = await extra.receive(timeout=5)
            while msg.type is aiohttp.WSMsgType.TEXT:  # the recent lines it had not read yet, then the close
                msg = await extra.receive(timeout=5)
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            stuck.close()

    asyncio.run(run())


@pytest.mark.processes
def test_huddle_monitor_shows_a_peer_joining(cluster: Cluster) -> None:
    alice = cluster.start("alice")
    monitor = subprocess.Popen([sys.executable, "-m", "huddle", "monitor", "--api", alice.api],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: list[str] = []

    def read() -> None:
        assert monitor.stdout is not None
        for line in monitor.stdout:
            seen.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        wait_for(lambda: any("in group 'test'" in line for line in seen), 20, "alice's start line, said before")
        cluster.start("bob")
        wait_for(lambda: any("peer bob (" in line and " joined" in line for line in seen), 20,
                 "alice's monitor to show bob joining")
    finally:
        monitor.terminate()
        monitor.wait(10)
        reader.join(10)
