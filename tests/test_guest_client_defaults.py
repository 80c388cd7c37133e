"""The Python guest's defaults follow the node it is given (``node=`` its API): the room and
the marco port are the node's, and a node on loopback gets marcos on 127.255.255.255 and
a guest listening on 127.0.0.1 (the README's example on its loopback set-up finds its host
at once).  No test here sends to 255.255.255.255: each checks the address before starting."""

from __future__ import annotations

import asyncio
import socket

import pytest
from aiohttp import web
from conftest import Cluster, free_port, room_key
from test_guest_processes import guest_names, start_host

from huddle.guest_client import LAN_BROADCAST, LOOPBACK_BROADCAST, Guest, GuestError


def test_defaults_follow_a_loopback_node_and_stay_the_lans_otherwise() -> None:
    async def made() -> list[Guest]:
        return [Guest("a", node="127.0.0.1:8090"), Guest("b", node="http://localhost:8090/"),
                Guest("c", host=("127.0.0.1", 5000)), Guest("d"), Guest("e", node="10.0.0.5:8090"),
                Guest("f", node="127.0.0.1:8090", marco_address="127.0.0.9", listen="127.0.0.2", marco_port=7)]

    a, b, c, d, e, f = asyncio.run(made())  # made, never started: nothing is sent
    for near in (a, b):
        assert (near.marco_address, near.listen) == (LOOPBACK_BROADCAST, "127.0.0.1")
    assert c.listen == "127.0.0.1"
    for lan in (d, e):  # a LAN's device: the Noam defaults
        assert (lan.marco_address, lan.marco_port, lan.listen) == (LAN_BROADCAST, 1030, "0.0.0.0")
    assert (f.marco_address, f.listen, f.marco_port) == ("127.0.0.9", "127.0.0.2", 7)  # what is given wins
    with pytest.raises(GuestError, match="is not a node's API"):
        Guest("g", node="ftp://127.0.0.1:21")


@pytest.mark.processes
def test_a_guest_given_a_loopback_node_finds_its_room_without_settings(cluster: Cluster) -> None:
    node, _ = start_host(cluster, "alice", free_port(socket.SOCK_DGRAM))  # a marco port of its own
    plain = cluster.start("bob", beacon=False)

    async def run() -> None:
        key = room_key()  # the secured group's room is keyed
        guest = Guest("scoreboard", node=node.api, hears=["score"], marco_interval=0.1, room_key=key)
        speaker = Guest("desk", node=node.api, speaks=["score"], marco_interval=0.1, room_key=key)
        for g in (guest, speaker):
            assert g.marco_address == LOOPBACK_BROADCAST  # never the LAN's broadcast from a test
        async with guest, speaker:
            assert guest.room == "test" and guest.host is not None and guest.host[0] == "127.0.0.1"
            assert sorted(guest_names(node.api)) == ["desk", "scoreboard"]
            await speaker.speak("score", {"home": 4})
            assert (await guest.next_event(10)).value == {"home": 4}
        with pytest.raises(GuestError, match="does not host guests"):
            await Guest("x", node=plain.api).start(5)

    asyncio.run(run())


@pytest.mark.parametrize("status, body", [
    (200, b"not json"), (200, b"[1, 2]"), (200, b'{"room": 5, "marco_port": 1030}'),
    (200, b'{"room": "r", "marco_port": 70000}'), (200, b'{"room": "r", "marco_port": true}'),
    (200, b'{"room": "r", "marco_port": 1030, "pad": "' + b"x" * (2 << 20) + b'"}'), (500, b"oops"),
])
def test_a_node_answering_nonsense_for_its_room_is_a_guest_error(status: int, body: bytes) -> None:
    async def run() -> str:
        async def room(request: web.Request) -> web.Response:
            return web.Response(status=status, body=body, content_type="application/json")

        app = web.Application()
        app.router.add_get("/api/v1/guests", room)
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            guest = Guest("x", node=f"127.0.0.1:{port}")
            with pytest.raises(GuestError) as exc:
                await guest.start(2)
            assert guest._server is None  # refused before anything opened or sent
            return str(exc.value)
        finally:
            await runner.cleanup()

    message = asyncio.run(run())
    assert "127.0.0.1" in message and ("not a room" in message or f"answered {status}" in message), message
