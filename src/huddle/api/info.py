"""What ``GET /api/v1/node``, ``/api/v1/system`` and ``/api/v1/log/summary`` show.

Pure builders: each takes the parts it reads (the mesh, the replicator, the
node's own figures) and returns a JSON-ready dict; the node (node.py) calls
them with its parts, and :class:`~huddle.api.ports.ApiNode` serves the results.
"""

from __future__ import annotations

from typing import Any

from ..config import NodeType
from ..protocol import Mesh
from ..protocol.picture import Reports
from ..protocol.replication import Replicator
from ..security import NodeIdentity

__all__ = ["log_summary", "node_info", "system_picture"]


def node_info(mesh: Mesh, *, identity: NodeIdentity | None, node_type: NodeType, mesh_time: float,
              started_at: float, read_only: bool, features: dict[str, object], security: dict[str, Any] | None,
              stats: dict[str, Any]) -> dict[str, Any]:
    """The node: who it is, its endpoint and clock, its type and state, its counters (``stats``),
    its features' facts (huddle/ports.py; ``guests``: the guest ports, kept where clients read them)."""
    return {
        "uuid": str(mesh.uuid),
        "name": mesh.name,
        "group": mesh.group,
        "key": None if identity is None else identity.fingerprint,
        "public_key": None if identity is None else identity.public_key.hex(),
        "security": security,  # mode, key id, refusals (transport/zap.py MeshSecurity.describe)
        "endpoint": mesh.endpoint,
        "time": mesh_time,
        "clock_offset": mesh.offset,
        "clock_source": None if mesh.synced_with is None else str(mesh.synced_with),
        "started_at": started_at,
        "type": node_type.name,
        "tags": dict(mesh.tags),  # what it advertises of itself (docs/protocol.md 4.1, "Tags")
        "on_cut_off": node_type.on_cut_off,
        "cut_off": mesh.cut_off,
        "read_only": read_only,
        "guests": features.get("guests"),
        "features": features,
        "stats": stats,
    }


def system_picture(mesh: Mesh, reports: Reports, now: float, mesh_time: float) -> dict[str, Any]:
    """The system picture as this node computes it from its ``reports`` (same reports,
    same digest on every node), each member with its features' facts (``ext``, protocol.md
    14.1), with round trips and rates beside it."""
    described = reports.pictures.describe(now)
    # Beside the picture (not in its digest): each member's key fingerprint, as its HELO proved
    # it to this node ("" for a member this node holds no session with, or a legacy id).
    keys = {str(p.uuid): (p.key, p.verified) for p in mesh.peers(now)}
    keys[str(mesh.uuid)] = (mesh.identity.fingerprint, mesh.identity.node_id == mesh.uuid)
    for m in described["members"]:
        m["key"], m["verified"] = keys.get(m["uuid"], ("", False))
    return {"node": str(mesh.uuid), "time": mesh_time, **described}


def log_summary(replicator: Replicator) -> dict[str, Any]:
    """The event log as this node holds it: version vector, events held, gaps, counters."""
    return {
        "version_vector": {str(s): q for s, q in replicator.version_vector().items()},
        "events": replicator.held(),
        "gaps": {str(s): [list(r) for r in ranges] for s, ranges in replicator.gaps().items()},
        "stats": replicator.stats.as_dict(),
    }
