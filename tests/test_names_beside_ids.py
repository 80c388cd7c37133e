"""Names beside ids, and times, in what the ``huddle`` command and the API show.

For a person: ``huddle peers`` has one NAME column, ``bob (35c9e1d4)``, and how long ago each
peer was last heard; ``tail`` starts each line with its time and ``posts`` shows a post's time,
both local ISO 8601 as ``huddle log`` does.  For a script (``--json`` and the API): beside each
node id an answer gives, the node's name where it is known (``source_name``, ``author_name``,
...), added, never in place of a field scripts read."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Iterator
from datetime import datetime
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import get
from test_names import ALICE, BOB, DAN, FakeStore, ServedApi

from huddle import render
from huddle.cli import commands
from huddle.ids import NodeId
from huddle.posts import cli as posts_cli
from huddle.wire.records import LogRecord

_PEER = {"uuid": BOB, "name": "bob", "endpoint": "tcp://127.0.0.1:5", "state": "alive", "last_seen": 1000.0,
         "rtt_ms": 0.25, "key": "ABCD-EFGH-JKLM-NPQR", "verified": True}
_ME = {"uuid": ALICE, "name": "alice", "key": "WXYZ-EFGH-JKLM-NPQR", "time": 1001.5}


def _local(t: float) -> str:
    return datetime.fromtimestamp(t).astimezone().isoformat(timespec="milliseconds")


# ------------------------------------------------------------------ text for a person

def test_peers_show_one_name_column_and_when_each_was_last_heard() -> None:
    me, head, row = render.peers_text([_PEER], _ME).splitlines()
    assert head.split() == ["NAME", "STATE", "LAST", "HEARD", "ENDPOINT", "RTT", "ms", "KEY", "TAGS"]
    assert row.startswith("bob (35c9aaaa)  alive  1.5 s ago")  # the node's mesh time less the peer's last_seen
    assert "UUID" not in head and BOB[:8] not in me
    # without the node's own time (no ``me``): that moment, local ISO as everywhere
    assert _local(1000.0) in render.peers_text([_PEER]).splitlines()[1]
    assert "-" in render.peers_text([_PEER | {"last_seen": None}]).splitlines()[1].split()


def test_tail_lines_start_with_their_time_as_log_does() -> None:
    event = {"type": "event", "source": ALICE, "seq": 1, "timestamp": 1700000000.25, "kind": "k", "body": 1}
    line = render.tail_text(event, {ALICE: "alice"}, arrived=1800000000.0)
    assert line == f"{_local(1700000000.25)}  + alice (35c9e1d4)#1 k 1"  # the event's own time
    assert render.log_text([event], {ALICE: "alice"}).split()[0] == line.split()[0]  # one convention
    chat = render.tail_text({"type": "chat", "name": "bob", "text": "hi"}, arrived=1800000000.0)
    assert chat == f"{_local(1800000000.0)}  <bob> hi"  # what has no time of its own: when it arrived


def test_posts_show_their_time_local_and_iso() -> None:
    post = {"id": "a" * 40, "timestamp": "2026-11-22T10:00:00Z", "size": 1, "mime_type": "text/plain",
            "subject": "s"}
    expected = datetime.fromisoformat("2026-11-22T10:00:00+00:00").astimezone().isoformat()
    assert render.posts_text([post]).split("  ")[1] == expected
    assert "2026-11-22T10:00:00Z" not in render.posts_text([post])


# ------------------------------------------------------------------ names beside ids for a script

def test_with_names_adds_a_name_beside_each_known_id_and_changes_nothing() -> None:
    names = {ALICE: "alice", "ABCD-EFGH-JKLM-NPQR": "bob"}
    event = {"type": "event", "source": ALICE, "received_from": DAN, "seq": 1}
    assert render.with_names(event, names) == event | {"source_name": "alice"}  # dan: no name known, none added
    post = {"id": "a" * 40, "author_key": "ABCD-EFGH-JKLM-NPQR", "from": ALICE}
    assert render.with_names(post, names) == post | {"author_name": "bob", "from_name": "alice"}
    peer_event = {"type": "peer_joined", "peer": ALICE, "name": "al"}  # its own name field stays as it came
    assert render.with_names(peer_event, names) == peer_event | {"peer_name": "alice"}
    assert render.with_names({"source": 5}, names) == {"source": 5}  # not an id: left alone


class RowsStore(FakeStore):
    """A log of two records: one from alice (a peer, named), one from dan (no name known)."""

    def page(self, source: NodeId | None, after: int, limit: int) -> list[Any]:
        return [SimpleNamespace(record=LogRecord(NodeId.from_hex(src), 1, 5.0, "k", "1", 0),
                                received_from=NodeId.from_hex(frm), received_at=6.0)
                for src, frm in ((ALICE, ALICE), (DAN, BOB))]


@pytest.fixture
def api() -> Iterator[ServedApi]:
    with contextlib.closing(ServedApi()) as served:
        yield served


def test_the_log_api_gives_the_source_name_beside_its_id(api: ServedApi) -> None:
    api.node.store = RowsStore(api.node)  # type: ignore[assignment]
    first, second = get(api.url, "/api/v1/log")["events"]
    assert (first["source"], first["source_name"], first["received_from_name"]) == (ALICE, "alice", "alice")
    assert second["source"] == DAN and "source_name" not in second  # a source known by no name
    assert second["received_from_name"] == "bob"
    assert set(first) - {"source_name", "received_from_name"} == set(second) - {"received_from_name"}


def test_the_system_api_names_each_links_nodes_and_keeps_the_picture(api: ServedApi) -> None:
    picture = {"digest": "d", "members": [{"uuid": ALICE, "name": "alice"}, {"uuid": BOB, "name": "bob"}],
               "links": [{"a": ALICE, "b": BOB, "state": "one-way", "from": BOB, "to": ALICE, "rtt_ms": None}]}
    api.node.system = lambda: picture  # type: ignore[method-assign]
    answer = get(api.url, "/api/v1/system")
    assert answer["links"] == [picture["links"][0] | {"a_name": "alice", "b_name": "bob", "from_name": "bob",
                                                      "to_name": "alice"}]
    assert {k: v for k, v in answer.items() if k != "links"} == {k: v for k, v in picture.items() if k != "links"}


class FakeClient:
    """What ``tail`` and ``posts`` call of ApiClient."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self._events = events

    async def names(self) -> dict[str, str]:
        return {ALICE: "alice", "ABCD-EFGH-JKLM-NPQR": "bob"}

    async def events(self, count: int | None = None) -> AsyncIterator[dict[str, Any]]:
        for e in self._events:
            yield e

    async def posts(self, limit: int) -> list[dict[str, Any]]:
        return [{"id": "a" * 40, "timestamp": "2026-11-22T10:00:00Z", "size": 1, "mime_type": "text/plain",
                 "subject": "s", "author_key": "ABCD-EFGH-JKLM-NPQR"}]


