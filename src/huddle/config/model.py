"""The node's configuration: :class:`NodeConfig`, made of sections, and the table of every setting.

A setting has one name, used as the flag and as the TOML key (docs/configuration.md):
a top-level setting ``name`` is ``--name`` and ``name = ...``; a setting of a section
is the key without the section's flag prefix in the section's table (``--posts-policy``
is ``policy`` in ``[posts]``, ``--beacon-port`` is ``beacon-port`` in ``[discovery]``),
and its flag's name at the top level still reads as it did before there were sections.
:data:`SETTINGS` lists them all, derived from the dataclasses; the TOML file
(:mod:`huddle.config.file`), the flags (:meth:`NodeConfig.with_flags`) and the
parser's test all read it.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from ..control.handlers import MAX_HANDLERS, HandlerSpec
from ..control.section import AppSpec, node_apps
from ..control.settings import ControlSection
from ..crg.section import CrgSection
from ..errors import ConfigError
from ..guests.section import GuestsSection
from ..limits import LimitError, Limits, parse_assignment
from ..pairing.section import PairingSection
from ..posts.section import PostsSection
from ..protocol import Timing
from ..protocol.delivery import DeliveryTiming
from ..security import GroupSecret, load_group_file
from ..wire import MAX_GROUP, MAX_NAME, TagError, parse_tags, tags_problem
from ..zre.section import ZreSection
from .sections import BUILTIN_TYPES, ApiSection, DiscoverySection, MeshSection, NodeType, TimingSection

__all__ = ["LOG_LEVELS", "SECTIONS", "SETTINGS", "NodeConfig", "Setting", "setting_named"]

LOG_LEVELS = ("debug", "info", "warning", "error")

# The sections, each a NodeConfig attribute named as its TOML table; a feature's among them.
SECTIONS: dict[str, type[Any]] = {s.TABLE: s for s in (
    MeshSection, DiscoverySection, ApiSection, TimingSection, PostsSection, GuestsSection, PairingSection,
    ZreSection, ControlSection, CrgSection)}


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "huddle" / "node"


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs to start: who it is, then one section per concern.
    Every setting has a flag and a TOML key of one name (:data:`SETTINGS`)."""

    name: str = field(default_factory=socket.gethostname)
    group: str = ""
    data_dir: Path = field(default_factory=_default_data_dir)
    node_type: str = field(default="standard", metadata={"key": "type", "aliases": ("node-type",)})
    log_level: str = "info"
    # Allow-list mode: only the node keys in DATA_DIR/trusted-keys are admitted (huddle trust
    # add|remove); it needs a group secret.
    allow_list: bool = False
    # Open mode, chosen: no group secret, anyone on the network who knows the group's name joins,
    # reads and writes.  Without it a node needs a group secret (require_secured).
    open: bool = False
    # The group secret, from group-key = FILE or join = CODE: with one, the mesh speaks
    # CurveZMQ and admits only holders of the secret (docs/security.md).
    group_secret: GroupSecret | None = field(default=None, metadata={"setting": False})
    types: tuple[NodeType, ...] = field(default=(), metadata={"setting": False})  # [types.NAME]; may redefine a built-in
    limits: Limits = field(default_factory=Limits, metadata={"setting": False})  # [limits.AREA] (docs/limits.md)
    apps: tuple[AppSpec, ...] = field(default=(), metadata={"setting": False})  # [[apps]] (docs/control.md)
    type_apps: tuple[tuple[str, tuple[AppSpec, ...]], ...] = field(default=(), metadata={"setting": False})  # a type's
    handlers: tuple[HandlerSpec, ...] = field(default=(), metadata={"setting": False})  # [[handlers]] (docs/control.md)
    type_handlers: tuple[tuple[str, tuple[HandlerSpec, ...]], ...] = field(default=(), metadata={"setting": False})
    # What the node advertises of itself ([tags] KEY = "VALUE", or tag = KEY=VALUE; docs/configuration.md "Tags").
    tags: Mapping[str, str] = field(default_factory=dict, hash=False, metadata={"setting": False})
    mesh: MeshSection = field(default_factory=MeshSection)
    discovery: DiscoverySection = field(default_factory=DiscoverySection)
    api: ApiSection = field(default_factory=ApiSection)
    timing: TimingSection = field(default_factory=TimingSection)
    posts: PostsSection = field(default_factory=PostsSection)
    guests: GuestsSection = field(default_factory=GuestsSection)
    pairing: PairingSection = field(default_factory=PairingSection)
    zre: ZreSection = field(default_factory=ZreSection)
    control: ControlSection = field(default_factory=ControlSection)
    crg: CrgSection = field(default_factory=CrgSection)

    def __post_init__(self) -> None:
        if not self.name or len(self.name.encode()) > MAX_NAME:
            raise ConfigError(f"name must be 1..{MAX_NAME} octets of UTF-8, got {self.name!r}")
        if len(self.group.encode()) > MAX_GROUP:
            raise ConfigError(f"group must be at most {MAX_GROUP} octets of UTF-8")
        if self.group_secret is not None and self.group_secret.group != self.group:
            raise ConfigError(f"the group secret is for group {self.group_secret.group!r}, not {self.group!r}: "
                              "a join code or group file gives the secret of one group only")
        if self.open and self.group_secret is not None:
            raise ConfigError("open mode (--open, open = true) and a group secret (--group-key, --join, group-key = "
                              "FILE) exclude each other: an open group has no secret; keep one of them")
        if self.allow_list and self.group_secret is None:
            raise ConfigError("allow-list mode needs a group secret (--group-key FILE or --join CODE): the mesh's "
                              "CurveZMQ keys come from it")
        if self.log_level.lower() not in LOG_LEVELS:
            raise ConfigError("log level must be debug, info, warning or error")
        problem = tags_problem(dict(self.tags))
        if problem is not None:
            raise ConfigError(f"tags: {problem}")
        self.mesh_timing()
        self.node_apps()

    def require_secured(self) -> None:
        """Refuse to run without a group secret unless open mode was chosen (docs/security.md,
        "Secure by default"): the node's last line of defence, whatever came before it."""
        if self.group_secret is not None or self.open:
            return
        if not self.group:
            raise ConfigError(
                "no group and no group secret: huddle runs secured groups, and a secured group has a name. "
                "Run 'huddle node --group NAME' to found a group or pair with its members, join one with "
                "--group NAME --join CODE or --group-key FILE ('huddle group new NAME' makes one), or give "
                "--open to run an open group that anyone on this network can join and read")
        raise ConfigError(
            f"group {self.group!r} has no secret here: huddle runs secured groups. Give its secret with "
            f"--group-key FILE ('huddle group new {self.group}' makes one) or --join CODE, run "
            f"'huddle node --group {self.group}' to found the group or pair with its members, or give --open "
            "to run an open group that anyone on this network can join and read")

    def type_spec(self) -> NodeType:
        """The node type named by ``node_type``: a [types.NAME] table, else a built-in."""
        for t in self.types:
            if t.name == self.node_type:
                return t
        if self.node_type in BUILTIN_TYPES:
            return BUILTIN_TYPES[self.node_type]
        known = sorted({*BUILTIN_TYPES, *(t.name for t in self.types)})
        raise ConfigError(f"unknown node type {self.node_type!r}; known: {', '.join(known)} (or define [types.{self.node_type}])")

    def node_apps(self) -> tuple[AppSpec, ...]:
        """The apps this node runs: its type's ``[[types.NAME.apps]]`` and its own ``[[apps]]``,
        each after those it depends on (docs/control.md)."""
        return node_apps(dict(self.type_apps).get(self.node_type, ()), self.apps)

    def node_handlers(self) -> tuple[HandlerSpec, ...]:
        """The handlers this node runs: its type's ``[[types.NAME.handlers]]``, then its own
        ``[[handlers]]`` (docs/control.md, "Handlers"); each fires on its own."""
        merged = (*dict(self.type_handlers).get(self.node_type, ()), *self.handlers)
        if len(merged) > MAX_HANDLERS:
            raise ConfigError(f"a node runs at most {MAX_HANDLERS} handlers, this one would run {len(merged)} "
                              f"(its type's and its own)")
        return merged

    def mesh_timing(self) -> Timing:
        """The mesh's timers: ``[timing]``'s settings, else the node type's and the protocol's."""
        return self.timing.resolve(self.type_spec())

    def delivery_timing(self) -> DeliveryTiming:
        return self.mesh.delivery_timing()

    def with_overrides(self, **changes: Any) -> NodeConfig:
        """The config with fields or settings changed; None leaves one as it is.  A name is a
        field of NodeConfig (``group_secret``, a whole ``mesh``...) or a setting's flag in Python
        spelling (``posts_policy``, ``guest_port``, ``api``, ``guests``; older spellings too)."""
        top: dict[str, Any] = {}
        values: dict[Setting, Any] = {}
        for name, value in changes.items():
            if value is None:
                continue
            # A section is given whole, or (api, guests) its flag names a setting of it.
            if (name in SECTIONS and isinstance(value, SECTIONS[name])) or (name in _FIELDS and name not in SECTIONS):
                top[name] = value
                continue
            s = setting_named(name)
            if s is None or not s.field:
                raise TypeError(f"NodeConfig has no field or setting {name!r}")
            values[s] = value
        return _replaced(replace(self, **top) if top else self, values)

    def with_flags(self, namespace: Mapping[str, Any]) -> NodeConfig:
        """``huddle node``'s flags (the parser's namespace, a dest per setting) over this config."""
        return self.with_settings({s: namespace.get(s.dest) for s in SETTINGS}, flags=True)

    def with_settings(self, values: Mapping[Setting, Any], *, flags: bool = False) -> NodeConfig:
        """These settings changed (None: left as it is): plain ones, the group secret from
        ``group-key`` (a file) or ``join`` (a code), ``limit`` assignments and ``tag`` ones (over
        the tags the config has: a key given replaces its value).  ``flags``: they came from the
        command line (errors then spell them as flags)."""
        def say(s: Setting) -> str:
            return f"--{s.flag}" if flags else s.key

        given = {s: v for s, v in values.items() if v is not None}
        key_file, code, assignments = given.pop(GROUP_KEY, None), given.pop(JOIN, None), given.pop(LIMIT, None)
        tags = given.pop(TAG, None)
        group = given.get(_GROUP)
        config = self
        if key_file is not None and code is not None:
            raise ConfigError(f"give {say(GROUP_KEY)} or {say(JOIN)}, not both: each gives the group's secret")
        if given.get(_OPEN) and (key_file is not None or code is not None):
            raise ConfigError(f"{say(_OPEN)} runs an open group, without a secret: it cannot go with "
                              f"{say(GROUP_KEY if key_file is not None else JOIN)}, which gives the group's secret")
        if key_file is not None:
            secret = load_group_file(Path(key_file))
            if flags and group is not None and group != secret.group:
                raise ConfigError(f"--group-key {key_file} is the secret of group {secret.group!r}, "
                                  f"not of --group {group!r}")
            given[_GROUP] = secret.group if group is None else group  # another group is refused by NodeConfig
            config = replace(config, group_secret=secret, group=given[_GROUP])
        elif code is not None:
            named = group if group is not None else self.group
            if not named:
                raise ConfigError(f"{say(JOIN)} needs {say(_GROUP)} NAME: the join code gives the secret of one "
                                  "named group")
            config = replace(config, group_secret=GroupSecret.from_code(named, code), group=named)
        config = _replaced(config, given)
        if tags:
            try:
                config = replace(config, tags=parse_tags(tags, base=config.tags))
            except TagError as exc:
                raise ConfigError(f"{say(TAG)}: {exc}") from None
        return config.with_limits(list(assignments)) if assignments else config

    def with_limits(self, assignments: list[str]) -> NodeConfig:
        """``--limit AREA.KEY=VALUE`` settings applied over the config's own."""
        table: dict[str, dict[str, Any]] = {}
        try:
            for text in assignments:
                area, key, value = parse_assignment(text)
                table.setdefault(area, {})[key] = value
            return replace(self, limits=self.limits.with_values(table))
        except LimitError as exc:
            raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class Setting:
    """One setting: where it lives, its TOML key, its flag and the older spellings still read."""

    table: str  # "" for the top level, else its section's table (and NodeConfig attribute)
    field: str  # the dataclass field it sets; "" for group-key, join and limit (NodeConfig reads those)
    key: str  # its TOML key within ``table``
    flag: str  # ``huddle node --FLAG``; at the top level, also a TOML key for it (the flat form)
    kind: str  # the field's type, as annotated: what a TOML value must be
    aliases: tuple[str, ...] = ()  # older spellings, read at the top level and in the section

    @property
    def dest(self) -> str:
        """Its name in Python and in the parser's namespace."""
        return self.flag.replace("-", "_")

    @property
    def where(self) -> str:
        return f"[{self.table}] {self.key}" if self.table else self.key


