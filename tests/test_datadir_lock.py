"""The data directory's lock: who holds it, said truly.  A holder that is stopping is
waited for (a node stops in well under a second), a live one refused with the advice
that fits, and a lock left by a node that crashed taken over, saying so."""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path

import pytest

from huddle.errors import DataDirLocked
from huddle.log.datadir import DataDir


def test_a_running_holder_is_refused_with_its_pid(tmp_path: Path) -> None:
    first = DataDir(tmp_path)
    first.lock()
    try:
        began = time.monotonic()
        with pytest.raises(DataDirLocked, match=f"in use by another huddle node \\(pid {os.getpid()}\\); give each "
                                                "node its own --data-dir"):
            DataDir(tmp_path).lock(wait=2.0)
        assert time.monotonic() - began < 0.5  # one that is not stopping is not waited for
    finally:
        first.unlock()


def test_a_stopping_holder_is_waited_for_then_the_lock_taken(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = DataDir(tmp_path)
    first.lock()
    first.stopping()
    assert (tmp_path / "lock").read_text() == f"{os.getpid()} stopping\n"
    let_go = threading.Timer(0.3, first.unlock)
    let_go.start()
    second = DataDir(tmp_path)
    with caplog.at_level(logging.INFO, "huddle.log"):
        began = time.monotonic()
        second.lock(wait=3.0)
        waited = time.monotonic() - began
    let_go.join()
    try:
        assert 0.2 < waited < 2.0, waited
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"
        assert not caplog.records  # it let go cleanly: nothing to say
    finally:
        second.unlock()


def test_a_holder_still_stopping_after_the_wait_is_named_as_such(tmp_path: Path) -> None:
    first = DataDir(tmp_path)
    first.lock()
    first.stopping()
    try:
        with pytest.raises(DataDirLocked) as caught:
            DataDir(tmp_path).lock(wait=0.2)
        assert f"held by huddle node pid {os.getpid()}, still stopping after 0.2 s" in str(caught.value)
        assert "give each node its own" not in str(caught.value)  # the advice that does not fit
    finally:
        first.unlock()


def test_a_clean_unlock_leaves_no_pid_and_a_crashed_holders_lock_is_taken_over(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    first = DataDir(tmp_path)
    first.lock()
    first.unlock()
    assert (tmp_path / "lock").read_text() == ""
    (tmp_path / "lock").write_text("4242\n")  # what a killed node leaves (the kernel let go of its lock)
    second = DataDir(tmp_path)
    with caplog.at_level(logging.INFO, "huddle.log"):
        second.lock()
    try:
        assert [r.getMessage() for r in caplog.records] == [
            f"data dir {tmp_path}: took over the lock of huddle node pid 4242, which did not stop cleanly "
            "(it crashed or was killed)"]
        assert (tmp_path / "lock").read_text() == f"{os.getpid()}\n"
    finally:
        second.unlock()
