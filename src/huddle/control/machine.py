"""One app's supervision as a pure state machine: time passed in, actions out (docs/control.md).

The driver (:mod:`huddle.control.supervisor`) tells the machine what happened (the operator
wants the app up or down, its dependencies run, its process exited, time passed) and carries
out the actions it returns: :data:`SPAWN` a process, :class:`Signal` its process group,
:data:`KILL` its process group.  The machine never touches a process, a clock or a random
source of its own (the jitter's source is handed in), so every sequence is tested without
one (tests/test_control_machine.py).

Every change of state goes through :meth:`AppMachine._move`, against :data:`TRANSITIONS`:
a move not in the table is a :class:`~huddle.errors.LocalProtocolError`.
"""

from __future__ import annotations

import collections
import enum
import signal
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from ..errors import LocalProtocolError
from .section import AppSpec

__all__ = ["KILL", "SPAWN", "TRANSITIONS", "Action", "AppMachine", "AppState", "Signal", "backoff_delay"]


class AppState(enum.StrEnum):
    WAITING = "waiting"  # wanted up, held back until every app it depends on runs
    STARTING = "starting"  # spawned, not yet up for startsecs
    RUNNING = "running"
    BACKOFF = "backoff"  # waiting to start again (after an exit, or held by the start-rate limit)
    STOPPING = "stopping"  # its stop signal sent; SIGKILL at the stop-timeout
    EXITED = "exited"  # it ended and its restart policy does not start it again
    FAILED = "failed"  # it did not start: retries used up (or a failed start under restart = never)
    STOPPED = "stopped"  # stopped by the operator or the node, or never started


S = AppState
# state -> the states it may move to: the one table (docs/control.md draws it).
TRANSITIONS: Final[dict[AppState, frozenset[AppState]]] = {
    S.STOPPED: frozenset({S.WAITING}),
    S.EXITED: frozenset({S.WAITING}),
    S.FAILED: frozenset({S.WAITING}),
    S.WAITING: frozenset({S.STARTING, S.BACKOFF, S.STOPPED}),
    S.STARTING: frozenset({S.RUNNING, S.BACKOFF, S.STOPPING, S.EXITED, S.FAILED}),
    S.RUNNING: frozenset({S.BACKOFF, S.STOPPING, S.EXITED}),
    S.BACKOFF: frozenset({S.STARTING, S.STOPPED}),
    S.STOPPING: frozenset({S.STOPPED}),
}
UP: Final = frozenset({S.STARTING, S.RUNNING, S.STOPPING})  # a process of the app is alive


class _Spawn:
    def __repr__(self) -> str:
        return "SPAWN"


class _Kill:
    def __repr__(self) -> str:
        return "KILL"


SPAWN: Final = _Spawn()  # start the app's process (its own process group)
KILL: Final = _Kill()  # SIGKILL to the app's whole process group


@dataclass(frozen=True)
class Signal:
    """Send ``signum`` to the app's whole process group."""

    signum: signal.Signals


Action = _Spawn | _Kill | Signal


def backoff_delay(spec: AppSpec, failures: int, jitter: float) -> float:
    """The delay before the next start after ``failures`` failed starts in a row (0: after an
    app that ran): ``backoff`` doubled for each, capped at ``backoff-max``, then scaled by a
    jitter of 0.75 .. 1 (``jitter`` in [0, 1)), so apps that fail together spread out."""
    base = min(spec.backoff_max, spec.backoff * 2.0 ** max(0, failures - 1))
    return base * (0.75 + 0.25 * jitter)


