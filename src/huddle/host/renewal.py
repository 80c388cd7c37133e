"""A retired identity renewed (docs/protocol.md 12.1): a peer showed a record in this
node's name, signed with its key, that differs from its own, so this identity's sequence
was reused; the node stops, and :func:`renew_identity_after` runs once its log is closed."""

from __future__ import annotations

import logging
from pathlib import Path

from ..ids import NodeId
from ..log import SqliteStore
from ..log.integrity import take_new_identity
from ..protocol.ownseq import IdentityRetired
from ..security import renew_identity

__all__ = ["renew_identity_after"]

log = logging.getLogger("huddle.node")


def renew_identity_after(data_dir: Path, group: str, old: NodeId, retired: IdentityRetired,
                         carried: list[tuple[str, str]]) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """The events recorded under the retired identity ``old`` since the start are taken out
    of the log (the group holds that identity's own records of those numbers, which it
    replays to the new identity as another source's) to be recorded again, ahead of
    ``carried``; the node takes a new key and the id it gives, as ``huddle repair
    --new-identity`` does (the old id listed in ``previous-ids``, the old key kept aside).
    Returns what to record once the next node records, and why the identity changed."""
    store = SqliteStore(data_dir / "log.sqlite", group)
    try:
        carried = store.take_after(old, retired.since) + carried  # then guests' events that waited
    finally:
        store.close()
    new = renew_identity(data_dir).node_id
    take_new_identity(data_dir, new, why="sequence-reused")
    log.error("this node retired its identity %s and continues as %s (%d events to record again): %s",
              old, new, len(carried), retired.reason)
    return carried, {"previous": str(old), "reason": retired.reason}
