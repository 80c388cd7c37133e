"""ZRE against code nobody on this team wrote: zeromq-pyre 0.3.4 and zre 0.2.0 (PyPI), in the
test process, and a huddle node started with ``--zre`` (docs/zre.md).

pyre picks its beacon interface itself (the first that is not loopback) and has no working
``set_interface``: the tests replace its interface lookup so it beacons to 127.255.255.255
from 127.0.0.1, the way the suite pins huddle's own beacons (``--interface lo``).  Nothing
goes anywhere but 127.0.0.0/8.  Its ROUTER binds ``tcp://*`` (pyre's own choice) but is
only ever dialled on 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import ipaddress
import itertools
import json
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import aiohttp
import pyre
import pytest
import zmq
from conftest import Cluster, get, http, wait_for
from pyre import zbeacon
from pyre.pyre_event import PyreEvent
from zre.node import ZreNode

from huddle.procs import NodeProcess, free_port

pytestmark = pytest.mark.processes

GROUP = "test"


def _loopback_socket(self: Any) -> None:
    """pyre's interface lookup, pinned to loopback (its own scan would pick a real network)."""
    self.address = ipaddress.IPv4Address("127.0.0.1")
    self.network_address = ipaddress.IPv4Address("127.0.0.0")
    self.broadcast_address = ipaddress.IPv4Address("127.255.255.255")
    self.interface_name = "lo"