def _settings() -> tuple[Setting, ...]:
    out: list[Setting] = []
    for f in fields(NodeConfig):
        if f.name in SECTIONS:
            section = SECTIONS[f.name]
            for g in fields(section):
                key = g.metadata.get("key", g.name.replace("_", "-"))
                out.append(Setting(f.name, g.name, key, g.metadata.get("flag", section.FLAG_PREFIX + key), str(g.type),
                                   tuple(g.metadata.get("aliases", ()))))
        elif f.metadata.get("setting", True):
            key = f.metadata.get("key", f.name.replace("_", "-"))
            out.append(Setting("", f.name, key, key, str(f.type), tuple(f.metadata.get("aliases", ()))))
    return (*out, GROUP_KEY, JOIN, LIMIT, TAG)


# The settings NodeConfig reads itself: each names a file, a code or a change, not a field.
GROUP_KEY = Setting("", "", "group-key", "group-key", "Path")  # a group file (huddle group new), relative to the TOML file
JOIN = Setting("", "", "join", "join", "str")  # a join code; needs the group's name
LIMIT = Setting("", "", "limit", "limit", "list[str]")  # AREA.KEY=VALUE assignments, over [limits.AREA]
TAG = Setting("", "", "tag", "tag", "list[str]")  # KEY=VALUE assignments, over [tags]

SETTINGS: tuple[Setting, ...] = _settings()
_FIELDS = {f.name for f in fields(NodeConfig)}
_GROUP = next(s for s in SETTINGS if s.flag == "group")
_OPEN = next(s for s in SETTINGS if s.flag == "open")
_BY_NAME: dict[str, Setting] = {name.replace("-", "_"): s for s in SETTINGS for name in (s.flag, *s.aliases)}


def setting_named(name: str) -> Setting | None:
    """The setting whose flag (or older spelling) is ``name``, dashes or underscores."""
    return _BY_NAME.get(name.replace("-", "_"))


def _replaced(config: NodeConfig, values: Mapping[Setting, Any]) -> NodeConfig:
    """Plain settings set, each section replaced once (so it checks its new values together)."""
    top: dict[str, Any] = {}
    parts: dict[str, dict[str, Any]] = {}
    for s, given in values.items():
        value = tuple(given) if s.kind.startswith("tuple[") and isinstance(given, list) else given  # a repeated flag's
        if s.table:
            parts.setdefault(s.table, {})[s.field] = value
        else:
            top[s.field] = value
    for table, changed in parts.items():
        top[table] = replace(getattr(config, table), **changed)
    return replace(config, **top) if top else config
