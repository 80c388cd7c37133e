"""A member's system-picture reports between real node processes on 127.0.0.1
(protocol.md 14, 14.1): a report in another member's name is refused and counted,
and the nodes a member made up leave every picture once it leaves."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import zmq
from conftest import Cluster, get, wait_for
from hostile_kit import RawPeer, node_stats, still_serving

pytestmark = pytest.mark.processes

MAX_SEQ = 2**63 - 1


def members(api: str) -> dict[str, dict[str, Any]]:
    return {m["uuid"]: m for m in get(api, "/api/v1/system")["members"]}


def raws(origin: str, peers: list[str], **kw: Any) -> dict[str, Any]:
    return {"origin": origin, "seq": kw.pop("seq", 1_000), "name": kw.pop("name", "raw"), "type": "standard",
            "beat": 1.0, "lost": 4, "cut_off": False,
            "peers": [[p, 0.1, 0.001, "alive", 1, 1, 1, 1, 0, 0, 0] for p in peers], **kw}


def test_a_member_cannot_speak_for_another_and_the_nodes_it_made_up_leave_with_it(
    cluster: Cluster, ctx: zmq.Context[zmq.Socket[bytes]],
) -> None:
    cluster.secure = False  # open (--open): the raw peer speaks NULL ZMTP to the mesh socket
    alice, bob = cluster.start("alice"), cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([alice, bob]), 20, "mesh")
    a, b = (get(n.api, "/api/v1/node")["uuid"].replace("-", "") for n in (alice, bob))
    raw = RawPeer(ctx, get(alice.api, "/api/v1/node")["endpoint"])
    raw.wait_admitted(alice.api)
    me = raw.uuid.hex()
    # Bob's report, as the raw member makes it up: cut off, forging, at the top of seq.  With
    # reports unsigned, alice took it and showed bob cut off until it expired, and never took bob's own
    # reports again (none has a higher seq).
    raw.send(b"RAWS", raws(b, [], seq=MAX_SEQ, name="bob", cut_off=True, forged={a: 9}))
    # Its own report, claiming sessions with 100 nodes it made up, and their reports (legacy ids,
    # unsigned: in open mode they travel as before).
    ghosts = [uuid.uuid4().hex for _ in range(100)]
    raw.send(b"RAWS", raws(me, [a, *ghosts]))
    for g in ghosts:
        raw.send(b"RAWS", raws(g, [me], name="ghost"))
    wait_for(lambda: len(members(alice.api)) == 103, 20, "the made-up nodes in alice's picture")
    for node in (alice, bob):
        health = members(node.api)
        assert health[b]["health"] != "cut-off" and health[b]["seq"] < MAX_SEQ, health[b]
    assert node_stats(alice.api)["reports_unsigned"] == 1
    # The member leaves: the nodes it made up leave with it (they stayed for minutes: their
    # reports' expiry was scaled by their number, 10 s x 10.3).
    raw.leave()
    for node in (alice, bob):
        wait_for(lambda node=node: len(members(node.api)) <= 3, 15, f"the made-up nodes to leave {node.name}'s picture")
    assert node_stats(alice.api)["reports_unvouched"] >= 100
    for node in (alice, bob):  # (degraded until the raw member's own report expires: its links are down)
        assert not {m["health"] for u, m in members(node.api).items() if u in (a, b)} & {"cut-off", "forging"}
    still_serving(cluster, [alice, bob])
