"""Names and id prefixes wherever a node or a post is asked for (api/resolve.py): the rule
alone, then the API's endpoints and the ``huddle`` command against an API served in this
process by a node whose peers the test chooses, then real nodes."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from conftest import Cluster, get, http, wait_for

from huddle import render
from huddle.api.http import start_api
from huddle.api.resolve import MAX_TEXT, Ambiguous, BadName, Unknown, resolve
from huddle.cli import main
from huddle.ids import NodeId
from huddle.protocol import PeerInfo

ALICE = "35c9e1d4" + "0" * 24
BOB = "35c9aaaa" + "1" * 24
CARL = "cafe0000" + "2" * 24  # named "beef"
DAN = "beef1234" + "3" * 24  # its id starts with carl's name
SELF = "5e1f0000" + "4" * 24
KNOWN = [(ALICE, "alice"), (BOB, "bob"), (CARL, "beef"), (DAN, "dan"), (SELF, "me")]


# ------------------------------------------------------------------ the rule


@pytest.mark.parametrize(("text", "expected"), [
    ("alice", ALICE),  # a name
    ("35c9e1d4", ALICE),  # the 8 hex digits `huddle peers` shows
    ("35c9e", ALICE),  # any unique prefix
    ("35C9E1D4", ALICE),  # hex in either case
    ("dan", DAN),
    ("beef12", DAN),  # longer than carl's name, so only dan's id
    (BOB, BOB),  # a whole id
    ("35c9aaaa-1111-1111-1111-111111111111", BOB),  # a whole id as a UUID string
    ("ab" * 16, "ab" * 16),  # a whole id known to no one: what it is used for decides
])
def test_a_name_a_unique_prefix_or_a_whole_id_resolves(text: str, expected: str) -> None:
    assert resolve(text, KNOWN) == expected


def test_a_shared_prefix_is_ambiguous_and_lists_the_candidates() -> None:
    with pytest.raises(Ambiguous) as caught:
        resolve("35c9", KNOWN)
    assert caught.value.candidates == [(BOB, "bob"), (ALICE, "alice")]
    assert caught.value.details() == {"candidates": [{"uuid": BOB, "name": "bob"}, {"uuid": ALICE, "name": "alice"}]}
    assert "alice" in str(caught.value) and "bob" in str(caught.value)


def test_a_name_equal_to_another_nodes_id_prefix_is_ambiguous() -> None:
    with pytest.raises(Ambiguous) as caught:
        resolve("beef", KNOWN)
    assert {i for i, _ in caught.value.candidates} == {CARL, DAN}


def test_two_nodes_of_one_name_are_ambiguous_and_one_node_seen_twice_is_not() -> None:
    twice = [*KNOWN, ("e" * 32, "alice")]
    with pytest.raises(Ambiguous) as caught:
        resolve("alice", twice)
    assert [i for i, _ in caught.value.candidates] == [ALICE, "e" * 32]
    # The same node as a peer, a member of the picture and a source of the log: one candidate.
    assert resolve("alice", [*KNOWN, (ALICE, "alice"), (ALICE, "")]) == ALICE


@pytest.mark.parametrize("text", ["nobody", "35c9e1d5", "0000"])
def test_unknown_text_is_unknown(text: str) -> None:
    with pytest.raises(Unknown, match="no node known to this node"):
        resolve(text, KNOWN)


def test_a_prefix_shorter_than_four_digits_matches_nothing() -> None:
    with pytest.raises(Unknown, match="at least 4 hex digits"):
        resolve("35c", KNOWN)


@pytest.mark.parametrize("text", ["", "   ", "x" * (MAX_TEXT + 1), "x" * 10_000, "bo\udcffb", "bo\x00b", "a\ufffd"])
def test_text_that_names_nothing_by_its_form_is_bad(text: str) -> None:
    with pytest.raises(BadName):
        resolve(text, KNOWN)


def test_posts_resolve_by_id_prefix_only() -> None:
    posts = [("a" * 40, "photo"), ("ab" + "c" * 38, "photo"), ("f00d" + "1" * 36, "ab12")]
    with pytest.raises(Unknown):  # three digits: too few
        resolve("abc", posts, digits=40, by_label=False, what="post")
    assert resolve("abcc", posts, digits=40, by_label=False, what="post") == "ab" + "c" * 38
    assert resolve("F00D", posts, digits=40, by_label=False, what="post") == "f00d" + "1" * 36
    with pytest.raises(BadName, match="not a post id"):  # a subject is not a name: "photo" names no post
        resolve("photo", posts, digits=40, by_label=False, what="post")
    with pytest.raises(Unknown):
        resolve("abcd", posts, digits=40, by_label=False, what="post")
    with pytest.raises(Ambiguous):
        resolve("aaaa", [*posts, ("aaaa" + "0" * 36, "x")], digits=40, by_label=False, what="post")


# ------------------------------------------------------------------ names beside ids in the text


def test_text_shows_a_name_beside_each_id_it_knows() -> None:
    names = {ALICE: "alice", "ABCD-EFGH-JKLM-NPQR": "bob"}
    assert render.named(ALICE, names) == "alice (35c9e1d4)"
    assert render.named(DAN, names) == "beef1234"  # no name known: the short id alone
    line = render.log_text([{"source": ALICE, "seq": 3, "kind": "k", "body": 1, "timestamp": 0.0}], names)
    assert line.split("  ", 1)[1].startswith("alice (35c9e1d4)#3")  # after the event's time
    summary = render.log_summary_text({"events": 4, "version_vector": {ALICE: 3, DAN: 1}, "gaps": {}}, names)
    assert "alice (35c9e1d4)  up to 3" in summary and "beef1234  up to 1" in summary
    assert render.event_text({"type": "event", "source": ALICE, "seq": 1, "kind": "k", "body": 1}, names) \
        == "+ alice (35c9e1d4)#1 k 1"
    assert render.event_text({"type": "message", "peer": ALICE, "seq": 2, "text": "hi"}, names) \
        == "> alice (35c9e1d4)#2 hi"
    assert render.event_text({"type": "peer_joined", "peer": BOB, "name": "bob", "endpoint": "tcp://h:1"}) \
        == "* bob (35c9aaaa) joined from tcp://h:1"
    post = {"id": "a" * 40, "timestamp": "t", "size": 1, "mime_type": "text/plain", "subject": "s"}
    assert "by bob (ABCD-EFGH)" in render.posts_text([post | {"author_key": "ABCD-EFGH-JKLM-NPQR"}], names)
    assert "by WXYZ-EFGH-JKLM-NPQR" in render.posts_text([post | {"author_key": "WXYZ-EFGH-JKLM-NPQR"}], names)


# ------------------------------------------------------------------ the API, in this process


class FakeMesh:
    def __init__(self) -> None:
        self.uuid = NodeId.from_hex(SELF)
        self.name = "me"
        self.excluded: dict[NodeId, str] = {}

    def alive_peers(self) -> list[NodeId]:
        return [NodeId.from_hex(ALICE), NodeId.from_hex(BOB)]


class FakeStore:
    def __init__(self, node: FakeNode) -> None:
        self.node = node

    def page(self, source: NodeId | None, after: int, limit: int) -> list[Any]:
        self.node.calls.append(("log", str(source)))
        return []


class FakeMembers:
    """No member failed or left (the peers answer lists only the admitted ones)."""

    def lost_peers(self) -> dict[NodeId, Any]:
        return {}

    def departed_state(self, peer: NodeId) -> str | None:
        return None


class FakeNode:
    """The node as the core routes use it: peers alice and bob (whose ids share 35c9), carl
    named "beef" in the system picture, dan a source of its log alone."""

    def __init__(self) -> None:
        self.mesh = FakeMesh()
        self.members = FakeMembers()
        self.store = FakeStore(self)
        self.features: list[Any] = []
        self.calls: list[tuple[str, str]] = []
        self.api_url: str | None = None

    def peers(self) -> list[PeerInfo]:
        return [PeerInfo(NodeId.from_hex(i), n, "tcp://127.0.0.1:1", "test", "alive", 0.0, None)
                for i, n in ((ALICE, "alice"), (BOB, "bob"))]

    def system(self) -> dict[str, Any]:
        return {"members": [{"uuid": i, "name": n} for i, n in ((SELF, "me"), (ALICE, "alice"), (CARL, "beef"))]}

    def log_summary(self) -> dict[str, Any]:
        return {"version_vector": {SELF: 3, DAN: 1}, "gaps": {}}

    def info(self) -> dict[str, Any]:
        return {"stats": {}}

    async def send_chat(self, text: str, to: NodeId | None = None) -> int:
        self.calls.append(("chat", str(to)))
        return 1

    async def send_to_wait(self, peer: NodeId, payload: bytes, timeout: float = 10.0) -> int:
        self.calls.append(("send", str(peer)))
        return 1

    def exclude(self, peer: NodeId, reason: str) -> bool:
        self.calls.append(("exclude", str(peer)))
        return True


class ServedApi:
    """A FakeNode's API on a loopback port, served by a thread's loop (so the ``huddle``
    command, which runs its own loop, can call it from the test)."""

    def __init__(self) -> None:
        self.node = FakeNode()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.runner, self.url = asyncio.run_coroutine_threadsafe(
            start_api(self.node, "127.0.0.1:0"), self.loop).result(10)  # type: ignore[arg-type]

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()

    def bad_input(self) -> int:
        counted: int = get(self.url, "/api/v1/node")["stats"]["api"]["bad_input"]
        return counted


@pytest.fixture
def api() -> Iterator[ServedApi]:
    served = ServedApi()
    try:
        yield served
    finally:
        served.close()


@pytest.mark.parametrize(("to", "expected"), [("bob", BOB), ("35c9e1d4", ALICE), ("35c9e", ALICE), (ALICE, ALICE)])
def test_messages_and_chat_take_a_name_or_a_prefix(api: ServedApi, to: str, expected: str) -> None:
    status, answer = http(api.url, "/api/v1/messages", {"to": to, "text": "hi"})
    assert status == 202, answer
    assert answer["sent"] == [{"peer": expected, "seq": 1}]
    status, answer = http(api.url, "/api/v1/chat", {"to": to, "text": "hi"})
    assert status == 202, answer
    assert api.node.calls[-2:] == [("send", expected), ("chat", expected)]


def test_an_ambiguous_prefix_is_refused_with_the_candidates(api: ServedApi) -> None:
    status, answer = http(api.url, "/api/v1/messages", {"to": "35c9", "text": "hi"})
    assert status == 409
    assert answer["candidates"] == [{"uuid": BOB, "name": "bob"}, {"uuid": ALICE, "name": "alice"}]
    status, answer = http(api.url, "/api/v1/chat", {"to": "beef", "text": "hi"})  # carl's name, dan's prefix
    assert status == 409 and {c["uuid"] for c in answer["candidates"]} == {CARL, DAN}
    assert api.node.calls == []  # nothing was sent


def test_an_unknown_name_is_404_with_a_reason(api: ServedApi) -> None:
    status, answer = http(api.url, "/api/v1/messages", {"to": "nobody", "text": "hi"})
    assert status == 404 and "no node known to this node is named 'nobody'" in answer["error"]
    assert api.node.calls == []


def test_exclude_and_log_take_a_name_or_a_prefix(api: ServedApi) -> None:
    status, answer = http(api.url, "/api/v1/peers/alice/exclude", {"reason": "test"})
    assert status == 200 and answer["excluded"] == ALICE
    status, answer = http(api.url, "/api/v1/log?source=dan")  # a source of the log, by its name nowhere: prefix
    assert status == 404
    status, answer = http(api.url, "/api/v1/log?source=beef1")
    assert status == 200
    status, answer = http(api.url, "/api/v1/log?source=me")
    assert status == 200
    assert api.node.calls == [("exclude", ALICE), ("log", DAN), ("log", SELF)]


@pytest.mark.parametrize(("path", "body"), [
    ("/api/v1/messages", {"to": "x" * 10_000, "text": "hi"}),
    ("/api/v1/messages", {"to": "", "text": "hi"}),
    ("/api/v1/chat", {"to": "\ud800", "text": "hi"}),
    ("/api/v1/chat", {"to": "", "text": "hi"}),
    ("/api/v1/peers/%FF%FE/exclude", {"reason": "x"}),
    ("/api/v1/peers/" + "x" * 5_000 + "/exclude", {"reason": "x"}),  # within aiohttp's 8190-octet request line
    ("/api/v1/log?source=%FF%FE", None),
    ("/api/v1/log?source=%00", None),
])
def test_hostile_names_are_400_and_counted(api: ServedApi, path: str, body: Any) -> None:
    before = api.bad_input()
    status, answer = http(api.url, path, body)
    assert status == 400, answer
    assert "error" in answer
    assert api.bad_input() == before + 1
    assert api.node.calls == []
    assert get(api.url, "/api/v1/peers")  # still serving


def test_a_flood_of_bad_ambiguous_and_unknown_names_leaves_the_api_serving(api: ServedApi) -> None:
    before = api.bad_input()
    answers = [http(api.url, "/api/v1/messages", {"to": to, "text": "hi"})[0]
               for _ in range(100) for to in ("x" * 5_000, "35c9", "nobody")]
    assert answers.count(400) == answers.count(409) == answers.count(404) == 100
    assert api.bad_input() == before + 100  # the malformed counted; asking for an unknown name is no fault
    assert api.node.calls == []
    assert http(api.url, "/api/v1/messages", {"to": "bob", "text": "hi"})[0] == 202


# ------------------------------------------------------------------ the command, against that API


def test_cli_send_by_name_and_prefix(api: ServedApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["send", "--to", "bob", "hi", "--api", api.url]) == 0
    assert main(["send", "--to", "35c9e1d4", "hi", "--api", api.url]) == 0
    assert main(["chat", "hi", "--to", "alice", "--api", api.url]) == 0
    assert main(["exclude", "35c9aa", "--api", api.url]) == 0
    assert api.node.calls == [("send", BOB), ("send", ALICE), ("chat", ALICE), ("exclude", BOB)]
    capsys.readouterr()


def test_cli_prints_the_candidates_of_an_ambiguous_name(api: ServedApi, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["send", "--to", "35c9", "hi", "--api", api.url]) == 1
    err = capsys.readouterr().err
    assert "409" in err and f"bob ({BOB})" in err and f"alice ({ALICE})" in err
    assert main(["log", "--source", "nobody", "--api", api.url]) == 1
    assert "404 no node known to this node is named 'nobody'" in capsys.readouterr().err
    assert api.node.calls == []


# ------------------------------------------------------------------ real nodes


@pytest.mark.processes
def test_real_nodes_send_to_a_name_and_get_a_post_by_prefix(cluster: Cluster, tmp_path: Path,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    alice, bob = cluster.start("alice"), cluster.start("bob")
    wait_for(lambda: cluster.mesh_complete([alice, bob]), 20, "mesh")
    bob_id = get(bob.api, "/api/v1/node")["uuid"]
    assert main(["send", "--to", "bob", "by name", "--api", alice.api, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["sent"][0]["peer"] == bob_id
    assert main(["send", "--to", bob_id[:8], "by prefix", "--api", alice.api]) == 0
    assert main(["send", "--to", "carol", "x", "--api", alice.api]) == 1
    assert "404" in capsys.readouterr().err

    async def upload() -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.post(alice.api + "/api/v1/posts?subject=photo", data=b"content",
                                                          headers={"Content-Type": "image/jpeg"}) as resp:
            assert resp.status == 201
            result: dict[str, Any] = await resp.json()
            return result

    status, _ = http(bob.api, "/api/v1/events", {"kind": "score", "body": 1})
    assert status == 201
    wait_for(lambda: get(alice.api, "/api/v1/log/summary")["version_vector"].get(bob_id), 20, "bob's event at alice")
    capsys.readouterr()
    assert main(["log", "--source", "bob", "--api", alice.api]) == 0  # by name, shown by name
    assert f"bob ({bob_id[:8]})#1" in capsys.readouterr().out

    post = asyncio.run(upload())
    capsys.readouterr()
    assert main(["posts", "--api", alice.api]) == 0  # its author by name
    assert f"by alice ({get(alice.api, '/api/v1/node')['key'][:9]})" in capsys.readouterr().out
    out = tmp_path / "got.jpg"
    assert main(["post", "get", post["id"][:12], "-o", str(out), "--api", alice.api]) == 0
    assert out.read_bytes() == b"content"
    status, meta = http(alice.api, f"/api/v1/posts/{post['id'][:6]}")
    assert status == 200 and meta["id"] == post["id"]
    status, answer = http(alice.api, f"/api/v1/posts/{'0' * 12}")
    assert status == 404 and "no post" in answer["error"]
    bad_before = get(alice.api, "/api/v1/node")["stats"]["api"]["bad_input"]
    for hostile in ("%FF%FE", "x" * 5_000, "%00"):
        status, answer = http(alice.api, f"/api/v1/posts/{hostile}")
        assert status == 400, answer
    assert get(alice.api, "/api/v1/node")["stats"]["api"]["bad_input"] == bad_before + 3
