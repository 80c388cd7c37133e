"""CRG ScoreBoard's WebSocket at ``/WS`` (crg/ws_http.py, crg/state.py) and ``huddle bout
export|import --crg`` (crg/cli.py), on two in-process nodes of a secured group on loopback.

A CRG client on one node registers paths and gets the state they cover, then the changes an
official makes on the OTHER node, pushed; Ping is answered Pong; Set is refused (read-only;
where ``[crg] ws-writable`` is on, it is recorded, checked by the bout's rules);
hostile frames (not JSON, binary, oversized, a flood of registrations, connections past the
bound) are refused and counted, and the node carries on.  The bout exported from one node
as a game file and imported into a third, fresh node is the same bout there.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import group_key, wait_for_async

from huddle.cli.parse import build_parser
from huddle.client import ApiClient
from huddle.config import NodeConfig
from huddle.crg import CrgError
from huddle.crg.state import Paths, changed, clock_keys
from huddle.crg.writes import ops_of_set
from huddle.crg.ws_http import MAX_CONNECTIONS, MAX_MESSAGE, MAX_PATHS, CrgHub
from huddle.doc import BoutDocument, parse_json_ops
from huddle.node import Node
from huddle.security import load_group_file

CURRENT = "ScoreBoard.CurrentGame"


def _config(name: str, tmp_path: Path, seeds: tuple[str, ...] = (), *, writable: bool = False) -> NodeConfig:
    return NodeConfig(name=name, group="test", data_dir=tmp_path / name, log_level="warning",
                      group_secret=load_group_file(group_key())).with_overrides(
        api="127.0.0.1:0", beacon=False, interface="lo", seeds=seeds, crg_ws_writable=writable)


class Screen:
    """A CRG client: what the node sent it, merged as CRG's WS.js merges pushes into its state."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.state: dict[str, Any] = {}
        self.others: list[dict[str, Any]] = []  # the messages that were not state pushes

    async def read(self, until: Any, what: str, timeout: float = 10.0) -> None:
        """Read messages until ``until(self)`` holds."""
        async with asyncio.timeout(timeout):
            while not until(self):
                msg = await self.ws.receive()
                assert msg.type == aiohttp.WSMsgType.TEXT, (what, msg)
                data = json.loads(msg.data)
                if set(data) == {"state"}:
                    self.state.update(data["state"])
                else:
                    self.others.append(data)

    async def ask(self, message: Any) -> dict[str, Any]:
        """Send a message; the next answer that is not a state push."""
        n = len(self.others)
        await (self.ws.send_str(message) if isinstance(message, str) else self.ws.send_json(message))
        await self.read(lambda s: len(s.others) > n, f"an answer to {message!r:.60}")
        return self.others[n]


@pytest.mark.timeout(180)
def test_crg_screens_follow_the_bout_and_cannot_write_it(tmp_path: Path) -> None:
    async def main() -> None:
        a = Node(_config("a", tmp_path, writable=True))  # [crg] ws-writable: its /WS takes Set
        runs = [asyncio.create_task(a.run())]
        await asyncio.wait_for(a.wait_ready(), 30)
        b = Node(_config("b", tmp_path, seeds=(a.mesh.endpoint.removeprefix("tcp://"),)))
        runs.append(asyncio.create_task(b.run()))
        try:
            await asyncio.wait_for(b.wait_ready(), 30)
            await wait_for_async(lambda: a.mesh.alive_peers() and b.mesh.alive_peers(), 30, "the two nodes to mesh")
            await a.until_recording(30)
            assert a.api_url is not None and b.api_url is not None
            async with aiohttp.ClientSession() as http:
                await _follow(http, a.api_url, b.api_url)
                await _hostile(http, b.api_url)
                await _writes(http, a.api_url, b.api_url)
                await _game_file(http, tmp_path, a)
        finally:
            for node in (a, b):
                node.stop()
            await asyncio.wait_for(asyncio.gather(*runs), 30)

    asyncio.run(main())


async def _post(http: aiohttp.ClientSession, api: str, ops: list[dict[str, Any]]) -> None:
    async with http.post(api + "/api/v1/doc/ops", json=ops) as resp:
        assert resp.status == 201, await resp.text()


