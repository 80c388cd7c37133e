"""Guests (Noam) on real node processes on 127.0.0.1: a raw-socket client written from the
Noam document's bytes, firing, bad input, discovery lists, the Python guest and a browser guest."""

from __future__ import annotations

import asyncio
import json
import queue
import socket
import threading
import time
from typing import Any

import pytest
from conftest import Cluster, free_port, get, http, wait_for

from huddle.procs import NodeProcess

# open_cluster: the nodes run open (--open): its raw guests register without a room key
# (a secured group's keyed room: tests/test_guest_room_key.py).
pytestmark = [pytest.mark.processes, pytest.mark.usefixtures("open_cluster")]

BROADCAST = "127.255.255.255"


def start_host(cluster: Cluster, name: str, marco_port: int, *extra: str) -> tuple[NodeProcess, dict[str, int]]:
    node = cluster.start(name, "--guests", "--guest-port", "0", "--guest-ws-port", "0",
                         "--guest-marco-port", str(marco_port), *extra)
    ports = get(node.api, "/api/v1/node")["guests"]
    assert ports["marco_port"] == marco_port and ports["tcp_port"] > 0 and ports["ws_port"] > 0
    return node, ports


def guest_names(api: str) -> list[str]:
    return [g["name"] for g in get(api, "/api/v1/guests")["guests"]]


