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
from .protocol import Timing
from .protocol.delivery import DeliveryTiming
from .wire.messages import MAX_GROUP, MAX_NAME

__all__ = ["NodeConfig", "load_config", "normalise_mdns_type", "parse_hostport", "parse_naming_endpoint"]

DEFAULT_API = "127.0.0.1:8089"
DEFAULT_BEACON_PORT = 5670


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
    heartbeat_interval: float = 1.0
    suspect_after: float = 2.5
    gone_after: float = 5.0
    log_level: str = "info"

    def __post_init__(self) -> None:
        if not self.name or len(self.name.encode()) > MAX_NAME:
            raise ConfigError(f"name must be 1..{MAX_NAME} octets of UTF-8, got {self.name!r}")
        if len(self.group.encode()) > MAX_GROUP:
            raise ConfigError(f"group must be at most {MAX_GROUP} octets of UTF-8")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        lo, hi = self.port_range
        if not 1 <= lo <= hi <= 65535:
            raise ConfigError(f"port range must be LOW-HIGH within 1..65535, got {lo}-{hi}")
        if not 1 <= self.beacon_port <= 65535:
            raise ConfigError(f"beacon port must be 1..65535, got {self.beacon_port}")
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
        try:
            self.timing()
            self.delivery_timing()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.send_buffer < self.mtu:
            raise ConfigError("send buffer must hold at least one frame (--send-buffer >= --mtu)")

    def timing(self) -> Timing:
        return Timing(
            heartbeat_interval=self.heartbeat_interval,
            suspect_after=self.suspect_after,
            gone_after=self.gone_after,
        )

    def delivery_timing(self) -> DeliveryTiming:
        return DeliveryTiming(mtu=self.mtu, max_message=self.max_message, buffer_bytes=self.send_buffer)

    def with_overrides(self, **changes: Any) -> NodeConfig:
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


_MDNS_TYPE = re.compile(r"^_[A-Za-z0-9-_]{1,62}\._(tcp|udp)\.local\.$")


def normalise_mdns_type(text: str) -> str:
    """``_huddle._tcp`` -> ``_huddle._tcp.local.``; a clear error for anything that is not a service type."""
    t = text.strip()
    if not t.endswith("."):
        t += "."
    if not t.endswith(".local."):
        t += "local."
    if not _MDNS_TYPE.match(t):
        raise ConfigError(f"mDNS service type {text!r} must look like _name._tcp (e.g. _huddle._tcp)")
    return t


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
        if kind == "float":
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
    for key, value in raw.items():
        name = key.replace("-", "_")
        if name not in _FIELDS:
            known = ", ".join(sorted(k.replace("_", "-") for k in _FIELDS))
            raise ConfigError(f"unknown config key {key!r} in {path}; known keys: {known}")
        values[name] = _coerce(name, value)
    return NodeConfig(**values)
