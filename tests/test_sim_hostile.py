"""The simulator with a hostile node among honest ones (huddle.simhostile): forged,
oversized and out-of-range messages at random times, from a seed.  The honest
nodes must converge on every honest event, hold nothing forged in an honest
node's name, exclude none of their own and stay bounded."""

from __future__ import annotations

import logging

import pytest

from huddle.simhostile import ATTACKS, run_hostile_scenario, run_sources_scenario

# Part of the seeds in CI (each takes a few seconds); `huddle simulate --hostile --runs N` runs more.
SEEDS = range(12)


@pytest.mark.parametrize("seed", SEEDS)
def test_honest_nodes_converge_and_stay_bounded_with_a_hostile_node_among_them(seed: int) -> None:
    logging.disable(logging.WARNING)  # the nodes log each kind of refusal; thousands here
    try:
        result = run_hostile_scenario(seed=seed)
    finally:
        logging.disable(logging.NOTSET)
    assert result.converged, f"{result.problems} -- rerun: {result.rerun}"
    assert result.events == 120
    # The attacks were made and refused: each kind of refusal was counted somewhere.
    assert sum(v for k, v in result.stats.items() if k.startswith("attacks_")) == 40
    assert result.stats.get("mesh_decode_errors", 0) > 0


def test_every_attack_is_refused_and_counted_where_it_lands() -> None:
    """All eleven attacks at once, several times each: the counters that say they were refused moved."""
    logging.disable(logging.WARNING)
    try:
        result = run_hostile_scenario(seed=100, attacks=6 * len(ATTACKS))
    finally:
        logging.disable(logging.NOTSET)
    assert result.converged, f"{result.problems} -- rerun: {result.rerun}"
    used = {k.removeprefix("attacks_") for k, v in result.stats.items() if k.startswith("attacks_") and v}
    assert used == set(ATTACKS), set(ATTACKS) - used
    for counter in ("own_refused", "sources_refused", "mesh_helos_refused", "mesh_introductions_refused",
                    "mesh_foreign_frames", "mesh_decode_errors"):
        assert result.stats.get(counter, 0) > 0, (counter, result.stats)
    # Reports in another member's name and of made-up nodes (forged-report): refused, or dropped
    # once no member vouched for them; no honest picture showed them (checked by converged).
    for counter in ("reports_unsigned", "reports_bad_signature", "reports_unvouched"):
        assert result.stats.get(counter, 0) > 0, (counter, result.stats)


def test_a_hostile_seed_replays_exactly() -> None:
    logging.disable(logging.WARNING)
    try:
        a = run_hostile_scenario(seed=5, attacks=10)
        b = run_hostile_scenario(seed=5, attacks=10)
    finally:
        logging.disable(logging.NOTSET)
    assert a.stats == b.stats
    assert a.rerun == "huddle simulate --hostile --nodes 5 --events 120 --attacks 10 --seed 5"


@pytest.mark.parametrize("seed", range(2))
def test_members_filling_the_sources_limit_do_not_keep_a_newcomers_events_out(seed: int) -> None:
    """Hostile members send made-up signed sources past log.max-sources (protocol.md 12.2): an
    honest newcomer's events still reach every honest node, in the place of made-up sources."""
    logging.disable(logging.WARNING)
    try:
        result = run_sources_scenario(seed=seed)
    finally:
        logging.disable(logging.NOTSET)
    assert result.converged, f"{result.problems} -- rerun: {result.rerun}"
    assert result.stats["sources_evicted"] > 0 and result.stats["sources_refused"] > 0