def marco(port: int, data: bytes, polos: int, timeout: float = 10.0) -> list[tuple[bytes, int]]:
    """Broadcast ``data`` until ``polos`` answers came (or fail); returns (answer, the answerer's UDP port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.bind(("127.0.0.1", 0))
        s.settimeout(0.5)
        got: list[tuple[bytes, int]] = []
        deadline = time.monotonic() + timeout
        while len(got) < polos:
            assert time.monotonic() < deadline, f"only {len(got)} of {polos} polos: {got}"
            s.sendto(data, (BROADCAST, port))
            got = []
            try:
                while len(got) < polos:
                    answer, addr = s.recvfrom(2048)
                    got.append((answer, addr[1]))
            except TimeoutError:
                pass
        return got


class RawGuest:
    """A guest written from the document alone: length-prefixed JSON over plain sockets.  It
    serves its own port, which the host connects back to."""

    def __init__(self, host_port: int, name: str, hears: list[str], options: dict[str, str] | None = None) -> None:
        self.name = name
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(10)
        port = self.server.getsockname()[1]
        self.sock = socket.create_connection(("127.0.0.1", host_port), timeout=10)
        body = json.dumps(["register", name, port, hears, [], "raw", "0.1", options or {}],
                          separators=(",", ":")).encode()
        self.sock.sendall(b"%06d" % len(body) + body)
        self.back, _ = self.server.accept()  # the host connects back to our port
        self.back.settimeout(10)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read(self, sock: socket.socket | None = None) -> bytes:
        """One whole message (prefix and all) from the host's connection, or b'' at EOF."""
        s = sock or self.back
        head = self._exactly(s, 6)
        return head + self._exactly(s, int(head)) if head else b""

    @staticmethod
    def _exactly(s: socket.socket, n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            if not chunk:
                return data
            data += chunk
        return data

    def close(self) -> None:
        for s in (self.sock, self.back, self.server):
            s.close()


def test_raw_guests_on_two_nodes_speak_the_documents_bytes(cluster: Cluster) -> None:
    port = free_port(socket.SOCK_DGRAM)
    a, a_ports = start_host(cluster, "a", port)
    b, b_ports = start_host(cluster, "b", port)
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    # Both nodes on this machine hear one marco (SO_REUSEADDR / SO_REUSEPORT); the one chosen for
    # guest1 answers polo (one host per guest: test_guest_hosts_processes.py counts them).
    polos = [answer for answer, _ in marco(port, b'["marco","guest1","test","raw","0.1"]', 1)]
    assert polos[0] in [b'["polo","test",%d]' % p["tcp_port"] for p in (a_ports, b_ports)]
    # Either host takes a guest that connects to it, chosen or not.

    g2 = RawGuest(b_ports["tcp_port"], "guest2", ["topic1"], {"heartbeat": "10", "heartbeat_ack": "true"})
    g1 = RawGuest(a_ports["tcp_port"], "guest1", [])
    try:
        wait_for(lambda: guest_names(b.api) == ["guest2"] and guest_names(a.api) == ["guest1"], 10, "registrations")
        g1.send(b'000042["event","guest1","topic1",[1,2,"potato"]]')
        assert g2.read() == b'000042["event","guest1","topic1",[1,2,"potato"]]'
        # guest2 does not hear topic2: the next thing it gets is the next topic1 event.
        g1.send(b'000035["event","guest1","topic2",{"x":1}]' + b'000036["event","guest1","topic1","second"]')
        assert g2.read() == b'000036["event","guest1","topic1","second"]'
        g2.send(b'000022["heartbeat","guest2"]')
        assert g2.read() == b'000026["heartbeat_ack","guest2"]'
        # The guest's event is an event of the group: kind = topic, in every node's log.
        log = get(b.api, "/api/v1/log")["events"]
        assert [(e["kind"], e["body"]) for e in log[:1]] == [("topic1", {"noam_guest": "guest1", "value": [1, 2, "potato"]})]
        # A node's own event on a heard topic reaches the guest too, under the node's name.
        assert http(a.api, "/api/v1/events", {"kind": "topic1", "body": "from the node"})[0] == 201
        assert g2.read() == b'000038["event","a","topic1","from the node"]'
        info = get(b.api, "/api/v1/guests")
        assert info["guests"][0]["hears"] == ["topic1"] and info["guests"][0]["events_out"] == 3
        assert get(a.api, "/api/v1/guests")["guests"][0]["speaks"] == ["topic1", "topic2"]
    finally:
        g1.close()
        g2.close()


def test_a_silent_guest_is_fired_after_twice_its_period(cluster: Cluster) -> None:
    a, ports = start_host(cluster, "a", free_port(socket.SOCK_DGRAM))
    quiet = RawGuest(ports["tcp_port"], "quiet", [], {"heartbeat": "0.5"})
    beating = RawGuest(ports["tcp_port"], "beating", [], {"heartbeat": "0.5"})
    stop = threading.Event()

    def beat() -> None:  # the other guest keeps its period (0.4 s < 0.5 s) the whole time
        while not stop.wait(0.4):
            beating.send(b'000023["heartbeat","beating"]')

    beater = threading.Thread(target=beat, daemon=True)
    beater.start()
    try:
        wait_for(lambda: sorted(guest_names(a.api)) == ["beating", "quiet"], 10, "two guests")
        start = time.monotonic()
        quiet.sock.settimeout(10)
        while quiet.sock.recv(100):  # until the host closes our connection
            pass
        fired_after = time.monotonic() - start
        assert 0.5 <= fired_after < 3.0, fired_after  # 2 x 0.5 s after its registration, seen from here
        assert guest_names(a.api) == ["beating"], "the beating guest stays"
        assert get(a.api, "/api/v1/guests")["stats"]["fired"] == 1
        assert quiet.read() == b"", "its connection from the host is closed too"
    finally:
        stop.set()
        beater.join(5)
        quiet.close()
        beating.close()


@pytest.mark.parametrize(("bad", "complaint"), [
    (b'00004x["heartbeat","bad"]', "length as 6 digits"),
    (b"002000[" + b"x" * 10, "2000 octets is over this host's limit of 1000"),
    (b"000005hello", "not JSON"),
    (b'000017["event","g","t"]', "'event' has 4 items, got 3"),
    (b'000019["event",5,"t",[1]]', "guest_name must be a string"),
    (b'000021["event","bad","t",1]', "before register"),
])
def test_bad_input_gets_an_error_and_a_disconnect_and_the_others_carry_on(
    cluster: Cluster, bad: bytes, complaint: str,
) -> None:
    a, ports = start_host(cluster, "a", free_port(socket.SOCK_DGRAM), "--guest-max-message", "1000")
    good = RawGuest(ports["tcp_port"], "good", ["t"])
    try:
        wait_for(lambda: guest_names(a.api) == ["good"], 10, "the good guest")
        with socket.create_connection(("127.0.0.1", ports["tcp_port"]), timeout=10) as s:
            s.sendall(bad)
            error = RawGuest.read(good, s)
            assert error.startswith(b"0") and json.loads(error[6:])[0] == "error", error
            assert complaint in json.loads(error[6:])[1]
            assert s.recv(100) == b"", "then the host closes the connection"
        assert guest_names(a.api) == ["good"]
        assert get(a.api, "/api/v1/guests")["stats"]["errors"] >= 1
        assert http(a.api, "/api/v1/events", {"kind": "t", "body": 1})[0] == 201
        assert good.read() == b'000019["event","a","t",1]', "the other guest carries on"
    finally:
        good.close()


def test_free_and_other_guests_are_listed_and_a_grabbed_free_guest_gets_a_polo(cluster: Cluster) -> None:
    port = free_port(socket.SOCK_DGRAM)
    a, ports = start_host(cluster, "a", port)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
        s.bind(("127.0.0.1", 0))
        s.sendto(b'["marco","roamer","","java","0.2"]', (BROADCAST, port))
        s.sendto(b'["marco","chessbot","chess","js","1"]', (BROADCAST, port))
        s.sendto(b'["marco","broken"', (BROADCAST, port))

        def listed() -> bool:
            g = get(a.api, "/api/v1/guests")
            return [x["name"] for x in g["free"]] == ["roamer"] and [x["name"] for x in g["others"]] == ["chessbot"]

        wait_for(listed, 10, "the free and the other guest listed")
        assert get(a.api, "/api/v1/guests")["stats"]["bad_datagrams"] == 1
        s.setblocking(False)
        with pytest.raises(BlockingIOError):
            s.recv(100)  # no polo for either
    assert http(a.api, "/api/v1/guests/roamer/grab", {})[0] == 201
    assert marco(port, b'["marco","roamer","","java","0.2"]', 1)[0][0] == b'["polo","test",%d]' % ports["tcp_port"]
    assert http(a.api, "/api/v1/guests/nobody/fire", {})[0] == 404


def test_the_python_guest_finds_a_host_and_comes_back_after_being_fired(cluster: Cluster) -> None:
    from huddle.guest_client import Guest

    port = free_port(socket.SOCK_DGRAM)
    a, _ = start_host(cluster, "a", port)
    b, b_ports = start_host(cluster, "b", free_port(socket.SOCK_DGRAM))
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")

    async def run() -> None:
        loop_errors: list[dict[str, Any]] = []
        asyncio.get_running_loop().set_exception_handler(lambda _, context: loop_errors.append(context))
        finder = Guest("finder", "test", hears=["ping"], marco_address=BROADCAST, marco_port=port,
                       marco_interval=0.2, listen="127.0.0.1", heartbeat=1.0, heartbeat_ack=True)
        other = Guest("other", hears=["pong"], host=("127.0.0.1", b_ports["tcp_port"]), listen="127.0.0.1")
        await finder.start()
        await other.start()
        try:
            assert finder.host is not None and finder.host[0] == "127.0.0.1"
            await asyncio.to_thread(wait_for, lambda: "finder" in guest_names(a.api) and "other" in guest_names(b.api),
                                    10, "both registered")
            await other.speak("ping", {"n": 1})
            e = await finder.next_event(10)
            assert (e.guest, e.topic, e.value) == ("other", "ping", {"n": 1})
            await finder.speak("pong", [e.value["n"] + 1])
            e = await other.next_event(10)
            assert (e.guest, e.topic, e.value) == ("finder", "pong", [2])
            # Fired by hand: it goes back to discovery and registers again.
            assert (await asyncio.to_thread(http, a.api, "/api/v1/guests/finder/fire", {}))[0] == 200
            deadline = time.monotonic() + 15
            while finder.registrations < 2:
                assert time.monotonic() < deadline, "the guest did not register again"
                await asyncio.sleep(0.05)
            await asyncio.to_thread(wait_for, lambda: "finder" in guest_names(a.api), 10, "finder back")
            await other.speak("ping", "again")
            e = await finder.next_event(10)
            assert e.value == "again"
            assert finder.errors == []
        finally:
            await finder.close()
            await other.close()
        await asyncio.sleep(0)  # one turn of the loop: the closed connections' callbacks run
        assert loop_errors == [], "closing a guest made asyncio report errors"

    asyncio.run(run())


def test_a_browser_guest_on_one_node_and_a_python_guest_on_another(cluster: Cluster, browser: Any) -> None:
    from playwright.sync_api import expect

    from huddle.guest_client import Guest

    a, a_ports = start_host(cluster, "a", free_port(socket.SOCK_DGRAM))
    b, b_ports = start_host(cluster, "b", free_port(socket.SOCK_DGRAM))
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    page = browser.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(a.api + "/")
    page.add_script_tag(url=a.api + "/guest.js")
    page.evaluate("""(url) => {
        window.got = [];
        window.g = new HuddleGuest({url, name: "browser", hears: ["to-browser"], heartbeat: 1});
        g.on("to-browser", (value, speaker) => window.got.push([speaker, value]));
        g.speak("to-python", {"hello": "from chromium"});
    }""", f"ws://127.0.0.1:{a_ports['ws_port']}/")
    wait_for(lambda: "browser" in guest_names(a.api), 10, "the browser registered at a")
    assert get(a.api, "/api/v1/guests")["guests"][0]["transport"] == "ws"

    results: queue.Queue[Any] = queue.Queue()
    page_got_it = threading.Event()

    async def python_side() -> None:
        async with Guest("py", hears=["to-python"], host=("127.0.0.1", b_ports["tcp_port"]), listen="127.0.0.1") as g:
            first = await g.next_event(15)
            if first.value == {"hello": "from chromium"}:
                # The page's first word was still travelling a -> b when py registered at b (a busy
                # machine): a guest hears what arrives while it is there.  The one asked for is next.
                first = await g.next_event(15)
            await g.speak("to-browser", ["from", "python"])
            results.put(first)
            # Stay registered until the page has the reply (the main thread waits for it with a deadline).
            await asyncio.to_thread(page_got_it.wait, 20)

    def python_thread() -> None:
        try:
            asyncio.run(python_side())
        except Exception as exc:  # reported by the main thread
            results.put(exc)

    thread = threading.Thread(target=python_thread, daemon=True)
    thread.start()
    wait_for(lambda: "py" in guest_names(b.api), 10, "py registered at b")
    # The browser spoke before the python guest existed; guests get live events, not the past: speak again.
    page.evaluate('g.speak("to-python", {"hello": "again"})')
    first = results.get(timeout=20)
    assert not isinstance(first, Exception), first
    assert (first.guest, first.topic, first.value) == ("browser", "to-python", {"hello": "again"})
    try:
        page.wait_for_function("window.got.length > 0", timeout=15_000)
    finally:
        page_got_it.set()
    assert page.evaluate("window.got") == [["py", ["from", "python"]]]
    expect(page.locator("body")).to_be_visible()
    assert page.evaluate("g.status") == "registered" and errors == []
    thread.join(10)


def test_a_websocket_guest_with_bad_input_gets_an_error_and_is_closed(cluster: Cluster) -> None:
    import aiohttp

    a, ports = start_host(cluster, "a", free_port(socket.SOCK_DGRAM))
    url = f"ws://127.0.0.1:{ports['ws_port']}/"

    async def run() -> list[tuple[str, Any]]:
        seen = []
        async with aiohttp.ClientSession() as session:
            for bad in ("000005hello", '["event","g"]', "000099" + '["heartbeat","g"]', b"\x00binary"):
                async with session.ws_connect(url) as ws:
                    await ws.send_str('["register","g",0,[],[],"py","1",{}]')  # without the prefix: taken too
                    if isinstance(bad, bytes):
                        await ws.send_bytes(bad)
                    else:
                        await ws.send_str(bad)
                    msg = await ws.receive(timeout=10)
                    closed = await ws.receive(timeout=10)
                    seen.append((json.loads(msg.data[6:])[1], closed.type))
        return seen

    seen = asyncio.run(run())
    reasons = [r for r, _ in seen]
    assert "not JSON" in reasons[0]
    assert "'event' has 4 items, got 2" in reasons[1]
    assert "length prefix does not match" in reasons[2]
    assert "send text messages" in reasons[3]
    assert {t for _, t in seen} <= {aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING}
    assert get(a.api, "/api/v1/guests")["guests"] == []
