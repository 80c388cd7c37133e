"""``[[apps]]``: the programs a node runs, per node and per node type (docs/control.md).

An app is one table of ``[[apps]]`` (the node's own) or of ``[[types.NAME.apps]]`` (every
node of that type runs it).  A node runs its type's apps and its own; one of its own with
the name of one of its type's replaces that one whole.  :func:`parse_apps` reads the TOML
tables (unknown keys, wrong types and bad values named with where they stand),
:func:`node_apps` merges a type's and a node's and orders them so that each app comes after
the apps it depends on (an unknown dependency and a cycle are errors).

This module imports nothing but the errors: the node's configuration reads it whether or
not the node runs apps.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any, Final

from ..errors import ConfigError

__all__ = ["APP_NAME", "PLACEMENTS", "RESTART_POLICIES", "AppSpec", "node_apps", "parse_apps"]

# An app's name is also the key of its state in the system picture's facts (docs/protocol.md 14.1).
APP_NAME: Final = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
RESTART_POLICIES: Final = ("never", "on-failure", "always")
PLACEMENTS: Final = ("this-node", "one-of-type")
STOP_SIGNALS: Final = ("TERM", "INT", "HUP", "QUIT", "KILL", "USR1", "USR2")
MAX_APPS: Final = 32  # per node: their states fit the picture's facts (2 KiB for all features)


@dataclass(frozen=True)
class AppSpec:
    """One app: what to run and how to supervise it (each field is a key of its table,
    dashes for underscores; docs/control.md says what each does)."""

    name: str
    command: tuple[str, ...]
    cwd: Path | None = None  # None: the node's data directory's apps/ folder
    env: tuple[tuple[str, str], ...] = ()
    autostart: bool = True
    restart: str = "on-failure"
    exitcodes: tuple[int, ...] = (0,)
    startsecs: float = 1.0  # an exit sooner is a failed start
    retries: int = 3  # failed starts in a row retried; then "failed"
    backoff: float = 0.5  # the first retry's delay; doubled for each failed start in a row
    backoff_max: float = 30.0
    start_limit: int = 10  # at most this many starts ...
    start_interval: float = 60.0  # ... in this many seconds; a start beyond waits
    stop_signal: str = "TERM"
    stop_timeout: float = 10.0  # then SIGKILL to the whole process group
    depends_on: tuple[str, ...] = ()
    placement: str = "this-node"
    log_size: int = 1 << 20  # octets of apps/NAME.log before it is rotated
    log_keep: int = 3  # rotated files kept: NAME.log.1 .. NAME.log.N

    def __post_init__(self) -> None:
        n = self.name
        if not APP_NAME.match(n):
            raise ConfigError(f"app name {n!r} must be 1..32 of a-z 0-9 _ - starting with a letter")
        if not self.command or not all(self.command):
            raise ConfigError(f"app {n!r}: command must be a non-empty list of non-empty strings (no shell)")
        if self.restart not in RESTART_POLICIES:
            raise ConfigError(f"app {n!r}: restart must be one of {', '.join(RESTART_POLICIES)}, got {self.restart!r}")
        if self.placement not in PLACEMENTS:
            raise ConfigError(f"app {n!r}: placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}")
        if self.stop_signal not in STOP_SIGNALS:
            raise ConfigError(f"app {n!r}: stop-signal must be one of {', '.join(STOP_SIGNALS)}, got {self.stop_signal!r}")
        if not all(0 <= c <= 255 for c in self.exitcodes):
            raise ConfigError(f"app {n!r}: exitcodes must be 0..255")
        for key, value, low, high in (("startsecs", self.startsecs, 0, 3600), ("backoff", self.backoff, 0, 3600),
                                      ("backoff-max", self.backoff_max, 0, 86400),
                                      ("start-interval", self.start_interval, 0, 86400),
                                      ("stop-timeout", self.stop_timeout, 0, 3600)):
            if not low <= value <= high:
                raise ConfigError(f"app {n!r}: {key} must be {low}..{high} seconds, got {value}")
        if self.backoff_max < self.backoff:
            raise ConfigError(f"app {n!r}: backoff-max ({self.backoff_max}) is below backoff ({self.backoff})")
        for key, count, low, high in (("retries", self.retries, 0, 1000), ("start-limit", self.start_limit, 1, 1000),
                                      ("log-size", self.log_size, 4096, 1 << 30), ("log-keep", self.log_keep, 0, 100)):
            if not low <= count <= high:
                raise ConfigError(f"app {n!r}: {key} must be {low}..{high}, got {count}")
        for dep in self.depends_on:
            name, at, node_type = dep.partition("@")
            if not APP_NAME.match(name) or (at and not APP_NAME.match(node_type)):
                raise ConfigError(f"app {n!r}: depends-on {dep!r} must be an app's name, or NAME@TYPE: app NAME on "
                                  "any node of type TYPE (each 1..32 of a-z 0-9 _ - starting with a letter)")
            if dep == n:
                raise ConfigError(f"app {n!r} depends on itself")

    @property
    def local_deps(self) -> tuple[str, ...]:
        """The apps of this node it depends on (``NAME``, not ``NAME@TYPE``)."""
        return tuple(d for d in self.depends_on if "@" not in d)

    @property
    def signal(self) -> signal.Signals:
        return signal.Signals[f"SIG{self.stop_signal}"]

    def expected(self, code: int) -> bool:
        """Is this exit status one of ``exitcodes`` (a death by a signal never is)?"""
        return code in self.exitcodes


_FIELDS: Final = {f.name.replace("_", "-"): f for f in fields(AppSpec)}
_KINDS: Final[dict[str, tuple[str, tuple[type, ...]]]] = {
    "str": ("a string", (str,)), "bool": ("true or false", (bool,)), "int": ("an integer", (int,)),
    "float": ("a number", (int, float)), "Path | None": ("a path (a string)", (str,)),
    "tuple[str, ...]": ("a list of strings", (list,)), "tuple[int, ...]": ("a list of integers", (list,)),
    "tuple[tuple[str, str], ...]": ("a table of strings", (dict,)),
}


def parse_apps(tables: Any, where: str, base: Path) -> tuple[AppSpec, ...]:
    """``[[apps]]`` tables (``where`` names them in errors) as specs; a relative ``cwd`` is
    relative to ``base`` (the config file's directory)."""
    if not isinstance(tables, list) or not all(isinstance(t, dict) for t in tables):
        raise ConfigError(f"{where} is an array of tables: [[apps]] with name = ... and command = [...] below it")
    out: list[AppSpec] = []
    for i, table in enumerate(tables):
        label = f"{where} #{i + 1}" + (f" ({table['name']!r})" if isinstance(table.get("name"), str) else "")
        out.append(_one(table, label, base))
    names = [a.name for a in out]
    twice = sorted({x for x in names if names.count(x) > 1})
    if twice:
        raise ConfigError(f"{where}: app {twice[0]!r} is given twice")
    return tuple(out)


def _one(table: Mapping[str, Any], label: str, base: Path) -> AppSpec:
    values: dict[str, Any] = {}
    for written, given in table.items():
        key = written.replace("_", "-")
        f = _FIELDS.get(key)
        if f is None:
            import difflib  # noqa: PLC0415 - only for a mistake

            match = difflib.get_close_matches(key, _FIELDS, n=1, cutoff=0.6)
            hint = f"; did you mean {match[0]!r}?" if match else f"; known: {', '.join(sorted(_FIELDS))}"
            raise ConfigError(f"{label}: unknown key {written!r}{hint}")
        value: Any = given
        what, types = _KINDS[str(f.type)]
        ok = isinstance(value, types) and not (isinstance(value, bool) and bool not in types)
        if ok and isinstance(value, list):
            inner: type = int if "int" in str(f.type) else str
            ok = all(isinstance(v, inner) and not isinstance(v, bool) for v in value)
        if ok and isinstance(value, dict):
            ok = all(isinstance(v, str) for v in value.values())
        if not ok:
            raise ConfigError(f"{label}: {key} has the wrong type: expected {what}, got {type(value).__name__} "
                              f"{value!r}")
        if isinstance(value, list):
            value = tuple(value)
        elif isinstance(value, dict):
            value = tuple((str(k), v) for k, v in value.items())
        elif key == "cwd":
            value = base / Path(value).expanduser()
        elif str(f.type) == "float":
            value = float(value)
        values[f.name] = value
    for required in ("name", "command"):
        if required not in values:
            raise ConfigError(f"{label}: an app needs {required} = ...")
    try:
        return AppSpec(**values)
    except ConfigError as exc:
        raise ConfigError(f"{label}: {exc}") from None


def node_apps(of_type: Sequence[AppSpec], own: Sequence[AppSpec]) -> tuple[AppSpec, ...]:
    """The apps a node runs: its type's, then its own (one of its own replaces its type's of the
    same name), ordered so that each comes after those it depends on (else in the order
    written); an unknown dependency or a cycle is a ConfigError."""
    merged: dict[str, AppSpec] = {a.name: a for a in of_type}
    merged.update((a.name, a) for a in own)
    if len(merged) > MAX_APPS:
        raise ConfigError(f"a node runs at most {MAX_APPS} apps, this one would run {len(merged)}")
    for app in merged.values():
        for dep in app.local_deps:
            if dep not in merged:
                raise ConfigError(f"app {app.name!r} depends on {dep!r}, which is not an app of this node "
                                  f"(known: {', '.join(merged) or 'none'})")
    return tuple(merged[n] for n in _ordered(merged))


def _ordered(apps: Mapping[str, AppSpec]) -> Iterable[str]:
    """Depth first, in the order written: each app after its dependencies; a cycle named."""
    done: list[str] = []
    path: list[str] = []

    def visit(name: str) -> None:
        if name in done:
            return
        if name in path:
            cycle = [*path[path.index(name):], name]
            raise ConfigError(f"apps depend on each other in a cycle: {' -> '.join(cycle)}")
        path.append(name)
        for dep in apps[name].local_deps:
            visit(dep)
        path.pop()
        done.append(name)

    for name in apps:
        visit(name)
    return done

