"""``huddle apps`` and ``huddle app start|stop|restart|logs NAME``: their parsers, and their
calls through :class:`~huddle.client.ApiClient` (docs/control.md, "Commands")."""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from .details import holders, parse

if TYPE_CHECKING:  # the client imports aiohttp, which `huddle --help` need not load
    from ..client import ApiClient

__all__ = ["add_parsers", "run"]

FOLLOW_EVERY: Final = 0.5  # seconds between two reads of an app's output with --follow


def add_parsers(sub: Any, client_options: Callable[[argparse.ArgumentParser], None], epilog: str) -> None:
    apps = sub.add_parser(
        "apps", help="the programs a node supervises: state, pid, restarts, uptime, last exit",
        description="List the apps the node runs ([[apps]] in its config and its type's): each one's state "
        "(waiting, starting, running, backoff, stopping, exited, failed, stopped), pid, restarts, uptime and "
        "last exit status; then every other node's apps and their states, from the system picture.",
        epilog=epilog)
    apps.add_argument("--node", metavar="NAME", help="that node's apps, with their details (a name or id prefix)")
    client_options(apps)
    app = sub.add_parser(
        "app", help="start, stop or restart one of a node's apps, or read its output",
        description="Orders for one app of the node: start, stop (its stop signal to its process group, then "
        "SIGKILL after its stop-timeout), restart; logs shows its standard output and error.", epilog=epilog)
    app_sub = app.add_subparsers(dest="app_command", metavar="ACTION", required=True)
    for order, summary in (("start", "start it (after the apps it depends on run)"),
                           ("stop", "stop it (it stays stopped until started)"),
                           ("restart", "stop it, then start it"),
                           ("logs", "print its output (the log file's tail); --follow to keep reading")):
        p = app_sub.add_parser(order, help=summary, description=summary, epilog=epilog)
        p.add_argument("name", metavar="NAME", help="the app's name, as 'huddle apps' lists it")
        if order == "logs":
            p.add_argument("-f", "--follow", action="store_true", help="keep printing what it writes, until Ctrl-C")
        p.add_argument("--node", metavar="NAME", help="the node that runs it (a name or id prefix; default: this "
                       "one): the order (or the read) is carried there and its result shown")
        client_options(p)


def _row(a: dict[str, Any]) -> str:
    state = str(a["state"])
    if state == "exited" or (a.get("last_exit") is not None and state in ("backoff", "failed")):
        state += f" ({a['last_exit']})"
    if a.get("retry_in") is not None:
        state += f", retry in {a['retry_in']:.1f} s"
    pid = "-" if a.get("pid") is None else str(a["pid"])
    up = "-" if a.get("uptime") is None else f"{a['uptime']:.0f} s"
    where = "" if "runs_on" not in a else "  one-of-type, runs on " + (", ".join(a["runs_on"]) or "no node")
    return f"{a['name']:<20} {state:<28} {pid:>7} {a['restarts']:>8} {up:>9}" + (
        f"  {a['error']}" if a.get("error") else "") + where


def apps_text(info: dict[str, Any]) -> str:
    apps = info.get("apps") or []
    if not apps:
        return "this node runs no app ([[apps]] in its config, or its type's)"
    head = f"{'NAME':<20} {'STATE':<28} {'PID':>7} {'RESTARTS':>8} {'UPTIME':>9}"
    return "\n".join([head, *(_row(a) for a in apps)])


def every_node(system: dict[str, Any], skip: object = None) -> dict[str, dict[str, dict[str, Any]]]:
    """Each member's apps as the picture shows them (its ``apps`` and ``apps-info`` facts): per
    node name, per app, its ``state``, ``pid``, ``restarts``, ``uptime`` (from its start time and
    the picture's mesh time), ``last_exit`` and, for a one-of-type app, ``runs_on`` (the names of
    the members that show it running: one, but for a partition that has not healed).  The
    member whose id is ``skip`` is not listed (it may still be where a one-of-type app runs)."""
    members = list(system.get("members") or [])
    now = system.get("time")
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for m in members:
        if skip is not None and m.get("uuid") == skip:
            continue
        ext = m.get("ext") or {}
        states, info = ext.get("apps") or {}, ext.get("apps-info") or {}
        apps: dict[str, dict[str, Any]] = {}
        for name, state in states.items():
            d = parse(info.get(name))
            since = d.get("since")
            apps[name] = {"state": state, "pid": d.get("pid"), "restarts": d["restarts"],
                          "uptime": None if since is None or not isinstance(now, (int, float)) else
                          round(max(0.0, now - since), 1), "last_exit": d.get("exit")}
            if d["one_of_type"]:
                apps[name]["runs_on"] = holders(members, name)
        out[str(m.get("name"))] = apps
    return out


def every_node_text(system: dict[str, Any], skip: object = None) -> str:
    """The members' apps, as the system picture shows them (their ``apps`` and ``apps-info`` facts)."""
    lines = [f"{'NODE':<20} {'APP':<20} {'STATE':<14} {'PID':>7} {'RESTARTS':>8} {'UPTIME':>9} {'EXIT':>5}  WHERE"]
    members = {str(m.get("name")): m for m in system.get("members") or []}
    for node, apps in sorted(every_node(system, skip).items()):
        for name, a in sorted(apps.items()):
            where = "" if "runs_on" not in a else "one-of-type, runs on " + (", ".join(a["runs_on"]) or "no node")
            if members[node].get("state") not in (None, "alive"):
                where = f"(node {members[node]['state']}) {where}".rstrip()
            lines.append(f"{node[:20]:<20} {name:<20} {a['state']:<14} {_dash(a['pid']):>7} {a['restarts']:>8} "
                         f"{_dash(a['uptime'], ' s'):>9} {_dash(a['last_exit']):>5}  {where}".rstrip())
    return "\n".join(lines) if len(lines) > 1 else "no other node of the group runs an app"


def _dash(value: object, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.0f}{unit}" if isinstance(value, float) else f"{value}{unit}"


async def run(api: ApiClient, args: argparse.Namespace) -> tuple[Any, str] | None:
    """``huddle apps`` and ``huddle app ...``: what the node answered, and the text for a person."""
    if args.command == "apps":
        if args.node is None:  # this node's details, then the others' states from the picture
            info, system = await api.apps(), await api.system()
            me = system.get("node")
            for a in info.get("apps") or []:  # where this node's one-of-type apps run (here or elsewhere)
                if a.get("placement") == "one-of-type":
                    a["runs_on"] = holders(system.get("members") or [], a["name"])
            return info | {"nodes": every_node(system, me)}, apps_text(info) + "\n\n" + every_node_text(system, me)
        info = await api.apps(args.node)
        return info, apps_text(info)
    if args.app_command != "logs":
        status = await api.app_order(args.name, args.app_command, args.node)
        return status, f"{args.app_command}: {apps_text({'apps': [status]}).splitlines()[1]}"
    out = await api.app_logs(args.name, None, args.node)
    if not args.follow:
        return out, out["text"].rstrip("\n")
    sys.stdout.write(out["text"])
    sys.stdout.flush()
    after = out["next"]
    while True:
        if not out.get("more"):  # another node's output comes a chunk at a time: the rest at once
            await asyncio.sleep(FOLLOW_EVERY)
        out = await api.app_logs(args.name, after, args.node)
        if out["lost"]:
            sys.stdout.write("[huddle: some output was written faster than it was read, and is left out]\n")
        sys.stdout.write(out["text"])
        sys.stdout.flush()
        after = out["next"]
