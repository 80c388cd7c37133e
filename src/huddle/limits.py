"""Every bound a node puts on what others may make it hold, in one place.

A node sits on a shared network: any device in range can send to its mesh
socket, guest ports, naming broker subscription and (when it listens beyond
loopback) its HTTP API.  Whatever such input can make the node keep — memory,
descriptors, disk, CPU per message — is bounded here, in bytes and in counts,
per peer and in total.  Each area has its own small dataclass; :class:`Limits`
groups them.  Every field is a default a user can change:

- in the TOML config, a ``[limits.AREA]`` table (``[limits.api]`` with
  ``max-connections = 512``);
- on the command line, ``--limit AREA.KEY=VALUE`` (repeatable).

``docs/limits.md`` lists them all, with what a peer that exceeds one gets;
a test checks that it names every field here.

This module imports nothing of huddle's: any layer may use it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field, fields
from typing import Any

__all__ = [
    "ApiLimits",
    "GuestLimits",
    "HandlerLimits",
    "LimitError",
    "Limits",
    "LogLimits",
    "MeshLimits",
    "NamingLimits",
    "PostLimits",
    "describe",
    "parse_assignment",
]

KiB = 1024
MiB = 1024 * 1024
GiB = 1024 * MiB


class LimitError(ValueError):
    """A limit set to something it cannot be (the message says which and why)."""


def _doc(text: str, **kw: Any) -> Any:
    """A field whose ``metadata["doc"]`` says what it bounds (shown by ``describe``)."""
    return field(metadata={"doc": text}, **kw)


# ---------------------------------------------------------------- the mesh socket


@dataclass(frozen=True)
class MeshLimits:
    """The ROUTER socket and the sessions behind it (docs/limits.md, "Mesh")."""

    receive_batch_bytes: int = _doc("octets of received messages the driver holds at once before handing them on",
                                    default=8 * MiB)
    receive_hwm: int = _doc("messages ZeroMQ queues per incoming connection before it stops reading it",
                            default=1000)
    max_sessions: int = _doc("sessions with peers in any phase (each holds one outgoing connection)",
                             default=250)
    max_handshaking: int = _doc("sessions not yet admitted (dialled, or answering a HELO), in total",
                                default=64)
    max_handshaking_per_introducer: int = _doc(
        "sessions not yet admitted opened on one peer's PEER introductions (member lists included; one of "
        "this node's own seeds: up to max-handshaking), or on HELOs from one address",
        default=8)
    max_sessions_per_address: int = _doc(
        "admitted sessions whose connection comes from one address, once max-sessions is reached: a HELO from "
        "an address holding this many is not answered then, and one from another address may end a session of "
        "an address holding more (sessions silent since their admission go first, whatever their address)",
        default=64)
    introduction_backoff: float = _doc(
        "seconds a node introduced by PEER whose handshake failed is not dialled again on a PEER",
        default=30.0)
    peer_gone_after_max: float = _doc(
        "seconds of silence a peer's announced beat x (lost + 1) may buy it before it counts as gone",
        default=60.0)
    max_blamed_addresses: int = _doc(
        "source addresses whose frames under another connection's UUID (and, in secure mode, whose refused "
        "handshakes) are counted one by one",
        default=256)
    max_waiting_helos: int = _doc(
        "HELOs past max-handshaking (or the per-address cap) held until a handshake slot frees, oldest first",
        default=256)
    max_members_listed: int = _doc(
        "members (uuid, endpoint, incarnation) one MEMB list carries; past it a node sends a random part of what "
        "it knows and reads the first this many of a list it receives", default=256)
    helo_clock_window: float = _doc(
        "seconds a signed HELO's time (its sender's clock) may differ from ours, either way", default=300.0)
    max_unproven_connections: int = _doc(
        "incoming connections beyond the sessions bound to their address (no verified HELO yet), in total",
        default=256)
    max_unproven_connections_per_address: int = _doc(
        "incoming connections from one address beyond the sessions bound to it (no verified HELO yet)",
        default=128)
    max_runtime_seeds: int = _doc(
        "seeds added while the node runs (huddle join) held at once; past it the oldest answered one is no "
        "longer a seed", default=16)


# ------------------------------------------------------------------ the audit log


@dataclass(frozen=True)
class LogLimits:
    """Replication: sources, version vectors, asks and what one GSIP is served
    (docs/limits.md, "Log")."""

    max_sources: int = _doc("sources (node UUIDs) the log tracks in all", default=4096)
    max_new_sources_per_peer: int = _doc(
        "sources no one vouches for that one forwarder (one address: a new id does not renew it) has the log track "
        "at once", default=1024)
    max_new_sources_per_message: int = _doc("new sources one XMSG or GSIP may introduce", default=256)
    max_vouched_per_address: int = _doc(
        "node ids admitted from one address that the log vouches for (their sources are never evicted)",
        default=1024)
    max_gap_ranges: int = _doc("disjoint ranges held beyond a gap, per source", default=1024)
    max_ask_ranges: int = _doc("missing ranges of one source asked for in one GSIP", default=1000)
    serve_records: int = _doc("records sent in answer to one GSIP, across all its asks", default=20_000)
    serve_bytes: int = _doc("octets of records sent in answer to one GSIP, across all its asks", default=8 * MiB)
    serve_ranges: int = _doc("ranges of one GSIP's asks answered (each may cost a read of the store)", default=4096)
    max_forgeries: int = _doc("forged batches of log records (a bad chain or signature) one peer may send before "
                              "it is excluded until it restarts (0: never excluded)", default=3)
    own_wait: float = _doc("seconds a starting node records nothing while no peer is admitted, or while a peer "
                           "claims more of its own records than it holds and none of them came (0: no window)",
                           default=2.0)
    own_quiet: float = _doc("seconds after its first peer's admission a starting node records nothing, unless a "
                            "peer claims more of its own records", default=1.0)


# -------------------------------------------------------------------- the HTTP API


@dataclass(frozen=True)
class ApiLimits:
    """The HTTP API and its WebSocket streams (docs/limits.md, "API")."""

    max_connections: int = _doc("HTTP connections open at once (WebSocket subscribers included)", default=256)
    max_connections_per_address: int = _doc("HTTP connections open at once from one IP address", default=64)
    idle_timeout: float = _doc("seconds a connection may wait for a request's head (from its opening or its last "
                               "answer), and an answer may go unread", default=30.0)
    body_timeout: float = _doc("seconds a request body may take to arrive (an upload: between two blocks)",
                               default=30.0)
    max_json_depth: int = _doc("nesting depth of a JSON request body", default=32)
    max_subscribers: int = _doc("WebSocket event subscribers at once", default=16)
    subscriber_buffer_bytes: int = _doc("octets of events waiting to be sent to one WebSocket subscriber",
                                        default=16 * MiB)
    allowed_hosts: tuple[str, ...] = _doc("host names a request's Host may carry besides the API's own address "
                                          "(e.g. a reverse proxy's); TOML list", default=())


# ----------------------------------------------------------------------- guests


@dataclass(frozen=True)
class GuestLimits:
    """Noam guests: marco, TCP and WebSocket connections (docs/limits.md, "Guests")."""

    max_connections: int = _doc("guest connections (TCP and WebSocket, registered or not) open at once",
                                default=256)
    max_connections_per_address: int = _doc("guest connections open at once from one IP address", default=32)
    register_timeout: float = _doc("seconds a guest connection may stay open before its register "
                                   "(and an HTTP connection to the WebSocket port before its upgrade)",
                                   default=10.0)
    frame_timeout: float = _doc("seconds a TCP message, once its first octet came, may take to arrive whole",
                                default=30.0)
    max_buffered_bytes: int = _doc("octets of incomplete TCP messages held for all guests together",
                                   default=32 * MiB)
    max_spotted: int = _doc("guests remembered from their marcos, on the free list and on the other-rooms list "
                            "(each)", default=1000)
    log_lines_per_minute: int = _doc("lines the guest doors write to the node's log per minute about joins, "
                                     "leaves and refused input", default=60)
    max_hosts_per_address: int = _doc("other guest hosts from one IP address that count in the choice of who "
                                      "answers a marco", default=4)


# ------------------------------------------------------------------------ posts


@dataclass(frozen=True)
class PostLimits:
    """Hydra posts (docs/limits.md, "Posts")."""

    max_size: int = _doc("octets of content one post may claim (fetched from a peer, or uploaded)", default=4 * GiB)
    min_free: int = _doc("octets the disk under the store keeps free beyond what a post being fetched still needs",
                         default=256 * MiB)
    max_posts: int = _doc("posts the store holds (each a metadata file, a content file and its entry in memory)",
                          default=100_000)


# ----------------------------------------------------------------------- naming


@dataclass(frozen=True)
class NamingLimits:
    """The naming broker client (docs/limits.md, "Naming")."""

    max_peers: int = _doc("peers learned through the brokers that the node remembers (and feeds to the mesh)",
                          default=1024)
    peer_expiry: float = _doc("seconds a peer learned through a broker is remembered after its last announcement",
                              default=30.0)
    messages_per_second: int = _doc("naming messages handled per second (and at once, after a quiet spell)",
                                    default=200)
    max_brokers: int = _doc("broker endpoints welcomes may make the node's naming PUB socket connect to",
                            default=8)
    max_age: float = _doc("seconds a secured group's announcement may be stamped before (or after) the "
                          "receiver's clock", default=60.0)


# --------------------------------------------------------------------- handlers


@dataclass(frozen=True)
class HandlerLimits:
    """The event handlers a node runs (docs/limits.md, "Handlers")."""

    running: int = _doc("handlers' processes running at once", default=4)
    queued: int = _doc("handler runs waiting for one of those places", default=64)


# ------------------------------------------------------------------------- all


@dataclass(frozen=True)
class Limits:
    """All of a node's limits, by area."""

    mesh: MeshLimits = field(default_factory=MeshLimits)
    log: LogLimits = field(default_factory=LogLimits)
    api: ApiLimits = field(default_factory=ApiLimits)
    guests: GuestLimits = field(default_factory=GuestLimits)
    posts: PostLimits = field(default_factory=PostLimits)
    naming: NamingLimits = field(default_factory=NamingLimits)
    handlers: HandlerLimits = field(default_factory=HandlerLimits)

    def __post_init__(self) -> None:
        for area in fields(self):
            part = getattr(self, area.name)
            for f in fields(part):
                value = getattr(part, f.name)
                if isinstance(value, bool):
                    continue
                if isinstance(value, (int, float)) and value < 0:
                    raise LimitError(f"limit {area.name}.{f.name.replace('_', '-')} must not be negative, got {value}")

    def with_values(self, values: dict[str, dict[str, Any]]) -> Limits:
        """A copy with ``{area: {key: value}}`` changed (keys with dashes or underscores)."""
        areas: dict[str, Any] = {}
        for area_name, table in values.items():
            area_key = area_name.replace("-", "_")
            if area_key not in _AREAS:
                raise LimitError(f"unknown limits area {area_name!r}; known: {', '.join(sorted(_AREAS))}")
            if not isinstance(table, dict):
                raise LimitError(f"[limits.{area_name}] must be a table of KEY = VALUE")
            part = getattr(self, area_key)
            known = {f.name: f for f in fields(part)}
            changes: dict[str, Any] = {}
            for key, value in table.items():
                name = key.replace("-", "_")
                if name not in known:
                    names = ", ".join(sorted(k.replace("_", "-") for k in known)) or "(none)"
                    raise LimitError(f"unknown limit {area_key}.{key}; known in {area_key}: {names}")
                changes[name] = _coerce(f"{area_key}.{key}", getattr(part, name), value)
            areas[area_key] = dataclasses.replace(part, **changes)
        return dataclasses.replace(self, **areas)


