"""The TOML file: sections, the flat keys older files use, and errors that say where and what.

A key is read in its section's table (``[posts]`` ``policy = "newest:5"``) or, as
before there were sections, at the top level (or in ``[node]``) under its flag's
name (``posts-policy = "newest:5"``); dashes or underscores.  A mistake names the
file, the table and the key, and offers the closest known key.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from ..control.handlers import HandlerSpec, parse_handlers
from ..control.section import AppSpec, parse_apps
from ..errors import ConfigError
from ..limits import LimitError, Limits
from .model import GROUP_KEY, SECTIONS, SETTINGS, NodeConfig, Setting
from .sections import BUILTIN_TYPES, NodeType

__all__ = ["TABLES", "load_config"]

# The tables that are not sections: node types ([types.NAME]), limits ([limits.AREA]), apps ([[apps]])
# and tags; [pipeline] is huddle pipeline's (its --config reads it there; docs/pipeline.md).
TABLES = ("types", "limits", "apps", "handlers", "tags", "pipeline")

# Where a key may stand: a section's table, or the top level (its key, its flag, older spellings).
_IN_TABLE: dict[str, dict[str, Setting]] = {table: {} for table in SECTIONS}
_TOP: dict[str, Setting] = {}
for _s in SETTINGS:
    if _s.table:
        for _name in (_s.key, *_s.aliases):
            _IN_TABLE[_s.table][_name] = _s
    for _name in (_s.flag, *_s.aliases):
        _TOP[_name] = _s

_EXPECTED = {
    "str": "a string", "int": "an integer", "float": "a number", "bool": "true or false",
    "str | None": "a string", "float | None": "a number", "Path": "a path (a string)",
    "tuple[str, ...]": "a list of strings", "list[str]": "a list of strings",
    "tuple[int, int]": '"LOW-HIGH" or [LOW, HIGH]',
}


def load_config(path: Path | None) -> NodeConfig:
    """Read a TOML file (docs/configuration.md); None: the defaults."""
    if path is None:
        return NodeConfig()
    try:
        with open(path, "rb") as fh:
            raw = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    try:
        return _read(raw, path)
    except ConfigError as exc:
        text = str(exc)
        raise ConfigError(text if text.startswith(f"in {path}:") else f"in {path}: {text}") from None


def _read(raw: dict[str, Any], path: Path) -> NodeConfig:
    node = raw.pop("node", None)
    if isinstance(node, dict):
        raw = {**node, **raw}
    given: dict[Setting, tuple[str, Any]] = {}  # each setting the file gives: as it wrote it, its value
    types: tuple[NodeType, ...] = ()
    apps: tuple[AppSpec, ...] = ()
    handlers: tuple[HandlerSpec, ...] = ()
    type_apps: list[tuple[str, tuple[AppSpec, ...]]] = []
    type_handlers: list[tuple[str, tuple[HandlerSpec, ...]]] = []
    limits = Limits()
    tags: dict[str, str] = {}
    for written, value in raw.items():
        name = written.replace("_", "-")
        if name in SECTIONS and isinstance(value, dict):
            for inner, item in value.items():
                s = _IN_TABLE[name].get(inner.replace("_", "-"))
                if s is None:
                    bare = inner.replace("_", "-").removeprefix(SECTIONS[name].FLAG_PREFIX)  # its flag's name, mistyped?
                    raise ConfigError(f"in {path}: unknown config key {inner!r} in [{name}]"
                                      f"{_closest(bare, _IN_TABLE[name])}")
                _put(given, s, f"[{name}] {inner}", _coerce(s, item, f"{inner!r} in [{name}]", path), path)
        elif name == "types":
            types = _types(value, path, type_apps, type_handlers)
        elif name == "apps":
            apps = parse_apps(value, f"in {path}: [[apps]]", path.parent)
        elif name == "handlers":
            handlers = parse_handlers(value, f"in {path}: [[handlers]]")
        elif name == "limits":
            if not isinstance(value, dict):
                raise ConfigError(f"in {path}: limits are tables, e.g. [limits.api] with max-connections = 512")
            try:
                limits = Limits().with_values(value)
            except LimitError as exc:
                raise ConfigError(f"in {path}: {exc}") from None
        elif name == "tags":
            tags = _tags(value, path)
        elif name == "pipeline":
            pass  # huddle pipeline's settings: it checks them when it reads them
        elif name == "group-secret":
            raise ConfigError(f"in {path}: give the group secret as group-key = \"FILE\" (a group file), not inline")
        elif name in SECTIONS and name not in _TOP:
            raise ConfigError(f"in {path}: {written} is a section: a table [{name}] with its keys below it")
        elif name in _TOP:
            s = _TOP[name]
            where = repr(written) if s.key == name and not s.table else f"{written!r} ({s.where})"
            _put(given, s, written, _coerce(s, value, where, path), path)
        else:
            known = {*_TOP, *SECTIONS, *TABLES}
            hint = _closest(written, known)
            if isinstance(value, dict):
                raise ConfigError(f"in {path}: unknown table [{written}]{hint}")
            raise ConfigError(f"in {path}: unknown config key {written!r}{hint}")
    values = {s: value for s, (_, value) in given.items()}
    if values.get(GROUP_KEY) is not None:  # a group file's path is relative to the config file's directory
        values[GROUP_KEY] = path.parent / values[GROUP_KEY]
    return NodeConfig(types=types, limits=limits, apps=apps, type_apps=tuple(type_apps),
                      handlers=handlers, type_handlers=tuple(type_handlers), tags=tags).with_settings(values)


def _put(given: dict[Setting, tuple[str, Any]], s: Setting, written: str, value: Any, path: Path) -> None:
    if s in given:
        raise ConfigError(f"in {path}: {s.where} is given twice (as {given[s][0]} and as {written}): keep one")
    given[s] = (written, value)


def _closest(word: str, known: Any) -> str:
    """"; did you mean 'X'?" for the known key closest to ``word``, else the list of them."""
    names = sorted(known)
    match = difflib.get_close_matches(word.replace("_", "-"), names, n=1, cutoff=0.6)
    return f"; did you mean {match[0]!r}?" if match else f"; known: {', '.join(names)}"


def _coerce(s: Setting, value: Any, where: str, path: Path) -> Any:
    """The TOML value as the setting's type; the wrong type names the file, the key and what it wants."""
    kind = s.kind
    ok: bool
    if kind in ("str", "str | None", "Path"):
        ok = isinstance(value, str)
        if ok and kind == "Path":
            return Path(value).expanduser()
    elif kind == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif kind in ("float", "float | None"):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            return float(value)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind in ("tuple[str, ...]", "list[str]"):
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        if ok:
            return tuple(value) if kind.startswith("tuple") else list(value)
    elif kind == "tuple[int, int]":
        pair = _port_pair(value)
        if pair is not None:
            return pair
        ok = False
    else:  # a section's field of a type this reader does not know: a new kind needs a line here
        raise ConfigError(f"in {path}: {where} has a type the file cannot give ({kind})")
    if not ok:
        raise ConfigError(f"in {path}: {where} has the wrong type: expected {_EXPECTED[kind]}, "
                          f"got {type(value).__name__} {value!r}")
    return value