@pytest.fixture
def zre_port(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(zbeacon.ZBeacon, "_prepare_socket", _loopback_socket)
    return free_port(socket.SOCK_DGRAM)


class PyrePeer:
    """One pyre node on loopback, its events gathered as they come."""

    def __init__(self, name: str, port: int) -> None:
        self.node = pyre.Pyre(name)
        self.node.set_port(str(port).encode())
        self.node.start()
        self.node.join(GROUP)
        self.events: list[PyreEvent] = []

    def poll(self) -> list[PyreEvent]:
        sock = self.node.socket()
        while sock.poll(0, zmq.POLLIN):
            self.events.append(PyreEvent(self.node))
        return self.events

    def saw(self, kind: str, name: str) -> PyreEvent | None:
        return next((e for e in self.poll() if e.type == kind and e.peer_name == name), None)

    def stop(self) -> None:
        self.node.stop()


@pytest.fixture
def pyres() -> Iterator[list[PyrePeer]]:
    made: list[PyrePeer] = []
    yield made
    for p in made:
        p.stop()


def start_zre_node(cluster: Cluster, name: str, port: int) -> NodeProcess:
    """A huddle node speaking ZRE on ``port`` (its beacons pinned to lo by the cluster's --interface lo),
    in clear (--zre-plain): pyre has no CURVE and dies on a v3 beacon; ZRE over CURVE, a secured
    node's default, is tests/test_zre_curve.py."""
    return cluster.start(name, "--zre", "--zre-port", str(port), "--zre-plain")


async def zre_event(z: ZreNode, events: list[dict[str, Any]], match: Callable[[dict[str, Any]], bool], what: str,
                    timeout: float = 20.0) -> dict[str, Any]:
    """The first of the ``zre`` node's events (gathered in ``events``) that ``match``es, read until it comes."""
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        found = next((e for e in events if match(e)), None)
        if found is not None:
            return found
        event = await z.recv(0.1)
        if event is not None:
            events.append(event)
    raise AssertionError(f"timed out waiting for {what}: {events}")


def zre_peers(node: NodeProcess) -> list[dict[str, Any]]:
    peers: list[dict[str, Any]] = get(node.api, "/api/v1/zre/peers")["peers"]
    return peers


def shouts_in_log(node: NodeProcess) -> list[dict[str, Any]]:
    return [e for e in get(node.api, "/api/v1/log?limit=1000")["events"] if e["kind"] == "zre.shout"]


def test_pyre_and_huddle_enter_join_and_shout_both_ways(tmp_path: Path, zre_port: int,
                                                        pyres: list[PyrePeer]) -> None:
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h1", zre_port)
        py = PyrePeer("py1", zre_port)
        pyres.append(py)
        # ENTER both ways: pyre hears huddle's HELLO (its header X-HUDDLE), huddle pyre's.
        enter = wait_for(lambda: py.saw("ENTER", "h1"), 20, "pyre's ENTER of the huddle node")
        assert enter.headers["X-HUDDLE"].startswith("tcp://127.0.0.1:")
        wait_for(lambda: py.saw("JOIN", "h1"), 10, "pyre's JOIN of the huddle node to the group")
        peer = wait_for(lambda: [p for p in zre_peers(node) if p["name"] == "py1" and GROUP in p["groups"]], 20,
                        "the node's view of pyre in the group")[0]
        assert peer["proto"] == "zre" and peer["state"] == "ready"
        shown = subprocess.run([sys.executable, "-m", "huddle", "zre", "peers", "--api", node.api], capture_output=True,
                               text=True, timeout=30, check=True).stdout
        assert "py1" in shown and "ready" in shown and GROUP in shown
        assert get(node.api, "/api/v1/node")["features"]["zre"] == {"port": zre_port, "peers": 1, "curve": False}
        # pyre -> huddle: a SHOUT to the group becomes an event of the group's log.
        py.node.shout(GROUP, b"hello from pyre")
        shout = wait_for(lambda: shouts_in_log(node), 20, "the SHOUT in the node's log")[0]
        assert shout["body"]["name"] == "py1" and shout["body"]["frames"] == ["hello from pyre"]
        assert shout["body"]["uuid"] == py.node.uuid().hex and shout["body"]["encoding"] == "utf-8"
        # huddle -> pyre: an event recorded through the API goes out as a SHOUT to the group.
        status, _ = http(node.api, "/api/v1/events", {"kind": "note", "body": {"text": "hello from huddle"}})
        assert status == 201
        heard = wait_for(lambda: py.saw("SHOUT", "h1"), 20, "pyre's SHOUT from the huddle node")
        assert heard.group == GROUP
        assert heard.msg == [b"note", b'{"text":"hello from huddle"}']
        # WHISPER both ways: pyre's to the node reaches the API's event stream (not the log) ...
        node_uuid = uuid.UUID(get(node.api, "/api/v1/node")["uuid"])
        whispered = asyncio.run(_whisper_seen_on_the_stream(node.api, lambda: py.node.whisper(node_uuid, b"psst")))
        assert whispered["name"] == "py1" and whispered["frames"] == ["psst"] and whispered["encoding"] == "utf-8"
        assert all(e["kind"] != "zre.whisper" for e in get(node.api, "/api/v1/log?limit=1000")["events"])
        # ... and the node's (POST /api/v1/zre/whisper, to a name or a UUID) reaches pyre.
        assert http(node.api, "/api/v1/zre/whisper", {"to": "py1", "text": "psst back"}) == (
            202, {"sent_to": py.node.uuid().hex})
        heard_whisper = wait_for(lambda: py.saw("WHISPER", "h1"), 20, "pyre's WHISPER from the huddle node")
        assert heard_whisper.msg == [b"psst back"]
        assert http(node.api, "/api/v1/zre/whisper", {"to": "nobody", "text": "x"})[0] == 404
        assert http(node.api, "/api/v1/zre/whisper", {"to": "py1"})[0] == 400
        # An addressed message (POST /api/v1/messages) to a peer no mesh member answers to, but pyre: a WHISPER.
        assert http(node.api, "/api/v1/messages", {"to": "py1", "text": "as a message"}) == (
            202, {"sent": [{"peer": py.node.uuid().hex, "via": "zre"}]})
        wait_for(lambda: [e for e in py.poll() if e.type == "WHISPER" and e.msg == [b"as a message"]], 20,
                 "pyre's WHISPER from an addressed message")
        assert http(node.api, "/api/v1/messages", {"to": "nobody", "text": "x"})[0] == 404  # neither: still refused
        assert http(node.api, "/api/v1/messages", {"to": "py1", "text": "x" * (64 * 1024 + 1)})[0] == 413
        # The bridged SHOUT is not shouted back (only this node's own events of other kinds are).
        assert [e.msg for e in py.poll() if e.type == "SHOUT"] == [[b"note", b'{"text":"hello from huddle"}']]
    finally:
        cluster.close()


def test_pyre_sees_the_huddle_node_exit_when_it_is_killed(tmp_path: Path, zre_port: int,
                                                          pyres: list[PyrePeer]) -> None:
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h2", zre_port)
        py = PyrePeer("py2", zre_port)
        pyres.append(py)
        wait_for(lambda: py.saw("ENTER", "h2"), 20, "pyre's ENTER of the huddle node")
        node.signal(signal.SIGKILL)
        node.wait(10)
        # No leaving beacon from a killed node: pyre's own timers expire it (about 30 s by pyre's).
        wait_for(lambda: py.saw("EXIT", "h2"), 45, "pyre's EXIT of the killed huddle node", interval=0.2)
    finally:
        cluster.close()


def test_pyre_sees_the_huddle_node_leave_at_once_when_it_stops(tmp_path: Path, zre_port: int,
                                                               pyres: list[PyrePeer]) -> None:
    """A node that stops sends a beacon with port 0: pyre drops it then, not 30 s later."""
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h7", zre_port)
        py = PyrePeer("py7", zre_port)
        pyres.append(py)
        wait_for(lambda: py.saw("ENTER", "h7"), 20, "pyre's ENTER of the huddle node")
        node.signal(signal.SIGTERM)
        assert node.wait(20) == 0
        wait_for(lambda: py.saw("EXIT", "h7"), 10, "pyre's EXIT of the stopped huddle node", interval=0.1)
    finally:
        cluster.close()


def test_the_huddle_node_sees_pyre_leave(tmp_path: Path, zre_port: int) -> None:
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h3", zre_port)
        py = PyrePeer("py3", zre_port)
        try:
            wait_for(lambda: [p for p in zre_peers(node) if p["name"] == "py3"], 20, "the node's view of pyre")
        finally:
            py.stop()  # pyre sends a beacon with port 0 as it stops
        wait_for(lambda: not [p for p in zre_peers(node) if p["name"] == "py3"], 20, "pyre gone from the node's view")
        counters = get(node.api, "/api/v1/zre/peers")["counters"]
        assert counters.get("peers_left", 0) + counters.get("peers_lost", 0) >= 1
    finally:
        cluster.close()


def test_the_zre_package_and_huddle_enter_join_and_shout_both_ways(tmp_path: Path, zre_port: int,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """``zre`` 0.2.0 (PyPI, asyncio): its beacon port is 15670 unless set; pinned to 127.0.0.1, its
    beacons go to the broadcast address it computes for the interface (replaced here by
    127.255.255.255: its own lookup reads the netmask by interface name) and to 127.0.0.1."""
    monkeypatch.setattr(ZreNode, "_interface_broadcast", lambda self: "127.255.255.255")
    cluster = Cluster(tmp_path)

    async def run(node: NodeProcess) -> None:
        z = ZreNode("z1")
        z.set_interface("127.0.0.1")
        z.set_port(zre_port)
        await z.start()
        await z.join(GROUP)
        loop = asyncio.create_task(z.run())  # its I/O: beacons, ROUTER, timers
        events: list[dict[str, Any]] = []

        until = functools.partial(zre_event, z, events)

        try:
            await until(lambda e: e["type"] == "ENTER" and e["peer_name"] == "h4", "its ENTER of the node")
            await until(lambda e: e["type"] == "JOIN" and e["group"] == GROUP, "its JOIN of the node")
            await asyncio.to_thread(wait_for, lambda: [p for p in zre_peers(node) if GROUP in p["groups"]], 20,
                                    "the node's view of the zre node in the group")
            await z.shout(GROUP, b"from zre")
            shouts = await asyncio.to_thread(wait_for, lambda: shouts_in_log(node), 20, "its SHOUT in the log")
            assert shouts[0]["body"]["frames"] == ["from zre"] and shouts[0]["body"]["name"] == "z1"
            status, _ = await asyncio.to_thread(http, node.api, "/api/v1/events", {"kind": "note", "body": 1})
            assert status == 201
            heard = await until(lambda e: e["type"] == "SHOUT", "the node's SHOUT")
            assert heard["group"] == GROUP and heard["payload"] == b"note"  # zre passes up the first frame alone
        finally:
            await z.stop()
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop

    try:
        asyncio.run(run(start_zre_node(cluster, "h4", zre_port)))
    finally:
        cluster.close()


def test_hostile_input_at_the_zre_doors_is_counted_and_the_node_stays_up(tmp_path: Path, zre_port: int) -> None:
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h5", zre_port)
        router = get(node.api, "/api/v1/zre/peers")["endpoint"]
        udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        udp.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        try:
            for data in (b"", b"ZRE", b"ZRE\x01" + bytes(30), b"\xff" * 400):
                udp.sendto(data, ("127.255.255.255", zre_port))
            fresh = itertools.count()

            def flood() -> dict[str, int] | None:
                """50 beacons of fresh UUIDs (each naming a port nobody listens on), until the table is full."""
                for i in itertools.islice(fresh, 50):
                    udp.sendto(b"ZRE\x01" + i.to_bytes(16, "big") + b"\x00\x09", ("127.255.255.255", zre_port))
                counters: dict[str, int] = get(node.api, "/api/v1/zre/peers")["counters"]
                return counters if counters.get("peers_full", 0) >= 200 else None

            wait_for(flood, 30, "the ZRE peers' table full", interval=0.05)
        finally:
            udp.close()
        ctx = zmq.Context()
        dealer = ctx.socket(zmq.DEALER)
        dealer.setsockopt(zmq.IDENTITY, b"\x01" + b"\x05" * 16)
        dealer.setsockopt(zmq.LINGER, 5000)  # closing waits for the messages to go
        dealer.connect(router)
        try:
            dealer.send_multipart([b"\xaa\xa1\x0b\x02\x00\x01"])  # an id no one sends
            dealer.send_multipart([b"\xaa\xa1\x06\x02\x00\x01"])  # a PING from nobody it knows
            dealer.send_multipart([b"\xaa\xa1\x03\x02\x00\x02\x01g", *[b"x"] * 40])  # too many frames
            dealer.send(b"\xaa" * (300 * 1024))  # past MAXMSGSIZE: the connection is dropped
        finally:
            dealer.close()
            ctx.term()
        info = wait_for(lambda: (i := get(node.api, "/api/v1/zre/peers"))["counters"].get("unknown_peer") and i, 20,
                        "the refusals counted")
        counters = info["counters"]
        assert len(info["peers"]) == 256 and counters["peers_made"] == 256  # bounded
        assert counters["beacon_malformed"] >= 4 and counters["message_malformed"] >= 2
        assert get(node.api, "/api/v1/node")["name"] == "h5"  # still up and answering
        plain = cluster.start("h6")  # without --zre: the route says so
        assert http(plain.api, "/api/v1/zre/peers")[0] == 409
        assert "zre" not in get(plain.api, "/api/v1/node")["features"]
    finally:
        cluster.close()


async def _whisper_seen_on_the_stream(api: str, whisper: Callable[[], None]) -> dict[str, Any]:
    """WHISPER (again, until seen) while reading the node's event stream; the zre_whisper event."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + 20
    async with aiohttp.ClientSession() as session, session.ws_connect(api.replace("http", "ws", 1) +
                                                                      "/api/v1/events") as ws:
        while loop.time() < deadline:
            whisper()
            try:
                msg = await ws.receive(timeout=0.3)
            except TimeoutError:
                continue
            if msg.type is aiohttp.WSMsgType.TEXT and (event := json.loads(msg.data))["type"] == "zre_whisper":
                return cast(dict[str, Any], event)
    raise AssertionError("no zre_whisper event on the stream in 20 s")


def test_a_flood_of_shouts_is_recorded_in_batches_and_the_node_keeps_answering(
        tmp_path: Path, zre_port: int, pyres: list[PyrePeer]) -> None:
    """3000 SHOUTs as fast as pyre sends them: each recorded (in batches, one transaction each)
    or, past the bounded backlog, counted; the API answers meanwhile."""
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h8", zre_port)
        wait_for(lambda: get(node.api, "/api/v1/node")["recording"], 30, "the node recording")
        py = PyrePeer("py8", zre_port)
        pyres.append(py)
        wait_for(lambda: [p for p in zre_peers(node) if GROUP in p["groups"]], 20, "pyre in the group")
        for i in range(3000):
            py.node.shout(GROUP, b"flood %d" % i)
        assert get(node.api, "/api/v1/node")["name"] == "h8"  # answered within the flood (10 s at most)

        def settled() -> dict[str, int] | None:
            counters: dict[str, int] = get(node.api, "/api/v1/zre/peers")["counters"]
            recorded: int = get(node.api, "/api/v1/log/summary")["events"]
            return counters if recorded + counters.get("shout_backlog", 0) == 3000 else None

        counters = wait_for(settled, 60, "every SHOUT recorded or counted", interval=0.1)
        assert counters["shouts_in"] == 3000
    finally:
        cluster.close()


# A pyre node in a child process (so it can be killed: no leaving beacon), pinned to loopback
# as the fixture pins the test's own; it prints "up" once started, then waits to be killed.
_PYRE_CHILD = """
import ipaddress, sys, time
import pyre
from pyre import zbeacon
def lo(self):
    self.address = ipaddress.IPv4Address("127.0.0.1")
    self.network_address = ipaddress.IPv4Address("127.0.0.0")
    self.broadcast_address = ipaddress.IPv4Address("127.255.255.255")
    self.interface_name = "lo"
zbeacon.ZBeacon._prepare_socket = lo
node = pyre.Pyre(sys.argv[1])
node.set_port(sys.argv[2].encode())
node.start()
node.join(sys.argv[3])
print("up", flush=True)
time.sleep(600)
"""


def test_the_huddle_node_pings_then_expires_a_killed_pyre(tmp_path: Path, zre_port: int) -> None:
    cluster = Cluster(tmp_path)
    child = subprocess.Popen([sys.executable, "-c", _PYRE_CHILD, "py9", str(zre_port), GROUP],
                             stdout=subprocess.PIPE, text=True)
    try:
        node = start_zre_node(cluster, "h9", zre_port)
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        wait_for(lambda: [p for p in zre_peers(node) if p["name"] == "py9" and p["state"] == "ready"], 20,
                 "the node's view of pyre")
        child.kill()
        child.wait(10)
        # Silent 5 s: evasive (pinged); 30 s: expired and forgotten.
        wait_for(lambda: [p for p in zre_peers(node) if p["name"] == "py9" and p["state"] == "evasive"], 15,
                 "pyre evasive", interval=0.2)
        wait_for(lambda: not [p for p in zre_peers(node) if p["name"] == "py9"], 40, "pyre expired", interval=0.2)
        assert get(node.api, "/api/v1/zre/peers")["counters"]["peers_expired"] == 1
    finally:
        child.kill()
        child.wait(10)
        cluster.close()
