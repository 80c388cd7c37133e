"""The composition root's own rules, without other processes: the document desk
(all-or-none operations, the jam rules, the document row's pacing), the ordered
event subscribers (the post service consumes first, the API's listeners hear
last), and the exit stack (a start that fails half-way closes what it opened)."""

from __future__ import annotations

import asyncio
import json
import socket
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import group_key

from huddle.config import NodeConfig
from huddle.doc import DOC_KIND, OperationError
from huddle.doc.desk import DocumentDesk, Recording
from huddle.errors import ConfigError, CutOffReadOnly
from huddle.ids import NodeId
from huddle.log.datadir import DataDir
from huddle.node import Node
from huddle.posts.feature import PostsFeature
from huddle.posts.peer import HydraBulk, HydraPayload, PostsPeerDown, PostsPeerUp
from huddle.posts.store import PostStore
from huddle.protocol.events import BufferSpace, ChatReceived, Event, MessageReceived, PeerExcluded
from huddle.security import load_group_file
from huddle.wire import LogRecord

ME = NodeId(b"\x01" * 16)
PEER = NodeId(b"\x02" * 16)


class _Log:
    """The node's side of the desk: records what it is given, or refuses while read-only."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.read_only = False
        self.now = 100.0

    def writable(self) -> None:
        if self.read_only:
            raise CutOffReadOnly("read-only")

    def origin(self) -> tuple[bytes, int]:
        return bytes(ME), len(self.records) + 1

    def record(self, events: list[tuple[str, Any]]) -> list[LogRecord]:
        self.writable()
        made = [LogRecord(ME, len(self.records) + 1 + i, self.now, kind, json.dumps(body))
                for i, (kind, body) in enumerate(events)]
        self.records += made
        return made

    def desk(self) -> DocumentDesk:
        return DocumentDesk(Recording(writable=self.writable, stamp=lambda: self.now, origin=self.origin,
                                      record=self.record))


def _fed(log: _Log, desk: DocumentDesk) -> None:
    """The log's new records reach the desk, as the node's LogAppended subscriber does."""
    desk.take([r for r in log.records if r.seq > len(desk.engine)])


def test_operations_are_checked_whole_and_recorded_all_or_none() -> None:
    log = _Log()
    desk = log.desk()
    good = {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "1.0"}
    with pytest.raises(OperationError, match=r"operation 2: .*cannot be removed"):
        desk.apply_ops([good, {"op": "remove", "to": {"team": "away"}}])
    assert log.records == []
    done = desk.apply_ops([good])
    assert [r.kind for r in log.records] == [DOC_KIND] and done[0]["seq"] == 1


def test_jams_start_and_stop_at_the_mesh_time_and_refuse_out_of_turn() -> None:
    log = _Log()
    desk = log.desk()
    with pytest.raises(OperationError, match="no jam is being skated"):
        desk.stop_jam()
    state = desk.start_jam()
    assert state["active"] is None  # recorded, not yet in the document: the log feeds it back
    _fed(log, desk)
    with pytest.raises(OperationError, match="stop it first"):
        desk.start_jam()
    log.now = 160.5
    desk.stop_jam()
    _fed(log, desk)
    bodies = [r.body for r in log.records]
    assert '"start"' in bodies[0] and '"100.0"' in bodies[0]
    assert '"duration"' in bodies[1] and '"60.5"' in bodies[1]


def test_a_read_only_node_refuses_after_the_jam_rules_said_their_word() -> None:
    log = _Log()
    desk = log.desk()
    log.read_only = True
    with pytest.raises(OperationError):  # the rules first: there is no jam to stop
        desk.stop_jam()
    with pytest.raises(CutOffReadOnly):
        desk.start_jam()
    assert log.records == []


def test_the_document_row_is_due_when_the_document_changed_and_not_more_often() -> None:
    log = _Log()
    desk = log.desk()
    assert desk.row(0.0) is not None  # the first one
    assert desk.row(100.0) is None  # nothing changed
    desk.start_jam()
    _fed(log, desk)
    assert desk.row(1.0) is None  # changed, but within DOC_ROW_INTERVAL
    row = desk.row(1.0, final=True)  # the node stops: the document as it leaves it
    assert row is not None and row["doc_events"] == 1
    desk.reload([log.records])  # the log read again (an ``empty`` node cut off): a new engine
    assert len(desk.engine) == 1


# ------------------------------------------------------------------- events


class _Posts:
    def __init__(self) -> None:
        self.seen: list[object] = []

    def handle(self, event: object) -> None:
        self.seen.append(event)


class _Mesh:
    def __init__(self) -> None:
        self.excluded = {PEER: "spam"}
        self.uuid = ME


def _wired(tmp_path: Path) -> tuple[Node, _Posts, list[Event]]:
    feature = PostsFeature()
    node = Node(NodeConfig(data_dir=tmp_path, open=True), features=[feature])  # never runs its mesh: no secret needed
    posts = _Posts()
    feature._service = posts  # type: ignore[assignment]
    node._mesh = _Mesh()  # type: ignore[assignment]
    heard: list[Event] = []
    node.add_listener(heard.append)
    node._wire_events()
    return node, posts, heard


def test_the_post_service_alone_hears_the_posts_peer_services_events(tmp_path: Path) -> None:
    node, posts, heard = _wired(tmp_path)
    mine = [HydraPayload(PEER, b"\xaa\xa0\x01"), HydraBulk(PEER, b"\xaa\xa0\x10", b"x"), PostsPeerUp(PEER),
            PostsPeerDown(PEER)]
    chat = ChatReceived(PEER, "bob", "hi", 1.0)
    message = MessageReceived(PEER, 1, b"plain")
    for event in [*mine, chat, message]:
        node.publish(event)
    assert posts.seen == mine  # the application's events are not the post service's
    assert heard == [chat, message]  # and its events never reach the listeners


def test_the_node_acts_on_its_events_before_the_listeners_hear_them(tmp_path: Path) -> None:
    node, _, heard = _wired(tmp_path)
    waiting = node._driver._space.setdefault(PEER, asyncio.Event())  # a sender waiting for room
    order: list[str] = []
    node.add_listener(lambda e: order.append(f"listener saw space={waiting.is_set()}"))
    node.publish(BufferSpace(PEER, 1))
    assert order == ["listener saw space=True"]
    saved: list[dict[NodeId, str]] = []
    node.add_listener(lambda e: saved.append(DataDir(tmp_path).excluded()) if isinstance(e, PeerExcluded) else None)
    node.publish(PeerExcluded(PEER, "bob", "spam", 2.0))
    assert saved == [{PEER: "spam"}]  # on disk before any listener hears of it
    assert [type(e) for e in heard] == [BufferSpace, PeerExcluded]


def test_listeners_added_or_removed_while_an_event_is_handed_out_change_only_the_next_events(
        tmp_path: Path) -> None:
    node, _, heard = _wired(tmp_path)
    order: list[str] = []
    late: list[Callable[[], None]] = []

    def first(event: Event) -> None:
        order.append("first")
        remove_second()  # the event being handed out still reaches it
        if not late:
            late.append(node.add_listener(lambda e: order.append("late")))  # hears the next event only

    remove_first = node.add_listener(first)
    remove_second = node.add_listener(lambda e: order.append("second"))
    chat = ChatReceived(PEER, "bob", "hi", 1.0)
    node.publish(chat)
    assert order == ["first", "second"]
    node.publish(chat)
    assert order == ["first", "second", "first", "late"]
    remove_first()
    remove_first()  # twice: nothing more happens
    remove_second()
    node.publish(chat)
    assert order == ["first", "second", "first", "late", "late"]
    assert heard == [chat] * 3  # the first listener, added before the others, heard every one


def test_a_chat_event_is_immutable_and_equal_by_its_fields() -> None:
    chat = ChatReceived(PEER, "bob", "hi", 1.0)
    assert chat == ChatReceived(PEER, "bob", "hi", 1.0) and hash(chat) == hash(ChatReceived(PEER, "bob", "hi", 1.0))
    assert chat != ChatReceived(PEER, "bob", "hi", 2.0)
    with pytest.raises(AttributeError):
        chat.text = "changed"  # type: ignore[misc]
    assert chat.to_json() == {"type": "chat", "from": str(PEER), "name": "bob", "text": "hi", "time": 1.0}


# ---------------------------------------------------------------- the exit stack


def test_a_start_that_fails_half_way_closes_what_it_opened(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        config = NodeConfig().with_overrides(name="a", group="g", data_dir=tmp_path, api=f"127.0.0.1:{port}",
                                             beacon=False, interface="lo", log_level="warning",
                                             group_secret=load_group_file(group_key("g")))
        node = Node(config)
        with pytest.raises(ConfigError, match="cannot serve the API"):  # the last part to start
            asyncio.run(asyncio.wait_for(node.run(), 30))
    assert node._left  # it said GBYE on the way out
    DataDir(tmp_path).lock()  # the data directory, the post store and the log are free again
    PostStore(tmp_path).close()
    with pytest.raises(sqlite3.ProgrammingError):  # the log's store is closed
        list(node.store.of_kind(DOC_KIND))
