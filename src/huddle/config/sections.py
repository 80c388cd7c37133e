"""The node's own configuration sections: the mesh socket, discovery, the API, the timers; node types.

A section is a frozen dataclass that checks itself (``__post_init__`` raises
:class:`~huddle.errors.ConfigError`).  Its class names its TOML table
(``TABLE``) and the prefix its fields' flags share (``FLAG_PREFIX``); a field's
``metadata`` may give another flag (``"flag"``), another TOML key (``"key"``)
and the older spellings still read (``"aliases"``).  docs/configuration.md
states the rule; :mod:`huddle.config.model` reads these to build the table of
every setting.  A feature's section (``posts``, ``guests``) is written the same
way in the feature's own package.
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass, field, fields
from typing import ClassVar

from ..errors import ConfigError
from ..mdnstype import normalise_mdns_type
from ..protocol import Timing
from ..protocol.delivery import DeliveryTiming

__all__ = [
    "BUILTIN_TYPES", "CUT_OFF_MODES", "DEFAULT_API", "DEFAULT_BEACON_PORT", "ApiSection", "DiscoverySection",
    "MeshSection", "NodeType", "TimingSection", "parse_hostport", "parse_naming_endpoint", "resolve_seed",
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


@dataclass(frozen=True)
class MeshSection:
    """``[mesh]``: the ROUTER socket and the addressed-message channel's sizes."""

    TABLE: ClassVar[str] = "mesh"
    FLAG_PREFIX: ClassVar[str] = ""

    port: int = 0  # 0: a free one in port_range
    port_range: tuple[int, int] = (49152, 65535)
    mtu: int = 60_000
    max_message: int = 128 * 1024 * 1024
    send_buffer: int = 16 * 1024 * 1024

    def __post_init__(self) -> None:
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"port must be 0..65535, got {self.port}")
        lo, hi = self.port_range
        if not 1 <= lo <= hi <= 65535:
            raise ConfigError(f"port range must be LOW-HIGH within 1..65535, got {lo}-{hi}")
        try:
            self.delivery_timing()
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.send_buffer < self.mtu:
            raise ConfigError("send buffer must hold at least one frame (--send-buffer >= --mtu)")

    def delivery_timing(self) -> DeliveryTiming:
        return DeliveryTiming(mtu=self.mtu, max_message=self.max_message, buffer_bytes=self.send_buffer)


@dataclass(frozen=True)
class DiscoverySection:
    """``[discovery]``: how the node finds its peers (docs/protocol.md, section 9)."""

    TABLE: ClassVar[str] = "discovery"
    FLAG_PREFIX: ClassVar[str] = ""

    # One flag per peer (--seed HOST:PORT, repeatable), so one key: seed = ["HOST:PORT", ...].
    seeds: tuple[str, ...] = field(default=(), metadata={"key": "seed", "aliases": ("seeds",)})
    beacon: bool = True
    beacon_address: str | None = None  # None: the interface's broadcast address
    beacon_port: int = DEFAULT_BEACON_PORT
    beacon_interval: float = 1.0
    interface: str | None = None  # None: the default route's
    mdns: bool = False
    mdns_type: str = "_huddle._tcp"
    naming: tuple[str, ...] = ()
    naming_interval: float = 1.0
    naming_timeout: float = 5.0

    def __post_init__(self) -> None:
        for seed in self.seeds:
            parse_hostport(seed, "seed")
        if not 1 <= self.beacon_port <= 65535:
            raise ConfigError(f"beacon port must be 1..65535, got {self.beacon_port}")
        if self.beacon_interval <= 0:
            raise ConfigError("beacon interval must be positive")
        normalise_mdns_type(self.mdns_type)
        for endpoint in self.naming:
            parse_naming_endpoint(endpoint)
        if self.naming_interval < 0:
            raise ConfigError("naming interval must be 0 (announce until heard, then stop) or positive")
        if self.naming_timeout <= 0:
            raise ConfigError("naming timeout must be positive")


