"""``huddle doc show|apply|export|history|jams|conflicts``: its parser, and its calls through
:class:`~huddle.client.ApiClient` (the document feature's command, doc/feature.py)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import HuddleError
from ..render import conflicts_text, doc_apply_text, doc_history_text, jams_text
from .roles import ROLES

if TYPE_CHECKING:  # the client imports aiohttp, which `huddle --help` need not load
    from ..client import ApiClient
    from ..ports import ClientOptions, Shown

__all__ = ["add_parser", "run"]


def add_parser(sub: Any, client_options: ClientOptions, epilog: str) -> None:
    doc = sub.add_parser(
        "doc", help="the shared bout document: show, apply operations, export, history, jams, conflicts",
        description="The bout document is made from the group's 'doc' events, in one order on every node. "
        "Operations are <add>, <remove> and <set> (XML, as in the source document) or their JSON form; "
        "docs/document.md has both.",
        epilog="examples:\n"
        "  echo '<set period=\"1\" jam=\"1\"><attribute name=\"start\">1700000000</attribute></set>' "
        "| huddle doc apply -\n"
        "  huddle doc apply lineup.xml\n"
        "  huddle doc apply --role scorekeeper-home trip.json\n"
        "  huddle doc conflicts\n"
        "  huddle doc show --eids\n"
        "  huddle doc export -o bout.xml\n"
        "  huddle doc jams\n\n" + epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    doc_sub = doc.add_subparsers(dest="doc_command", metavar="ACTION", required=True)
    d_show = doc_sub.add_parser("show", help="print the document (XML; --json for the tree)")
    d_show.add_argument("--eids", action="store_true", help="keep the eid attributes (left out by default)")
    d_apply = doc_sub.add_parser("apply", help="apply operations from a file (XML or JSON; - for stdin)")
    d_apply.add_argument("file", metavar="FILE", help="operations: <add>, <remove>, <set>, an <action> of them, "
                         "or JSON; '-' reads standard input")
    d_apply.add_argument("--role", choices=ROLES, help="the role of the official writing: a write outside the "
                         "role's fields is recorded but held as a conflict (docs/document.md \"Roles\")")
    d_export = doc_sub.add_parser("export", help="save the document to a file")
    d_export.add_argument("-o", "--out", required=True, type=Path, metavar="FILE", help="where to write it")
    d_export.add_argument("--eids", action="store_true", help="keep the eid attributes")
    d_export.add_argument("--format", choices=["xml", "json"], default="xml", help="default: xml")
    d_hist = doc_sub.add_parser("history", help="who changed an element, when, with which event")
    d_hist.add_argument("eid", metavar="EID", help="the element's eid (see 'huddle doc show --eids')")
    doc_sub.add_parser("jams", help="what jam are we on: active, just completed, upcoming")
    doc_sub.add_parser("conflicts", help="writes by a role that does not own the field, for the head NSO")
    for p in (d_show, d_apply, d_export, d_hist, doc_sub.choices["jams"], doc_sub.choices["conflicts"]):
        client_options(p)


def _read_ops(file: str) -> str:
    """The operations' text: the file's, or standard input's (``-``)."""
    try:
        return sys.stdin.read() if file == "-" else Path(file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise HuddleError(f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}") from None


async def run(api: ApiClient, args: argparse.Namespace) -> Shown:
    """``huddle doc ACTION``: what the node answered, and its text."""
    action = args.doc_command
    if action == "show":
        if args.json:
            print(json.dumps(await api.doc_json(args.eids), indent=2, ensure_ascii=False))
        else:
            print(await api.doc_xml(args.eids), end="")
        return None
    if action == "apply":
        text = await asyncio.to_thread(_read_ops, args.file)
        ctype = "application/xml" if text.lstrip().startswith("<") else "application/json"
        result = await api.doc_apply(text, ctype, args.role)
        return result, doc_apply_text(result)
    if action == "export":
        out = (json.dumps(await api.doc_json(args.eids), indent=2, ensure_ascii=False) + "\n"
               if args.format == "json" else await api.doc_xml(args.eids))
        try:
            args.out.write_text(out, encoding="utf-8")
        except OSError as exc:
            raise HuddleError(f"cannot write {args.out}: {exc.strerror}") from None
        return {"out": str(args.out), "bytes": len(out.encode())}, f"saved the document to {args.out}"
    if action == "history":
        h = await api.doc_history(args.eid)
        return h, doc_history_text(h)
    if action == "conflicts":
        c = await api.bout_conflicts()
        return c, conflicts_text(c)
    j = await api.jams()
    return j, jams_text(j)
