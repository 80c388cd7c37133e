"""The apps' details in the system picture (docs/control.md, "In the system picture"): the
``apps-info`` facts' words, their budget, reading a peer's, the start time read once per process,
and what ``huddle apps`` makes of another node's facts."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

from huddle.control.cli import every_node, every_node_text
from huddle.control.details import BUDGET, describe, details_facts, parse
from huddle.control.feature import AppInfoFeature, AppsFeature
from huddle.wire import MAX_EXTENSION_OCTETS, extension_problem


def test_the_words_of_an_app_leave_out_what_it_has_not() -> None:
    assert describe(4242, 2, 1764340000.123, 3, True) == "pid=4242 restarts=2 since=1764340000.1 exit=3 one-of-type"
    assert describe(None, 0, None, -15, False) == "exit=-15"  # stopped by SIGTERM: no pid, no start time
    assert describe(None, 0, None, None, False) == ""  # never started
    assert describe(None, 0, None, None, True) == "one-of-type"  # waiting for its turn on another node


def test_details_stop_at_the_budget_in_start_order() -> None:
    rows = [(f"app{i:02d}", 100000 + i, 1, 1764340000.0 + i, 0, False) for i in range(32)]  # a node's 32 apps
    facts = details_facts(rows)
    # Each app's fact is "appNN":"pid=1000NN restarts=1 since=17643400NN.0 exit=0": 57 octets, 58 with its
    # comma; 768 octets hold 13 of them in braces (13 * 58 + 1 = 755; 14 would be 813).
    assert list(facts) == [f"app{i:02d}" for i in range(13)]
    assert len(json.dumps(facts, separators=(",", ":")).encode()) <= BUDGET
    # Never the budget of a report's ext as a whole: the states of 32 apps and these details fit beside each other.
    states = {f"app{i:02d}": "exited (0)" for i in range(32)}
    assert extension_problem({"apps": states, "apps-info": facts}) is None
    assert MAX_EXTENSION_OCTETS == 2048
    assert details_facts([("quiet", None, 0, None, None, False)]) == {}  # nothing to say: not in the facts


def test_a_peers_words_are_read_not_trusted() -> None:
    assert parse("pid=7 restarts=2 since=12.5 exit=-9 one-of-type") == {
        "pid": 7, "restarts": 2, "since": 12.5, "exit": -9, "one_of_type": True}
    # Unknown words, values that are no numbers, a non-string fact: left out.
    assert parse("pid=x restarts=1e3 since=soon colour=red exit=3 =4 flag") == {"restarts": 0, "one_of_type": False,
                                                                               "exit": 3}
    assert parse(None) == parse(17) == {"restarts": 0, "one_of_type": False}
    assert parse(" ".join(["exit=1"] * 100 + ["pid=9"])) == {"restarts": 0, "one_of_type": False, "exit": 1}


class _Supervisor:
    def __init__(self) -> None:
        self.rows: list[dict[str, Any]] = []
        self.apps = {"clock": SimpleNamespace(spec=SimpleNamespace(placement="one-of-type")),
                     "board": SimpleNamespace(spec=SimpleNamespace(placement="this-node"))}

    def statuses(self) -> list[dict[str, Any]]:
        return self.rows


def test_the_start_time_is_read_once_per_process() -> None:
    """A fact that changed makes a report go to every member: the start time must not drift with
    the mesh clock's corrections while the process runs, and must change when it is replaced."""
    clock = {"mesh": 1000.0}
    feature = AppsFeature()
    sup = _Supervisor()
    feature.supervisor = sup  # type: ignore[assignment]
    feature._host = SimpleNamespace(mesh_time=lambda: clock["mesh"])  # type: ignore[assignment]
    info = AppInfoFeature(feature)
    sup.rows = [{"name": "clock", "pid": 11, "uptime": 40.0, "restarts": 0, "last_exit": None},
                {"name": "board", "pid": None, "uptime": None, "restarts": 0, "last_exit": None}]
    assert info.facts() == {"clock": "pid=11 since=960.0 one-of-type"}
    clock["mesh"] = 1030.7  # 30 s on, and the mesh clock corrected by 0.7 s meanwhile
    sup.rows[0]["uptime"] = 70.0
    assert info.facts() == {"clock": "pid=11 since=960.0 one-of-type"}  # unchanged: no report for it
    sup.rows[0].update(pid=12, uptime=1.0, restarts=1, last_exit=3)  # crashed and restarted
    assert info.facts() == {"clock": "pid=12 restarts=1 since=1029.7 exit=3 one-of-type"}
    assert AppInfoFeature(AppsFeature()).facts() is None  # a node that runs no app says nothing


def test_huddle_apps_shows_another_nodes_details_and_where_a_one_of_type_app_runs() -> None:
    system = {"node": "a" * 32, "time": 2000.0, "members": [
        {"uuid": "a" * 32, "name": "alice", "ext": {"apps": {"clock": "waiting"}, "apps-info": {"clock": "one-of-type"}}},
        {"uuid": "b" * 32, "name": "bob", "state": "suspect", "ext": {
            "apps": {"clock": "running", "board": "backoff"},
            "apps-info": {"clock": "pid=77 restarts=1 since=1880.0 exit=3 one-of-type", "board": "restarts=4 exit=1"}}},
        {"uuid": "c" * 32, "name": "carol", "ext": {"posts": {"posts": 1}}},
    ]}
    nodes = every_node(system, skip="a" * 32)
    assert nodes == {"bob": {"clock": {"state": "running", "pid": 77, "restarts": 1, "uptime": 120.0, "last_exit": 3,
                                       "runs_on": ["bob"]},
                             "board": {"state": "backoff", "pid": None, "restarts": 4, "uptime": None, "last_exit": 1}},
                     "carol": {}}
    assert every_node(system)["alice"]["clock"]["runs_on"] == ["bob"]  # alice waits: bob runs it
    text = every_node_text(system, skip="a" * 32).splitlines()
    assert text[0].split() == ["NODE", "APP", "STATE", "PID", "RESTARTS", "UPTIME", "EXIT", "WHERE"]
    assert text[1].split() == ["bob", "board", "backoff", "-", "4", "-", "1", "(node", "suspect)"]
    assert text[2].split() == ["bob", "clock", "running", "77", "1", "120", "s", "3", "(node", "suspect)",
                               "one-of-type,", "runs", "on", "bob"]
