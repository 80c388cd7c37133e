"""The node's parts in huddle.host, each without a node: the routing of its events
(ordered subscribers, consumption, statistics rows, listeners), the recording of what
waits for the start-up window, who follows its group key, and the event loop's handler
of sockets that cannot accept."""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from typing import Any, cast

import pytest

from huddle.errors import NotRecording, NotRunning
from huddle.host.address import Following
from huddle.host.events import EventRoutes
from huddle.host.loop import AcceptFailures
from huddle.host.recording import Recorder
from huddle.ids import NodeId
from huddle.ports import Feature
from huddle.protocol.events import ChatReceived, PeerJoined
from huddle.security import GroupSecret

PEER = NodeId(b"\x02" * 16)


@dataclass(frozen=True)
class Waved:
    """A feature's own event."""

    peer: NodeId
    time: float


class Rows:
    """The statistics rows, kept in a list."""

    def __init__(self) -> None:
        self.rows: list[tuple[float, str, NodeId | None, str]] = []

    def event(self, row: tuple[float, str, NodeId | None, str] | None) -> None:
        if row is not None:
            self.rows.append(row)


def _routes() -> tuple[EventRoutes, Rows]:
    routes, rows = EventRoutes({Waved: lambda e: {"type": "waved", "time": e.time, "hand": "left"}}), Rows()
    routes.rows = rows  # type: ignore[assignment]
    return routes, rows


def test_subscribers_hear_in_order_and_one_that_consumes_stops_the_rest() -> None:
    routes, rows = _routes()
    heard: list[str] = []
    routes.add_listener(lambda e: heard.append(f"listener {type(e).__name__}"))
    routes.wire([((ChatReceived,), lambda e: heard.append("first") or e.text == "mine"),
                 ((ChatReceived, PeerJoined), lambda e: heard.append("second"))])
    routes.publish(ChatReceived(PEER, "bob", "mine", 1.0))
    assert heard == ["first"]  # consumed: neither the second nor the listeners hear it
    routes.publish(ChatReceived(PEER, "bob", "hi", 2.0))
    assert heard == ["first", "first", "second", "listener ChatReceived"]
    assert rows.rows == []  # a chat is not a statistic
    routes.publish(PeerJoined(PEER, "bob", "tcp://127.0.0.1:1", 3.0))
    assert heard[-2:] == ["second", "listener PeerJoined"] and [r[1] for r in rows.rows] == ["peer_joined"]


def test_a_features_event_is_a_row_as_the_stream_shows_it_and_the_listeners_hear_it() -> None:
    routes, rows = _routes()
    heard: list[object] = []
    routes.add_listener(heard.append)
    routes.wire([])
    routes.publish(Waved(PEER, 4.0))
    assert rows.rows == [(4.0, "waved", PEER, json.dumps({"hand": "left"}))] and heard == [Waved(PEER, 4.0)]
    routes.publish(object())  # a type nobody subscribed to: nobody hears it
    assert len(heard) == 1


def test_a_failing_listener_is_logged_and_the_next_one_still_hears(caplog: pytest.LogCaptureFixture) -> None:
    routes, _ = _routes()
    heard: list[object] = []

    def broken(event: object) -> None:
        raise RuntimeError("a listener's bug")

    routes.add_listener(broken)
    routes.add_listener(heard.append)
    routes.wire([])
    with caplog.at_level(logging.ERROR, "huddle.node"):
        routes.publish(Waved(PEER, 1.0))
    assert heard == [Waved(PEER, 1.0)] and "event listener failed" in caplog.text


class Replicator:
    """The replicator as the recorder reads it: starting, then recording."""

    def __init__(self) -> None:
        self.starting, self.recording, self.retired = True, False, None
        self.appended: list[list[tuple[str, str]]] = []
        self.stats = type("Stats", (), {"events_refused": 0})()

    def why_not_recording(self) -> str:
        return "starting"

    def append_many(self, events: list[tuple[str, str]], now: float, stamp: float, canonical: bool = False) -> list[Any]:
        self.appended.append(list(events))
        return []


