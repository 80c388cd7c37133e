"""Rejoining after a restart: a node SIGKILLed and restarted on its data directory (same UUID, a new port)
is back in the full mesh within 5 s of its restart, whatever the discovery: seeds only,
beacons, mDNS, a naming broker.  Real node processes on 127.0.0.1."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
from conftest import Broker, Cluster, get, http, wait_for

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes


def endpoint_of(node: NodeProcess) -> str:
    return str(get(node.api, "/api/v1/node")["endpoint"]).removeprefix("tcp://")


def restart_within_5s(cluster: Cluster, nodes: list[NodeProcess], which: int, delay: float, tmp_path: Path,
                      flags: tuple[str, ...], beacon: bool, group: str) -> None:
    victim = nodes[which]
    uuid = get(victim.api, "/api/v1/node")["uuid"]
    victim.signal(signal.SIGKILL)
    victim.wait()
    deadline = time.monotonic() + delay
    wait_for(lambda: time.monotonic() >= deadline, delay + 1, "the restart delay")
    restarted = cluster.start(victim.name, *flags, beacon=beacon, group=group, data_dir=tmp_path / victim.name)
    started = time.monotonic()
    assert get(restarted.api, "/api/v1/node")["uuid"] == uuid
    nodes[which] = restarted
    wait_for(lambda: cluster.mesh_complete(nodes), 5, "the full mesh again")
    assert time.monotonic() - started < 5.5


@pytest.mark.parametrize("delay", [0.5, 3.0, 10.0])
def test_seeds_only_restart_rejoins_everyone_and_survives_its_seed_leaving(cluster: Cluster, tmp_path: Path,
                                                                           delay: float) -> None:
    nodes = [cluster.start("s0", beacon=False, group="seeds")]
    for i in range(1, 4):
        nodes.append(cluster.start(f"s{i}", "--seed", endpoint_of(nodes[-1]), beacon=False, group="seeds"))
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "the seeded mesh")
    seed = endpoint_of(nodes[1])
    restart_within_5s(cluster, nodes, 2, delay, tmp_path, ("--seed", seed), False, "seeds")
    stats = [get(n.api, "/api/v1/node")["stats"] for n in nodes]
    assert stats[2]["lists_received"] >= 1  # its seed's member list
    if delay < 5:  # the others still had their stale session: its HELO replaced it at once
        assert sum(s["restarts_followed"] for s in stats) >= 2, stats
    # Its seed leaves: it is not isolated, and still hears the others' events.
    nodes[1].signal(signal.SIGTERM)
    nodes[1].wait()
    rest = [n for i, n in enumerate(nodes) if i != 1]
    wait_for(lambda: cluster.mesh_complete(rest), 10, "the three others without the seed")
    status, data = http(rest[0].api, "/api/v1/events", {"kind": "score", "body": {"after": "seed left"}})
    assert status == 201, data
    wait_for(lambda: get(nodes[2].api, "/api/v1/log/summary")["events"] >= 1, 5,
             "the restarted node to get an event from a node it met through its seed")


@pytest.mark.parametrize("delay", [0.5, 3.0])
def test_beacon_restart_rejoins_within_5s(cluster: Cluster, tmp_path: Path, delay: float) -> None:
    nodes = [cluster.start(f"b{i}", group="beacons") for i in range(4)]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "the beacon mesh")
    restart_within_5s(cluster, nodes, 2, delay, tmp_path, (), True, "beacons")


@pytest.mark.parametrize("delay", [0.5])
def test_mdns_restart_rejoins_within_5s(cluster: Cluster, tmp_path: Path, delay: float) -> None:
    nodes = [cluster.start(f"m{i}", "--mdns", beacon=False, group="mdns-rejoin") for i in range(4)]
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "the mDNS mesh")
    restart_within_5s(cluster, nodes, 2, delay, tmp_path, ("--mdns",), False, "mdns-rejoin")


@pytest.mark.parametrize("delay", [0.5])
def test_broker_restart_rejoins_within_5s(cluster: Cluster, tmp_path: Path, delay: float) -> None:
    broker = Broker(tmp_path, "broker")
    try:
        flags = ("--naming", broker.endpoint)
        nodes = [cluster.start(f"r{i}", *flags, beacon=False, group="brokered") for i in range(4)]
        wait_for(lambda: cluster.mesh_complete(nodes), 30, "the brokered mesh")
        restart_within_5s(cluster, nodes, 2, delay, tmp_path, flags, False, "brokered")
    finally:
        broker.stop()
