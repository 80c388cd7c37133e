"""Hydra on its own wire, end to end (docs/hydra.md): huddle nodes started with ``--zre``,
found over ZRE the way Hydra finds its peers (the HELLO's header ``X-HYDRA``), a Hydra client
and a Hydra server written here from edgenet/hydra's framing (``src/hydra_proto.c``: one frame,
``AA A0``, the id, the fields; ids of ``include/hydra_proto.h``), and pyre as the ZRE side of
the test's Hydra node (``src/hydra.c`` runs its server beside a Zyre node that carries the
header).  Beacons go to 127.255.255.255, connections to 127.0.0.1, as tests/test_zre_interop.py
pins them.
"""

from __future__ import annotations

import hashlib
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyre
import pytest
import zmq
from conftest import Cluster, get, wait_for
from posts_kit import add_post, ids
from pyre import zbeacon
from test_zre_interop import PyrePeer, _loopback_socket

from huddle.procs import NodeProcess, free_port

pytestmark = pytest.mark.processes

MiB = 1024 * 1024
CHUNK_SIZE = 10 * MiB  # Hydra's client asks this much per CHUNK (src/hydra_client.c)


@pytest.fixture
def zre_port(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(zbeacon.ZBeacon, "_prepare_socket", _loopback_socket)
    return free_port(socket.SOCK_DGRAM)


@pytest.fixture
def pyres() -> Iterator[list[PyrePeer]]:
    made: list[PyrePeer] = []
    yield made
    for p in made:
        p.stop()


# ---- Hydra's framing, written out from src/hydra_proto.c (not huddle's codec) ----

def _s(text: str | bytes) -> bytes:
    raw = text.encode() if isinstance(text, str) else text
    return bytes([len(raw)]) + raw


def frame(mid: int, *fields: bytes) -> bytes:
    return b"\xaa\xa0" + bytes([mid]) + b"".join(fields)


def parse(data: bytes) -> tuple[int, dict[str, Any]]:
    """A server's message: (id, its fields) as hydra_proto_recv reads them."""
    assert data[:2] == b"\xaa\xa0", data[:8]
    mid, pos, out = data[2], 3, {}

    def string(n: int) -> str:
        nonlocal pos
        size = int.from_bytes(data[pos:pos + n], "big")
        pos += n + size
        return data[pos - size:pos].decode()

    if mid == 2:  # HELLO-OK
        out = {"identity": string(1), "nickname": string(1)}
    elif mid == 5:  # NEXT-OK
        out = {"ident": string(1)}
    elif mid == 8:  # META-OK
        out = {"subject": string(4), "timestamp": string(1), "parent_id": string(1), "digest": string(1),
               "mime_type": string(1), "content_size": int.from_bytes(data[pos:pos + 8], "big")}
    elif mid == 10:  # CHUNK-OK
        offset, size = struct.unpack_from(">QI", data, pos)
        out = {"offset": offset, "content": data[pos + 12:pos + 12 + size]}
    elif mid == 15:  # ERROR
        out = {"status": int.from_bytes(data[pos:pos + 2], "big")}
        pos += 2
        out["reason"] = string(1)
    return mid, out


class HydraClient:
    """A Hydra client as src/hydra_client.c speaks: a DEALER, one frame per message."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.RCVTIMEO, 20000)
        self.sock.connect(endpoint)

    def ask(self, data: bytes, *more: bytes) -> tuple[int, dict[str, Any]]:
        self.sock.send_multipart([data, *more])
        return parse(self.sock.recv())

    def hello(self) -> None:
        assert self.ask(frame(1, _s("C" * 32), _s("test client")))[0] == 2

    def close(self) -> None:
        self.sock.close(linger=0)


def hydra_endpoint(py: PyrePeer, name: str) -> str:
    enter = wait_for(lambda: py.saw("ENTER", name), 20, f"pyre's ENTER of {name}")
    endpoint: str = enter.headers["X-HYDRA"]
    assert endpoint.startswith("tcp://127.0.0.1:")
    return endpoint


def hydra_id(meta: dict[str, Any]) -> str:
    """hydra_post_ident: SHA1 over subject:timestamp:parent_id:mime_type:digest, as zdigest writes it."""
    text = f"{meta['subject']}:{meta['timestamp']}:{meta['parent_id']}:{meta['mime_type']}:{meta['digest']}"
    return hashlib.sha1(text.encode()).hexdigest().upper()


def hydra_view_id(post: dict[str, Any]) -> str:
    """The id a Hydra node gives one of huddle's posts (GET /api/v1/posts's fields): its digest in uppercase."""
    return hydra_id({**post, "parent_id": post.get("parent_id") or "", "digest": str(post["digest"]).upper()})


def start_zre_node(cluster: Cluster, name: str, port: int, **kw: Any) -> NodeProcess:
    # In clear (--zre-plain): pyre, the discovery of these tests, has no CURVE (docs/zre.md, "CURVE").
    return cluster.start(name, "--zre", "--zre-port", str(port), "--zre-plain", **kw)


def test_a_hydra_client_fetches_huddles_posts_in_chunks_resumed_after_a_cut(
        tmp_path: Path, zre_port: int, pyres: list[PyrePeer], ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h1", zre_port)
        small = add_post(node.api, b"hello hydra", "small")
        big_content = os.urandom(50 * MiB)
        big = add_post(node.api, big_content, "big")
        py = PyrePeer("py1", zre_port)
        pyres.append(py)
        endpoint = hydra_endpoint(py, "h1")  # found over ZRE, as src/hydra.c finds its peers
        client = HydraClient(ctx, endpoint)
        client.hello()
        mid, nxt = client.ask(frame(3, _s("HEAD")))  # NEXT-OLDER HEAD: the newest
        # Hydra's view of huddle's post (docs/hydra.md, "Post ids"): the id a Hydra node gives it once it
        # holds it (over the digest it recomputes, in uppercase), not huddle's own (over its lowercase one).
        assert mid == 5 and nxt["ident"] == hydra_view_id(big) != str(big["id"]).upper()
        mid, meta = client.ask(frame(7))
        assert mid == 8 and meta["content_size"] == 50 * MiB and hydra_id(meta) == nxt["ident"]
        got = bytearray()
        while len(got) < 20 * MiB:  # two of Hydra's 10 MB chunks, then the connection is cut
            mid, chunk = client.ask(frame(9, struct.pack(">QI", len(got), CHUNK_SIZE)))
            assert mid == 10 and chunk["offset"] == len(got) and len(chunk["content"]) == CHUNK_SIZE
            got += chunk["content"]
        client.close()
        # A new connection (a new routing id): a new session, resumed from where the file stops.
        client = HydraClient(ctx, endpoint)
        client.hello()
        assert client.ask(frame(3, _s("HEAD")))[1]["ident"] == nxt["ident"]
        assert client.ask(frame(7))[0] == 8
        chunks = 0
        while len(got) < 50 * MiB:
            mid, chunk = client.ask(frame(9, struct.pack(">QI", len(got), CHUNK_SIZE)))
            assert mid == 10 and chunk["offset"] == len(got) and chunk["content"]
            got += chunk["content"]
            chunks += 1
        assert chunks == 3 and hashlib.sha1(got).hexdigest().upper() == meta["digest"] and bytes(got) == big_content
        # What Hydra's hydra_post_set_data recomputes from the content gives the id it was named by.
        assert hydra_id({**meta, "digest": hashlib.sha1(got).hexdigest().upper()}) == nxt["ident"]
        # NEXT-OLDER from the big one's id: the small one, in one chunk as Hydra's client asks.
        mid, nxt2 = client.ask(frame(3, _s(nxt["ident"])))
        assert mid == 5 and nxt2["ident"] == hydra_view_id(small)
        client.ask(frame(7))
        assert client.ask(frame(9, struct.pack(">QI", 0, CHUNK_SIZE)))[1]["content"] == b"hello hydra"
        assert client.ask(frame(3, _s(nxt2["ident"])))[0] == 6  # NEXT-EMPTY
        assert client.ask(frame(11))[0] == 12  # PING, PING-OK
        assert client.ask(frame(13))[0] == 14  # GOODBYE, GOODBYE-OK
        client.close()
        facts = get(node.api, "/api/v1/node")["features"]["hydra"]
        assert facts["endpoint"] == endpoint and facts["sessions"] == 2 and facts["goodbye"] == 1
    finally:
        cluster.close()


def test_malformed_hydra_frames_get_error_and_change_nothing(
        tmp_path: Path, zre_port: int, pyres: list[PyrePeer], ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    cluster = Cluster(tmp_path)
    try:
        node = start_zre_node(cluster, "h2", zre_port)
        post = add_post(node.api, b"stays as it is", "kept")
        py = PyrePeer("py2", zre_port)
        pyres.append(py)
        client = HydraClient(ctx, hydra_endpoint(py, "h2"))
        client.hello()
        assert client.ask(frame(3, _s("HEAD")))[0] == 5
        hostile = [b"", b"\xaa", b"\xaa\xa0", b"junk", b"\xaa\xa1\x01", b"\xaa\xa0\x00", b"\xaa\xa0\x63",
                   b"\xaa\xa0\x09\x00\x01", b"\xaa\xa0\x03\x09HEAD", b"\xaa\xa0\x03\x02\xff\xfe", b"\xaa\xa0\x07!"]
        for data in hostile:
            mid, err = client.ask(data)
            assert mid == 15 and err["status"] == 500, (data, err)
        mid, err = client.ask(frame(7), b"a second frame")  # one frame per message
        assert mid == 15 and err["status"] == 500
        # Nothing changed: the session and its current post are where they were.
        mid, meta = client.ask(frame(7))
        assert mid == 8 and meta["subject"] == "kept"
        # An unexpected command (a server's NEXT-OK): ERROR, and the session is closed, as Hydra's is.
        assert client.ask(frame(5, _s("x")))[0] == 15
        assert client.ask(frame(7))[1]["status"] == 500  # HELLO first: no session
        # A flood of frames too long for a client's command: the connection drops, the node stays.
        flood = HydraClient(ctx, hydra_endpoint(py, "h2"))
        for _ in range(200):
            flood.sock.send(frame(1, b"\xff" * 8192))
        flood.close()
        client.close()
        assert ids(node.api) == {post["id"]}
        facts = get(node.api, "/api/v1/node")["features"]["hydra"]
        assert facts["malformed"] == len(hostile) and facts["frames_malformed"] == 1
        assert facts["closed_on_error"] == 1 and facts["sessions"] == 1 and facts["open_sessions"] == 0
    finally:
        cluster.close()


def test_two_huddle_nodes_of_different_groups_exchange_posts_over_zre(tmp_path: Path, zre_port: int) -> None:
    """Not of one mesh (two groups), they find each other's X-HYDRA over ZRE and fetch the
    other's posts, sealed (the seal rides after META-OK's fields) and with the same ids."""
    cluster = Cluster(tmp_path)
    try:
        a = start_zre_node(cluster, "ha", zre_port, group="hya")
        b = start_zre_node(cluster, "hb", zre_port, group="hyb")
        pa = add_post(a.api, b"from a", "post of a")
        pb = add_post(b.api, os.urandom(3 * MiB), "post of b")
        wait_for(lambda: {pa["id"], pb["id"]} <= ids(a.api) and {pa["id"], pb["id"]} <= ids(b.api), 40,
                 "each node's post in the other's store")
        fetched = get(a.api, f"/api/v1/posts/{pb['id']}")
        assert fetched["sealed"] and fetched["digest"] == pb["digest"] and fetched["size"] == 3 * MiB
        facts = get(a.api, "/api/v1/node")["features"]["hydra"]
        assert facts["fetch_posts_fetched"] >= 1 and facts["peers"] == 1
    finally:
        cluster.close()


class HydraServer(threading.Thread):
    """The server side of a Hydra node, as src/hydra_server.xml answers, serving one post; it
    is cut (its ROUTER closed and bound again on the same port) once ``cut_after`` octets went."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], meta: dict[str, Any], content: bytes,
                 cut_after: int) -> None:
        super().__init__(daemon=True)
        self.ctx, self.meta, self.content, self.cut_after = ctx, meta, content, cut_after
        self.port = free_port()
        self.served = 0
        self.cuts = 0
        self.stop = threading.Event()
        self.sessions: set[bytes] = set()

    def run(self) -> None:
        router = self._bind()
        try:
            while not self.stop.is_set():
                if not router.poll(100):
                    continue
                rid, data = router.recv_multipart()
                reply = self._answer(rid, data)
                router.send_multipart([rid, reply])
                if self.served >= self.cut_after and not self.cuts:
                    router.close(linger=0)  # the cut: what is in flight is lost
                    self.cuts += 1
                    self.sessions.clear()
                    router = self._bind()
        finally:
            router.close(linger=0)

    def _bind(self) -> zmq.Socket[bytes]:
        """Bind the port, once the socket closed on it has let it go (within 10 s)."""
        deadline = time.monotonic() + 10
        while True:
            router = self.ctx.socket(zmq.ROUTER)
            router.setsockopt(zmq.LINGER, 0)
            try:
                router.bind(f"tcp://127.0.0.1:{self.port}")
                return router
            except zmq.ZMQError:
                router.close(linger=0)
                if time.monotonic() > deadline:
                    raise
                self.stop.wait(0.05)

    def _answer(self, rid: bytes, data: bytes) -> bytes:
        mid = data[2]
        if rid not in self.sessions:
            if mid != 1:
                return frame(15, struct.pack(">H", 500), _s(""))  # START: COMMAND-INVALID, no session
            self.sessions.add(rid)
            return frame(2, _s("D" * 32), _s("hydra-in-test"))
        m = self.meta
        if mid == 3:
            ident = data[4:4 + data[3]].decode()
            return frame(5, _s(m["ident"])) if ident == "HEAD" else frame(6)
        if mid == 7:
            return frame(8, struct.pack(">I", len(m["subject"])) + m["subject"].encode(), _s(m["timestamp"]),
                         _s(""), _s(m["digest"]), _s(m["mime_type"]), struct.pack(">Q", len(self.content)))
        if mid == 9:
            offset, octets = struct.unpack_from(">QI", data, 3)
            part = self.content[offset:offset + octets]
            self.served += len(part)
            return frame(10, struct.pack(">QI", offset, len(part)), part)
        if mid == 13:
            self.sessions.discard(rid)
            return frame(14)
        self.sessions.discard(rid)
        return frame(15, struct.pack(">H", 500), _s(""))


