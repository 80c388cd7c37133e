#!/usr/bin/env python3
"""Reproduce libzmq 4.3.5's ``Assertion failed: !_io_error (src/stream_engine_base.cpp:310)``
against huddle's own ROUTER, and show which socket settings reach it.

The abort (seen once in a 64-node bench/scale.py run: the node process died) needs
four things on one incoming connection of a ROUTER (zeromq/libzmq #4364, #3937,
#4841; read in libzmq 4.3.5's stream_engine_base.cpp):

1. its input stopped: the connection's queue reached ``RCVHWM`` because the
   application did not read for a while (a busy node); libzmq stops polling the
   descriptor for input and keeps the message it could not queue;
2. an error or hang-up on the descriptor (EPOLLERR / EPOLLHUP, reported even
   though input is not polled): the peer reset the connection -- for instance a
   peer that closed its socket answers the next PING with an RST;
   ``in_event`` then sees input stopped, removes the descriptor and sets
   ``_io_error``, and the engine waits for the application to read on;
3. ZMTP heartbeats on (``HEARTBEAT_IVL`` > 0): in 4.3.5 the heartbeat timer
   re-arms itself unconditionally and calls ``out_event`` to write a PING, which
   asserts ``!_io_error`` -- the abort, within one heartbeat interval;
4. the application not reading on (which would end the engine cleanly) before
   that timer fires, nor the heartbeat timeout firing first.

Each round runs in a child process: a real ``ZmqTransport`` (huddle's ROUTER,
with a small ``receive_hwm``) that is not read; ``--senders`` DEALERs each send
``--messages`` messages (far more than the mark) and close; the ROUTER is left
unread for ``--stall`` seconds (the busy node: this wait is the scenario, not a
wait for a condition); then everything queued is read.  ``--settings``:

* ``huddle``: the transport as huddle builds it (no ZMTP heartbeats; TCP keep-alive);
* ``zmtp-heartbeats``: the same plus ``HEARTBEAT_IVL`` 1 s and ``HEARTBEAT_TIMEOUT``
  3 s, the settings huddle used from issue 19 until this fix.

    PYTHONPATH=src python bench/zmq_abort.py --settings both --rounds 3

Prints one line per round (``survived: read N messages`` or ``aborted (SIGABRT)``
with libzmq's message) and exits 1 if a ``huddle`` round aborted.

``--scenario hostile-ping`` is what is NOT fixed: a raw TCP client (no libzmq)
that greets the ROUTER as a DEALER (ZMTP 3.1, NULL mechanism: anyone can, in
open mode), sends far more one-octet messages than the mark in one write with a
ZMTP PING command among them, and resets the connection.  libzmq stops input
with the PING still in its read buffer; the reset sets ``_io_error``; when the
node reads on, ``restart_input`` decodes the PING, whose PONG goes through
``out_event``: the same assert, whatever the ROUTER's own heartbeat settings.
Only a libzmq that does not assert there (or input that never stops: an
unbounded ``RCVHWM``, which issue 19's bounds rule out) removes it; see
bench/HISTORY.md.  Its rounds do not change the exit status.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass

import zmq

from huddle.ids import NodeId
from huddle.limits import MeshLimits
from huddle.transport.zmq_transport import ZmqTransport

SETTINGS = ("huddle", "zmtp-heartbeats")
SCENARIOS = ("peers-close", "hostile-ping")
OLD_HEARTBEAT_IVL_MS = 1000  # what the ROUTER set before this fix
OLD_HEARTBEAT_TIMEOUT_MS = 3000


@dataclass(frozen=True)
class Outcome:
    settings: str
    returncode: int
    read: int  # messages read after the stall; -1 if the child died
    detail: str

    @property
    def aborted(self) -> bool:
        return self.returncode == -signal.SIGABRT

    def line(self) -> str:
        if self.aborted:
            return f"{self.settings}: aborted (SIGABRT): {self.detail}"
        if self.returncode != 0:
            return f"{self.settings}: exited with {self.returncode}: {self.detail}"
        return f"{self.settings}: survived: read {self.read} messages"


def _zmtp_frame(flags: int, body: bytes) -> bytes:
    assert len(body) < 256
    return bytes([flags, len(body)]) + body


def _zmtp_property(name: bytes, value: bytes) -> bytes:
    return bytes([len(name)]) + name + struct.pack(">I", len(value)) + value


def hostile_ping(port: int, messages: int) -> None:
    """A raw ZMTP 3.1 DEALER (NULL mechanism): one write of ``messages`` one-octet
    messages, a PING command, as many again; then an RST (SO_LINGER 0)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.sendall(b"\xff" + b"\x00" * 8 + b"\x7f" + b"\x03\x01" + b"NULL".ljust(20, b"\x00") + b"\x00" * 32)
    greeting = b""
    while len(greeting) < 64:
        chunk = s.recv(64 - len(greeting))
        if not chunk:
            raise ConnectionError("the ROUTER closed during the greeting")
        greeting += chunk
    ready = b"\x05READY" + _zmtp_property(b"Socket-Type", b"DEALER") + _zmtp_property(b"Identity", b"h" * 16)
    burst = _zmtp_frame(0x00, b"x") * messages
    ping = _zmtp_frame(0x04, b"\x04PING" + b"\x00\x00")  # a command frame: PING, TTL 0, no context
    s.sendall(_zmtp_frame(0x04, ready) + burst + ping + burst)
    time.sleep(0.5)  # the burst reaches the ROUTER, whose input stops at the mark
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    s.close()  # an RST


