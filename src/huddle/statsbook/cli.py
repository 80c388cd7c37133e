"""``huddle bout export|import``: the bout to and from the files the sport uses, through a node's API.

Each subcommand takes exactly one format, a mutually exclusive group of options
(``--statsbook`` or ``--crg`` to export, ``--igrf`` or ``--crg`` to import): a format adds its
option to the group and its runner to the table beside it (:data:`EXPORTERS`,
:data:`IMPORTERS`).  CRG ScoreBoard's game file is the crg feature's (:mod:`huddle.crg.cli`),
loaded when it runs.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError, HuddleError

if TYPE_CHECKING:  # the client imports aiohttp, which `huddle --help` need not load
    from ..client import ApiClient
    from ..ports import ClientOptions, Shown

__all__ = ["EXPORTERS", "IMPORTERS", "add_parser", "run"]

Runner = Callable[["ApiClient", argparse.Namespace], Awaitable["Shown"]]
CRG_HELP = "CRG ScoreBoard's game file (JSON, as CRG 4.x/5.x saves it; docs/crg.md)"


def add_parser(sub: Any, client_options: ClientOptions, epilog: str) -> None:
    bout = sub.add_parser(
        "bout", help="the bout to and from the sport's files: the WFTDA statsbook, its IGRF, CRG's game file",
        description="Export the node's bout (its document and summary) as the files a sanctioned bout hands in, "
        "or set a bout up from one. docs/statsbook.md has the sheets and the cell map.",
        epilog="examples:\n"
        "  huddle bout export --statsbook bout.xlsx\n"
        "  huddle bout export --statsbook bout.xlsx --template wftda-statsbook-blank.xlsx\n"
        "  huddle bout import --igrf filled-statsbook.xlsx\n"
        "  huddle bout export --crg game.json         # CRG ScoreBoard's game file (docs/crg.md)\n"
        "  huddle bout import --crg game.json\n\n"
        "exit status: 0 done, 1 the node refused or failed, 2 bad usage, 4 bad input file, 5 the output "
        "cannot be written\n\n" + epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bout_sub = bout.add_subparsers(dest="bout_command", metavar="ACTION", required=True)
    export = bout_sub.add_parser("export", help="write the bout to a file (--statsbook, --crg)")
    formats = export.add_mutually_exclusive_group(required=True)  # one format; another adds its option here
    formats.add_argument("--statsbook", type=Path, metavar="FILE.xlsx",
                         help="the WFTDA statsbook: IGRF, Score, Penalties, Lineups, Game Clock, Penalty Box, "
                         "Official Reviews")
    formats.add_argument("--crg", type=Path, metavar="FILE.json", help=CRG_HELP)
    export.add_argument("--template", type=Path, metavar="BLANK.xlsx",
                        help="with --statsbook: fill this blank statsbook in place, only the cell map's cells")
    imp = bout_sub.add_parser("import", help="set the bout up from a file (--igrf, --crg)")
    formats = imp.add_mutually_exclusive_group(required=True)
    formats.add_argument("--igrf", type=Path, metavar="FILE.xlsx",
                         help="a filled statsbook's IGRF sheet: the event, teams, rosters and officials, "
                         "recorded as one batch of operations")
    formats.add_argument("--crg", type=Path, metavar="FILE.json", help=CRG_HELP)
    for p in (export, imp):
        client_options(p)


async def _export_statsbook(api: ApiClient, args: argparse.Namespace) -> Shown:
    from .workbook import check_output, check_xlsx, write_statsbook  # noqa: PLC0415 - openpyxl: when used

    check_output(args.statsbook)  # refused before the node is asked
    if args.template is not None:
        await asyncio.to_thread(check_xlsx, args.template)
    document, summary = (await api.doc_json())["document"], await api.bout_summary()
    result = await asyncio.to_thread(write_statsbook, document, summary, args.statsbook, args.template)
    into = f" (filled in {args.template})" if args.template is not None else ""
    left = f"; {len(result['skipped'])} map cells not in the template" if result["skipped"] else ""
    return result, f"saved the statsbook to {args.statsbook}{into}: {result['cells']} cells{left}"


async def _import_igrf(api: ApiClient, args: argparse.Namespace) -> Shown:
    from .workbook import read_igrf  # noqa: PLC0415 - openpyxl: when used

    ops = await asyncio.to_thread(read_igrf, args.igrf)
    if not ops:
        raise HuddleError(f"{args.igrf}: its IGRF sheet is empty (no event, team, skater or official)")
    result = await api.doc_apply(json.dumps(ops), "application/json")
    people = sum(len(op.get("children", ())) for op in ops)
    return result, f"set the bout up from {args.igrf}: {len(ops)} operations, {people} people"


async def _export_crg(api: ApiClient, args: argparse.Namespace) -> Shown:
    from ..crg.cli import run_crg_export  # noqa: PLC0415 - the crg feature's: when used

    return await run_crg_export(args, api)


async def _import_crg(api: ApiClient, args: argparse.Namespace) -> Shown:
    from ..crg.cli import run_crg_import  # noqa: PLC0415 - the crg feature's: when used

    return await run_crg_import(args, api)


# format option (its dest) -> what runs it
EXPORTERS: dict[str, Runner] = {"statsbook": _export_statsbook, "crg": _export_crg}
IMPORTERS: dict[str, Runner] = {"igrf": _import_igrf, "crg": _import_crg}


async def run(api: ApiClient, args: argparse.Namespace) -> Shown:
    """``huddle bout export|import``: the one format given, run."""
    if args.bout_command == "export" and args.template is not None and args.statsbook is None:
        raise ConfigError("--template goes with --statsbook")
    table = EXPORTERS if args.bout_command == "export" else IMPORTERS
    for dest, runner in table.items():
        if getattr(args, dest, None) is not None:
            return await runner(api, args)
    raise ConfigError(f"bout {args.bout_command}: give a format ({', '.join('--' + d for d in table)})")