async def _follow(http: aiohttp.ClientSession, api_a: str, api_b: str) -> None:
    async with http.ws_connect(api_b + "/WS/?source=/views/standard/index.html&platform=test") as ws:  # as CRG's WS.js
        screen = Screen(ws)
        await screen.read(lambda s: "WS.Device.Id" in s.state, "the greeting")  # as CRG's onOpen
        await ws.send_json({"action": "Register", "paths": [f"{CURRENT}.Team(1)", f"{CURRENT}.Clock(Jam)",
                                                            f"{CURRENT}.Period(*).Jam(*).TeamJam(1).Lead"]})
        await screen.read(lambda s: f"{CURRENT}.Team(1).Score" in s.state, "the registered paths' state")
        assert screen.state[f"{CURRENT}.Team(1).Score"] == 0 and screen.state[f"{CURRENT}.Clock(Jam).Running"] is False
        assert not any(k.startswith(f"{CURRENT}.Team(2)") for k in screen.state)  # what it did not register
        # An official on the OTHER node: the team's name, a trip of 4, lead; the jam starts.
        jam = {"period": 1, "jam": 1}
        await _post(http, api_a, [
            {"op": "set", "to": {"team": "home"}, "attribute": "name", "value": "Rollers"},
            {"op": "add", "to": jam, "children": [{"tag": "points", "attrs": {"team": "home", "points": "4", "pass": "2"}}]},
            {"op": "set", "to": jam, "attribute": "lead", "value": "home"}])
        async with http.post(api_a + "/api/v1/bout/start") as resp:
            assert resp.status == 201
        await screen.read(lambda s: s.state.get(f"{CURRENT}.Team(1).Score") == 4
                          and s.state.get(f"{CURRENT}.Clock(Jam).Running") is True, "the change pushed from node a")
        assert screen.state[f"{CURRENT}.Team(1).TeamName"] == "Rollers"
        assert screen.state[f"{CURRENT}.Period(1).Jam(1).TeamJam(1).Lead"] is True
        assert screen.state[f"{CURRENT}.Clock(Jam).Number"] == 1
        assert await screen.ask({"action": "Ping"}) == {"Pong": ""}
        # Set, read-only: refused as CRG refuses a device that may not write; nothing recorded.
        async with http.get(api_b + "/api/v1/node") as resp:
            events = (await resp.json())["features"]["doc"]["events"]
        key = f"{CURRENT}.Team(1).TeamName"
        assert await screen.ask({"action": "Set", "key": key, "value": "Hackers"}) == {
            "authorization": "Not authorized for Set"}
        async with http.get(api_b + "/api/v1/doc?format=json") as resp:
            assert (await resp.json())["events"] == events
        assert screen.state[key] == "Rollers"


async def _hostile(http: aiohttp.ClientSession, api: str) -> None:
    async with http.ws_connect(api + "/WS") as ws:
        screen = Screen(ws)
        assert "error" in await screen.ask("{not json")
        assert "error" in await screen.ask({"paths": ["x"]})  # no action
        assert "Unknown Action" in (await screen.ask({"action": "Explode"}))["error"]
        assert "error" in await screen.ask({"action": "Register", "paths": [1, 2]})
        await ws.send_bytes(b"\x00\x01binary")
        await screen.read(lambda s: "binary" in str(s.others[-1:]), "the binary frame refused")
        # A flood of registrations: past MAX_PATHS on this connection, refused; the connection carries on.
        flood = [f"{CURRENT}.Team(1).Skater(x{i})" for i in range(MAX_PATHS)]
        await ws.send_json({"action": "Register", "paths": flood})  # covers nothing yet: no answer
        assert await screen.ask({"action": "Ping"}) == {"Pong": ""}
        answer = await screen.ask({"action": "Register", "paths": ["ScoreBoard.Version"]})
        assert f"at most {MAX_PATHS} paths" in answer["error"]
        assert await screen.ask({"action": "Ping"}) == {"Pong": ""}
    async with http.ws_connect(api + "/WS") as ws:  # oversized: the connection is closed (1009), the node stays
        await ws.receive()  # the greeting
        await ws.send_str(json.dumps({"action": "Register", "paths": ["x" * MAX_MESSAGE]}))
        msg = await asyncio.wait_for(ws.receive(), 10)
        assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)
        assert ws.close_code == aiohttp.WSCloseCode.MESSAGE_TOO_BIG
    # Connections past the bound: refused (503), counted; those open work on.
    opened = [await http.ws_connect(api + "/WS") for _ in range(MAX_CONNECTIONS)]
    try:
        with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
            await http.ws_connect(api + "/WS")
        assert refused.value.status == 503
        await opened[-1].send_json({"action": "Ping"})
        await Screen(opened[-1]).read(lambda s: {"Pong": ""} in s.others, "a Pong on the last connection")
    finally:
        for ws in opened:
            await ws.close()
    async with http.get(api + "/api/v1/crg") as resp:
        counts = await resp.json()
    assert counts["refused"] == {"malformed": 4, "oversized": 1, "binary": 1, "paths": 1, "connections": 1, "set": 1,
                                 "slow": 0}
    async with http.get(api + "/api/v1/node") as resp:
        assert resp.status == 200
        assert (await resp.json())["features"]["crg"]["ws_refused"] == 9