def peers_close(ctx: zmq.Context[zmq.Socket[bytes]], port: int, senders: int, messages: int) -> None:
    """``senders`` DEALERs each send ``messages`` messages to the ROUTER, then close."""
    dealers: list[zmq.Socket[bytes]] = []
    for i in range(senders):
        d = ctx.socket(zmq.DEALER)
        d.setsockopt(zmq.LINGER, 0)
        d.setsockopt(zmq.IDENTITY, b"sender-%010d" % i)
        d.connect(f"tcp://127.0.0.1:{port}")
        dealers.append(d)
    body = b"x" * 100
    for d in dealers:
        for _ in range(messages):
            d.send_multipart([b"XMSG", body])  # DEALER queues (SNDHWM 1000 by default) or blocks briefly
    time.sleep(0.5)  # the queued messages reach the ROUTER, whose input stops at the mark
    for d in dealers:
        d.close()  # the peer goes: the ROUTER's next PING (if any) is answered with an RST


def child(settings: str, scenario: str, senders: int, messages: int, hwm: int, stall: float) -> int:
    """One round, in this process (which may abort)."""
    transport = ZmqTransport(NodeId(uuid.uuid4().bytes), on_frames=lambda batch, sources: None,
                             limits=MeshLimits(receive_hwm=hwm))
    router = transport.router
    if settings == "zmtp-heartbeats":
        router.setsockopt(zmq.HEARTBEAT_IVL, OLD_HEARTBEAT_IVL_MS)
        router.setsockopt(zmq.HEARTBEAT_TIMEOUT, OLD_HEARTBEAT_TIMEOUT_MS)
    port = transport.bind("127.0.0.1", 0, (49152, 65535))
    if scenario == "hostile-ping":
        hostile_ping(port, messages)
    else:
        peers_close(transport.ctx, port, senders, messages)
    time.sleep(stall)  # the node is busy: nothing read
    read = 0
    while router.poll(500):
        router.recv_multipart()
        read += 1
    print(f"read {read}", flush=True)
    transport.close()  # its sockets (the ROUTER's monitor too) before the context
    return 0


def run_round(settings: str, senders: int, messages: int, hwm: int, stall: float, timeout: float = 60.0,
              scenario: str = "peers-close") -> Outcome:
    """One round in a child process; what became of it."""
    cmd = [sys.executable, os.path.abspath(__file__), "--child", settings, "--scenario", scenario,
           "--senders", str(senders), "--messages", str(messages), "--hwm", str(hwm), "--stall", str(stall)]
    out = subprocess.run(cmd, check=False, capture_output=True, text=True, timeout=timeout)  # its death is the result
    read = -1
    for line in out.stdout.splitlines():
        if line.startswith("read "):
            read = int(line[5:])
    lines = [ln for ln in out.stderr.splitlines() if ln.strip()]
    detail = next((ln for ln in lines if "Assertion failed" in ln), lines[-1] if lines else "")
    return Outcome(settings, out.returncode, read, detail.strip())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", choices=(*SETTINGS, "both"), default="both")
    ap.add_argument("--scenario", choices=SCENARIOS, default="peers-close",
                    help="peers-close (fixed; the default) or hostile-ping (not fixed: see above)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--senders", type=int, default=4, help="DEALERs sending to the ROUTER (default 4)")
    ap.add_argument("--messages", type=int, default=300, help="messages each sends (default 300)")
    ap.add_argument("--hwm", type=int, default=10, help="the ROUTER's mesh.receive-hwm (default 10)")
    ap.add_argument("--stall", type=float, default=4.0, help="seconds the ROUTER is not read (default 4)")
    ap.add_argument("--child", choices=SETTINGS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.child, args.scenario, args.senders, args.messages, args.hwm, args.stall)
    print(f"libzmq {zmq.zmq_version()}, pyzmq {zmq.pyzmq_version()}, scenario {args.scenario}")
    which = SETTINGS if args.settings == "both" else (args.settings,)
    failed = False
    for settings in which:
        for _ in range(args.rounds):
            outcome = run_round(settings, args.senders, args.messages, args.hwm, args.stall, scenario=args.scenario)
            print(outcome.line(), flush=True)
            failed |= settings == "huddle" and args.scenario == "peers-close" and outcome.returncode != 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
