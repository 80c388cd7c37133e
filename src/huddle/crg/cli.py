"""``--crg FILE`` of ``huddle bout export`` and ``huddle bout import``: a bout to and from the
game file CRG ScoreBoard saves (docs/crg.md), through :class:`~huddle.client.ApiClient`.

The option is on the ``huddle bout`` parser (:mod:`huddle.statsbook.cli`, where each format
has its runner); :func:`run_crg_export` and :func:`run_crg_import` do the work when it is given.
The export reads the node's document (with its eids, so the file's ids are the node's) and adds it up here, as the node would; the
import sends the operations to the node, which checks them against the bout's rules as any
write (one batch, all or nothing, while they fit a request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ..doc import bout_summary
from ..doc.model import Element
from ..errors import HuddleError
from .export import export_crg
from .load import import_crg
from .paths import CrgError

if TYPE_CHECKING:  # the client imports aiohttp, which `huddle --help` need not load
    from ..client import ApiClient
    from ..ports import Shown

__all__ = ["MAX_FILE", "element_of_json", "run_crg_export", "run_crg_import"]

MAX_FILE: Final = 64 * 1024 * 1024  # octets of a game file to import: a season's autosave is a few MiB
_BATCH: Final = 768 * 1024  # octets of operations per request (the API takes bodies of 1 MiB)


def element_of_json(tree: dict[str, Any]) -> Element:
    """The document as ``GET /api/v1/doc?format=json&eids=1`` gives it, as elements again."""
    e = Element(str(tree["tag"]), tree.get("eid"), {str(k): str(v) for k, v in tree.get("attrs", {}).items()},
                str(tree.get("text", "")))
    for child in tree.get("children", []):
        e.append(element_of_json(child))
    return e


async def run_crg_export(args: argparse.Namespace, api: ApiClient) -> Shown:
    """Write the node's bout to ``args.crg`` as CRG's game file."""
    root = element_of_json((await api.doc_json(True))["document"])
    data = export_crg(root, bout_summary(root))
    text = json.dumps(data, indent=2, ensure_ascii=False) + "\n"
    try:
        await asyncio.to_thread(args.crg.write_text, text, encoding="utf-8")
    except OSError as exc:
        raise HuddleError(f"cannot write {args.crg}: {exc.strerror}") from None
    keys = len(data["state"])
    return {"out": str(args.crg), "keys": keys, "bytes": len(text.encode())}, \
        f"saved the bout to {args.crg} as a CRG game file ({keys} keys)"


def _read(path: Path) -> Any:
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE + 1)
    except OSError as exc:
        raise HuddleError(f"cannot read {path}: {exc.strerror}") from None
    if len(raw) > MAX_FILE:
        raise CrgError(f"{path} is larger than {MAX_FILE} octets: not a game file")
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise CrgError(f"{path} is not JSON: {exc}") from None


def _batches(ops: list[dict[str, Any]]) -> list[str]:
    """The operations as JSON bodies, each within _BATCH octets, in order."""
    out: list[str] = []
    batch: list[str] = []
    size = 0
    for op in ops:
        text = json.dumps(op, ensure_ascii=False)
        if batch and size + len(text) + 2 > _BATCH:
            out.append("[" + ",".join(batch) + "]")
            batch, size = [], 0
        batch.append(text)
        size += len(text.encode()) + 1
    if batch:
        out.append("[" + ",".join(batch) + "]")
    return out


async def run_crg_import(args: argparse.Namespace, api: ApiClient) -> Shown:
    """Record the game of ``args.crg`` in the node's bout."""
    ops = import_crg(await asyncio.to_thread(_read, args.crg))
    if not ops:
        raise CrgError(f"{args.crg} holds a game with nothing the bout document can say")
    bodies = _batches(ops)
    recorded = 0
    for body in bodies:
        result = await api.doc_apply(body, "application/json")
        recorded += len(result["ops"])
    return {"file": str(args.crg), "ops": recorded, "batches": len(bodies)}, \
        f"recorded {recorded} operations from {args.crg}" + (f" in {len(bodies)} batches" if len(bodies) > 1 else "")
