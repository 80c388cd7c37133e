"""A hostile member forwarding forged log records, against real node processes (protocol.md 12.5):
a raw peer (open mode, a random version-4 id) completes the handshake with an honest
node, fetches another member's signed records from it, then sends it a forged record
for that member and an altered copy of a real one.  The node rejects both (nothing
stored), keeps the true record, counts the forgeries against the raw peer (API and
the system picture), and at ``log.max-forgeries`` ends its session (excluded)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import zmq
from conftest import Cluster, get, http, wait_for
from hostile_kit import RawPeer, node_stats, still_serving

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes


class Forger(RawPeer):
    """A member that says HELO and BOUT like a node, then forwards what it likes."""

    def __init__(self, ctx: zmq.Context[zmq.Socket[bytes]], node_endpoint: str) -> None:
        super().__init__(ctx, node_endpoint, name="forger")

    def fetch(self, source: str, upto: int) -> dict[str, Any]:
        """Ask the node for ``source``'s records 1.. and return the XMSG body that ends at ``upto``."""
        self.send(b"GSIP", {"vv": {}, "ask": {source: [[1, 0]]}})
        got: dict[str, Any] = {}

        def arrived() -> bool:
            while self.inbox.poll(50):
                frames = self.inbox.recv_multipart()
                if len(frames) == 3 and frames[1] == b"XMSG":
                    body = json.loads(frames[2])
                    if body.get("heads") and body["records"][-1][1] == upto:
                        got.update(body)
            return bool(got)

        wait_for(arrived, 20, "the node to serve the member's signed records")
        return got

    def gbye_reason(self) -> str:
        while self.inbox.poll(100):
            frames = self.inbox.recv_multipart()
            if len(frames) == 3 and frames[1] == b"GBYE":
                return frames[2].decode()
        return ""


def summary(api: str) -> dict[str, Any]:
    result: dict[str, Any] = get(api, "/api/v1/log/summary")
    return result


def test_forged_and_altered_records_are_rejected_counted_and_the_forwarder_excluded(
    cluster: Cluster, ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    cluster.secure = False  # open (--open): the raw peer speaks NULL ZMTP to the mesh socket
    nodes = [cluster.start(n) for n in ("alice", "bob")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    for victim, source_node in ((nodes[1], nodes[0]), (nodes[0], nodes[1])):
        check_one(ctx, victim, source_node)
    still_serving(cluster, nodes)


def check_one(ctx: zmq.Context[zmq.Socket[bytes]], victim: NodeProcess, source_node: NodeProcess) -> None:
    source = get(source_node.api, "/api/v1/node")["uuid"]
    for i in range(3):
        status, body = http(source_node.api, "/api/v1/events", {"kind": "score", "body": {"i": i}})
        assert status == 201, body
    wait_for(lambda: summary(victim.api)["version_vector"].get(source) == 3, 20, "the events to replicate")
    forger = Forger(ctx, get(victim.api, "/api/v1/node")["endpoint"])
    forger.wait_admitted(victim.api)
    real = forger.fetch(source, 3)
    true_rows = {r[1]: r for r in real["records"]}

    def forgeries() -> int:
        by_peer: dict[str, int] = node_stats(victim.api)["log_forgeries"]
        return by_peer.get(forger.uuid.hex(), 0)

    # 1. a forged record for the member, next in its sequence, unsigned
    forger.send(b"XMSG", {"records": [[source, 4, 1.0, "score", '{"i":666}', 0]]})
    wait_for(lambda: forgeries() == 1, 20, "the forged record to be counted against the forger")
    # 2. an altered copy of a real record, with the real head
    altered = [list(r) for r in real["records"]]
    altered[-1][4] = '{"i":1000}'
    forger.send(b"XMSG", {"records": altered, "heads": real["heads"]})
    wait_for(lambda: forgeries() == 2, 20, "the altered record to be counted against the forger")
    assert summary(victim.api)["version_vector"][source] == 3  # nothing forged recorded
    kept = {r["seq"]: r for r in get(victim.api, f"/api/v1/log?source={source}&limit=10")["events"]}
    assert set(kept) == {1, 2, 3}
    assert kept[3]["body"] == json.loads(true_rows[3][4]) == {"i": 2}  # the true record
    # 3. a third forgery: the limit (log.max-forgeries 3): its session ends
    forger.send(b"XMSG", {"records": [[source, 4, 1.0, "score", '{"i":667}', 0]]})
    wait_for(lambda: forgeries() == 3, 20, "the third forgery to be counted")
    wait_for(lambda: not any(p["name"] == "forger" and p["state"] == "alive" for p in get(victim.api, "/api/v1/peers")),
             20, "the forger to be excluded")
    assert "forged log records" in wait_for(forger.gbye_reason, 20, "the forger's GBYE")
    assert summary(victim.api)["stats"]["forgers_excluded"] == 1
    assert summary(victim.api)["version_vector"][source] == 3
