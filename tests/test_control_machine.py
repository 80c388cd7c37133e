"""One app's supervision as a pure state machine (huddle/control/machine.py; docs/control.md):
time passed in, no process.  Back-off and its cap, giving up after ``retries``, ``startsecs``,
the restart policies with ``exitcodes``, the start-rate limit, stopping with SIGKILL at the
timeout, and the transition table (every move the machine makes is in it; one not in it is
refused; docs/control.md draws the same table)."""

from __future__ import annotations

import random
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from huddle.control.machine import KILL, SPAWN, TRANSITIONS, AppMachine, AppState, Signal, backoff_delay
from huddle.control.section import AppSpec
from huddle.errors import LocalProtocolError

S = AppState
DOCS = Path(__file__).resolve().parent.parent / "docs" / "control.md"


def spec(**kw: Any) -> AppSpec:
    return AppSpec(**{"name": "app", "command": ("x",), **kw})


def machine(jitter: float = 1.0 - 1e-12, **kw: Any) -> AppMachine:
    return AppMachine(spec(**kw), lambda: jitter)


def up(m: AppMachine, now: float) -> None:
    """Wanted and its dependencies ready: spawned."""
    m.start(now)
    assert m.ready(now) == [SPAWN] and m.state is S.STARTING


def test_backoff_doubles_from_backoff_and_stops_at_the_cap_with_jitter_below() -> None:
    s = spec(backoff=0.5, backoff_max=4.0)
    assert [backoff_delay(s, n, 1.0) for n in range(7)] == [0.5, 0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    assert [backoff_delay(s, n, 0.0) for n in (1, 5)] == [0.375, 3.0]  # jitter: 0.75 .. 1 of the delay
    assert all(backoff_delay(s, n, j) <= 4.0 for n in range(20) for j in (0.0, 0.5, 0.999))


def test_a_crash_loop_backs_off_longer_each_time_then_fails_after_retries() -> None:
    m = machine(retries=3, startsecs=1.0, backoff=0.5, backoff_max=1.5)
    now = 0.0
    up(m, now)
    delays = []
    for _ in range(3):
        now += 0.1  # an exit within startsecs: a failed start
        assert m.exited(now, 1) == [] and m.state is S.BACKOFF
        retry = m.next_deadline()
        assert retry is not None
        delays.append(round(retry - now, 6))
        assert m.tick(retry - 0.001) == [] and m.state is S.BACKOFF  # not before its time
        now = retry
        assert m.tick(now) == [SPAWN] and m.state is S.STARTING
    assert delays == [0.5, 1.0, 1.5]  # doubled, capped at backoff-max
    assert m.exited(now + 0.1, 1) == [] and m.state is S.FAILED  # the 4th failed start: retries (3) used up
    assert (m.failures, m.restarts, m.last_exit, m.label()) == (4, 3, 1, "failed")
    assert m.next_deadline() is None and m.tick(now + 100) == []
    m.start(now + 200)  # the operator starts it again: a fresh count
    assert m.state is S.WAITING and m.failures == 0


def test_startsecs_decides_a_failed_start_and_a_run_resets_the_count() -> None:
    m = machine(retries=1, startsecs=2.0)
    up(m, 0.0)
    assert m.tick(1.9) == [] and m.state is S.STARTING
    assert m.exited(1.95, 1) == [] and m.failures == 1 and m.state is S.BACKOFF
    retry = m.next_deadline()
    assert retry is not None and m.tick(retry) == [SPAWN]
    assert m.tick(retry + 2.0) == [] and m.state is S.RUNNING and m.failures == 0  # up for startsecs
    assert m.exited(retry + 10, 3) == [] and m.state is S.BACKOFF  # a crash after a run: restarted, not a failure
    assert m.failures == 0 and m.next_deadline() == pytest.approx(retry + 10 + 0.5)
    # an exit at startsecs exactly, with no tick between, counts as a run
    m2 = machine(startsecs=2.0)
    up(m2, 0.0)
    assert m2.exited(2.0, 1) == [] and m2.failures == 0 and m2.state is S.BACKOFF


@pytest.mark.parametrize(("policy", "code", "ran", "after"), [
    ("never", 0, True, "exited"), ("never", 3, True, "exited"), ("never", 0, False, "exited"),
    ("never", 3, False, "failed"),
    ("on-failure", 0, True, "exited"), ("on-failure", 3, True, "backoff"), ("on-failure", -9, True, "backoff"),
    ("on-failure", 0, False, "exited"), ("on-failure", 3, False, "backoff"),
    ("always", 0, True, "backoff"), ("always", 3, True, "backoff"), ("always", 0, False, "backoff"),
])
def test_the_restart_policies_with_exitcodes(policy: str, code: int, ran: bool, after: str) -> None:
    m = machine(restart=policy, exitcodes=(0,), startsecs=1.0)
    up(m, 0.0)
    end = 5.0 if ran else 0.5
    m.tick(end)
    m.exited(end, code)
    assert m.state == after, (policy, code, ran)
    if after == "exited":
        assert m.label() == f"exited ({code})"


def test_exitcodes_name_the_expected_ones() -> None:
    m = machine(restart="on-failure", exitcodes=(0, 2))
    up(m, 0.0)
    m.tick(2.0)
    m.exited(2.0, 2)
    assert m.state is S.EXITED  # 2 is expected: not restarted
    m = machine(restart="on-failure", exitcodes=(2,))
    up(m, 0.0)
    m.tick(2.0)
    m.exited(2.0, 0)
    assert m.state is S.BACKOFF  # 0 is not among them: a failure


def test_the_start_rate_limit_holds_starts_back_until_the_window_allows() -> None:
    m = machine(restart="always", start_limit=3, start_interval=10.0, startsecs=0.0, backoff=0.1, backoff_max=0.1)
    now = 0.0
    up(m, now)
    starts = [now]
    while len(starts) < 6:
        m.tick(now)
        assert m.state is S.RUNNING
        now += 0.01
        m.exited(now, 0)
        retry = m.next_deadline()
        assert retry is not None
        now = retry
        actions = m.tick(now)
        if actions == [SPAWN]:
            starts.append(now)
        else:
            assert actions == [] and m.state is S.BACKOFF  # held by the limit: its next try is later
            nxt = m.next_deadline()
            assert nxt is not None and nxt > now
            now = nxt
            assert m.tick(now) == [SPAWN]
            starts.append(now)
    for t0 in starts:
        assert len([t for t in starts if t0 - 10.0 + 1e-9 < t <= t0]) <= 3, starts  # never more than 3 in 10 s
    assert starts[3] >= starts[0] + 10.0


def test_stop_signals_the_group_then_kills_at_the_timeout() -> None:
    m = machine(stop_signal="INT", stop_timeout=5.0)
    up(m, 0.0)
    m.tick(1.0)
    assert m.stop(2.0) == [Signal(signal.SIGINT)] and m.state is S.STOPPING
    assert m.next_deadline() == 7.0
    assert m.tick(6.9) == [] and m.tick(7.0) == [KILL]
    assert m.tick(8.0) == [] and m.next_deadline() is None  # killed once
    assert m.exited(8.1, -9) == [] and m.state is S.STOPPED and m.last_exit == -9
    assert m.stop(9.0) == [] and m.state is S.STOPPED  # stopping a stopped app: nothing


def test_stop_without_a_process_and_restart() -> None:
    m = machine()
    m.start(0.0)
    assert m.stop(0.0) == [] and m.state is S.STOPPED  # waiting: stopped at once
    up(m, 1.0)
    m.exited(1.1, 1)
    assert m.state is S.BACKOFF and m.stop(1.2) == [] and m.state is S.STOPPED  # backing off: stopped at once
    up(m, 2.0)
    assert m.restart(3.5) == [Signal(signal.SIGTERM)] and m.state is S.STOPPING
    assert m.exited(3.6, -15) == [] and m.state is S.WAITING  # down, then up again through waiting
    assert m.ready(3.6) == [SPAWN]
    m2 = machine(stop_timeout=0.0)
    up(m2, 0.0)
    assert m2.stop(0.1) == [KILL]  # no grace at all


def test_a_process_that_cannot_be_made_is_a_failed_start() -> None:
    m = machine(retries=0)
    up(m, 0.0)
    assert m.spawn_failed(0.0, "No such file or directory") == [] and m.state is S.FAILED
    assert m.error == "No such file or directory" and m.last_exit == 127


def test_every_move_is_in_the_table_and_one_not_in_it_is_refused() -> None:
    """Random inputs at random times: each state change is an edge of TRANSITIONS (one input may
    make two: a restart while backing off is a stop, then a start)."""
    rng = random.Random(7)
    seen: set[tuple[AppState, AppState]] = set()
    for policy in ("never", "on-failure", "always"):
        m = machine(restart=policy, retries=2, startsecs=1.0, stop_timeout=1.0, start_limit=2, start_interval=20.0)
        moves: list[tuple[AppState, AppState]] = []
        real_move = m._move

        def move(new: AppState, m: AppMachine = m, moves: list[tuple[AppState, AppState]] = moves,
                 real_move: Any = real_move) -> None:
            moves.append((m.state, new))
            real_move(new)

        m._move = move  # type: ignore[method-assign]
        now = 0.0
        for _ in range(3000):
            now += rng.choice((0.0, 0.05, 0.3, 1.0, 3.0))
            before = m.state
            step = rng.choice(("start", "stop", "restart", "ready", "tick", "exit"))
            if step == "exit":
                if before not in (S.STARTING, S.RUNNING, S.STOPPING):
                    with pytest.raises(LocalProtocolError):
                        m.exited(now, 1)
                    continue
                m.exited(now, rng.choice((0, 1, -9)))
            else:
                getattr(m, step)(now)
        for a, b in moves:
            assert b in TRANSITIONS[a], (a, b)
            seen.add((a, b))
    edges = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert seen == edges, f"edges never taken: {edges - seen}"  # the table has no dead rows
    m = machine()
    with pytest.raises(LocalProtocolError, match="no move from stopped to running"):
        m._move(S.RUNNING)


def test_the_docs_draw_the_same_table() -> None:
    """docs/control.md lists each state's moves as "- `from` -> `to`, `to`"."""
    text = DOCS.read_text()
    drawn = {AppState(a): frozenset(AppState(t.strip(" `")) for t in b.split(","))
             for a, b in re.findall(r"^- `([a-z]+)` -> (.+)$", text, re.M)}
    assert drawn == TRANSITIONS
