"""The ZeroMQ transport on loopback: what it holds for a peer that does not read."""

from __future__ import annotations

import asyncio
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


def test_a_connection_dropping_and_coming_back_is_reported_at_once() -> None:
    """The peer's process dies (its sockets close): the DEALER's monitor says so within
    milliseconds, not after heartbeats; when a peer listens there again, it says it is back."""

    async def run() -> list[tuple[int, bool]]:
        changes: list[tuple[int, bool]] = []
        changed = asyncio.Event()

        def on_link(conn: int, up: bool) -> None:
            changes.append((conn, up))
            changed.set()

        async def next_change(timeout: float) -> tuple[int, bool]:
            async with asyncio.timeout(timeout):
                while not changes:
                    changed.clear()
                    await changed.wait()
            return changes.pop(0)

        transport = ZmqTransport(NodeId(os.urandom(16)), on_frames=lambda batch, sources: None, on_link=on_link)
        transport.start(asyncio.get_running_loop())
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        peer = ctx.socket(zmq.ROUTER)
        peer.setsockopt(zmq.LINGER, 0)
        seen: list[tuple[int, bool]] = []
        try:
            port = peer.bind_to_random_port("tcp://127.0.0.1")
            assert transport.connect(7, f"tcp://127.0.0.1:{port}")
            seen.append(await next_change(5.0))  # connected
            t0 = time.monotonic()
            peer.close()  # as a killed process's kernel closes its sockets
            seen.append(await next_change(5.0))
            assert time.monotonic() - t0 < 0.5, "the drop was not reported at once"
            peer = ctx.socket(zmq.ROUTER)
            peer.setsockopt(zmq.LINGER, 0)
            peer.bind(f"tcp://127.0.0.1:{port}")
            seen.append(await next_change(5.0))  # ZeroMQ reconnected on its own
            transport.disconnect(7)
            assert transport.links is not None
            events = transport.links.events
            peer.close()
            await asyncio.sleep(0)  # a closed connection's monitor is gone: nothing more is read or reported
            assert transport.links.events == events and not changes
        finally:
            transport.close()
            peer.close()
            ctx.term()
        return seen

    assert asyncio.run(run()) == [(7, True), (7, False), (7, True)]


def test_connections_are_not_watched_unless_asked() -> None:
    transport = ZmqTransport(NodeId(os.urandom(16)), on_frames=lambda batch, sources: None)
    assert transport.links is None
    transport.close()


def test_a_silent_connection_under_a_nodes_uuid_does_not_shut_that_node_out() -> None:
    """Someone connects to the ROUTER under node C's UUID (public: beacons, the API) and says
    nothing.  C's own connections carry a routing suffix of their own, so they share no identity
    with it: C's messages are read at once, with its UUID as the sender frame and its connection
    (address#suffix) as their source; the squatter's id, a bare UUID, names no connection of C's."""

    async def run() -> tuple[list[list[bytes]], list[str]]:
        got: list[list[bytes]] = []
        sources: list[str] = []
        arrived = asyncio.Event()

        def on_frames(batch: list[list[bytes]], srcs: list[str]) -> None:
            got.extend(batch)
            sources.extend(srcs)
            arrived.set()

        receiver = ZmqTransport(NodeId(os.urandom(16)), on_frames=on_frames)
        receiver.start(asyncio.get_running_loop())
        c = NodeId(os.urandom(16))
        member = ZmqTransport(c, on_frames=lambda batch, srcs: None)
        ctx: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        squatter = ctx.socket(zmq.DEALER)
        squatter.setsockopt(zmq.IDENTITY, bytes(c))
        squatter.setsockopt(zmq.LINGER, 0)
        monitor = squatter.get_monitor_socket(zmq.EVENT_HANDSHAKE_SUCCEEDED)
        try:
            port = receiver.bind("127.0.0.1", 0, (20000, 60000))
            squatter.connect(f"tcp://127.0.0.1:{port}")
            async with asyncio.timeout(5.0):  # the squatter's connection holds its id at the ROUTER
                while not monitor.poll(0):
                    await asyncio.sleep(0.01)
            assert member.connect(1, f"tcp://127.0.0.1:{port}")
            assert member.send(1, [b"BEAT", b""])
            async with asyncio.timeout(5.0):
                while not got:
                    arrived.clear()
                    await arrived.wait()
        finally:
            squatter.disable_monitor()
            monitor.close()
            squatter.close()
            ctx.term()
            member.close()
            receiver.close()
        return got, sources

    got, sources = asyncio.run(run())
    assert len(got) == 1 and got[0][1:] == [b"BEAT", b""] and len(got[0][0]) == 16
    address, mark, suffix = sources[0].partition("#")
    assert (address, mark, len(bytes.fromhex(suffix))) == ("127.0.0.1", "#", 8)
