"""The bout's clocks (doc/clocks.py): each clock and each move between them, from a document and a
mesh time only (docs/document.md "Clocks").  Pure: documents made by applying operations, the
time passed in.  Then two nodes in one process whose system clocks differ by seconds: their
``GET /api/v1/bout/clocks`` agree, the group's time being what counts (nodes on loopback, found by
seed, secured with the session's group file)."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import group_key, load_group_file, wait_for_async

from huddle.config import NodeConfig
from huddle.doc import BoutDocument, parse_json_ops
from huddle.doc.clocks import JAM_LENGTH, PERIOD_LENGTH, TEAM_TIMEOUT_LENGTH, clocks
from huddle.doc.feature import DocumentFeature
from huddle.doc.model import Element
from huddle.node import Node

T0 = 1_800_000_000.0  # a mesh time
SRC = b"\x01" * 16


class Bout:
    """A document and the operations a jam timer's device records, by mesh time."""

    def __init__(self, *, door: bool = True) -> None:
        self.doc = BoutDocument()
        self.seq = 0
        self.door = door  # False: as a replay applies the log's events, without the API's check

    def op(self, op: dict[str, Any]) -> Bout:
        self.seq += 1
        (op,) = parse_json_ops(op)  # as the API has it: normalised
        if self.door:
            self.doc.check(op)
        self.doc.apply(op, (T0 + self.seq, SRC, self.seq))
        return self

    def jam(self, period: int, number: int, start: float, duration: float | None = None) -> Bout:
        to = {"period": period, "jam": number}
        self.op({"op": "set", "to": to, "attribute": "start", "value": repr(T0 + start)})
        if duration is not None:
            self.op({"op": "set", "to": to, "attribute": "duration", "value": repr(duration)})
        return self

    def timeout(self, at: float, kind: str, team: str = "", period: int = 1) -> Bout:
        attrs = {"kind": kind, "time": repr(T0 + at)} | ({"team": team} if team else {})
        return self.op({"op": "add", "to": {"period": period}, "children": [{"tag": "timeout", "attrs": attrs}]})

    def at(self, t: float) -> dict[str, Any]:
        return clocks(self.doc.root, T0 + t)


def test_before_the_first_jam_nothing_runs() -> None:
    c = Bout().at(0)
    assert c == {
        "now": T0, "period": {"number": 0, "running": False, "remaining": PERIOD_LENGTH},
        "jam": {"number": 0, "running": False, "elapsed": 0.0, "remaining": JAM_LENGTH},
        "lineup": {"running": False, "elapsed": 0.0},
        "timeout": {"running": False, "kind": None, "team": None, "elapsed": 0.0},
        "intermission": {"running": False, "remaining": 0.0},
    }


def test_a_jam_runs_the_jam_and_period_clocks_from_its_start() -> None:
    c = Bout().jam(1, 1, 10).at(40)
    assert c["period"] == {"number": 1, "running": True, "remaining": PERIOD_LENGTH - 30}
    assert c["jam"] == {"number": 1, "running": True, "elapsed": 30.0, "remaining": 90.0}
    assert not c["lineup"]["running"] and not c["timeout"]["running"]


def test_a_jam_called_early_stops_its_clock_and_the_lineup_clock_counts_up() -> None:
    b = Bout().jam(1, 1, 10, duration=45.5)
    c = b.at(60)
    assert c["jam"] == {"number": 1, "running": False, "elapsed": 45.5, "remaining": 74.5}
    assert c["lineup"] == {"running": True, "elapsed": 4.5}
    assert c["period"]["running"] and c["period"]["remaining"] == PERIOD_LENGTH - 50
    # The lineup clock counts past 30 s (a late jam shows); the next jam stops it.
    assert b.at(100)["lineup"] == {"running": True, "elapsed": 44.5}
    c = b.jam(1, 2, 101).at(102)
    assert c["jam"] == {"number": 2, "running": True, "elapsed": 1.0, "remaining": 119.0}
    assert not c["lineup"]["running"]


def test_a_jam_not_stopped_ends_itself_at_two_minutes() -> None:
    b = Bout().jam(1, 1, 0)
    assert b.at(JAM_LENGTH - 0.5)["jam"]["running"]
    c = b.at(JAM_LENGTH + 5)
    assert c["jam"] == {"number": 1, "running": False, "elapsed": JAM_LENGTH, "remaining": 0.0}
    assert c["lineup"] == {"running": True, "elapsed": 5.0}
    # A duration recorded past 2:00 (the stop pressed late) reads as 2:00.
    assert Bout().jam(1, 1, 0, duration=130).at(140)["jam"]["elapsed"] == JAM_LENGTH