def _port_pair(value: Any) -> tuple[int, int] | None:
    if isinstance(value, str):
        lo, sep, hi = value.partition("-")
        if sep and lo.strip().isdigit() and hi.strip().isdigit():
            return int(lo), int(hi)
    elif isinstance(value, list) and len(value) == 2 and all(type(v) is int for v in value):
        return value[0], value[1]
    return None


def _tags(table: Any, path: Path) -> dict[str, str]:
    """``[tags]``: ``role = "scoreboard"``, a string per key (NodeConfig checks their bounds)."""
    if not isinstance(table, dict):
        raise ConfigError(f'in {path}: tags are a table, e.g. [tags] with role = "scoreboard"')
    for key, value in table.items():
        if not isinstance(value, str):
            raise ConfigError(f"in {path}: [tags] {key} must be a string, e.g. {key} = {json.dumps(str(value))}")
    return dict(table)


_TYPE_KEYS = {"base", "heartbeat_interval", "lost_heartbeats", "send_rate", "on_cut_off", "about"}


def _types(tables: Any, path: Path, apps: list[tuple[str, tuple[AppSpec, ...]]],
           handlers: list[tuple[str, tuple[HandlerSpec, ...]]]) -> tuple[NodeType, ...]:
    """``[types.NAME]`` tables: each starts from ``base`` (a built-in, default
    standard) and changes the keys it gives; its ``[[types.NAME.apps]]`` go to ``apps``, its
    ``[[types.NAME.handlers]]`` to ``handlers``."""
    if not isinstance(tables, dict) or not all(isinstance(v, dict) for v in tables.values()):
        raise ConfigError(f"in {path}: node types are tables, e.g. [types.kiosk] with heartbeat-interval = 0.5")
    out = []
    for name, table in tables.items():
        spec = {k.replace("-", "_"): v for k, v in table.items()}
        if "apps" in spec:
            apps.append((name, parse_apps(spec.pop("apps"), f"in {path}: [[types.{name}.apps]]", path.parent)))
        if "handlers" in spec:
            handlers.append((name, parse_handlers(spec.pop("handlers"), f"in {path}: [[types.{name}.handlers]]")))
        unknown = sorted(k.replace("_", "-") for k in set(spec) - _TYPE_KEYS)
        if unknown:
            raise ConfigError(f"in {path}: [types.{name}] has unknown key(s) {', '.join(unknown)}"
                              f"{_closest(unknown[0], {k.replace('_', '-') for k in _TYPE_KEYS})}")
        base_name = spec.pop("base", "standard")
        if base_name not in BUILTIN_TYPES:
            raise ConfigError(f"in {path}: [types.{name}] base must be a built-in type ({', '.join(BUILTIN_TYPES)})")
        base = BUILTIN_TYPES[base_name]
        spec.setdefault("about", f"defined in {path.name}, based on {base_name}")
        checks: dict[str, tuple[type, ...]] = {"heartbeat_interval": (int, float), "lost_heartbeats": (int,),
                                               "send_rate": (int,), "on_cut_off": (str,), "about": (str,)}
        for key, value in spec.items():
            if isinstance(value, bool) or not isinstance(value, checks[key]):
                raise ConfigError(f"in {path}: [types.{name}] {key.replace('_', '-')} has the wrong type ({value!r})")
        if "heartbeat_interval" in spec:
            spec["heartbeat_interval"] = float(spec["heartbeat_interval"])
        out.append(replace(base, name=name, **spec))
    return tuple(out)
