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


# ------------------------------------------------------------------ the audit log


@dataclass(frozen=True)
class LogLimits:
    """Replication: sources, version vectors, asks and what one GSIP is served
    (docs/limits.md, "Log")."""

    max_sources: int = _doc("sources (node UUIDs) the log tracks in all", default=4096)
    max_new_sources_per_peer: int = _doc("new sources one peer may introduce during its session", default=1024)
    max_new_sources_per_message: int = _doc("new sources one XMSG or GSIP may introduce", default=256)
    max_gap_ranges: int = _doc("disjoint ranges held beyond a gap, per source", default=1024)
    max_ask_ranges: int = _doc("missing ranges of one source asked for in one GSIP", default=1000)
    serve_records: int = _doc("records sent in answer to one GSIP, across all its asks", default=20_000)
    serve_bytes: int = _doc("octets of records sent in answer to one GSIP, across all its asks", default=8 * MiB)
    serve_ranges: int = _doc("ranges of one GSIP's asks answered (each may cost a read of the store)", default=4096)


# -------------------------------------------------------------------- the HTTP API


@dataclass(frozen=True)
class ApiLimits:
    """The HTTP API and its WebSocket streams (docs/limits.md, "API")."""


# ----------------------------------------------------------------------- guests


@dataclass(frozen=True)
class GuestLimits:
    """Noam guests: marco, TCP and WebSocket connections (docs/limits.md, "Guests")."""


# ------------------------------------------------------------------------ posts


@dataclass(frozen=True)
class PostLimits:
    """Hydra posts (docs/limits.md, "Posts")."""


# ----------------------------------------------------------------------- naming


@dataclass(frozen=True)
class NamingLimits:
    """The naming broker client (docs/limits.md, "Naming")."""


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
