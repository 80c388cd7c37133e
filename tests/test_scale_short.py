"""The scale harness's core (bench/scale.py) at N=8 for about 20 s: real node processes
on 127.0.0.1 form a full mesh, hold it with no false suspicion through an idle and a
loaded window, and every event posted reaches every node."""

from __future__ import annotations

import asyncio
import math
from types import ModuleType

import pytest
from conftest import load_bench

pytestmark = pytest.mark.processes


def _load_scale(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    return load_bench("scale", monkeypatch)  # scale.py imports benchlib from its own directory


@pytest.mark.timeout(90)
def test_eight_nodes_hold_a_full_mesh_with_no_false_suspicion_and_deliver_every_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    scale = _load_scale(monkeypatch)
    r = asyncio.run(scale.run_size(8, mode="seeds", hold=12.0, rate=20.0, settle=20.0))
    assert not r.died, r.died
    assert not r.incomplete, f"no full mesh: {r.incomplete}"
    assert not math.isnan(r.formed)
    assert r.suspicions == [], r.suspicions
    load = r.windows["load"]
    assert load.posted >= 100 and load.post_failed == 0 and load.behind == 0
    assert r.events == load.posted
    assert r.delivered, r.missing
    assert all(count >= r.events for count in r.log_counts), r.log_counts
    # The traffic counters moved as they should: heartbeats in both windows, the log's
    # records only under load, each node's figures read from its own stats.traffic.
    idle = r.windows["idle"]
    assert len(idle.octets["heartbeat"]) == len(load.octets["heartbeat"]) == 8
    assert min(idle.octets["heartbeat"]) > 0 and min(load.octets["heartbeat"]) > 0
    assert max(idle.octets["replication"]) < min(load.octets["replication"])
    assert idle.by_type.get("BEAT", 0) > 0 and load.by_type.get("XMSG", 0) > 0
    assert len(idle.cpu_pct) == 8 and all(0 < rss < 1024 for rss in load.rss_mib)
