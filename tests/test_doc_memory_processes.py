"""A node's memory under a stream of document operations written on several nodes
at once (the 30-minute soak's finding): it grows with the document and the
events that make it, about 2 KiB per operation, and no more.

Before the fix each node's RSS grew by 66-72 MiB over the 720 operations measured
below, against 1.3-1.5 MiB after (every out-of-order arrival rebuilds the document; the replaced documents, and
the scratch copy of each write, waited for a full garbage collection that
hardly ever ran).  bench/HISTORY.md ("Memory under the stream") has the figures."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from conftest import Cluster, get, http, wait_for
from hostile_kit import footprint

from huddle.procs import NodeProcess

pytestmark = pytest.mark.processes

NODES = 3
WARMUP = 60  # operations per node before the first measurement (imports, caches, first pages)
MEASURED = 240  # operations per node measured
# What a document operation may cost a node that holds it, in RSS: measured 1.9-2.1 KiB (the
# element or history entry it makes, its body and key kept for rebuilds), against 94-103 KiB
# before the fix.
PER_OP_KIB = 8.0
SLACK_MIB = 2.0  # page-granular noise of RSS


def _op(k: int) -> dict[str, Any]:
    period, jam = 1 + k % 2, 1  # the nodes write at once: a later jam could come before its predecessor
    return [
        {"op": "set", "to": {"period": period, "jam": jam}, "attribute": "duration", "value": str(k)},
        {"op": "add", "to": {"period": period, "jam": jam}, "children": [
            {"tag": "points", "attrs": {"team": "home", "number": str(k % 99), "points": str(k % 5)}}]},
        {"op": "set", "to": {"path": "venue"}, "text": f"hall {k}"},
    ][k % 3]


def _write_all(nodes: list[NodeProcess], first: int, count: int) -> None:
    """``count`` operations on each node, the nodes written at the same time (so that
    events arrive out of order, as in a group)."""
    failed: list[str] = []

    def writer(i: int, node: NodeProcess) -> None:
        for k in range(first, first + count):
            status, body = http(node.api, "/api/v1/doc/ops", [_op(k * NODES + i)])
            if status != 201:
                failed.append(f"{node.name}: {status} {body}")
                return

    threads = [threading.Thread(target=writer, args=(i, n)) for i, n in enumerate(nodes)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not failed, failed


def _all_held(nodes: list[NodeProcess], total: int) -> bool:
    return all(get(n.api, "/api/v1/doc?format=json")["events"] == total for n in nodes)


def test_rss_grows_with_the_document_only_under_concurrent_document_writes(cluster: Cluster) -> None:
    nodes = [cluster.start(f"n{i}") for i in range(NODES)]
    wait_for(lambda: cluster.mesh_complete(nodes), 20, "the full mesh")
    _write_all(nodes, 0, WARMUP)
    wait_for(lambda: _all_held(nodes, NODES * WARMUP), 30, "every node to hold the warm-up operations")
    base = [footprint(n).rss_mib for n in nodes]
    _write_all(nodes, WARMUP, MEASURED)
    total = NODES * (WARMUP + MEASURED)
    wait_for(lambda: _all_held(nodes, total), 30, "every node to hold every operation")
    ops = NODES * MEASURED  # every node holds each of them
    bound = SLACK_MIB + ops * PER_OP_KIB / 1024
    grew = {n.name: footprint(n).rss_mib - b for n, b in zip(nodes, base, strict=True)}
    assert all(g <= bound for g in grew.values()), \
        f"RSS grew by {grew} MiB over {ops} operations held (bound {bound:.1f} MiB: {PER_OP_KIB} KiB each)"
