"""The one rate-limited logging rule (huddle.ratelog): per kind, ``burst`` lines a period."""

from __future__ import annotations

import logging

import pytest

from huddle.ratelog import RateLog

log = logging.getLogger("huddle.test_ratelog")


def test_a_flood_of_one_kind_is_one_line_a_period_and_the_next_says_how_many_were_left_out() -> None:
    gate = RateLog(log, period=60.0)
    assert gate.due("host", 0.0) == 0
    assert [gate.due("host", t) for t in (1.0, 2.0, 59.9)] == [None, None, None]
    assert gate.due("origin", 3.0) == 0, "each kind has its own period"
    assert gate.due("host", 60.0) == 3
    assert gate.due("host", 61.0) is None
    assert gate.left_out == 4


def test_a_quiet_kind_logs_its_next_line_at_once() -> None:
    gate = RateLog(log, period=10.0)
    assert gate.due("k", 0.0) == 0
    assert gate.due("k", 500.0) == 0
    assert gate.due("k", 509.0) is None


def test_a_burst_lets_that_many_lines_a_period_through() -> None:
    gate = RateLog(log, period=60.0, burst=3)
    assert [gate.due("k", float(t)) for t in range(6)] == [0, 0, 0, None, None, None]
    assert [gate.due("k", 60.0 + t) for t in range(4)] == [3, 0, 0, None]


def test_the_written_line_carries_the_count_left_out(caplog: pytest.LogCaptureFixture) -> None:
    gate = RateLog(log, period=60.0)
    with caplog.at_level(logging.INFO, logger=log.name):
        for i in range(1000):
            gate.warning("refused", i * 0.01, "refused %d", i)
        assert gate.info("refused", 60.0, "refused %s", "late") is True
        assert gate.info("refused", 60.5, "refused %s", "later") is False
    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.WARNING, "refused 0"),
        (logging.INFO, "refused late (999 more like this left out before)"),
    ]


def test_nonsense_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        RateLog(log, period=0.0)
    with pytest.raises(ValueError):
        RateLog(log, burst=-1)


def test_a_burst_of_zero_only_counts() -> None:
    gate = RateLog(log, period=1.0, burst=0)
    assert [gate.due("k", float(t)) for t in range(3)] == [None, None, None] and gate.left_out == 3