async def _writes(http: aiohttp.ClientSession, api_a: str, api_b: str) -> None:
    """Node a takes Set: recorded as operations (they reach node b), checked by the bout's rules."""
    async with http.ws_connect(api_a + "/WS") as ws:
        screen = Screen(ws)
        await ws.send_json({"action": "Set", "key": f"{CURRENT}.Team(2).TeamName", "value": "Bruisers"})
        await ws.send_json({"action": "Set", "key": f"{CURRENT}.Period(1).Jam(1).TeamJam(2).ScoringTrip(2).Score",
                            "value": 3})
        deadline = asyncio.get_running_loop().time() + 10
        while (s := await _summary(http, api_b))["teams"]["away"] != {**s["teams"]["away"], "name": "Bruisers",
                                                                        "score": 3}:
            assert asyncio.get_running_loop().time() < deadline, "a's Sets to reach node b"
            await asyncio.sleep(0.05)
        before = await _summary(http, api_a)
        answer = await screen.ask({"action": "Set", "key": f"{CURRENT}.Period(1).Jam(1).TeamJam(2).ScoringTrip(3).Score",
                                   "value": 9})
        assert "must be a whole number from 0 to 4" in answer["error"]  # the bout's rules: 0 to 4 a trip
        answer = await screen.ask({"action": "Set", "key": f"{CURRENT}.Clock(Jam).Time", "value": 0})
        assert "cannot be set here" in answer["error"]
        assert (await _summary(http, api_a)) == before  # nothing recorded
    async with http.get(api_a + "/api/v1/crg") as resp:
        assert (await resp.json())["refused"]["set"] == 2


async def _summary(http: aiohttp.ClientSession, api: str) -> dict[str, Any]:
    async with http.get(api + "/api/v1/bout/summary") as resp:
        result: dict[str, Any] = await resp.json()
        return result


async def _game_file(http: aiohttp.ClientSession, tmp_path: Path, a: Node) -> None:
    """``huddle bout export --crg`` on node a, ``import --crg`` on a fresh node c: the same bout."""
    parser = build_parser()
    path = tmp_path / "game.json"
    assert a.api_url is not None
    args = parser.parse_args(["bout", "export", "--crg", str(path), "--api", a.api_url])
    async with ApiClient(a.api_url) as api:
        shown = await args.api_handler(api, args)
    summary = await _summary(http, a.api_url)
    assert shown is not None and shown[0]["out"] == str(path)
    assert "ScoreBoard.Version(release)" in json.loads(path.read_text())["state"]
    c = Node(_config("c", tmp_path))  # no seeds, no beacons: it meets neither a nor b
    run = asyncio.create_task(c.run())
    try:
        await asyncio.wait_for(c.wait_ready(), 30)
        await c.until_recording(30)
        assert c.api_url is not None
        args = parser.parse_args(["bout", "import", "--crg", str(path), "--api", c.api_url])
        async with ApiClient(c.api_url) as api:
            shown = await args.api_handler(api, args)
        assert shown is not None and shown[0]["ops"] > 0
        again = await _summary(http, c.api_url)
        assert summary["teams"]["home"]["score"] == 4 and again["teams"] == summary["teams"] and again["jams"] == summary["jams"]
    finally:
        c.stop()
        await asyncio.wait_for(run, 30)


def test_registered_paths_cover_as_crg_paths_do() -> None:
    paths = Paths()
    paths.add("ScoreBoard.Game(g).Team(1).Score")
    paths.add("ScoreBoard.Game(*).Rule(*).Value")
    assert paths.covers("ScoreBoard.Game(g).Team(1).Score")
    assert not paths.covers("ScoreBoard.Game(g).Team(1).ScoreX")  # a prefix of tokens, not of characters
    assert not paths.covers("ScoreBoard.Game(g).Team(2).Score")
    assert paths.covers("ScoreBoard.Game(h).Rule(Period.Number).Value")  # an id holding a dot, under (*)
    assert not paths.covers("ScoreBoard.Game(h).Rule(Period.Number).Name")
    everything = Paths()
    everything.add("ScoreBoard")
    assert everything.covers("ScoreBoard.Version(release)") and not everything.covers("ScoreBoardX")
    assert Paths().select({"a": 1}) == {}


