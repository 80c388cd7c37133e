"""A flood of bad input is counted in full and logged at most once a minute per kind
(ratelog.py), the next line saying how many were left out: the mesh's undecodable,
foreign, unanswered-HELO lines (sans-I/O, time passed in) and the driver's
survived failures."""

from __future__ import annotations

import logging
import time

import pytest

from huddle import NodeId
from huddle.driver import MeshDriver
from huddle.protocol import Mesh
from huddle.wire import Chat, Group, Helo, encode

BOB = NodeId(b"\x02" * 16)


def mesh() -> Mesh:
    return Mesh(NodeId(b"\x01" * 16), name="alice", group="g", endpoint="tcp://10.0.0.1:5000",
                incarnation="11" * 8, now=0.0)


def lines(caplog: pytest.LogCaptureFixture, logger: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == logger]


def test_undecodable_messages_are_all_counted_and_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    m = mesh()
    garbage = [b"\x02" * 16, b"NOPE", b"{}"]
    with caplog.at_level(logging.WARNING, logger="huddle.mesh"):
        for i in range(500):
            m.receive(garbage, i * 0.1, "10.0.0.66")  # 500 in 50 s
        assert m.stats.decode_errors == 500
        assert len(lines(caplog, "huddle.mesh")) == 1
        m.receive(garbage, 61.0, "10.0.0.66")
    said = lines(caplog, "huddle.mesh")
    assert len(said) == 2 and "(501 so far)" in said[1] and "(499 more like this left out before)" in said[1]


def test_messages_under_another_connections_uuid_are_logged_once_a_minute(caplog: pytest.LogCaptureFixture) -> None:
    m = mesh()
    chat = encode(Chat(BOB, "hi"))
    with caplog.at_level(logging.WARNING, logger="huddle.mesh"):
        m.receive(encode(Helo(BOB, endpoint="tcp://10.0.0.2:6000", name="bob", incarnation="22" * 8)), 0.0,
                  "10.0.0.2")
        m.receive(encode(Group(BOB, group="g")), 0.0, "10.0.0.2")
        assert m.alive_peers() == [BOB]
        for i in range(300):  # 300 in 30 s, from another machine under bob's UUID
            m.receive(chat, 1.0 + i * 0.1, "10.0.0.66")
        m.receive(chat, 62.0, "10.0.0.66")  # a minute on: said again, with how many were not
    assert m.stats.foreign_frames == 301
    assert [s for s in lines(caplog, "huddle.mesh") if "another connection" in s] == [
        "dropped a message from 10.0.0.66 under another connection's UUID (1 so far)",
        "dropped a message from 10.0.0.66 under another connection's UUID (301 so far)"
        " (299 more like this left out before)"]


class _Raising:
    """A mesh whose every receive raises (a bug the driver must survive)."""

    def receive(self, frames: list[bytes], now: float, source: str) -> bool:
        raise RuntimeError("a bug")

    def receive_chat(self, frames: list[bytes], now: float, source: str) -> None:  # CHAT's fast path
        raise RuntimeError("a bug")

    def take_actions(self) -> list[object]:
        return []


def test_the_driver_counts_every_failure_it_survives_and_logs_once_a_minute(
        caplog: pytest.LogCaptureFixture) -> None:
    driver = MeshDriver(time.monotonic, lambda event: None)
    driver.mesh = _Raising()  # type: ignore[assignment]
    batch = [[b"\x02" * 16, b"CHAT", b"hi"]] * 50
    with caplog.at_level(logging.ERROR, logger="huddle.driver"):
        driver.on_frames(batch, ["127.0.0.1"] * 50)
    assert driver.stats.receive_failures == 50
    said = lines(caplog, "huddle.driver")
    assert len(said) == 1 and "(1 so far" in said[0]
    assert caplog.records[0].exc_info is not None  # the first one with its traceback