def test_a_team_timeout_runs_a_minute_and_stops_the_period_clock_until_the_next_jam() -> None:
    b = Bout().jam(1, 1, 0, duration=60).timeout(70, "team", "home")
    c = b.at(100)
    assert c["timeout"] == {"running": True, "kind": "team", "team": "home", "elapsed": 30.0}
    assert not c["lineup"]["running"]
    assert c["period"] == {"number": 1, "running": False, "remaining": PERIOD_LENGTH - 70}
    # After its minute the lineup clock runs; the period clock waits for the jam.
    c = b.at(70 + TEAM_TIMEOUT_LENGTH + 3)
    assert not c["timeout"]["running"] and c["timeout"]["kind"] is None
    assert c["lineup"] == {"running": True, "elapsed": 3.0}
    assert c["period"] == {"number": 1, "running": False, "remaining": PERIOD_LENGTH - 70}
    c = b.jam(1, 2, 140).at(150)
    assert c["period"] == {"number": 1, "running": True, "remaining": PERIOD_LENGTH - 80}


@pytest.mark.parametrize("kind", ["review", "official"])
def test_a_review_or_official_timeout_runs_until_the_next_jam(kind: str) -> None:
    b = Bout().jam(1, 1, 0, duration=30).timeout(40, kind, "away" if kind == "review" else "")
    c = b.at(400)
    assert c["timeout"] == {"running": True, "kind": kind, "team": "away" if kind == "review" else None,
                            "elapsed": 360.0}
    assert c["period"]["remaining"] == PERIOD_LENGTH - 40 and not c["period"]["running"]
    c = b.jam(1, 2, 410).at(420)
    assert not c["timeout"]["running"] and c["jam"]["running"]
    assert c["period"]["remaining"] == PERIOD_LENGTH - 50


def test_a_timeout_without_a_time_is_not_on_the_clock() -> None:
    b = Bout().jam(1, 1, 0, duration=30)
    b.op({"op": "add", "to": {"period": 1}, "children": [{"tag": "timeout", "attrs": {"kind": "official"}}]})
    assert not b.at(40)["timeout"]["running"] and b.at(40)["lineup"]["running"]


def test_the_period_ends_when_its_clock_runs_out_between_jams_then_halftime() -> None:
    b = Bout().jam(1, 1, 0, duration=100)
    c = b.at(PERIOD_LENGTH + 10)
    assert c["period"] == {"number": 1, "running": False, "remaining": 0.0}
    assert not c["lineup"]["running"]
    assert c["intermission"] == {"running": True, "remaining": 900.0 - 10}
    # The ruleset's halftime counts.
    b.op({"op": "set", "to": {"path": "ruleset/halftime"}, "attribute": "duration", "value": "600"})
    assert b.at(PERIOD_LENGTH + 10)["intermission"] == {"running": True, "remaining": 590.0}
    assert b.at(PERIOD_LENGTH + 700)["intermission"] == {"running": False, "remaining": 0.0}
    # Period 2's first jam ends the intermission and starts period 2's clock.
    c = b.jam(2, 1, PERIOD_LENGTH + 700).at(PERIOD_LENGTH + 710)
    assert c["period"] == {"number": 2, "running": True, "remaining": PERIOD_LENGTH - 10}
    assert c["jam"]["number"] == 1 and not c["intermission"]["running"]


def test_a_period_whose_clock_runs_out_in_a_jam_ends_with_the_jam() -> None:
    b = Bout().jam(1, 1, 0, duration=60).jam(1, 2, PERIOD_LENGTH - 20)
    c = b.at(PERIOD_LENGTH + 10)
    assert c["period"] == {"number": 1, "running": False, "remaining": 0.0}
    assert c["jam"]["running"] and not c["intermission"]["running"]
    b.jam(1, 2, PERIOD_LENGTH - 20, duration=50)  # the jam ends 30 s after the period clock ran out
    c = b.at(PERIOD_LENGTH + 40)
    assert c["intermission"] == {"running": True, "remaining": 900.0 - 10}
    assert not c["lineup"]["running"]


def test_a_recorded_period_start_and_duration_are_the_period() -> None:
    b = Bout().jam(1, 1, 100, duration=50)
    b.op({"op": "set", "to": {"period": 1}, "attribute": "start", "value": repr(T0 + 50)})
    assert b.at(200)["period"]["remaining"] == PERIOD_LENGTH - 150
    b.op({"op": "set", "to": {"period": 1}, "attribute": "duration", "value": "160"})
    c = b.at(300)
    assert c["period"] == {"number": 1, "running": False, "remaining": PERIOD_LENGTH - 160}
    assert c["intermission"] == {"running": True, "remaining": 900.0 - 90}


