"""A node stops in under a second whatever clients it serves: its event stream's
WebSocket subscribers are told (close code 1001, "going away") and closed, its
data directory's lock is released, and a node started on that directory at once
runs (docs/architecture.md, "Stopping")."""

from __future__ import annotations

import base64
import os
import signal
import socket
import time
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for

from huddle.procs import free_port

pytestmark = pytest.mark.processes

SUBSCRIBERS = 50


def _subscribe(api: str, rcvbuf: int | None = None, path: str = "/api/v1/events") -> socket.socket:
    """A raw WebSocket client of ``path`` (the event stream), its handshake answered 101."""
    host, port = api.removeprefix("http://").rsplit(":", 1)
    s = socket.socket()
    if rcvbuf is not None:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.settimeout(10)
    s.connect((host, int(port)))
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
               f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = s.recv(1)
        assert chunk, f"the API closed the handshake: {head!r}"
        head += chunk
    assert head.startswith(b"HTTP/1.1 101"), head
    return s


def _close_code(s: socket.socket, deadline: float) -> int | None:
    """The code of the close frame the node sends on ``s`` (frames before it skipped);
    None if the connection ends, or the deadline passes, without one."""
    buf = b""
    while True:
        while len(buf) >= 2:
            size, at = buf[1] & 0x7F, 2
            if size == 126:
                size, at = int.from_bytes(buf[2:4], "big"), 4
            elif size == 127:
                size, at = int.from_bytes(buf[2:10], "big"), 10
            if len(buf) < at + size:
                break
            opcode, payload, buf = buf[0] & 0x0F, buf[at:at + size], buf[at + size:]
            if opcode == 0x8:
                return int.from_bytes(payload[:2], "big") if len(payload) >= 2 else None
        s.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            chunk = s.recv(65536)
        except (TimeoutError, OSError):
            return None
        if not chunk:
            return None
        buf += chunk


def _request_in_progress(api: str) -> socket.socket:
    """A request whose body never comes: its handler waits (api.body-timeout, 30 s)."""
    host, port = api.removeprefix("http://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.sendall(f"POST /api/v1/events HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
              "Content-Length: 100\r\n\r\n{".encode())
    return s


def test_sigterm_with_fifty_subscribers_stops_in_under_a_second_and_restarts(cluster: Cluster, tmp_path: Path) -> None:
    conf = tmp_path / "alice.toml"
    conf.write_text(f"[limits.api]\nmax-subscribers = {SUBSCRIBERS + 1}\n")
    alice = cluster.start("alice", "--config", str(conf), beacon=False)
    # One that reads nothing, with megabytes of events unsent to it: its close cannot be written.
    stuck = _subscribe(alice.api, rcvbuf=4096)
    wait_for(lambda: get(alice.api, "/api/v1/node")["stats"]["api"]["subscribers"] == 1, 10, "the stuck subscriber")
    for _ in range(4):
        status, answer = http(alice.api, "/api/v1/events", {"kind": "big", "body": "x" * 1_000_000})
        assert status == 201, answer
    subscribers = [_subscribe(alice.api) for _ in range(SUBSCRIBERS)]
    pending = _request_in_progress(alice.api)
    try:
        wait_for(lambda: get(alice.api, "/api/v1/node")["stats"]["api"]["subscribers"] == SUBSCRIBERS + 1, 10,
                 "every subscriber to be streamed to")
        began = time.monotonic()
        alice.signal(signal.SIGTERM)
        code = alice.wait(10)
        took = time.monotonic() - began
        assert code == 0, alice.log_path.read_text()[-2000:]
        # Before: about 31 s, the API's cleanup waiting for each stream's handler to end by itself.
        assert took < 1.0, f"the node took {took:.2f} s to stop with {SUBSCRIBERS} subscribers"
        deadline = time.monotonic() + 2.0
        codes = [_close_code(s, deadline) for s in subscribers]
        assert codes == [1001] * SUBSCRIBERS, codes
        try:
            answer = pending.recv(4096)
        except ConnectionResetError:
            answer = b""
        assert answer == b"", answer  # the request in progress: cancelled, its connection closed
    finally:
        for s in [*subscribers, stuck, pending]:
            s.close()
    # The lock went with it, let go cleanly: a node on the same directory starts at once, and
    # finds no pid left in the lock (which it would take for a node that crashed).
    assert (alice.data_dir / "lock").read_text() == ""
    again = cluster.start("alice", "--config", str(conf), beacon=False, data_dir=alice.data_dir)
    assert get(again.api, "/api/v1/node")["name"] == "alice"
    log = alice.log_path.read_text()
    assert "told 51 subscriber(s) the node is going away, and closed them (1 cut off" in log
    assert "did not stop cleanly" not in log and "still stopping" not in log


def test_sigterm_with_guests_upgraded_but_not_registered_stops_in_under_a_second(cluster: Cluster) -> None:
    """The guests' WebSocket port: a connection that upgraded and has not registered yet is
    told "going away" too.  Before: about 46 s with three (the room's register timeout stops
    with the node, and aiohttp waited for each handler)."""
    node = cluster.start("host", "--guests", "--guest-port", "0", "--guest-ws-port", "0",
                         "--guest-marco-port", str(free_port(socket.SOCK_DGRAM)), beacon=False)
    ws_port = get(node.api, "/api/v1/node")["guests"]["ws_port"]
    guests = [_subscribe(f"http://127.0.0.1:{ws_port}", path="/") for _ in range(3)]
    try:
        began = time.monotonic()
        node.signal(signal.SIGTERM)
        code = node.wait(10)
        took = time.monotonic() - began
        assert code == 0, node.log_path.read_text()[-2000:]
        assert took < 1.0, f"the node took {took:.2f} s to stop with 3 guests' WebSockets open"
        deadline = time.monotonic() + 2.0
        assert [_close_code(s, deadline) for s in guests] == [1001] * 3
    finally:
        for s in guests:
            s.close()
