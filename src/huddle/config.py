"""Node configuration: defaults, a TOML file, then command-line flags."""

from __future__ import annotations

import os
import re
import socket
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .limits import LimitError, Limits, parse_assignment
from .mdnstype import normalise_mdns_type
from .posts.codec import MAX_FETCH
from .posts.model import Policy
from .protocol import Timing
from .protocol.delivery import DeliveryTiming
from .security import GroupSecret, load_group_file
from .wire import MAX_GROUP, MAX_NAME

__all__ = [
    "BUILTIN_TYPES", "CUT_OFF_MODES", "NodeConfig", "NodeType",
    "load_config", "normalise_mdns_type", "parse_hostport", "parse_naming_endpoint", "resolve_seed",
]

DEFAULT_API = "127.0.0.1:8090"  # 8089 is the Noam guests' WebSocket port
DEFAULT_BEACON_PORT = 5670


CUT_OFF_MODES = ("continue", "read-only", "empty")
_TYPE_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class NodeType:
    """What kind of node this is: how often it beats, how many beats its peers
    may miss before counting it gone, how fast it accepts addressed messages,
    and what it keeps of the others' state when it is cut off from all of them:

    - ``continue``: everything, and it goes on writing (its events reach the
      others when it reconnects);
    - ``read-only``: everything, but it refuses new events (API: 409) until a
      peer is back, so a console never acts on a view it cannot share;
    - ``empty``: nothing of the others (their events leave its store and its
      document); on reconnect it receives everything again.
    """

    name: str
    heartbeat_interval: float = 1.0
    lost_heartbeats: int = 4
    send_rate: int = 0  # octets per second of addressed messages it accepts; 0: no limit
    on_cut_off: str = "continue"
    about: str = ""

    def __post_init__(self) -> None:
        if not _TYPE_NAME.match(self.name):
            raise ConfigError(f"node type name {self.name!r} must be 1..32 of a-z 0-9 _ - starting with a letter")
        if not 0.01 <= self.heartbeat_interval <= 60:
            raise ConfigError(f"node type {self.name!r}: heartbeat-interval must be 0.01..60 seconds")
        if not 1 <= self.lost_heartbeats <= 100:
            raise ConfigError(f"node type {self.name!r}: lost-heartbeats must be 1..100")
        if not 0 <= self.send_rate < 2**53:
            raise ConfigError(f"node type {self.name!r}: send-rate must be 0 (no limit) or octets per second")
        if self.on_cut_off not in CUT_OFF_MODES:
            raise ConfigError(f"node type {self.name!r}: on-cut-off must be one of {', '.join(CUT_OFF_MODES)}")

    @property
    def gone_after(self) -> float:
        return self.heartbeat_interval * (self.lost_heartbeats + 1)


BUILTIN_TYPES: dict[str, NodeType] = {t.name: t for t in (
    NodeType("standard", 1.0, 4, 0, "continue", "a laptop: beats every 1 s, gone after 5 s, keeps working alone"),
    NodeType("console", 0.25, 3, 0, "read-only",
             "an operator's console: gone after 1 s; cut off, it shows the others' state but refuses writes"),
    NodeType("display", 0.5, 5, 0, "empty",
             "a wall display: gone after 3 s; cut off, it drops the others' state and receives it all again"),
    NodeType("server", 1.0, 9, 0, "continue", "a machine that must ride out pauses: gone after 10 s"),
    NodeType("device", 2.0, 4, 256 * 1024, "continue",
             "a small device on a slow link: beats every 2 s, addressed messages to it paced at 256 KiB/s"),
)}


def _default_data_dir() -> Path:
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "huddle" / "node"


