"""``[[handlers]]``: programs a node runs when something happens (docs/control.md, "Handlers").

A handler is one table of ``[[handlers]]``: ``on`` (what it runs on), ``command`` (an argument
list, no shell), ``timeout`` (seconds, then SIGKILL to its process group) and ``env``.
:func:`parse_handlers` reads the tables; :func:`triggers` names what an occurrence fires, and
:class:`Admission` bounds how many run at once and how many wait (the rest are dropped and
counted).  The driver that runs them is :mod:`huddle.control.handler_runner`.

What ``on`` may say:

* ``peer-up``: a peer was admitted; ``peer-suspect``: one missed its heartbeats;
  ``peer-gone``: one left or was lost;
* ``event:KIND``: a record of kind KIND entered this node's log (its own or a peer's);
  ``event:*``: any record;
* ``app:NAME:STATE``: app NAME of this node moved to STATE (``waiting``, ``starting``,
  ``running``, ``backoff``, ``stopping``, ``exited``, ``failed``, ``stopped``); ``*`` for
  NAME, STATE or both: any.

Pure: this module imports nothing but the errors and the app section (the node's
configuration reads it whether or not the node runs handlers).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Generic, Literal, TypeVar

from ..errors import ConfigError
from .section import APP_NAME

__all__ = ["APP_STATES", "MAX_HANDLERS", "PEER_TRIGGERS", "Admission", "HandlerSpec", "parse_handlers", "triggers"]

PEER_TRIGGERS: Final = ("peer-up", "peer-suspect", "peer-gone")
APP_STATES: Final = ("waiting", "starting", "running", "backoff", "stopping", "exited", "failed", "stopped")
MAX_HANDLERS: Final = 64  # per node
_KIND: Final = re.compile(r"^[^\s\x00-\x1f\x7f]{1,255}$")  # a log record's kind, as the log takes one
_KEYS: Final = ("on", "command", "timeout", "env")


@dataclass(frozen=True)
class HandlerSpec:
    """One handler: what it runs on, what it runs, for how long at most, with what added to its environment."""

    on: str
    command: tuple[str, ...]
    timeout: float = 30.0
    env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not _valid_on(self.on):
            raise ConfigError(f"handler on = {self.on!r}: expected peer-up, peer-suspect, peer-gone, event:KIND "
                              "(or event:*) or app:NAME:STATE (NAME and STATE may be *)")
        if not self.command or not all(self.command):
            raise ConfigError(f"handler on {self.on!r}: command must be a non-empty list of non-empty strings")
        if not 0 < self.timeout <= 3600:
            raise ConfigError(f"handler on {self.on!r}: timeout must be above 0 and at most 3600 seconds, "
                              f"got {self.timeout}")


def _valid_on(on: str) -> bool:
    if on in PEER_TRIGGERS:
        return True
    kind, colon, rest = on.partition(":")
    if not colon:
        return False
    if kind == "event":
        return bool(_KIND.match(rest))
    if kind == "app":
        name, colon, state = rest.partition(":")
        return bool(colon) and (name == "*" or bool(APP_NAME.match(name))) and (state == "*" or state in APP_STATES)
    return False


def triggers(what: Literal["peer-up", "peer-suspect", "peer-gone", "event", "app"], name: str = "",
             state: str = "") -> tuple[str, ...]:
    """Every ``on`` that fires for an occurrence: a peer's (``what`` its trigger), a record's
    (``event``, ``name`` its kind) or an app's (``app``, ``name`` and ``state``)."""
    if what == "event":
        return (f"event:{name}", "event:*")
    if what == "app":
        return (f"app:{name}:{state}", f"app:{name}:*", f"app:*:{state}", "app:*:*")
    return (what,)


def parse_handlers(tables: Any, where: str) -> tuple[HandlerSpec, ...]:
    """``[[handlers]]`` tables (``where`` names them in errors) as specs."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{where} is an array of tables: [[handlers]] with on = ... and command = [...] below it")
    if len(tables) > MAX_HANDLERS:
        raise ConfigError(f"{where}: at most {MAX_HANDLERS} handlers, got {len(tables)}")
    return tuple(_one(t, f"{where} #{i + 1}") for i, t in enumerate(tables))


def _one(table: Mapping[str, Any], label: str) -> HandlerSpec:
    unknown = sorted(set(table) - set(_KEYS))
    if unknown:
        raise ConfigError(f"{label}: unknown key {unknown[0]!r}; known: {', '.join(_KEYS)}")
    on, command, timeout, env = (table.get(k) for k in _KEYS)
    if not isinstance(on, str):
        raise ConfigError(f"{label}: a handler needs on = \"...\" (a string)")
    if not isinstance(command, list) or not all(isinstance(c, str) for c in command):
        raise ConfigError(f"{label}: a handler needs command = [...] (a list of strings)")
    if timeout is None:
        timeout = 30.0
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ConfigError(f"{label}: timeout must be a number of seconds, got {timeout!r}")
    if env is None:
        env = {}
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ConfigError(f"{label}: env must be a table of strings")
    try:
        return HandlerSpec(on, tuple(command), float(timeout), tuple((str(k), v) for k, v in env.items()))
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None


_J = TypeVar("_J")


class Admission(Generic[_J]):
    """How many handlers run at once (``running``) and wait (``queued``): a job offered runs
    if there is room, else waits if the queue has room, else is dropped (counted by the
    caller); a job done lets the oldest waiting one run."""

    def __init__(self, running: int, queued: int) -> None:
        if running < 1 or queued < 0:
            raise ValueError("handlers need room to run one at least, and a queue of 0 or more")
        self.limit, self.bound = running, queued
        self.running = 0
        self.waiting: collections.deque[_J] = collections.deque()

    def offer(self, job: _J) -> Literal["run", "queued", "dropped"]:
        if self.running < self.limit:
            self.running += 1
            return "run"
        if len(self.waiting) < self.bound:
            self.waiting.append(job)
            return "queued"
        return "dropped"

    def done(self) -> _J | None:
        """A job ended: the next to run (it holds the place the ended one left), or None."""
        if self.running <= 0:
            raise ValueError("no job runs")
        if self.waiting:
            return self.waiting.popleft()
        self.running -= 1
        return None

    def drain(self) -> Iterable[_J]:
        """The waiting jobs, taken out (the node stops: they never run)."""
        while self.waiting:
            yield self.waiting.popleft()