class AppMachine:
    """One app's state, its failed starts in a row, restarts, last exit and timers."""

    def __init__(self, spec: AppSpec, jitter: Callable[[], float]) -> None:
        self.spec = spec
        self._jitter = jitter
        self.state = S.STOPPED
        self.failures = 0  # failed starts in a row
        self.restarts = 0  # starts made by the restart policy
        self.last_exit: int | None = None  # the last exit status; negative: killed by that signal
        self.error = ""  # why the last start could not spawn, if it could not
        self.started_at: float | None = None  # when the process now alive was spawned
        self._retry_at = 0.0
        self._kill_at: float | None = None  # while stopping, until SIGKILL is sent
        self._then_start = False  # a restart: up again once stopped
        self._starts: collections.deque[float] = collections.deque(maxlen=spec.start_limit)

    def _move(self, new: AppState) -> None:
        if new not in TRANSITIONS[self.state]:
            raise LocalProtocolError(f"app {self.spec.name!r}: no move from {self.state} to {new}")
        self.state = new

    # ----------------------------------------------------------- inputs

    def start(self, now: float) -> list[Action]:
        """The operator (or autostart) wants it up: it waits for its dependencies; a start while
        it stops makes it start again once stopped; one while it is up does nothing."""
        if self.state in (S.STOPPED, S.EXITED, S.FAILED):
            self.failures, self.error = 0, ""
            self._move(S.WAITING)
        elif self.state is S.STOPPING:
            self._then_start = True
        return []

    def ready(self, now: float) -> list[Action]:
        """Every app it depends on runs: a waiting app starts (unless the start-rate limit holds it)."""
        if self.state is not S.WAITING:
            return []
        return self._spawn(now, S.WAITING)

    def stop(self, now: float) -> list[Action]:
        """The operator (or the node stopping) wants it down: its stop signal to its process
        group, SIGKILL at ``stop-timeout``; one with no process is stopped at once."""
        self._then_start = False
        if self.state in (S.STARTING, S.RUNNING):
            self._move(S.STOPPING)
            self._kill_at = now + self.spec.stop_timeout
            if self.spec.stop_timeout <= 0:
                self._kill_at = None
                return [KILL]
            return [Signal(self.spec.signal)]
        if self.state in (S.WAITING, S.BACKOFF):
            self._move(S.STOPPED)
        return []

    def restart(self, now: float) -> list[Action]:
        """Stop it if it is up, then start it (through waiting, for its dependencies)."""
        actions = self.stop(now)
        if self.state is S.STOPPING:
            self._then_start = True
            return actions
        return actions + self.start(now)

    def spawn_failed(self, now: float, error: str) -> list[Action]:
        """The process could not be made (no such program, not executable): a failed start."""
        self.error = error
        return self.exited(now, 127)

    def exited(self, now: float, code: int) -> list[Action]:
        """Its process ended with ``code`` (negative: killed by that signal)."""
        if self.state not in UP:
            raise LocalProtocolError(f"app {self.spec.name!r}: an exit while {self.state}")
        self.last_exit = code
        if self.state is S.STARTING and now >= self._up_at():
            self._move(S.RUNNING)
            self.failures = 0
        self.started_at, self._kill_at = None, None
        if self.state is S.STOPPING:
            self._move(S.STOPPED)
            if self._then_start:
                self._then_start = False
                return self.start(now)
            return []
        policy, expected = self.spec.restart, self.spec.expected(code)
        if self.state is S.STARTING and (policy == "always" or not expected):  # not up for startsecs: a failed start
            self.failures += 1
            if policy == "never" or self.failures > self.spec.retries:
                self._move(S.FAILED)
                return []
            self._backoff(now, self.failures)
            return []
        if self.state is S.RUNNING and (policy == "always" or (policy == "on-failure" and not expected)):
            self._backoff(now, 0)
            return []
        self._move(S.EXITED)
        return []

    def tick(self, now: float) -> list[Action]:
        """Time passed: up for startsecs, a back-off over, a stop's timeout reached."""
        if self.state is S.STARTING and now >= self._up_at():
            self._move(S.RUNNING)
            self.failures = 0
        elif self.state is S.BACKOFF and now >= self._retry_at:
            actions = self._spawn(now, S.BACKOFF)
            self.restarts += len(actions)
            return actions
        elif self.state is S.STOPPING and self._kill_at is not None and now >= self._kill_at:
            self._kill_at = None
            return [KILL]
        return []

    # ----------------------------------------------------------- reading

    def next_deadline(self) -> float | None:
        """When :meth:`tick` next has something to do (None: not before an input)."""
        if self.state is S.STARTING:
            return self._up_at()
        if self.state is S.BACKOFF:
            return self._retry_at
        if self.state is S.STOPPING:
            return self._kill_at
        return None

    def retry_in(self, now: float) -> float | None:
        return max(0.0, self._retry_at - now) if self.state is S.BACKOFF else None

    def label(self) -> str:
        """The state as the system picture shows it: ``exited (CODE)`` with its last exit status."""
        return f"exited ({self.last_exit})" if self.state is S.EXITED else str(self.state)

    # ----------------------------------------------------------- inside

    def _up_at(self) -> float:
        assert self.started_at is not None  # starting: spawned at started_at
        return self.started_at + self.spec.startsecs

    def _spawn(self, now: float, came_from: AppState) -> list[Action]:
        """Start now, unless ``start-limit`` starts were made within ``start-interval``: then
        back off until the oldest of them is that old."""
        starts = self._starts
        if len(starts) == self.spec.start_limit and now - starts[0] < self.spec.start_interval:
            self._retry_at = starts[0] + self.spec.start_interval
            if came_from is S.WAITING:
                self._move(S.BACKOFF)
            return []
        starts.append(now)
        self.started_at = now
        self._move(S.STARTING)
        return [SPAWN]

    def _backoff(self, now: float, failures: int) -> None:
        self._retry_at = now + backoff_delay(self.spec, failures, self._jitter())
        self._move(S.BACKOFF)
