"""Where an app may start, from the system picture alone (huddle/control/placement.py,
docs/control.md "Across nodes"): another node's app depended on, and the one node of a type
that runs a ``one-of-type`` app.  Pure: pictures are written here as the API gives them."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from huddle.control.placement import BUSY, HOLDING, WANTING, holder, may_start, remote_ready, split_dependency

LABELS = ("waiting", "starting", "running", "backoff", "stopping", "exited (0)", "failed", "stopped", None)
STATES = ("alive", "suspect", "failed", "left")


def member(uuid: str, label: str | None, state: str = "alive", node_type: str = "server",
           app: str = "clock") -> dict[str, Any]:
    m: dict[str, Any] = {"uuid": uuid, "name": f"n{uuid}", "type": node_type, "health": "ok", "state": state,
                         "ext": {} if label is None else {"apps": {app: label}}}
    return m


def test_split_dependency() -> None:
    assert split_dependency("clock") == ("clock", None)
    assert split_dependency("clock@server") == ("clock", "server")


@pytest.mark.parametrize("label", LABELS)
@pytest.mark.parametrize("state", STATES)
@pytest.mark.parametrize("node_type", ["server", "display"])
def test_another_nodes_app_is_ready_only_running_on_an_alive_member_of_the_type(
        label: str | None, state: str, node_type: str) -> None:
    members = [member("a1", label, state, node_type)]
    expected = label == "running" and state == "alive" and node_type == "server"
    assert remote_ready(members, "clock", "server") is expected
    assert remote_ready(members, "other", "server") is False  # another app of that node


def test_a_member_whose_state_the_digest_omits_is_alive() -> None:
    m = member("a1", "running")
    del m["state"]
    assert remote_ready([m], "clock", "server")
    assert holder([m], "clock", "server") == "a1"


def test_malformed_facts_are_no_app() -> None:
    for ext in (None, [], {"apps": None}, {"apps": []}, {"apps": {"clock": 3}}):
        m = member("a1", "running") | {"ext": ext}
        assert not remote_ready([m], "clock", "server")
        assert holder([m], "clock", "server") is None


def test_the_lowest_id_of_those_waiting_is_chosen_when_none_runs_it() -> None:
    members = [member("c3", "waiting"), member("a1", "waiting"), member("b2", "waiting")]
    assert holder(members, "clock", "server") == "a1"
    assert [may_start(members, "clock", "server", me) for me in ("a1", "b2", "c3")] == [True, False, False]


def test_the_node_that_runs_it_keeps_it_against_a_lower_id() -> None:
    members = [member("a1", "waiting"), member("b2", "running"), member("c3", "waiting")]
    assert holder(members, "clock", "server") == "b2"
    assert not may_start(members, "clock", "server", "a1")


def test_after_a_heal_the_lowest_id_of_those_running_keeps_it() -> None:
    members = [member("c3", "running"), member("b2", "backoff"), member("a1", "waiting")]
    assert holder(members, "clock", "server") == "b2"


def test_a_gone_holder_passes_it_on_and_a_suspect_one_keeps_it() -> None:
    assert holder([member("a1", "running", "failed"), member("b2", "waiting")], "clock", "server") == "b2"
    assert holder([member("a1", "running", "left"), member("b2", "waiting")], "clock", "server") == "b2"
    assert holder([member("a1", "running", "suspect"), member("b2", "waiting")], "clock", "server") == "a1"


def test_the_holder_waits_for_the_instance_it_takes_over_from_to_stop() -> None:
    members = [member("a1", "waiting"), member("b2", "stopping")]
    assert holder(members, "clock", "server") == "a1"
    assert not may_start(members, "clock", "server", "a1")
    members[1] = member("b2", "waiting")
    assert may_start(members, "clock", "server", "a1")


def test_other_types_and_ends_are_no_candidates() -> None:
    members = [member("a1", "running", node_type="display"), member("b2", "failed"), member("c3", "stopped"),
               member("d4", "exited (0)"), member("e5", "waiting")]
    assert holder(members, "clock", "server") == "e5"
    assert holder(members[:4], "clock", "server") is None
    assert not may_start(members[:4], "clock", "server", "b2")


def _pictures() -> list[list[dict[str, Any]]]:
    """Every picture of three members of the type (each label and member state)."""
    out = []
    for labels in itertools.product(LABELS, repeat=3):
        for states in itertools.product(("alive", "suspect", "failed"), repeat=3):
            out.append([member(u, label, state) for u, label, state in zip(("a1", "b2", "c3"), labels, states,
                                                                            strict=True)])
    return out


def test_exhaustively_one_holder_and_at_most_one_may_start() -> None:
    """Over every picture of three members: the holder is a present member that wants the app;
    at most one member may start it, and none while another member shows an instance; the
    members see the same picture, so none of them decides another holder."""
    for members in _pictures():
        chosen = holder(members, "clock", "server")
        wanting = [m["uuid"] for m in members if m["state"] != "failed" and m["ext"].get("apps", {}).get("clock")
                   in WANTING]
        holding = [u for u in wanting if next(m for m in members if m["uuid"] == u)["ext"]["apps"]["clock"] in HOLDING]
        assert chosen == (min(holding) if holding else min(wanting) if wanting else None), members
        starters = [m["uuid"] for m in members if may_start(members, "clock", "server", m["uuid"])]
        assert len(starters) <= 1, members
        if starters:  # the holder, and no other present member shows an instance
            assert starters == [chosen]
            assert all(m["ext"].get("apps", {}).get("clock") not in BUSY or m["state"] == "failed"
                       for m in members if m["uuid"] != chosen), members
