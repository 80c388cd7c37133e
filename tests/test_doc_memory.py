"""The bout document gives its memory back at once: a replaced document (a rebuild)
and the scratch copy each write checks itself against are freed by reference
counting, not left for a full collection of the garbage collector (which, on a
node under a steady stream of document operations from several nodes, ran
far less often than documents were replaced: RSS grew by hundreds of MiB)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from huddle import NodeId
from huddle.doc import DocEngine, OperationError, to_xml
from huddle.doc.desk import DocumentDesk, Recording
from huddle.doc.engine import BoutDocument
from huddle.doc.model import Element
from huddle.protocol.logstore import canonical_json
from huddle.wire import LogRecord

A = NodeId(bytes([0xA] * 16))
B = NodeId(bytes([0xB] * 16))

# Every kind of change that links elements: a jam made on first use (its history names the
# period), adds (the history names the children), sets, a remove, and the same jam made again
# after the remove (its ``before`` is the removed one).
OPS: list[dict[str, Any]] = [
    {"op": "add", "to": {"period": 1, "jam": 1}, "children": [
        {"tag": "lineup", "attrs": {"team": "home", "position": "jammer", "number": "12"}}]},
    {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "duration", "value": "120"},
    {"op": "add", "to": {"period": 1, "jam": 2}, "children": [
        {"tag": "points", "attrs": {"team": "away", "number": "7", "points": "4"}}]},
    {"op": "set", "to": {"path": "venue"}, "text": "Hall 1"},
    {"op": "remove", "to": {"period": 1, "jam": 2}},
    {"op": "add", "to": {"period": 1, "jam": 2}, "children": [
        {"tag": "points", "attrs": {"team": "home", "number": "3", "points": "2"}}]},
]


@contextmanager
def collector_off() -> Iterator[None]:
    """Only reference counting frees memory inside (what a node gets between full collections)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def elements_alive() -> int:
    return sum(1 for o in gc.get_objects() if type(o) is Element)


def elements_of(doc: BoutDocument) -> int:
    """The elements a document holds: its tree, and removed ones kept for their history."""
    seen: set[int] = set()
    stack: list[Element] = [doc.root, *doc._removed.values()]
    while stack:
        e = stack.pop()
        if id(e) not in seen:
            seen.add(id(e))
            stack.extend(e.children)
            if e.before is not None:
                stack.append(e.before)
    return len(seen)


def rec(source: NodeId, seq: int, ts: float, op: dict[str, Any]) -> LogRecord:
    return LogRecord(source, seq, ts, "doc", canonical_json(op), 0)


def test_a_discarded_document_is_freed_without_the_collector_and_still_reads() -> None:
    with collector_off():
        before = elements_alive()
        doc = BoutDocument()
        for i, op in enumerate(OPS):
            doc.apply_body(canonical_json(op), (float(i), bytes(A), i + 1))
        assert doc.applied == len(OPS) and not doc.dropped
        assert doc.history_of(doc._jams[(1, 2)].eid)[0]["op"] == "create"  # type: ignore[index]
        xml = to_xml(doc.root, eids=True)
        held = elements_alive() - before
        assert held == elements_of(doc) > 10
        doc.discard()
        assert to_xml(doc.root, eids=True) == xml, "the tree still reads after discard"
        del doc
        assert elements_alive() == before, "a discarded document leaves nothing for the collector"


def test_rebuilds_free_the_document_they_replace() -> None:
    """Events that arrive out of order make the engine rebuild the document; the old
    one must go at once (before: one whole document of garbage per rebuild)."""
    with collector_off():
        before = elements_alive()
        engine = DocEngine()
        seq = {A: 0, B: 0}
        for i in range(60):
            # A's events are stamped ahead of B's: each of B's sorts before an applied one.
            source = A if i % 2 == 0 else B
            seq[source] += 1
            op = OPS[i % len(OPS)] if i % len(OPS) != 4 else OPS[1]  # no removes: every add stays
            engine.add(rec(source, seq[source], 1000.0 + i + (5 if source == A else 0), op))
            doc = engine.document
            assert elements_alive() - before == elements_of(doc), f"after event {i}: {engine.rebuilds} rebuilds"
        assert engine.rebuilds >= 25, engine.rebuilds
        engine.discard()  # as the desk does with an engine it replaces (a reload)
        del doc, engine
        assert elements_alive() == before


def test_a_write_leaves_no_copy_of_the_document_behind() -> None:
    """Each write is checked against a scratch copy of the whole document; the copy
    must go when the write is done, accepted or refused."""
    with collector_off():
        before = elements_alive()
        seq = [0]

        def record(events: list[tuple[str, Any]]) -> list[LogRecord]:
            out = []
            for kind, body in events:
                seq[0] += 1
                out.append(LogRecord(A, seq[0], float(seq[0]), kind, canonical_json(body), 0))
            desk.take(out)
            return out

        desk = DocumentDesk(Recording(writable=lambda: None, stamp=lambda: float(seq[0] + 1),
                                      origin=lambda: (bytes(A), seq[0] + 1), record=record))
        for i in range(40):
            desk.apply_ops([{"op": "add", "to": {"period": 1 + i % 2, "jam": 1 + i // 2 % 5}, "children": [
                {"tag": "points", "attrs": {"team": "home", "number": str(i), "points": "1"}}]}])
            try:
                desk.apply_ops([{"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "nonsense", "value": "1"}])
            except OperationError:
                pass
            else:
                raise AssertionError("an attribute a jam does not have was accepted")
            assert elements_alive() - before == elements_of(desk.engine.document), f"after write {i}"
