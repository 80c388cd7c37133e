"""Real node processes on 127.0.0.1: meshes, groups, leaving, crashing, restarting."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import Cluster, alive_names, free_port, get, group_key, wait_for

pytestmark = pytest.mark.processes


def test_eight_nodes_on_a_chain_of_seeds_form_a_full_mesh(cluster: Cluster) -> None:
    ports = [free_port() for _ in range(8)]
    nodes = []
    for i, port in enumerate(ports):
        seed = [] if i == 0 else ["--seed", f"127.0.0.1:{ports[i - 1]}"]
        # Started all at once: a seed that is not up yet is retried until it answers.
        nodes.append(cluster.start(f"n{i}", "--port", str(port), *seed, beacon=False, wait=False))
    for n in nodes:
        n.wait_api()
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "8 nodes on seeds to mesh")
    info = get(nodes[3].api, "/api/v1/node")
    assert info["endpoint"] == f"tcp://127.0.0.1:{ports[3]}"
    peers = get(nodes[3].api, "/api/v1/peers")
    assert {p["endpoint"] for p in peers} == {f"tcp://127.0.0.1:{p}" for i, p in enumerate(ports) if i != 3}
    assert all(p["group"] == "test" and len(p["uuid"]) == 32 for p in peers)


def test_eight_nodes_on_beacons_alone_form_a_full_mesh(cluster: Cluster) -> None:
    nodes = [cluster.start(f"b{i}", wait=False) for i in range(8)]
    for n in nodes:
        n.wait_api()
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "8 nodes on beacons to mesh")
    for n in nodes:
        port = int(get(n.api, "/api/v1/node")["endpoint"].rsplit(":", 1)[1])
        assert 49152 <= port <= 65535


def test_two_groups_on_one_beacon_port_never_see_each_other(cluster: Cluster) -> None:
    reds = [cluster.start(f"red{i}", group="red", wait=False) for i in range(3)]
    blues = [cluster.start(f"blue{i}", group="blue", wait=False) for i in range(3)]
    for n in reds + blues:
        n.wait_api()
    wait_for(lambda: cluster.mesh_complete(reds) and cluster.mesh_complete(blues), 20, "both groups to mesh")
    # Let several more beacon rounds pass: still no cross-talk, and it was filtered early.
    first = get(reds[0].api, "/api/v1/node")["stats"]["beacons"]["other_group"]
    wait_for(lambda: get(reds[0].api, "/api/v1/node")["stats"]["beacons"]["other_group"] >= first + 6, 10,
             "more beacons from the other group")
    assert cluster.mesh_complete(reds) and cluster.mesh_complete(blues)
    stats = get(reds[0].api, "/api/v1/node")["stats"]
    assert stats["refused"] == 0  # never even connected to the other group


def test_sigterm_makes_the_others_drop_it_within_a_second(cluster: Cluster) -> None:
    nodes = [cluster.start(n, "--gone-after", "30", "--suspect-after", "20") for n in ("a", "b", "c")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    start = time.monotonic()
    nodes[2].signal(signal.SIGTERM)
    wait_for(lambda: all("c" not in alive_names(n.api) for n in nodes[:2]), 1.0, "the others to drop c")
    assert time.monotonic() - start < 1.0
    assert nodes[2].wait(10) == 0
    assert alive_names(nodes[0].api) == {"b"}


def test_sigkill_is_detected_as_gone_within_the_timeout(cluster: Cluster) -> None:
    timing = ["--heartbeat-interval", "0.25", "--suspect-after", "0.75", "--gone-after", "1.5"]
    nodes = [cluster.start(n, *timing) for n in ("a", "b", "c")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    start = time.monotonic()
    nodes[2].signal(signal.SIGKILL)

    def gone_everywhere() -> bool:
        return all("c" not in alive_names(n.api) for n in nodes[:2])

    wait_for(gone_everywhere, 5, "c to be gone")
    elapsed = time.monotonic() - start
    assert 0.5 < elapsed < 2.5, elapsed  # 1.5 s of silence, minus up to one beat, plus tick and polling
    states = {p["name"]: p["state"] for p in get(nodes[0].api, "/api/v1/peers")}
    assert states == {"b": "alive", "c": "failed"}  # listed, failed, until it returns or is forgotten


def test_restarted_node_keeps_its_uuid_and_is_readmitted(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a")
    b = cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "mesh")
    uuid = get(b.api, "/api/v1/node")["uuid"]
    b.signal(signal.SIGKILL)
    b.wait()
    b2 = cluster.start("b", data_dir=tmp_path / "b")
    assert get(b2.api, "/api/v1/node")["uuid"] == uuid
    wait_for(lambda: cluster.mesh_complete([a, b2]), 20, "restarted b to be re-admitted")
    peers = get(a.api, "/api/v1/peers")
    assert [(p["uuid"], p["state"]) for p in peers] == [(uuid, "alive")]


def test_a_data_dir_serves_one_node_only(cluster: Cluster, tmp_path: Path) -> None:
    cluster.start("a", beacon=False)
    proc = subprocess.run(
        [sys.executable, "-m", "huddle", "node", "--name", "a2", "--data-dir", str(tmp_path / "a"),
         "--interface", "lo", "--api", "127.0.0.1:0", "--no-beacon", "--group-key", str(group_key())],
        capture_output=True, text=True, timeout=30,
    )
    assert proc.returncode == 1
    assert "is in use by another huddle node" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stdout == ""
