"""A node restarted on a damaged log: refused, repaired, no sequence reused, the group converges."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for

pytestmark = pytest.mark.processes

PER_NODE = 100


def emit(api: str, body: object) -> dict[str, object]:
    status, data = http(api, "/api/v1/events", {"kind": "k", "body": body})
    assert status == 201, data
    return data  # type: ignore[no-any-return]


def records(api: str) -> dict[tuple[str, int], tuple[float, str]]:
    rows = get(api, "/api/v1/log?limit=10000")["events"]
    return {(r["source"], r["seq"]): (r["timestamp"], repr(r["body"])) for r in rows}


def converged(apis: list[str], total: int) -> bool:
    sums = [get(a, "/api/v1/log/summary") for a in apis]
    return all(s["events"] == total and not s["gaps"] and s["version_vector"] == sums[0]["version_vector"]
               for s in sums)


def empty_it(path: Path) -> None:
    path.write_bytes(b"")


def flip_a_record(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    at = raw.index(b"c-0050")
    raw[at + 5] ^= 0x01  # "c-0050" becomes "c-0051": valid text, wrong content
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("damage", [empty_it, flip_a_record], ids=["emptied", "flipped"])
def test_a_damaged_log_is_refused_then_repaired_without_reusing_a_sequence(cluster: Cluster, tmp_path: Path,
                                                                           damage: object) -> None:
    nodes = [cluster.start(n) for n in ("a", "b", "c")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "mesh")
    for i in range(1, PER_NODE + 1):
        for n in nodes:
            emit(n.api, f"{n.name}-{i:04d}")
    apis = [n.api for n in nodes]
    wait_for(lambda: converged(apis, 3 * PER_NODE), 30, "300 events everywhere")
    before = records(nodes[0].api)
    old_c = get(nodes[2].api, "/api/v1/node")["uuid"]

    c = nodes[2]
    c.signal(signal.SIGTERM)
    assert c.wait(20) == 0
    data = tmp_path / "c"
    assert callable(damage)
    damage(data / "log.sqlite")

    refused = cluster.start("c", data_dir=data, wait=False)
    assert refused.wait(30) != 0, "a damaged log must not be believed"
    told = refused.log_path.read_text()
    assert "damaged" in told and f"huddle repair --data-dir {data}" in told

    fixed = subprocess.run([sys.executable, "-m", "huddle", "repair", "--data-dir", str(data)],
                           capture_output=True, text=True, timeout=60, check=False)
    assert fixed.returncode == 0, fixed.stderr
    assert "new identity" in fixed.stdout

    c2 = cluster.start("c", data_dir=data)
    new_c = get(c2.api, "/api/v1/node")["uuid"]
    assert new_c != old_c
    assert (data / "previous-ids").read_text().split()[0] == old_c
    for i in range(1, 11):
        assert emit(c2.api, f"c2-{i:04d}")["seq"] == i  # a fresh identity: nothing of it to collide with
    apis = [nodes[0].api, nodes[1].api, c2.api]
    wait_for(lambda: converged(apis, 3 * PER_NODE + 10), 30, "the group to converge after the repair")

    held = [records(a) for a in apis]
    assert held[0] == held[1] == held[2], "every node holds the same records, with the same content"
    for key, content in before.items():
        assert held[0][key] == content, f"{key} changed"  # the old identity's records, as first written
    assert sum(1 for (s, _q) in held[0] if s == old_c) == PER_NODE