def test_huddle_fetches_a_hydra_nodes_50_mib_post_resumed_after_a_cut(
        tmp_path: Path, zre_port: int, ctx: zmq.Context[zmq.Socket[bytes]]) -> None:
    content = os.urandom(50 * MiB)
    digest = hashlib.sha1(content).hexdigest().upper()  # zchunk_digest: uppercase
    meta = {"subject": "from hydra", "timestamp": "2026-11-28T12:00:00Z", "parent_id": "",
            "mime_type": "application/octet-stream", "digest": digest}
    meta["ident"] = hydra_id(meta)
    server = HydraServer(ctx, meta, content, cut_after=20 * MiB)
    server.start()
    cluster = Cluster(tmp_path)
    stoppers: list[Callable[[], None]] = []
    try:
        # Open: a Hydra node's posts carry no seal, and a secured group takes sealed posts alone.
        node = start_zre_node(cluster, "h4", zre_port, secure=False)
        hydra_zre = pyre.Pyre("hydra-node")  # its Zyre side, with the header as src/hydra.c sets it
        hydra_zre.set_port(str(zre_port).encode())
        hydra_zre.set_header("X-HYDRA", f"tcp://127.0.0.1:{server.port}")
        hydra_zre.start()
        stoppers.append(hydra_zre.stop)
        pid = meta["ident"].lower()
        wait_for(lambda: pid in ids(node.api), 90, "the Hydra node's post in huddle's store", interval=0.5)
        post = get(node.api, f"/api/v1/posts/{pid}")
        assert post["digest"] == digest and post["size"] == 50 * MiB and not post["sealed"]
        assert server.cuts == 1
        # Resumed: not fetched again from the start (at most the chunks in flight at the cut twice).
        assert server.served < 50 * MiB + 20 * MiB
        facts = get(node.api, "/api/v1/node")["features"]["hydra"]
        assert facts["fetch_posts_fetched"] == 1 and facts["fetch_sessions_failed"] >= 1
    finally:
        for stop in stoppers:
            stop()
        server.stop.set()
        server.join(10)
        cluster.close()
