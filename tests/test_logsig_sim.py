"""The hostile forwarder in the deterministic simulator (protocol.md 12.5): a member that
forwards a forged record for another source and an altered copy of a real one.
Every honest node rejects both, keeps the true record, counts the forgeries
against the forwarder and excludes it at the threshold (simhostile.run_forger_scenario)."""

from __future__ import annotations

import pytest

from huddle.simhostile import run_forger_scenario


@pytest.mark.parametrize("seed", range(12))
def test_a_forging_member_is_caught_by_every_honest_node(seed: int) -> None:
    result = run_forger_scenario(seed=seed)
    assert result.converged, f"{result.problems} (rerun: {result.rerun})"
    assert result.stats["forgeries"] >= 3 * result.nodes
    assert result.stats["forgers_excluded"] == result.nodes
