"""Run inside a network namespace of its own (tests/test_curve_wire.py starts it with
``ip netns exec``): two nodes on the namespace's loopback, a raw AF_PACKET capture of
that loopback, and an event, a chat line, an addressed message and a post, each with a
distinctive plaintext.  Prints one JSON line: which plaintexts the captured octets contain.

    python tests/wire_capture.py OUT_DIR TOKEN [--group-key FILE]
"""

from __future__ import annotations

import json
import signal
import socket
import struct
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from huddle.procs import NodeProcess

ETH_P_ALL = 0x0003
MAX_CAPTURE = 64 * 1024 * 1024  # octets kept at most
TIMEOUT = 30.0


class Capture:
    """Every frame on ``lo`` (in this namespace), kept in memory up to MAX_CAPTURE octets."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.1)
        self.frames: list[bytes] = []
        self.octets = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                frame = self.sock.recv(65536)
            except TimeoutError:
                continue
            if self.octets < MAX_CAPTURE:
                self.frames.append(frame)
                self.octets += len(frame)

    def stop(self, ports: set[int]) -> bytes:
        """The TCP payloads of the frames to or from ``ports`` (the mesh's ROUTERs: not the API's
        requests, which carry the plaintexts on this loopback too), one a line."""
        self._stop.set()
        self._thread.join(5)
        self.sock.close()
        segments = map(_tcp, self.frames)
        return b"\n".join(payload for sport, dport, payload in segments if sport in ports or dport in ports)


def _tcp(frame: bytes) -> tuple[int, int, bytes]:
    """(source port, destination port, payload) of an Ethernet + IPv4 + TCP frame; (0, 0, b"") else."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 6:
        return 0, 0, b""
    ip = 14
    tcp = ip + (frame[ip] & 0x0F) * 4
    if len(frame) < tcp + 20:
        return 0, 0, b""
    sport, dport = struct.unpack_from("!HH", frame, tcp)
    return sport, dport, frame[tcp + (frame[tcp + 12] >> 4) * 4:]


def _call(api: str, path: str, body: Any = None, raw: bytes | None = None) -> Any:
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(api + path, data=data, method="GET" if data is None else "POST")
    req.add_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.loads(resp.read() or b"null")


def _wait(predicate: Any, what: str) -> None:
    deadline = time.monotonic() + TIMEOUT
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out waiting for {what}")
        time.sleep(0.05)


def main(out: Path, token: str, extra: list[str]) -> None:
    capture = Capture()
    nodes = [NodeProcess(name, out / name, "--beacon-port", "5670", "--beacon-interval", "0.25", *extra,
                         group="test") for name in ("a", "b")]
    try:
        a, b = (n.wait_api() for n in nodes)
        _wait(lambda: any(p["state"] == "alive" for p in _call(a, "/api/v1/peers"))
              and any(p["state"] == "alive" for p in _call(b, "/api/v1/peers")), "the two nodes to meet")
        b_uuid = _call(b, "/api/v1/node")["uuid"]
        ports = {int(_call(api, "/api/v1/node")["endpoint"].rsplit(":", 1)[1]) for api in (a, b)}
        texts = {kind: f"{token}-{kind}" for kind in ("event", "chat", "message", "post")}
        record = _call(a, "/api/v1/events", {"kind": "note", "body": {"text": texts["event"]}})
        _call(a, "/api/v1/chat", {"text": texts["chat"]})
        _call(a, "/api/v1/messages", {"to": b_uuid, "text": texts["message"]})
        _call(a, f"/api/v1/posts?subject={texts['post']}-subject", raw=(texts["post"] + "\n").encode() * 8)

        def received(kind: str) -> bool:
            return bool(_call(b, "/api/v1/node")["stats"]["traffic"]["received"][kind])

        _wait(lambda: _call(b, "/api/v1/log/summary")["version_vector"].get(record["source"]) == record["seq"],
              "the event at b")
        _wait(lambda: received("CHAT") and received("DMSG"), "the chat line and the message at b")
        _wait(lambda: any(p["subject"] == f"{texts['post']}-subject" for p in _call(b, "/api/v1/posts"))
              and received("BULK"), "the post and its content at b")
    finally:
        for n in nodes:
            n.signal(signal.SIGTERM)
        for n in nodes:
            n.wait(20)
    wire = capture.stop(ports)
    print(json.dumps({"octets": len(wire), "found": {kind: text.encode() in wire for kind, text in texts.items()}}))


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3:])
