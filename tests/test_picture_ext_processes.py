"""A feature's facts reach every node's system picture through RAWS' extension map
(protocol.md 14.1 ``ext``), between three real node processes on 127.0.0.1, with the
digest the same on all three (14.2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import Cluster, get, wait_for

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes


def posts_of(nodes: list[NodeProcess]) -> dict[str, Any] | None:
    """Every member's posts facts as every node's picture shows them, and the digest, if the
    three pictures agree (same digest, three members); else None."""
    pics = [get(n.api, "/api/v1/system") for n in nodes]
    if len({p["digest"] for p in pics}) != 1 or any(len(p["members"]) != 3 for p in pics):
        return None
    shown = [{m["name"]: m["ext"].get("posts") for m in p["members"]} for p in pics]
    return {"digest": pics[0]["digest"], "posts": shown[0]} if all(s == shown[0] for s in shown) else None


def test_a_post_added_on_one_node_shows_in_every_nodes_picture_with_one_digest(cluster: Cluster,
                                                                                tmp_path: Path) -> None:
    nodes = [cluster.start(name) for name in ("a", "b", "c")]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "three nodes to mesh")
    before = wait_for(lambda: (got := posts_of(nodes)) and got["posts"]["a"] == {"posts": 0, "octets": 0} and got,
                      20, "every picture showing a's posts facts")
    note = tmp_path / "note.txt"
    note.write_bytes(b"the extension map carries this count")
    out = subprocess.run([sys.executable, "-m", "huddle", "post", "add", str(note), "--subject", "hi", "--api",
                          nodes[0].api], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    # a's report now says one post; so, once posts reach them, do b's and c's: every node shows
    # what every node reported, and the three digests agree (each covers every member's facts).
    after = wait_for(lambda: (got := posts_of(nodes)) and all(v == {"posts": 1, "octets": 36}
                                                              for v in got["posts"].values()) and got,
                     15, "every picture showing one post held by every node")
    assert after["digest"] != before["digest"]
    # What the reports carry is what each node's features report locally.
    assert get(nodes[1].api, "/api/v1/node")["features"]["posts"] == after["posts"]["b"]
    out = subprocess.run([sys.executable, "-m", "huddle", "system", "--api", nodes[2].api],
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    table = lines[lines.index("posts") + 1:lines.index("posts") + 5]
    assert table[0].split() == ["NAME", "POSTS", "OCTETS"]
    assert sorted(line.split() for line in table[1:]) == [["a", "1", "36"], ["b", "1", "36"], ["c", "1", "36"]]