@dataclass(frozen=True)
class NodeConfig:
    """Everything a node needs to start.  Every field can be set in TOML."""

    name: str = field(default_factory=socket.gethostname)
    group: str = ""
    data_dir: Path = field(default_factory=_default_data_dir)
    port: int = 0
    port_range: tuple[int, int] = (49152, 65535)
    api: str = DEFAULT_API
    seeds: tuple[str, ...] = ()
    beacon: bool = True
    beacon_address: str | None = None
    beacon_port: int = DEFAULT_BEACON_PORT
    beacon_interval: float = 1.0
    interface: str | None = None
    mdns: bool = False
    mdns_type: str = "_huddle._tcp"
    naming: tuple[str, ...] = ()
    naming_interval: float = 1.0
    naming_timeout: float = 5.0
    mtu: int = 60_000
    max_message: int = 128 * 1024 * 1024
    send_buffer: int = 16 * 1024 * 1024
    node_type: str = "standard"
    types: tuple[NodeType, ...] = ()  # from [types.NAME] tables; may redefine a built-in
    heartbeat_interval: float | None = None  # None: the node type's
    suspect_after: float | None = None  # None: half of gone_after
    gone_after: float | None = None  # None: the type's beat x (lost heartbeats + 1)
    guests: bool = False  # host Noam guests (marco / polo, TCP and WebSocket)
    guest_marco_port: int = 1030
    guest_port: int = 0  # TCP port guests connect to; 0: a free one
    guest_ws_port: int = 8089  # WebSocket port for guests (browsers); 0: a free one
    guest_max_message: int = 999_999  # octets; a longer length prefix gets the guest an error and a disconnect
    posts_policy: str = "all"  # what to fetch from peers: all, newest:N, budget:OCTETS[kmg]
    posts_chunk: int = 1024 * 1024  # octets per FETCH request
    posts_interval: float = 2.0  # seconds before a failed or incomplete sync session is tried again
    log_level: str = "info"
    # The group secret (issue 22): from --group-key FILE, --join CODE or TOML group-key = "FILE".
    # With one, the mesh speaks CurveZMQ and admits only holders of the secret (docs/security.md).
    group_secret: GroupSecret | None = None
    # Allow-list mode (--allow-list, TOML allow-list = true): only the node keys in
    # DATA_DIR/trusted-keys are admitted (huddle trust add|remove); needs a group secret.
    allow_list: bool = False
    api_require_token: bool = False  # require the API token on loopback too (a shared machine)
    limits: Limits = field(default_factory=Limits)  # [limits.AREA] tables, --limit AREA.KEY=VALUE (docs/limits.md)

    def __post_init__(self) -> None:
        if not self.name or len(self.name.encode()) > MAX_NAME:
            raise ConfigError(f"name must be 1..{MAX_NAME} octets of UTF-8, got {self.name!r}")
        if len(self.group.encode()) > MAX_GROUP:
            raise ConfigError(f"group must be at most {MAX_GROUP} octets of UTF-8")
        if self.group_secret is not None and self.group_secret.group != self.group:
            raise ConfigError(f"the group secret is for group {self.group_secret.group!r}, not {self.group!r}: "
                              "a join code or group file gives the secret of one group only")
        if self.allow_list and self.group_secret is None:
            raise ConfigError("allow-list mode needs a group secret (--group-key FILE or --join CODE): the mesh's "
                              "CurveZMQ keys come from it")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        lo, hi = self.port_range
        if not 1 <= lo <= hi <= 65535:
            raise ConfigError(f"port range must be LOW-HIGH within 1..65535, got {lo}-{hi}")
        if not 1 <= self.beacon_port <= 65535:
            raise ConfigError(f"beacon port must be 1..65535, got {self.beacon_port}")
        for what, port in (("guest marco port", self.guest_marco_port), ("guest port", self.guest_port),
                           ("guest WebSocket port", self.guest_ws_port)):
            if not 0 <= port <= 65535 or (what == "guest marco port" and port == 0):
                raise ConfigError(f"{what} must be {'1' if 'marco' in what else '0'}..65535, got {port}")
        if not 2 <= self.guest_max_message <= 999_999:
            raise ConfigError(f"guest max message must be 2..999999 octets (6 digits), got {self.guest_max_message}")
        if self.beacon_interval <= 0:
            raise ConfigError("beacon interval must be positive")
        parse_hostport(self.api, "api")
        normalise_mdns_type(self.mdns_type)
        for endpoint in self.naming:
            parse_naming_endpoint(endpoint)
        if self.naming_interval < 0:
            raise ConfigError("naming interval must be 0 (announce until heard, then stop) or positive")
        if self.naming_timeout <= 0:
            raise ConfigError("naming timeout must be positive")
        for seed in self.seeds:
            parse_hostport(seed, "seed")
        if self.log_level.lower() not in {"debug", "info", "warning", "error"}:
            raise ConfigError("log level must be debug, info, warning or error")
        self.type_spec()
        try:
            self.timing()
            self.delivery_timing()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.send_buffer < self.mtu:
            raise ConfigError("send buffer must hold at least one frame (--send-buffer >= --mtu)")
        self._check_posts()

    def _check_posts(self) -> None:
        try:
            Policy.parse(self.posts_policy)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if not 1024 <= self.posts_chunk <= MAX_FETCH:
            raise ConfigError(f"posts chunk must be 1024..{MAX_FETCH} octets, got {self.posts_chunk}")
        if self.posts_interval <= 0:
            raise ConfigError("posts interval must be positive")

    def type_spec(self) -> NodeType:
        """The node type named by ``node_type``: a [types.NAME] table, else a built-in."""
        for t in self.types:
            if t.name == self.node_type:
                return t
        if self.node_type in BUILTIN_TYPES:
            return BUILTIN_TYPES[self.node_type]
        known = sorted({*BUILTIN_TYPES, *(t.name for t in self.types)})
        raise ConfigError(f"unknown node type {self.node_type!r}; known: {', '.join(known)} (or define [types.{self.node_type}])")

    def timing(self) -> Timing:
        """Liveness timers: explicit settings, else from the node type.  With
        only a heartbeat interval given, the type's lost heartbeats still apply."""
        t = self.type_spec()
        beat = self.heartbeat_interval if self.heartbeat_interval is not None else t.heartbeat_interval
        gone = self.gone_after if self.gone_after is not None else beat * (t.lost_heartbeats + 1)
        suspect = self.suspect_after if self.suspect_after is not None else gone / 2
        return Timing(heartbeat_interval=beat, suspect_after=suspect, gone_after=gone)

    def delivery_timing(self) -> DeliveryTiming:
        return DeliveryTiming(mtu=self.mtu, max_message=self.max_message, buffer_bytes=self.send_buffer)

    def with_overrides(self, **changes: Any) -> NodeConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

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


