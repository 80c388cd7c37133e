"""The hostile-peer test kit: raw clients for each of a node's doors, and the
measurements every hostile test asserts on — the node is still up, its memory
and descriptors stayed under a stated bound, its honest peers still exchange
events, and the counter for the attempt moved.

Every socket here is on 127.0.0.1 (or 127.0.0.x, for a connection that must
come from another address than the honest peers').  Floods are bounded in
count and in time by the tests that use them.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

import zmq
from conftest import Cluster, free_port, get, http, wait_for

from huddle.procs import NodeProcess
from huddle.security import NodeIdentity
from huddle.wire import Helo, helo_signed

__all__ = [
    "Footprint", "RawPeer", "footprint", "node_stats", "raw_dealer", "signed_helo", "still_serving",
]


class Footprint:
    """A node process's resident memory (MiB) and open descriptors, read from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.rss_mib = _rss_mib(pid)
        self.fds = len(os.listdir(f"/proc/{pid}/fd"))

    def __repr__(self) -> str:
        return f"Footprint(pid={self.pid}, rss={self.rss_mib:.0f} MiB, fds={self.fds})"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def footprint(node: NodeProcess) -> Footprint:
    assert node.proc.poll() is None, f"node {node.name} exited with {node.proc.returncode}; see {node.log_path}"
    return Footprint(node.proc.pid)


def node_stats(api: str) -> dict[str, Any]:
    result: dict[str, Any] = get(api, "/api/v1/node")["stats"]
    return result


def raw_dealer(ctx: zmq.Context[zmq.Socket[bytes]], endpoint: str, identity: bytes | None,
               source: str | None = None) -> zmq.Socket[bytes]:
    """A DEALER with any identity it likes, connected to a node's ROUTER.  With
    ``source`` (e.g. ``127.0.0.2``) the connection comes from that address."""
    sock = ctx.socket(zmq.DEALER)
    if identity is not None:
        sock.setsockopt(zmq.IDENTITY, identity)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    if source is not None:
        sock.connect(f"tcp://{source}:0;{endpoint.removeprefix('tcp://')}")
    else:
        sock.connect(endpoint)
    return sock


class RawPeer:
    """A member that says HELO and BOUT like a node (open mode, a random version-4 id), then
    sends whatever it likes.  Its ROUTER hears what the node sends it (the node dials back)."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], node_endpoint: str, group: str = "test",
                 name: str = "raw") -> None:
        self.uuid = uuid.uuid4().bytes
        self.name = name
        self.inbox = ctx.socket(zmq.ROUTER)
        self.inbox.setsockopt(zmq.LINGER, 0)
        port = free_port()
        self.inbox.bind(f"tcp://127.0.0.1:{port}")
        self.out = raw_dealer(ctx, node_endpoint, self.uuid)
        helo = {"version": 1, "endpoint": f"tcp://127.0.0.1:{port}", "name": name,
                "incarnation": os.urandom(8).hex(), "reply": False, "peers": 0, "beat": 60.0, "lost": 100}
        self.send(b"HELO", helo)
        self.out.send_multipart([b"BOUT", group.encode()])

    def send(self, kind: bytes, body: Any) -> None:
        """``body`` as it is (bytes) or as compact JSON; at most 1 MiB."""
        raw = body if isinstance(body, bytes) else json.dumps(body, separators=(",", ":")).encode()
        assert len(raw) <= 1024 * 1024, len(raw)
        self.out.send_multipart([kind, raw])

    def wait_admitted(self, api: str) -> None:
        """Until the node at ``api`` lists this peer alive."""
        wait_for(lambda: any(p["name"] == self.name and p["state"] == "alive" for p in get(api, "/api/v1/peers")),
                 20, f"the raw peer {self.name} to be admitted")

    def leave(self) -> None:
        """GBYE: the honest mesh is complete again without it."""
        self.out.send_multipart([b"GBYE", b""])

    def drain(self, timeout_ms: int = 200) -> list[list[bytes]]:
        got = []
        while self.inbox.poll(timeout_ms):
            got.append(self.inbox.recv_multipart())
        return got


def still_serving(cluster: Cluster, nodes: list[NodeProcess], timeout: float = 20.0) -> None:
    """Every node is up, the mesh among ``nodes`` is complete, and a chat from
    the first reaches every other (the honest peers are unaffected)."""
    for n in nodes:
        footprint(n)
    wait_for(lambda: cluster.mesh_complete(nodes), timeout, "the honest mesh to be complete")
    before = [node_stats(n.api)["chats_received"] for n in nodes[1:]]
    status, body = http(nodes[0].api, "/api/v1/chat", {"text": "still here"})
    assert (status, body) == (202, {"sent_to": len(nodes) - 1}), (status, body)
    for n, b in zip(nodes[1:], before, strict=True):
        wait_for(lambda n=n, b=b: node_stats(n.api)["chats_received"] > b, timeout, f"the chat to reach {n.name}")


def signed_helo(who: NodeIdentity, endpoint: str, name: str, incarnation: str, **members: Any) -> Helo:
    """A HELO as a node of this version sends it: under the id ``who``'s key gives (unless
    ``sender`` is given), signed by that key, stamped with this machine's clock."""
    members.setdefault("sender", who.node_id)
    helo = Helo(endpoint=endpoint, name=name, incarnation=incarnation, key=who.public_key, sig=bytes(64),
                at=round(time.time() * 1000), **members)
    return dataclasses.replace(helo, sig=who.sign(helo_signed(helo)))
