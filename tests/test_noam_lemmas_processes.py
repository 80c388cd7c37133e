"""Noam lemmas as written, against a real node: the JavaScript lemma's discovery and WebSocket,
the Ruby lemma's TCP, with non-ASCII text, as far as the group's log."""

from __future__ import annotations

import asyncio
import socket
import urllib.request
from typing import Any

import pytest
from conftest import Cluster, free_port, get, wait_for
from test_guest_processes import guest_names, marco, start_host
from test_noam_lemmas import TEXT, js_tcp_reader, lemma_frame

pytestmark = pytest.mark.processes


def test_the_javascript_and_ruby_lemmas_find_a_node_and_their_text_reaches_the_log_intact(cluster: Cluster) -> None:
    import aiohttp

    # Open (--open): the lemmas as written send no room key, which a secured group's room requires
    # (docs/guests.md, "The room key"); a keyed room refusing them is tested in tests/test_guest_room_key.py.
    cluster.secure = False
    a, ports = start_host(cluster, "a", free_port(socket.SOCK_DGRAM))
    # noam-io/lemma-javascript src/MessageBuilder.js (marco: dialect "node.js", version "1.1"): one polo,
    # its port a number (the JS lemma then dials the WebSocket port it knows, 8089 in the field).
    (polo, _), = marco(ports["marco_port"], b'["marco","jslemma","test","node.js","1.1"]', 1)
    assert polo == b'["polo","test",%d]' % ports["tcp_port"]

    async def run() -> list[Any]:
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(f"ws://127.0.0.1:{ports['ws_port']}/websocket") as ws:
            await ws.send_str(lemma_frame(["register", "jslemma", 0, ["score"], [], "web", "1.0"], "utf16").decode())
            sock = socket.create_connection(("127.0.0.1", ports["tcp_port"]), timeout=10)
            # noam-io/lemma-ruby lib/noam_lemma/message/register.rb: 7 items, the length in characters
            sock.sendall(lemma_frame(["register", "rubý", 0, [], ["score"], "ruby-script", "0.2.1"], "chars"))
            wait_for(lambda: sorted(guest_names(a.api)) == ["jslemma", "rubý"], 10, "both lemmas registered")
            sock.sendall(lemma_frame(["event", "rubý", "score", TEXT], "chars"))
            frame = await ws.receive(timeout=10)
            sock.close()
            return js_tcp_reader([frame.data])

    assert asyncio.run(run()) == [["event", "rubý", "score", TEXT]]
    log = get(a.api, "/api/v1/log")["events"]
    assert [(e["kind"], e["body"]) for e in log if e["kind"] == "score"] == [("score", {"noam_guest": "rubý",
                                                                                         "value": TEXT})]
    assert get(a.api, "/api/v1/guests")["stats"]["lengths_in_characters"] == 2  # the Ruby register and event


def test_a_secured_groups_room_takes_the_lemmas_as_written_only_when_keyless(cluster: Cluster) -> None:
    """The lemmas as written send no room key (docs/guests.md, "Keyless guests"): a SECURED node's
    room refuses them (counted), unless started with --guest-keyless, which takes them into a room
    marked keyless in its facts, the guests' listing, its log line and every event they say."""
    import aiohttp

    keyed, keyed_ports = start_host(cluster, "keyed", free_port(socket.SOCK_DGRAM))  # secured: the session's key
    keyless, ports = start_host(cluster, "keyless", free_port(socket.SOCK_DGRAM), "--guest-keyless")
    assert get(keyed.api, "/api/v1/node")["security"]["mode"] != "open"
    assert get(keyless.api, "/api/v1/node")["security"]["mode"] != "open"
    js_register = lemma_frame(["register", "jslemma", 0, ["score"], [], "web", "1.0"], "utf16").decode()
    ruby_register = lemma_frame(["register", "rubý", 0, [], ["score"], "ruby-script", "0.2.1"], "chars")

    async def refused() -> tuple[str, bytes]:
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(f"ws://127.0.0.1:{keyed_ports['ws_port']}/websocket") as ws:
            await ws.send_str(js_register)
            said = (await ws.receive(timeout=10)).data
        with socket.create_connection(("127.0.0.1", keyed_ports["tcp_port"]), timeout=10) as sock:
            sock.sendall(ruby_register)
            heard = b""
            while chunk := sock.recv(4096):  # the error, then the host closes the connection
                heard += chunk
        return said, heard

    said, heard = asyncio.run(refused())
    assert "room key" in said and b"room key" in heard, (said, heard)
    stats = get(keyed.api, "/api/v1/guests")["stats"]
    assert stats["room_key_refused"] == 2 and stats["keyless_admitted"] == 0, stats
    assert get(keyed.api, "/api/v1/guests")["guests"] == [] and get(keyed.api, "/api/v1/node")["guests"]["keyless"] is False

    async def admitted() -> list[Any]:
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(f"ws://127.0.0.1:{ports['ws_port']}/websocket") as ws:
            await ws.send_str(js_register)
            sock = socket.create_connection(("127.0.0.1", ports["tcp_port"]), timeout=10)
            sock.sendall(ruby_register)
            wait_for(lambda: sorted(guest_names(keyless.api)) == ["jslemma", "rubý"], 10, "both lemmas registered")
            sock.sendall(lemma_frame(["event", "rubý", "score", TEXT], "chars"))
            frame = await ws.receive(timeout=10)
            sock.close()
            return js_tcp_reader([frame.data])

    assert asyncio.run(admitted()) == [["event", "rubý", "score", TEXT]]  # the JS lemma hears the Ruby lemma
    log = get(keyless.api, "/api/v1/log")["events"]
    assert [(e["kind"], e["body"]) for e in log if e["kind"] == "score"] == [
        ("score", {"noam_guest": "rubý", "value": TEXT, "keyless": True})]
    room = get(keyless.api, "/api/v1/guests")
    assert room["keyless"] is True and room["stats"]["keyless_admitted"] == 2
    assert all(g["keyless"] for g in room["guests"]), room["guests"]
    node = get(keyless.api, "/api/v1/node")
    assert node["guests"]["keyless"] is True and node["features"]["guests"]["keyless"] is True
    assert "the guests' room is KEYLESS" in keyless.log_path.read_text()
    assert "keyless-room" in urllib.request.urlopen(keyless.api + "/", timeout=10).read().decode()
