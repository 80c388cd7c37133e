"""Discovery in every mode between real node processes on 127.0.0.1: mDNS, naming brokers, mixed groups."""

from __future__ import annotations

import pytest
from conftest import Cluster, alive_names, get, wait_for

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