def parse_naming_endpoint(text: str) -> tuple[str, int]:
    """``tcp://HOST:PORT`` of a naming broker's publisher; a clear error otherwise."""
    if not text.startswith("tcp://"):
        raise ConfigError(f"a naming broker is tcp://HOST:PORT (its --pub endpoint), got {text!r}")
    host, port = parse_hostport(text[6:], "naming broker")
    if port == 0 or host in ("*", "0.0.0.0"):
        raise ConfigError(f"a naming broker needs a host and a port to connect to, got {text!r}")
    return host, port


def parse_hostport(text: str, what: str) -> tuple[str, int]:
    """Split ``HOST:PORT`` (``[v6]:PORT`` too); raise ConfigError with a hint."""
    host, sep, port_text = text.rpartition(":")
    if not sep or not host or not port_text.isdigit():
        raise ConfigError(f"{what} must be HOST:PORT, got {text!r}")
    port = int(port_text)
    if not 0 <= port <= 65535:
        raise ConfigError(f"{what} port must be 0..65535, got {port}")
    return host.strip("[]"), port


def resolve_seed(seed: str) -> str:
    """``--seed HOST:PORT`` -> ``tcp://IP:PORT`` (peers are kept by IP octets)."""
    host, port = parse_hostport(seed, "seed")
    if port == 0:
        raise ConfigError(f"seed {seed!r} needs a port")
    try:
        infos = socket.getaddrinfo(host, port, socket.AF_INET, socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot resolve seed host {host!r}: {exc.strerror}") from None
    ip = str(infos[0][4][0])
    return f"tcp://{ip}:{port}"


_FIELDS = {f.name: f for f in fields(NodeConfig)}


def _coerce(key: str, value: Any) -> Any:
    kind = _FIELDS[key].type
    try:
        if key == "data_dir":
            if not isinstance(value, str):
                raise TypeError
            return Path(value).expanduser()
        if key in ("seeds", "naming"):
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise TypeError
            return tuple(value)
        if key == "port_range":
            if isinstance(value, str):
                lo, _, hi = value.partition("-")
                return (int(lo), int(hi))
            if isinstance(value, list) and len(value) == 2 and all(isinstance(v, int) for v in value):
                return (value[0], value[1])
            raise TypeError
        if kind in ("bool",):
            if not isinstance(value, bool):
                raise TypeError
            return value
        if kind == "int":
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError
            return value
        if kind in ("float", "float | None"):
            if not isinstance(value, (int, float)) or isinstance(value, bool):
                raise TypeError
            return float(value)
        if not isinstance(value, str):
            raise TypeError
        return value
    except (TypeError, ValueError):
        raise ConfigError(f"config key {key!r} has the wrong type ({type(value).__name__}: {value!r})") from None


def load_config(path: Path | None) -> NodeConfig:
    """Read a TOML file (keys as in :class:`NodeConfig`, dashes allowed)."""
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
    node = raw.pop("node", None)
    if isinstance(node, dict):
        raw = {**node, **raw}
    values: dict[str, Any] = {}
    types = raw.pop("types", None)
    if types is not None:
        values["types"] = _types(types, path)
    limits = raw.pop("limits", None)
    if limits is not None:
        if not isinstance(limits, dict):
            raise ConfigError(f"in {path}: limits are tables, e.g. [limits.api] with max-connections = 512")
        try:
            values["limits"] = Limits().with_values(limits)
        except LimitError as exc:
            raise ConfigError(f"in {path}: {exc}") from None
    group_key = raw.pop("group-key", raw.pop("group_key", None))
    if group_key is not None:
        if not isinstance(group_key, str):
            raise ConfigError(f"in {path}: group-key is the path of a group file (huddle group new), e.g. \"derby.key\"")
        secret = load_group_file(path.parent / Path(group_key).expanduser())
        values["group_secret"] = secret
        values["group"] = secret.group  # unless the file sets another, which is then refused
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name == "group_secret":
            raise ConfigError(f"in {path}: give the group secret as group-key = \"FILE\" (a group file), not inline")
        if name not in _FIELDS:
            known = ", ".join(sorted(k.replace("_", "-") for k in _FIELDS))
            raise ConfigError(f"unknown config key {key!r} in {path}; known keys: {known}")
        values[name] = _coerce(name, value)
    return NodeConfig(**values)


_TYPE_KEYS = {"base", "heartbeat_interval", "lost_heartbeats", "send_rate", "on_cut_off", "about"}


def _types(tables: Any, path: Path) -> tuple[NodeType, ...]:
    """``[types.NAME]`` tables: each starts from ``base`` (a built-in, default
    standard) and changes the keys it gives."""
    if not isinstance(tables, dict) or not all(isinstance(v, dict) for v in tables.values()):
        raise ConfigError(f"in {path}: node types are tables, e.g. [types.kiosk] with heartbeat-interval = 0.5")
    out = []
    for name, table in tables.items():
        spec = {k.replace("-", "_"): v for k, v in table.items()}
        unknown = set(spec) - _TYPE_KEYS
        if unknown:
            raise ConfigError(f"in {path}: [types.{name}] has unknown key(s) {', '.join(sorted(unknown))}; "
                              f"known: {', '.join(sorted(k.replace('_', '-') for k in _TYPE_KEYS))}")
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
