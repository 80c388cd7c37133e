"""Each app's details in the system picture (docs/control.md, "In the system picture").

The ``apps`` facts carry each app's state (what placement and dependencies read); the
``apps-info`` facts carry, beside them, what an operator asks next: its pid, how often it was
restarted, since when it runs, how it last ended, and whether it is a ``one-of-type`` app.
A fact is one flat value (docs/protocol.md 14.1), so an app's details are one string of words,
each ``key=value`` or a flag, in this order, each left out when it has nothing to say::

    pid=4242 restarts=1 since=1764340000.1 exit=3 one-of-type

``since`` is the group's mesh time at which the running process started (a reader subtracts it
from its own mesh time for the uptime: the same on every node, and no fact that ticks).  Every
word changes only when the app starts or ends, when its state changes too: the details make no
report that the state would not have made.

The ``ext`` object of a report is at most 2048 octets for every feature together
(``MAX_EXTENSION_OCTETS``), so the details stay within :data:`BUDGET`: apps are described in
their start order while the facts fit, and those that do not fit are left out (their state
still shows).  Pure: the caller passes the rows and the clock's reading.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, Final

__all__ = ["BUDGET", "ONE_OF_TYPE", "Row", "describe", "details_facts", "holders", "parse"]

# Octets of the apps-info facts as compact JSON.  A report's features go into its ``ext`` in the
# order of their names (apps, apps-info, doc, guests, ...) while they fit: the states first, then
# these, leaving the features after them room (32 apps' states take about 800 octets).
BUDGET: Final = 768
ONE_OF_TYPE: Final = "one-of-type"  # the flag of an app placed on one node of its type

# What a row holds: name, pid (None: not up), restarts, since (mesh time; None: not up),
# last exit (None: never ended), one-of-type or not.
Row = tuple[str, int | None, int, float | None, int | None, bool]


def describe(pid: int | None, restarts: int, since: float | None, last_exit: int | None, one_of_type: bool) -> str:
    """One app's details as the string its fact holds (the module docstring's words)."""
    words = []
    if pid is not None:
        words.append(f"pid={pid}")
    if restarts:
        words.append(f"restarts={restarts}")
    if since is not None:
        words.append(f"since={since:.1f}")
    if last_exit is not None:
        words.append(f"exit={last_exit}")
    if one_of_type:
        words.append(ONE_OF_TYPE)
    return " ".join(words)


def details_facts(rows: Iterable[Row], budget: int = BUDGET) -> dict[str, object]:
    """The ``apps-info`` facts of ``rows`` (in start order): as many apps as fit in ``budget``
    octets; an app with nothing to say (never started, not one-of-type) is left out."""
    facts: dict[str, object] = {}
    for name, pid, restarts, since, last_exit, one in rows:
        text = describe(pid, restarts, since, last_exit, one)
        if not text:
            continue
        wider = {**facts, name: text}
        if len(json.dumps(wider, separators=(",", ":"), ensure_ascii=False).encode()) > budget:  # as the wire counts
            break  # start order: the first apps, the ones others depend on, keep their details
        facts = wider
    return facts


def parse(text: object) -> dict[str, Any]:
    """An ``apps-info`` fact read back: ``pid``, ``restarts``, ``since``, ``exit`` (numbers),
    ``one_of_type`` (bool).  Anything else (another node's words this one does not know, a
    value that is not a number) is left out: a peer's facts are read, never trusted."""
    out: dict[str, Any] = {"restarts": 0, "one_of_type": False}
    if not isinstance(text, str):
        return out
    for word in text.split()[:16]:
        key, eq, value = word.partition("=")
        if not eq:
            if key == ONE_OF_TYPE:
                out["one_of_type"] = True
            continue
        try:
            if key in ("pid", "restarts", "exit"):
                out[key] = int(value)
            elif key == "since":
                out[key] = float(value)
        except ValueError:
            continue
    return out


def holders(members: Iterable[Mapping[str, Any]], app: str) -> list[str]:
    """The names of the members whose picture shows ``app`` running (where a one-of-type app runs)."""
    found = []
    for m in members:
        ext = m.get("ext")
        apps = ext.get("apps") if isinstance(ext, Mapping) else None
        if isinstance(apps, Mapping) and apps.get(app) == "running":
            found.append(str(m.get("name")))
    return sorted(found)