_AREAS = {f.name for f in fields(Limits)}


def _coerce(what: str, default: Any, value: Any) -> Any:
    """``value`` (from TOML, or text from the command line) as the type of ``default``."""
    kind = type(default)
    if isinstance(value, str) and kind is not str:
        text = value.strip().lower()
        try:
            if kind is bool:
                if text not in ("true", "false", "1", "0", "yes", "no"):
                    raise ValueError
                return text in ("true", "1", "yes")
            if kind is int:
                return int(_scaled(text))
            return float(text)
        except ValueError:
            wanted = "true or false" if kind is bool else "a number"
            raise LimitError(f"limit {what} must be {wanted}, got {value!r}") from None
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if kind is tuple and isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    if type(value) is not kind:
        raise LimitError(f"limit {what} has the wrong type ({type(value).__name__}: {value!r}; expected {kind.__name__})")
    return value


def _scaled(text: str) -> int:
    """``64k`` / ``8m`` / ``1g`` (binary multiples) or a plain integer."""
    mult = {"k": KiB, "m": MiB, "g": GiB}.get(text[-1:], 1)
    digits = text[:-1] if mult != 1 else text
    return int(digits) * mult


def parse_assignment(text: str) -> tuple[str, str, str]:
    """``AREA.KEY=VALUE`` (``--limit``) -> (area, key, value text)."""
    lhs, sep, value = text.partition("=")
    area, dot, key = lhs.strip().partition(".")
    if not sep or not dot or not area or not key:
        raise LimitError(f"--limit takes AREA.KEY=VALUE (e.g. api.max-connections=512), got {text!r}")
    return area, key, value


def describe(limits: Limits | None = None) -> list[tuple[str, Any, str]]:
    """Every limit as (``area.key``, value, what it bounds), in declaration order."""
    limits = limits or Limits()
    out = []
    for area in fields(limits):
        part = getattr(limits, area.name)
        for f in fields(part):
            out.append((f"{area.name}.{f.name.replace('_', '-')}", getattr(part, f.name), str(f.metadata.get("doc", ""))))
    return out
