"""Discovery in every mode between real node processes on 127.0.0.1: mDNS, naming brokers, mixed groups."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import Broker, Cluster, alive_names, free_port, get, group_key, wait_for

pytestmark = pytest.mark.processes


def test_mdns_alone_meshes_six_nodes_and_ignores_another_group(cluster: Cluster) -> None:
    nodes = [cluster.start(f"m{i}", "--mdns", beacon=False, group="mdns-test") for i in range(6)]
    stranger = cluster.start("stranger", "--mdns", beacon=False, group="other-group")
    wait_for(lambda: cluster.mesh_complete(nodes), 30, "six mDNS nodes to mesh")
    assert alive_names(stranger.api) == set()
    wait_for(lambda: get(stranger.api, "/api/v1/node")["stats"]["mdns"]["other_group"] >= 6, 10,
             "the stranger to have seen (and ignored) the six")
    info = get(nodes[0].api, "/api/v1/node")
    assert info["stats"]["mdns"]["found"] >= 5 and "beacons" not in info["stats"]


def test_the_source_documents_service_type_can_be_chosen(cluster: Cluster) -> None:
    a = cluster.start("a", "--mdns", "--mdns-type", "_nsode_derbyos_com._tcp", beacon=False, group="nsode")
    b = cluster.start("b", "--mdns", "--mdns-type", "_nsode_derbyos_com._tcp", beacon=False, group="nsode")
    c = cluster.start("c", "--mdns", beacon=False, group="nsode")  # the default type: does not see them
    wait_for(lambda: cluster.mesh_complete([a, b]), 30, "the two _nsode_derbyos_com nodes to mesh")
    assert alive_names(c.api) == set()


@pytest.fixture
def brokers(tmp_path: Path) -> Iterator[list[Broker]]:
    made: list[Broker] = []
    yield made
    for b in made:
        b.stop()


def test_a_broker_alone_meshes_six_nodes_and_keeps_groups_apart(cluster: Cluster, brokers: list[Broker],
                                                               tmp_path: Path) -> None:
    broker = Broker(tmp_path, "broker")
    brokers.append(broker)
    nodes = [cluster.start(f"b{i}", "--naming", broker.endpoint, beacon=False, group="brokered") for i in range(6)]
    other = cluster.start("other", "--naming", broker.endpoint, beacon=False, group="elsewhere")
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "six brokered nodes to mesh")
    assert alive_names(other.api) == set()
    stats = get(other.api, "/api/v1/node")["stats"]["naming"]
    assert stats["heard"] >= 1 and stats["found"] == 0 and stats["other_group"] == 0  # filtered at the publisher


def test_a_broker_restart_keeps_the_mesh_and_the_nodes_register_again(cluster: Cluster, brokers: list[Broker],
                                                                    tmp_path: Path) -> None:
    broker = Broker(tmp_path, "broker")
    brokers.append(broker)
    nodes = [cluster.start(f"r{i}", "--naming", broker.endpoint, beacon=False) for i in range(3)]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "three brokered nodes to mesh")
    broker.kill()
    late = cluster.start("late", "--naming", broker.endpoint, "--naming-timeout", "30", beacon=False, wait=False)
    assert cluster.mesh_complete(nodes)  # data does not go through the broker
    broker.start()  # same ports: the nodes reconnect and announce again
    late.wait_api(30)
    wait_for(lambda: cluster.mesh_complete([*nodes, late]), 20, "the late node to mesh through the restarted broker")


def test_two_brokers_one_killed_no_interruption(cluster: Cluster, brokers: list[Broker], tmp_path: Path) -> None:
    b1, b2 = Broker(tmp_path, "b1"), Broker(tmp_path, "b2")
    brokers += [b1, b2]
    flags = ["--naming", b1.endpoint, "--naming", b2.endpoint]
    nodes = [cluster.start(f"t{i}", *flags, beacon=False) for i in range(3)]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "three nodes with two brokers to mesh")
    b1.kill()
    late = cluster.start("late", *flags, beacon=False)  # starts at once: b2 forwards its announcement
    wait_for(lambda: cluster.mesh_complete([*nodes, late]), 20, "the late node to mesh through the second broker")


def test_no_broker_at_start_is_a_clear_error(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "huddle", "node", "--name", "x", "--data-dir", str(tmp_path / "x"), "--interface", "lo",
         "--api", "127.0.0.1:0", "--no-beacon", "--naming", f"tcp://127.0.0.1:{free_port()}", "--naming-timeout", "1",
         "--group-key", str(group_key())],
        capture_output=True, text=True, timeout=30, check=False)
    assert out.returncode == 2
    assert "no naming broker forwarded our announcement within 1 s" in out.stderr
    assert "huddle broker --pub" in out.stderr


def test_a_mixed_group_of_eight_forms_one_mesh(cluster: Cluster, brokers: list[Broker], tmp_path: Path) -> None:
    """Two by mDNS, two by beacons, two through a broker, two by seeds; a few nodes use two ways,
    and member lists (MEMB) carry everyone across."""
    broker = Broker(tmp_path, "broker")
    brokers.append(broker)
    g = "mixed"
    m1 = cluster.start("mdns1", "--mdns", beacon=False, group=g)
    m2 = cluster.start("mdns2+beacon", "--mdns", beacon=True, group=g)  # bridges mDNS and beacons
    c1 = cluster.start("beacon1", beacon=True, group=g)
    c2 = cluster.start("beacon2+broker", "--naming", broker.endpoint, beacon=True, group=g)  # bridges to the broker
    n1 = cluster.start("broker1", "--naming", broker.endpoint, beacon=False, group=g)
    n2 = cluster.start("broker2", "--naming", broker.endpoint, beacon=False, group=g)
    endpoint_of = lambda node: get(node.api, "/api/v1/node")["endpoint"].removeprefix("tcp://")  # noqa: E731
    s1 = cluster.start("seed1", "--seed", endpoint_of(m1), beacon=False, group=g)
    s2 = cluster.start("seed2", "--seed", endpoint_of(n1), beacon=False, group=g)
    everyone = [m1, m2, c1, c2, n1, n2, s1, s2]
    wait_for(lambda: cluster.mesh_complete(everyone), 40, "the mixed group of eight to form one mesh", interval=0.2)


def test_garbage_through_a_broker_is_counted_and_dropped(cluster: Cluster, brokers: list[Broker],
                                                         tmp_path: Path) -> None:
    import zmq

    from huddle.transport.naming import announcement_topic

    broker = Broker(tmp_path, "broker")
    brokers.append(broker)
    a = cluster.start("a", "--naming", broker.endpoint, beacon=False, group="g")
    b = cluster.start("b", "--naming", broker.endpoint, beacon=False, group="g")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    pub.connect(f"tcp://127.0.0.1:{broker.sub_port}")
    topic = announcement_topic("g")
    bad = [[topic, b"not json"], [topic, b"[1, 2]"], [topic, b'{"uuid": "zz", "endpoint": "x"}'],
           [topic, b'{"uuid": "' + b"ab" * 16 + b'", "group": "g", "endpoint": "udp://1.2.3.4:5"}'],
           [b"huddle.welcome", b'{"sub": 5}'], [topic, b"x", b"three frames"]]
    try:
        def sent_and_counted() -> bool:
            for frames in bad:
                pub.send_multipart(frames)
            return get(a.api, "/api/v1/node")["stats"]["naming"]["malformed"] >= 5
        wait_for(sent_and_counted, 10, "the garbage to be counted", interval=0.2)
    finally:
        pub.close(0)
        ctx.term()
    assert alive_names(a.api) == {"b"} and alive_names(b.api) == {"a"}