def test_tail_json_adds_the_names_and_tail_text_has_times(capsys: pytest.CaptureFixture[str]) -> None:
    events = [{"type": "event", "source": ALICE, "seq": 1, "timestamp": 1.0, "kind": "k", "body": 1},
              {"type": "message", "peer": ALICE, "seq": 1, "text": "hi"}]
    client = FakeClient(events)
    asyncio.run(commands._tail(client, argparse.Namespace(count=None, json=True)))  # type: ignore[arg-type]
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert lines == [events[0] | {"source_name": "alice"}, events[1] | {"peer_name": "alice"}]
    asyncio.run(commands._tail(client, argparse.Namespace(count=None, json=False)))  # type: ignore[arg-type]
    first, second = capsys.readouterr().out.splitlines()
    assert first == f"{_local(1.0)}  + alice (35c9e1d4)#1 k 1"
    assert second.endswith("  > alice (35c9e1d4)#1 hi") and second[:4].isdigit()


def test_posts_json_adds_the_authors_name() -> None:
    args = argparse.Namespace(command="posts", limit=10, json=True)
    data, text = asyncio.run(posts_cli.run(FakeClient([]), args))  # type: ignore[arg-type]
    assert data[0]["author_name"] == "bob" and data[0]["author_key"] == "ABCD-EFGH-JKLM-NPQR"
    assert "by bob (ABCD-EFGH)" in text
