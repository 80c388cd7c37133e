"""The ZeroMQ transport on loopback: what it holds for a peer that does not read."""

from __future__ import annotations

import os
import time

import zmq

from huddle.ids import NodeId
from huddle.transport.zmq_transport import ZmqTransport

MiB = 1024 * 1024


def test_large_frames_a_peer_does_not_read_are_counted_until_written() -> None:
    transport = ZmqTransport(NodeId(os.urandom(16)), on_frames=lambda batch, sources: None)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    inbox = ctx.socket(zmq.ROUTER)
    inbox.setsockopt(zmq.RCVHWM, 1)  # a peer that stops reading: ZeroMQ takes one message, the kernel a little
    inbox.setsockopt(zmq.RCVBUF, 4096)
    inbox.setsockopt(zmq.LINGER, 0)
    try:
        port = inbox.bind_to_random_port("tcp://127.0.0.1")
        transport.connect(1, f"tcp://127.0.0.1:{port}")
        data = os.urandom(MiB)
        for _ in range(40):
            assert transport.send(1, [b"BULK", b"head", data])
        assert transport.send(1, [b"CHAT", b"small frames are not counted"])
        assert 28 * MiB <= transport.queued_large(1) <= 40 * MiB  # ZeroMQ may have written some already
        assert inbox.poll(10_000), "the first message never came"
        inbox.recv_multipart()
        # The kernel holds at most a few MiB (tcp_wmem's maximum here is 4 MiB): most is still ours.
        assert transport.queued_large(1) >= 40 * MiB - 12 * MiB
        got = 1
        deadline = time.monotonic() + 30
        while got < 41:
            assert time.monotonic() < deadline, f"only {got} of 41 messages read"
            if inbox.poll(1000):
                inbox.recv_multipart()
                got += 1
        while transport.queued_large(1) != 0:
            assert time.monotonic() < deadline, f"{transport.queued_large(1)} octets still counted after all was read"
            time.sleep(0.005)
        assert transport.queued_large(2) == 0  # no such connection
    finally:
        transport.close()
        inbox.close()
        ctx.term()


def test_trackers_of_written_frames_are_not_kept_when_nobody_asks() -> None:
    """Large frames that are not content (big log batches) go out on connections whose count
    nobody asks for: the trackers of frames already written do not pile up (nor their data)."""
    transport = ZmqTransport(NodeId(os.urandom(16)), on_frames=lambda batch, sources: None)
    ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
    inbox = ctx.socket(zmq.ROUTER)
    inbox.setsockopt(zmq.LINGER, 0)
    try:
        port = inbox.bind_to_random_port("tcp://127.0.0.1")
        transport.connect(1, f"tcp://127.0.0.1:{port}")
        conn = transport.conns[1]
        deadline = time.monotonic() + 30
        for i in range(200):
            assert transport.send(1, [b"XMSG", os.urandom(300 * 1024)])
            assert inbox.poll(10_000), f"message {i} never came"
            inbox.recv_multipart()
            while not conn.large[-1][0].done:  # written, and ZeroMQ has let it go
                assert time.monotonic() < deadline, "ZeroMQ never released a frame it wrote"
                time.sleep(0.001)
            assert len(conn.large) <= 2, len(conn.large)
        assert transport.queued_large(1) == 0
    finally:
        transport.close()
        inbox.close()
        ctx.term()
