"""The pairing door in-process (huddle/pairing/door.py): its own ZAP in its own context, what it
answers, and following the mesh's interface when it moves (docs/security.md, "Pairing")."""

from __future__ import annotations

import asyncio
import contextlib
import time

import zmq
import zmq.asyncio

from huddle.pairing.codec import Accepted, Pair, Pending, decode, encode
from huddle.pairing.door import Door, door_keypair
from huddle.pairing.requests import Requests
from huddle.security import GroupSecret, NodeIdentity


def _dealer(ctx: zmq.asyncio.Context, endpoint: str, identity: NodeIdentity) -> zmq.asyncio.Socket:
    keys = identity.curve()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.CURVE_SERVERKEY, door_keypair("derby").public)
    sock.setsockopt(zmq.CURVE_PUBLICKEY, keys.public)
    sock.setsockopt(zmq.CURVE_SECRETKEY, keys.secret)
    sock.connect(endpoint)
    return sock


async def _ask(sock: zmq.asyncio.Socket, identity: NodeIdentity) -> object:
    await sock.send(encode(Pair(identity.public_key, "dev", identity.node_id.hex(), "derby")))
    return decode(await asyncio.wait_for(sock.recv(), 5))


def test_the_door_answers_follows_a_move_and_leaves_the_default_context_alone() -> None:
    async def main() -> None:
        secret = GroupSecret.new("derby")
        requests = Requests()
        door = Door("derby", requests, lambda: secret, time.monotonic)
        port = door.bind("127.0.0.1")
        task = asyncio.create_task(door.run())
        ctx = zmq.asyncio.Context()
        try:
            device = NodeIdentity.generate()
            sock = _dealer(ctx, f"tcp://127.0.0.1:{port}", device)
            assert await _ask(sock, device) == Pending(device.fingerprint)
            assert requests.accept(time.monotonic(), device.fingerprint) is not None
            answer = await _ask(sock, device)
            assert isinstance(answer, Accepted) and answer.group_file == secret.file_text()
            sock.close(linger=0)
            # The interface moved: the door listens on the new address, at the same port.
            assert door.move("127.0.0.2") == port
            moved = _dealer(ctx, f"tcp://127.0.0.2:{port}", device)
            assert isinstance(await _ask(moved, device), Accepted)
            moved.close(linger=0)
            # ZAP is per context: the door's handler is not the default context's.
            plain: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.REP)
            plain.bind("inproc://zeromq.zap.01")  # free there: the door bound its own context's
            plain.close(linger=0)
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            ctx.term()

    asyncio.run(main())


def test_a_request_expires_on_the_running_door_and_leaves_nothing() -> None:
    async def main() -> None:
        secret = GroupSecret.new("derby")
        requests = Requests(ttl=0.5)
        door = Door("derby", requests, lambda: secret, time.monotonic)
        port = door.bind("127.0.0.1")
        task = asyncio.create_task(door.run())
        ctx = zmq.asyncio.Context()
        try:
            device = NodeIdentity.generate()
            sock = _dealer(ctx, f"tcp://127.0.0.1:{port}", device)
            assert await _ask(sock, device) == Pending(device.fingerprint)
            sock.close(linger=0)
            deadline = time.monotonic() + 10
            while requests.stats.expired == 0:  # the door's loop expires requests every second
                assert time.monotonic() < deadline, "the request did not expire"
                await asyncio.sleep(0.05)
            assert requests.pending(time.monotonic()) == [] and requests.stats.pending == 0
            assert requests.accept(time.monotonic(), device.fingerprint) is None
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            ctx.term()

    asyncio.run(main())
