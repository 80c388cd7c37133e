"""The simulated bout: five officials' devices record a roller-derby bout on real nodes
(docs/demo.md, "The simulated bout").  :mod:`.plan` makes the writes (pure), :mod:`.play`
sends them to the nodes' APIs, each device to its own node."""

from __future__ import annotations

from .plan import DEVICES, Device, Write, plan_bout

__all__ = ["DEVICES", "Device", "Write", "plan_bout"]
