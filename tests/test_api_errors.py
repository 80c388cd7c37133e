"""The API answers an error by its type, in one table (api/http.py ``ERROR_STATUS``): the
same type gives the same status on every endpoint, a subclass its own entry or its base's,
and an error of no type there is a 500.  The lifecycle has its own type (NotRunning: 503)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from huddle.api.doc_http import add_doc_routes
from huddle.api.http import ERROR_STATUS, error_status, start_api
from huddle.doc import JamStateError, OperationError
from huddle.errors import (
    CutOffReadOnly,
    HuddleError,
    LocalProtocolError,
    NoSuchPeer,
    NotRecording,
    NotRunning,
    TooLarge,
)
from huddle.ids import NodeId
from huddle.protocol.delivery import BufferFull, MessageTooLarge, NotIncluded


def test_a_type_gets_its_entry_or_its_nearest_listed_base() -> None:
    assert error_status(NotRunning("x")) == 503  # its own entry, not LocalProtocolError's 400
    assert error_status(NotIncluded("x")) == error_status(NoSuchPeer("x")) == 404  # delivery's, by its base
    assert error_status(MessageTooLarge("x")) == error_status(TooLarge("x")) == 413
    assert error_status(BufferFull("x")) == 503
    assert error_status(JamStateError("x")) == 409 and error_status(OperationError("x")) == 422
    assert error_status(LocalProtocolError("x")) == 400
    assert error_status(CutOffReadOnly("x")) == 409 and error_status(NotRecording("x")) == 503
    assert error_status(HuddleError("x")) is None and error_status(RuntimeError("x")) is None  # bugs: 500
    assert all(issubclass(kind, Exception) and 400 <= status < 600 for kind, status in ERROR_STATUS.items())


def test_not_running_is_a_local_protocol_error_of_its_own() -> None:
    """Whoever caught LocalProtocolError for "the node is not running" still does."""
    assert issubclass(NotRunning, LocalProtocolError) and issubclass(NoSuchPeer, LocalProtocolError)


class FakeDocs:
    """The document feature, its desk the fake node: the document's routes (api/doc_http.py)."""

    def __init__(self, desk: FakeNode) -> None:
        self.desk = desk
        self.event_renderers: dict[type, Any] = {}

    def routes(self, app: web.Application) -> None:
        add_doc_routes(app, self)


class FakeNode:
    """The node as the core routes use it, and the document's desk; each call raises what the test sets."""

    def __init__(self) -> None:
        self.raises: Exception | None = None
        self.features: list[Any] = [FakeDocs(self)]  # the core routes and the document's

    def _maybe(self) -> None:
        if self.raises is not None:
            raise self.raises

    async def send_chat(self, text: str, to: NodeId | None = None) -> int:
        self._maybe()
        return 0

    async def until_recording(self, timeout: float) -> None:
        return None

    def emit(self, kind: str, body: Any) -> Any:
        self._maybe()
        raise AssertionError("set an error")

    def apply_ops(self, ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self._maybe()
        return []

    def start_jam(self, role: str | None = None) -> dict[str, Any]:
        self._maybe()
        return {}

    stop_jam = start_jam


CHAT = ("/api/v1/chat", {"text": "hi", "to": "ab" * 16})
EVENT = ("/api/v1/events", {"kind": "k", "body": 1})
OPS = ("/api/v1/doc/ops", [{"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "1.0"}])
JAM = ("/api/v1/bout/start", {})


@pytest.mark.parametrize(("endpoint", "error", "status"), [
    (CHAT, NoSuchPeer("no alive peer"), 404),  # before: every LocalProtocolError of chat was a 404
    (CHAT, NotRunning("the node is not running"), 503),
    (EVENT, LocalProtocolError("event is larger than the record limit"), 400),
    (EVENT, NotRunning("the node is not running"), 503),  # before: a 400, as any refused event
    (EVENT, CutOffReadOnly("cut off"), 409),
    (EVENT, NotRecording("starting"), 503),
    (OPS, OperationError("does not fit"), 422),
    (OPS, TooLarge("the ops' events are too large"), 413),
    (OPS, NotRunning("the node is not running"), 503),  # before: a 413, as any refused op
    (JAM, JamStateError("no jam is being skated"), 409),
    (JAM, RuntimeError("a bug"), 500),
], ids=lambda v: type(v).__name__ if isinstance(v, Exception) else str(v)[:20])
def test_every_endpoint_answers_an_error_by_its_type(endpoint: tuple[str, Any], error: Exception, status: int) -> None:
    path, body = endpoint
    got = asyncio.run(_post(path, body, error))
    assert got[0] == status, got
    assert got[1]["error"] == str(error) or status == 500
    assert (got[2] == "1") is (status == 503)  # Retry-After on a 503


def test_a_malformed_operation_is_the_requests_fault() -> None:
    got = asyncio.run(_post("/api/v1/doc/ops", [{"op": "nonsense"}], None))
    assert got[0] == 400


async def _post(path: str, body: Any, error: Exception | None) -> tuple[int, dict[str, Any], str | None]:
    node = FakeNode()
    node.raises = error
    runner, url = await start_api(node, "127.0.0.1:0")  # type: ignore[arg-type]
    try:
        async with aiohttp.ClientSession() as session, session.post(
                url + path, data=json.dumps(body), headers={"Content-Type": "application/json"}) as resp:
            return resp.status, await resp.json(), resp.headers.get("Retry-After")
    finally:
        await runner.cleanup()
