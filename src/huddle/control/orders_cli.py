"""``huddle control stop|shutdown|reboot --node NAME | --all``: Safir's node orders, through
:class:`~huddle.client.ApiClient` (docs/control.md, "Orders from any node")."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the client imports aiohttp, which `huddle --help` need not load
    from ..client import ApiClient

__all__ = ["add_parsers", "run"]

_ORDERS = (("stop", "the node stops its apps, then itself"),
           ("shutdown", "stop, then run the node's [control] shutdown-command (refused without one)"),
           ("reboot", "stop, then run the node's [control] reboot-command (refused without one)"))


def add_parsers(sub: Any, client_options: Callable[[argparse.ArgumentParser], None], epilog: str) -> None:
    control = sub.add_parser(
        "control", help="order a node, or every node, to stop, shut down or reboot",
        description="Safir's node orders, from any node: the order travels to the node named as a signed "
        "addressed message, is recorded in the group's log with its result, and the node's answer is shown.",
        epilog=epilog)
    orders = control.add_subparsers(dest="control_command", metavar="ORDER", required=True)
    for order, summary in _ORDERS:
        p = orders.add_parser(order, help=summary, description=summary, epilog=epilog)
        which = p.add_mutually_exclusive_group(required=True)
        which.add_argument("--node", metavar="NAME", help="the node (a name or id prefix)")
        which.add_argument("--all", action="store_true", help="every node of the group, this one last")
        client_options(p)


def _line(r: dict[str, Any]) -> str:
    who = r.get("node_name") or r.get("node") or "?"
    if r.get("error"):
        return f"{who}: refused ({r.get('status', '')}): {r['error']}"
    then = " then: " + " ".join(r["then"]) if r.get("then") else ""
    return f"{who}: {r.get('action')} accepted, stopping{then}"


async def run(api: ApiClient, args: argparse.Namespace) -> tuple[Any, str] | None:
    """``huddle control ORDER``: what the node answered, and the text for a person."""
    out = await api.node_order(args.control_command, None if args.all else args.node)
    results = out.get("results", [out])
    return out, "\n".join(_line(r) for r in results)
