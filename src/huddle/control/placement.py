"""Where an app may start, read from the system picture: another node's app it depends on,
and which node of a type runs a ``one-of-type`` app (docs/control.md, "Across nodes").

Every node's apps' states are in the picture (each member's ``ext["apps"]``, the labels of
:meth:`~huddle.control.machine.AppMachine.label`), and the picture is the same on every node
that holds the same reports.  So both answers are pure functions of the picture's members
(the dicts of ``GET /api/v1/system``: ``uuid``, ``type``, ``state``, ``ext``): two nodes that
see the same group decide the same, and none of them asks another.

* :func:`remote_ready`: ``NAME@TYPE`` in ``depends-on`` is met when an ``alive`` member of
  type TYPE shows its app NAME ``running``.
* :func:`holder`: the member that runs a ``one-of-type`` app.  The candidates are the present
  members (alive or suspect: a missed heartbeat is no failover) of the type that want it up
  (its label ``waiting``, ``starting``, ``running`` or ``backoff``); of those that already run
  it (``starting``, ``running``, ``backoff``) the one with the lowest id, else the candidate
  with the lowest id.  The holder keeps it while it is present (a node that comes back or joins
  with a lower id does not take it over); after a partition heals, when each side ran its own,
  the lowest id of the two keeps it and the other stops.
* :func:`may_start`: the holder starts it only once no other member shows an instance
  (``stopping`` too: the one it takes over from must be gone first).

Pure: nothing here reads a clock or does I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["BUSY", "HOLDING", "WANTING", "holder", "label_of", "may_start", "remote_ready", "split_dependency"]

PRESENT: Final = frozenset({"alive", "suspect"})  # a member whose report is held (docs/protocol.md 14.2)
HOLDING: Final = frozenset({"starting", "running", "backoff"})  # the labels of an instance that runs (or restarts)
WANTING: Final = HOLDING | {"waiting"}  # ... and of a node that would start it if chosen
BUSY: Final = HOLDING | {"stopping"}  # an instance whose process may be alive


def split_dependency(dep: str) -> tuple[str, str | None]:
    """``NAME@TYPE`` as (NAME, TYPE); a plain ``NAME`` (an app of this node) as (NAME, None)."""
    name, at, node_type = dep.partition("@")
    return (name, node_type) if at else (name, None)


def label_of(member: Mapping[str, Any], app: str) -> str | None:
    """The label of ``app`` in ``member``'s facts (None: it does not report that app)."""
    ext = member.get("ext")
    apps = ext.get("apps") if isinstance(ext, Mapping) else None
    label = apps.get(app) if isinstance(apps, Mapping) else None
    return label if isinstance(label, str) else None


def _state(member: Mapping[str, Any]) -> str:
    return str(member.get("state", "alive"))  # the digest's members omit "alive"


def remote_ready(members: Iterable[Mapping[str, Any]], app: str, node_type: str) -> bool:
    """Some ``alive`` member of type ``node_type`` shows ``app`` running."""
    return any(m.get("type") == node_type and _state(m) == "alive" and label_of(m, app) == "running" for m in members)


def holder(members: Iterable[Mapping[str, Any]], app: str, node_type: str) -> str | None:
    """The id of the member that runs the ``one-of-type`` app ``app`` of type ``node_type``
    (the module docstring's rule); None when no member of the type wants it."""
    wanting: list[str] = []
    holding: list[str] = []
    for m in members:
        if m.get("type") != node_type or _state(m) not in PRESENT:
            continue
        label = label_of(m, app)
        if label in WANTING:
            wanting.append(str(m.get("uuid")))
            if label in HOLDING:
                holding.append(str(m.get("uuid")))
    if holding:
        return min(holding)
    return min(wanting) if wanting else None


def may_start(members: Iterable[Mapping[str, Any]], app: str, node_type: str, me: str) -> bool:
    """This node (id ``me``) may start its waiting ``one-of-type`` app now: it is the holder,
    and no other present member of the type shows an instance whose process may be alive."""
    seen = list(members)
    if holder(seen, app, node_type) != me:
        return False
    return not any(str(m.get("uuid")) != me and m.get("type") == node_type and _state(m) in PRESENT
                   and label_of(m, app) in BUSY for m in seen)
