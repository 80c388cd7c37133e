"""Identity theft (protocol.md 4.1, "Identity"): a second real node started with a member's node-id file
copied into its data directory, but its own key, is refused: it is never admitted under
the member's id, its events are not recorded, the refusal is counted, and the member
keeps its id, its key and its events."""

from __future__ import annotations

import shutil
import signal
from pathlib import Path

import pytest
from conftest import Cluster, alive_names, get, http, wait_for
from hostile_kit import node_stats

pytestmark = pytest.mark.processes


def emit(api: str, text: str) -> None:
    status, data = http(api, "/api/v1/events", {"kind": "note", "body": {"text": text}})
    assert status == 201, data


def texts(api: str) -> set[str]:
    return {r["body"].get("text", "") for r in get(api, "/api/v1/log?limit=1000")["events"]}


def bob_as_alice_sees_it(alice: str) -> list[tuple[str, str, str | None, bool]]:
    return [(p["name"], p["state"], p["key"], p["verified"]) for p in get(alice, "/api/v1/peers")
            if p["state"] not in ("gone", "failed", "left")]


def test_a_node_with_a_members_id_but_another_key_is_refused(cluster: Cluster, tmp_path: Path) -> None:
    # Open (--open): in a secured group eve's data directory (a member's id, not the one its key
    # gives) is refused at start (docs/security.md); open mode lets it run, and the mesh refuse it.
    cluster.secure = False
    alice, bob = cluster.start("alice"), cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([alice, bob]), 20, "mesh")
    bob_info = get(bob.api, "/api/v1/node")
    emit(bob.api, "bob 1")
    wait_for(lambda: "bob 1" in texts(alice.api), 10, "bob's event at alice")

    # eve: a data directory with bob's node-id in it, and a key of its own (made at its first start).
    eve_dir = tmp_path / "eve"
    eve_dir.mkdir()
    shutil.copy(tmp_path / "bob" / "node-id", eve_dir / "node-id")
    eve = cluster.start("eve", data_dir=eve_dir)
    eve_info = get(eve.api, "/api/v1/node")
    assert eve_info["uuid"] == bob_info["uuid"] and eve_info["key"] != bob_info["key"]

    # While bob is here, eve's claim (its beacon says bob's id at eve's endpoint) changes nothing.
    wait_for(lambda: node_stats(alice.api)["members_probed"] >= 1, 20, "alice to hear of bob's id at eve's endpoint")
    emit(eve.api, "eve 1")
    emit(bob.api, "bob 2")
    wait_for(lambda: "bob 2" in texts(alice.api), 10, "bob's second event at alice")
    assert bob_as_alice_sees_it(alice.api) == [("bob", "alive", bob_info["key"], True)]

    # bob leaves: eve's HELOs under bob's id now reach alice, and are refused on the key.
    bob.signal(signal.SIGTERM)
    assert bob.wait(20) == 0
    wait_for(lambda: node_stats(alice.api)["refused_identity"] >= 1, 30, "eve's HELO to be refused")
    emit(eve.api, "eve 2")
    refused = node_stats(alice.api)["refused_identity"]
    wait_for(lambda: node_stats(alice.api)["refused_identity"] > refused, 30, "eve to try again, and be refused")
    assert alive_names(alice.api) == set()
    assert not {"eve 1", "eve 2"} & texts(alice.api)

    # eve goes, bob comes back on his own data directory: admitted, his key, his events.
    eve.signal(signal.SIGTERM)
    assert eve.wait(20) == 0
    bob2 = cluster.start("bob", data_dir=tmp_path / "bob")
    wait_for(lambda: cluster.mesh_complete([alice, bob2]), 30, "bob to rejoin")
    emit(bob2.api, "bob 3")
    wait_for(lambda: "bob 3" in texts(alice.api), 10, "bob's third event at alice")
    assert bob_as_alice_sees_it(alice.api) == [("bob", "alive", bob_info["key"], True)]
    held = texts(alice.api)
    assert {"bob 1", "bob 2", "bob 3"} <= held and not {"eve 1", "eve 2"} & held