def test_what_changed_and_the_clocks() -> None:
    assert changed({"a": 1, "b": True, "c": 0}, {"a": 2, "b": 1, "c": 0, "d": "x"}) == {"a": 2, "b": 1, "d": "x"}
    assert changed({"gone": 1}, {}) == {"gone": None}  # as CRG says a key is gone
    clocks = {"now": 5.0, "period": {"number": 2, "running": True, "remaining": 1234.5},
              "jam": {"number": 7, "running": True, "elapsed": 10, "remaining": 110},
              "lineup": {"running": False, "elapsed": 0}, "timeout": {"running": False, "kind": None, "elapsed": 0},
              "intermission": {"running": False, "remaining": 0}}
    keys = clock_keys(clocks)
    assert keys["Clock(Period).Number"] == 2 and keys["Clock(Period).Time"] == 1234500
    assert keys["Clock(Jam).Time"] == 110000 and keys["Clock(Jam).Running"] is True
    assert keys["Clock(Lineup).Running"] is False and keys["Clock(Intermission).Time"] == 0


def test_a_set_means_explicit_operations_never_a_toggle() -> None:
    doc = BoutDocument()
    for i, op in enumerate(parse_json_ops([
            {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "lead", "value": "away"},
            {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "lost", "value": "home"},
            {"op": "add", "to": {"period": 1, "jam": 1}, "children": [
                {"tag": "points", "attrs": {"team": "home", "points": "2", "pass": "2"}}]}])):
        doc.apply(op, (1.0, bytes(16), i + 1))
    root, gid = doc.root, doc.root.eid
    tj = f"{CURRENT}.Period(1).Jam(1).TeamJam"
    to = {"period": 1, "jam": 1}
    trip = root.find("period", number="1").find("jam", number="1").find("points")  # type: ignore[union-attr]
    assert trip is not None
    assert ops_of_set(root, f"ScoreBoard.Game({gid}).Team(1).TeamName", "Rollers") == [
        {"op": "set", "to": {"team": "home"}, "attribute": "name", "value": "Rollers"}]
    assert ops_of_set(root, f"{tj}(1).Lead", True) == [{"op": "set", "to": to, "attribute": "lead", "value": "home"}]
    assert ops_of_set(root, f"{tj}(1).Lead", False) == []  # away leads: home's "not lead" changes nothing
    assert ops_of_set(root, f"{tj}(2).Lead", "false") == [{"op": "set", "to": to, "attribute": "lead", "value": ""}]
    assert ops_of_set(root, f"{tj}(2).Lost", True) == [{"op": "set", "to": to, "attribute": "lost", "value": "both"}]
    assert ops_of_set(root, f"{tj}(1).Lost", True) == []  # already: a Set says the value, not "flip it"
    assert ops_of_set(root, f"{tj}(1).Lost", False) == [{"op": "set", "to": to, "attribute": "lost", "value": ""}]
    assert ops_of_set(root, f"{tj}(1).ScoringTrip(2).Score", 4) == [
        {"op": "set", "to": {"eid": trip.eid}, "attribute": "points", "value": "4"}]
    assert ops_of_set(root, f"{tj}(1).ScoringTrip(3).Score", 1) == [{"op": "add", "to": to, "children": [
        {"tag": "points", "attrs": {"team": "home", "points": "1", "pass": "3"}}]}]
    assert ops_of_set(root, f"{tj}(1).ScoringTrip(2).Score", None) == [{"op": "remove", "to": {"eid": trip.eid}}]
    for key, value, flag, reason in (
            ("ScoreBoard.Game(other).Team(1).TeamName", "x", None, "this bout's game"),
            (f"{CURRENT}.Team(3).TeamName", "x", None, "a team is 1 or 2"),
            (f"{CURRENT}.Clock(Jam).Running", True, None, "cannot be set here"),
            (f"{tj}(1).ScoringTrip(2).Score", "lots", None, "a whole number"),
            (f"{tj}(1).ScoringTrip(2).Score", 1, "change", "flag"),
            (f"{CURRENT}.Period(9).Jam(1).TeamJam(1).Lead", True, None, "1..2"),
            (7, "x", None, "'key' must be"), (f"{CURRENT}.Team(1", "x", None, "not a state key")):
        with pytest.raises(CrgError, match=reason):
            ops_of_set(root, key, value, flag)


def test_the_hub_makes_its_state_again_only_when_the_document_changed_and_takes_the_clocks_given() -> None:
    doc = BoutDocument()
    hub = CrgHub()
    token = [1]
    hub.source = lambda: (doc.root, token[0])
    first = hub.state()
    assert first[f"{CURRENT}.Clock(Jam).Running"] is False and f"{CURRENT}.Clock(Jam).Time" not in first
    assert hub.state() is first  # the same document: not made again
    hub.clocks = lambda root: {"period": {"number": 1, "running": True, "remaining": 1799.5},
                               "jam": {"number": 1, "running": True, "elapsed": 1.0, "remaining": 119.0}}
    token[0] = 2
    again = hub.state()
    assert again[f"{CURRENT}.Clock(Period).Time"] == 1799500 and again[f"{CURRENT}.Clock(Jam).Running"] is True
    assert changed(first, again)[f"{CURRENT}.Clock(Jam).Time"] == 119000