@dataclass(frozen=True)
class ApiSection:
    """``[api]``: where the HTTP API listens and whether loopback needs its token."""

    TABLE: ClassVar[str] = "api"
    FLAG_PREFIX: ClassVar[str] = "api-"

    address: str = field(default=DEFAULT_API, metadata={"flag": "api"})
    require_token: bool = False  # require the API token on loopback too (a shared machine)

    def __post_init__(self) -> None:
        parse_hostport(self.address, "api")


_PROTOCOL = Timing()

# [timing] key -> (lowest, highest, unit): the range each timer is checked against.
TIMING_RANGES: dict[str, tuple[float, float, str]] = {
    "heartbeat_interval": (0.01, 60, "seconds"),
    "suspect_after": (0.01, 3600, "seconds"),
    "gone_after": (0.02, 3600, "seconds"),
    "handshake_timeout": (0.1, 600, "seconds"),
    "seed_retry": (0.01, 600, "seconds"),
    "rtt_probe_interval": (0.1, 3600, "seconds"),
    "gone_retention": (1, 86_400, "seconds"),
    "membership_interval": (0.1, 3600, "seconds"),
    "seed_reopen_after": (1, 86_400, "seconds"),
    "exclude_after_errors": (0, 1_000_000, "messages (0: never)"),
    "exclude_slow_after": (0, 86_400, "seconds (0: never)"),
}


@dataclass(frozen=True)
class TimingSection:
    """``[timing]``: every timer of the mesh (:class:`~huddle.protocol.Timing`).  The three
    liveness timers default to the node type's; the others to the protocol's own."""

    TABLE: ClassVar[str] = "timing"
    FLAG_PREFIX: ClassVar[str] = ""

    heartbeat_interval: float | None = None  # None: the node type's
    suspect_after: float | None = None  # None: half of gone_after
    gone_after: float | None = None  # None: the type's beat x (lost heartbeats + 1)
    handshake_timeout: float = _PROTOCOL.handshake_timeout
    seed_retry: float = _PROTOCOL.seed_retry
    rtt_probe_interval: float = _PROTOCOL.rtt_probe_interval
    gone_retention: float = _PROTOCOL.gone_retention
    membership_interval: float = _PROTOCOL.membership_interval
    seed_reopen_after: float = _PROTOCOL.seed_reopen_after
    exclude_after_errors: int = _PROTOCOL.exclude_after_errors
    exclude_slow_after: float = _PROTOCOL.exclude_slow_after

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            lo, hi, unit = TIMING_RANGES[f.name]
            if value is not None and not lo <= value <= hi:
                raise ConfigError(f"timing: {f.name.replace('_', '-')} must be {_number(lo)}..{_number(hi)} {unit}, "
                                  f"got {_number(value)}")

    def resolve(self, node_type: NodeType) -> Timing:
        """The mesh's timers: the settings given, else the node type's.  With only a
        heartbeat interval given, the type's lost heartbeats still apply."""
        beat = self.heartbeat_interval if self.heartbeat_interval is not None else node_type.heartbeat_interval
        gone = self.gone_after if self.gone_after is not None else beat * (node_type.lost_heartbeats + 1)
        suspect = self.suspect_after if self.suspect_after is not None else gone / 2
        try:
            return Timing(heartbeat_interval=beat, suspect_after=suspect, gone_after=gone,
                          handshake_timeout=self.handshake_timeout, seed_retry=self.seed_retry,
                          rtt_probe_interval=self.rtt_probe_interval, gone_retention=self.gone_retention,
                          exclude_after_errors=self.exclude_after_errors, exclude_slow_after=self.exclude_slow_after,
                          membership_interval=self.membership_interval, seed_reopen_after=self.seed_reopen_after)
        except ValueError as exc:
            raise ConfigError(f"timing: {exc}") from None


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


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
