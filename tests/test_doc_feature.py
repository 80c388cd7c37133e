"""The bout document as a feature (doc/feature.py), on a fake host: it loads from the
log as it starts, takes what is new in the log, makes the document again after an
``empty`` node type's cut-off, records through the host (nothing while read-only),
writes its ``document`` statistics row when one is due and once more as the node
stops, and reports its facts."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Coroutine, Iterable
from typing import Any

import pytest

from huddle.config import NodeConfig
from huddle.doc import DOC_KIND, OperationError, digest, jams
from huddle.doc.feature import DocumentFeature
from huddle.errors import CutOffReadOnly, NotRunning
from huddle.ids import NodeId
from huddle.protocol.events import CutOff, LogAppended
from huddle.wire import LogRecord

ME = NodeId(b"\x01" * 16)
PEER = NodeId(b"\x02" * 16)
START = {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "5.0"}


class Host:
    """The part of a FeatureHost the document feature uses: a log held in a list."""

    def __init__(self, node_type: str = "standard") -> None:
        self.config = NodeConfig().with_overrides(type=node_type)
        self.uuid = ME
        self.log: list[LogRecord] = []  # every node's records, as the store holds them
        self.read_only = False
        self.rows: list[tuple[str, dict[str, Any]]] = []
        self.now = 100.0

    def check_writable(self) -> None:
        if self.read_only:
            raise CutOffReadOnly("read-only")

    def next_seq(self) -> int:
        return sum(r.source == ME for r in self.log) + 1

    def records_of(self, kind: str) -> Iterable[list[LogRecord]]:
        yield [r for r in self.log if r.kind == kind]

    def stat_row(self, kind: str, detail: dict[str, Any]) -> None:
        self.rows.append((kind, detail))

    def local_now(self) -> float:
        return self.now

    def mesh_time(self) -> float:
        return self.now

    def emit_many(self, events: list[tuple[str, Any]]) -> list[LogRecord]:
        self.check_writable()
        seq = self.next_seq()
        made = [LogRecord(ME, seq + i, self.now, kind, json.dumps(body)) for i, (kind, body) in enumerate(events)]
        self.log += made
        return made


def _started(host: Host) -> tuple[DocumentFeature, contextlib.AsyncExitStack, list[Coroutine[Any, Any, None]]]:
    feature, stack, spawned = DocumentFeature(), contextlib.AsyncExitStack(), []
    asyncio.run(feature.start(stack, spawned.append, host))  # type: ignore[arg-type]
    return feature, stack, spawned


def _appended(feature: DocumentFeature, records: list[LogRecord], frm: NodeId | None = None) -> None:
    """What the node publishes as records are new in its log: each subscriber of the event hears it."""
    event = LogAppended(((records, frm),))
    for kinds, subscriber in feature.subscriptions():
        if LogAppended in kinds:
            subscriber(event)


def test_before_it_starts_it_has_no_desk_and_nothing_to_say() -> None:
    feature = DocumentFeature()
    assert feature.facts() is None
    with pytest.raises(NotRunning):
        feature.desk  # noqa: B018 - the property raises


def test_it_loads_the_log_records_through_the_host_and_takes_what_is_new() -> None:
    host = Host()
    host.log.append(LogRecord(PEER, 1, 50.0, DOC_KIND, json.dumps(START)))
    host.log.append(LogRecord(PEER, 2, 51.0, "chat", json.dumps("not the document's")))
    feature, _, spawned = _started(host)
    assert len(feature.desk.engine) == 1 and jams(feature.desk.engine.document.root)["active"] is not None
    assert len(spawned) == 1  # its statistics rows' task
    stop = {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "duration", "value": "30"}
    _appended(feature, [LogRecord(PEER, 3, 52.0, DOC_KIND, json.dumps(stop))], PEER)
    assert len(feature.desk.engine) == 2 and jams(feature.desk.engine.document.root)["active"] is None
    for run in spawned:
        run.close()


def test_operations_are_recorded_through_the_host_and_nothing_while_read_only() -> None:
    host = Host()
    feature, _, spawned = _started(host)
    host.read_only = True
    with pytest.raises(CutOffReadOnly):
        feature.desk.apply_ops([START])
    assert host.log == []
    host.read_only = False
    done = feature.desk.apply_ops([START])
    assert done[0]["source"] == str(ME) and done[0]["seq"] == 1 and [r.kind for r in host.log] == [DOC_KIND]
    _appended(feature, host.log)  # the log tells every subscriber, the feature among them
    assert jams(feature.desk.engine.document.root)["active"] is not None
    for run in spawned:
        run.close()


def test_an_empty_node_type_makes_its_document_again_after_a_cut_off_and_others_do_not_listen() -> None:
    standard, _, unrun = _started(Host("standard"))
    unrun[0].close()
    assert [kinds for kinds, _ in standard.subscriptions()] == [(LogAppended,)]
    host = Host("display")  # a display empties itself when cut off
    host.log.append(LogRecord(PEER, 1, 50.0, DOC_KIND, json.dumps(START)))
    feature, _, spawned = _started(host)
    cut = next(fn for kinds, fn in feature.subscriptions() if kinds == (CutOff,))
    host.log.clear()  # the node dropped the other nodes' records first (its subscriber comes ahead)
    cut(CutOff(cut_off=False, time=1.0))  # met a peer again: nothing to make again
    assert len(feature.desk.engine) == 1
    cut(CutOff(cut_off=True, time=2.0))
    assert len(feature.desk.engine) == 0 and jams(feature.desk.engine.document.root)["active"] is None
    for run in spawned:
        run.close()


def test_its_row_is_written_when_due_and_once_more_as_the_node_stops() -> None:
    host = Host()
    feature, stack, spawned = _started(host)

    async def first_turn() -> None:
        task = asyncio.ensure_future(spawned[0])
        await asyncio.sleep(0)  # its first turn: a row at once, then it sleeps STATS_INTERVAL
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        feature.desk.apply_ops([START])
        _appended(feature, host.log)
        await stack.aclose()  # the node stops: the document as it leaves it

    asyncio.run(first_turn())
    assert [(kind, row["doc_events"]) for kind, row in host.rows] == [("document", 0), ("document", 1)]
    assert host.rows[1][1]["digest"] == digest(feature.desk.engine.document.root)


def test_its_facts_follow_the_document() -> None:
    host = Host()
    feature, _, spawned = _started(host)
    empty = feature.facts()
    assert empty == {"events": 0, "dropped": 0, "refused": 0, "digest": digest(feature.desk.engine.document.root)}
    feature.desk.apply_ops([START])
    _appended(feature, host.log)
    facts = feature.facts()
    assert facts is not None and facts["events"] == 1 and facts["digest"] != empty["digest"]
    assert facts["digest"] == digest(feature.desk.engine.document.root)
    with pytest.raises(OperationError):  # against the bout's rules: counted, nothing recorded
        feature.desk.apply_ops([{"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "lead", "value": "purple"}])
    assert feature.facts() == {**facts, "refused": 1} and len(host.log) == 1
    for run in spawned:
        run.close()