def test_the_bout_over_stops_every_clock() -> None:
    b = Bout().jam(1, 1, 0, duration=30).jam(2, 1, 2000, duration=PERIOD_LENGTH + 10)
    c = b.at(2000 + PERIOD_LENGTH + 50)
    assert c["period"] == {"number": 2, "running": False, "remaining": 0.0}
    assert not any(c[k]["running"] for k in ("jam", "lineup", "timeout", "intermission"))
    b2 = Bout().jam(1, 1, 0, duration=30)
    b2.op({"op": "add", "to": {"team": "official"}, "children": [
        {"tag": "person", "attrs": {"name": "Ref", "role": "head-referee"}}]})
    b2.op({"op": "set", "to": {"path": "bout"}, "attribute": "signed", "value": "Ref"})
    b2.op({"op": "set", "to": {"path": "bout"}, "attribute": "status", "value": "final"})
    c = b2.at(60)
    assert not any(c[k]["running"] for k in ("period", "jam", "lineup", "timeout", "intermission"))


def test_the_same_document_and_mesh_time_give_the_same_clocks() -> None:
    # Two documents from the same operations applied in another order (as replays): the clocks agree.
    a = Bout(door=False).jam(1, 1, 0, duration=30).timeout(35, "team", "away").jam(1, 2, 120)
    b = Bout(door=False).jam(1, 2, 120).timeout(35, "team", "away").jam(1, 1, 0, duration=30)
    for t in (10, 50, 100, 125, 300):
        assert a.at(t) == b.at(t)


def test_nonsense_in_the_document_does_not_break_the_clocks() -> None:
    # Written past the rules (an older node, a hostile peer): read as nothing.
    b = Bout()
    jam = b.doc.root.find("period", number="1")
    assert jam is not None
    e = Element("jam", None, {"number": "1", "start": "soon", "duration": "nan"})
    jam.append(e)
    jam.append(Element("timeout", None, {"kind": "team", "time": "inf"}))
    assert b.at(10)["jam"]["number"] == 0


# ---------------------------------------------------------------- two nodes, two system clocks

SKEW = 7.0  # seconds bob's system clock is ahead of alice's


def _config(tmp_path: Path, name: str, seeds: tuple[str, ...] = ()) -> NodeConfig:
    return NodeConfig().with_overrides(name=name, group="test", data_dir=tmp_path / name, interface="lo", beacon=False,
                                       api="127.0.0.1:0", seeds=seeds, log_level="warning",
                                       group_secret=load_group_file(group_key("test")))


async def _started(stack: contextlib.AsyncExitStack, config: NodeConfig, skew: float) -> Node:
    node = Node(config)
    node._base += skew  # its wall clock as the node read it at start-up: `skew` seconds off
    task = asyncio.create_task(node.run())

    async def stop() -> None:
        node.stop()
        await task

    stack.push_async_callback(stop)
    await asyncio.wait_for(node.wait_ready(), 30)
    return node


def test_two_nodes_whose_system_clocks_differ_show_the_same_clocks(tmp_path: Path) -> None:
    async def main() -> None:
        async with contextlib.AsyncExitStack() as stack:
            alice = await _started(stack, _config(tmp_path, "alice"), 0.0)
            bob = await _started(stack, _config(tmp_path, "bob", (alice.mesh.endpoint.removeprefix("tcp://"),)), SKEW)
            assert abs(bob.local_now() - alice.local_now() - SKEW) < 0.5  # the system clocks differ
            await wait_for_async(lambda: abs(bob.mesh_time() - alice.mesh_time()) < 0.05, 30,
                                 "one mesh time for both")
            http = await stack.enter_async_context(aiohttp.ClientSession())

            async def get(node: Node, path: str) -> Any:
                async with http.get(f"{node.api_url}{path}") as r:
                    assert r.status == 200
                    return await r.json()

            async with http.post(f"{alice.api_url}/api/v1/bout/start?role=jam-timer") as r:
                assert r.status == 201
            await wait_for_async(lambda: _active(get(bob, "/api/v1/bout/jams")), 10, "the jam on bob")
            a, b = await asyncio.gather(get(alice, "/api/v1/bout/clocks"), get(bob, "/api/v1/bout/clocks"))
            assert abs(a["now"] - b["now"]) < 0.5
            for c in (a, b):
                assert c["jam"]["number"] == 1 and c["jam"]["running"] and c["period"]["running"]
                assert c["jam"]["elapsed"] < 3.0  # not SKEW seconds off on either node
            assert abs(a["jam"]["elapsed"] - b["jam"]["elapsed"]) < 0.5
            assert abs(a["period"]["remaining"] - b["period"]["remaining"]) < 0.5
            # The same clocks at the same mesh time, exactly: the function of the document and the time.
            roots = [_doc(n).desk.engine.document.root for n in (alice, bob)]
            t = alice.mesh_time()
            assert clocks(roots[0], t) == clocks(roots[1], t)

    asyncio.run(asyncio.wait_for(main(), 90))


def _doc(node: Node) -> DocumentFeature:
    return next(f for f in node.features if isinstance(f, DocumentFeature))


async def _active(jams: Any) -> bool:
    return (await jams)["active"] is not None