def test_what_arrives_while_the_node_starts_is_recorded_once_the_window_ends() -> None:
    replicator, executed = Replicator(), []
    recorder = Recorder(lambda: replicator, writable=lambda: None, local_now=lambda: 1.0,  # type: ignore[arg-type, return-value]
                        mesh_time=lambda: 1.0, execute=lambda: executed.append(1), carried=[("k", '"before"')],
                        renewed=False)
    assert recorder.record_soon("guest", {"said": "hi"}) is None  # kept, not refused
    with pytest.raises(NotRecording):
        recorder.emit("k", 1)  # a write of its own waits (the API holds it) or is refused
    assert replicator.stats.events_refused == 1 and recorder.describe() == {"recording": False,
                                                                           "not_recording": "starting"}

    async def window_ends() -> None:
        task = asyncio.ensure_future(recorder.record_carried())
        await asyncio.sleep(0.01)
        assert replicator.appended == []  # still starting
        replicator.starting, replicator.recording = False, True
        await asyncio.wait_for(task, 5)

    asyncio.run(window_ends())
    assert replicator.appended == [[("k", '"before"'), ("guest", '{"said":"hi"}')]] and executed == [1]
    assert recorder.carried == []


def test_a_recorder_of_a_node_not_running_says_so() -> None:
    recorder = Recorder(lambda: None, writable=lambda: None, local_now=lambda: 0.0, mesh_time=lambda: 0.0,
                        execute=lambda: None, carried=[], renewed=False)
    with pytest.raises(NotRunning):
        recorder.emit("k", 1)
    asyncio.run(recorder.until_recording(5))  # returns at once: nothing to wait for


class Keys:
    def __init__(self, *secrets: GroupSecret) -> None:
        self._secrets = secrets
        self.current = secrets[0]

    def secrets(self) -> tuple[GroupSecret, ...]:
        return self._secrets


def test_each_rotation_step_reaches_the_features_in_the_order_they_asked() -> None:
    finders: Any = type("Finders", (), {"naming": None})()
    following = Following(finders, (5670, 5679), lambda endpoint: None)
    with pytest.raises(NotRunning):
        following.address  # noqa: B018 - no interface before the node starts
    told: list[tuple[str, str]] = []
    following.key_watchers.append(lambda s: told.append(("guests", s.code)))
    following.key_watchers.append(lambda s: told.append(("other", s.code)))
    a = GroupSecret.new("g")
    following.keys_changed(Keys(a))  # type: ignore[arg-type]
    assert told == [("guests", a.code), ("other", a.code)]


def test_a_socket_that_cannot_accept_is_counted_and_the_rest_goes_to_asyncio() -> None:
    handler, passed = AcceptFailures(), []

    class Loop:
        def time(self) -> float:
            return 0.0

        def default_exception_handler(self, context: dict[str, Any]) -> None:
            passed.append(context["message"])

    loop: Any = Loop()
    handler(loop, {"message": "socket.accept() out of system resources", "exception": OSError(24, "EMFILE")})
    handler(loop, {"message": "socket.accept() out of system resources", "exception": OSError(24, "EMFILE")})
    handler(loop, {"message": "Task exception was never retrieved"})
    assert handler.count == 2 and passed == ["Task exception was never retrieved"]


def test_a_feature_whose_facts_raise_says_nothing_and_the_others_still_report() -> None:
    """A feature's bug must not stop the picture's reports (protocol.md 14.1 ``ext``)."""
    from huddle.host.mesh import feature_facts

    class Good:
        name = "good"

        def facts(self) -> dict[str, object]:
            return {"n": 1}

    class Broken:
        name = "broken"

        def facts(self) -> dict[str, object]:
            raise RuntimeError("a feature's bug")

    assert feature_facts(cast("list[Feature]", [Broken(), Good()])) == {"good": {"n": 1}}
