"""The statsbook as a file: :func:`write_statsbook` and :func:`read_igrf` (openpyxl; docs/statsbook.md).

Without a template, a workbook made from nothing: the seven sheets, a few labels, and the
cells of :func:`~huddle.statsbook.cells.statsbook_cells` at the statsbook's addresses.
With one, the league's blank statsbook filled in place: only the cell map's cells are
written (the blank's formulas compute the rest), every other cell, style, formula and sheet
is left as the blank has it.  The file is written beside its final name and moved there, so
a failed write leaves no half a statsbook.

An xlsx read (a template, an IGRF) is a zip of XML: it is checked before openpyxl opens it
(at most :data:`MAX_FILE` octets, :data:`MAX_PARTS` parts, :data:`MAX_UNPACKED` octets
unpacked), so a hostile file (a zip bomb) is refused in one line instead of filling memory.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Final

from ..doc.model import Element
from ..errors import HuddleError
from .cellmap import IGRF, LINEUPS, PENALTIES, SCORE, SHEETS, address, column
from .cells import Cells, statsbook_cells
from .igrf import igrf_operations

if TYPE_CHECKING:
    from openpyxl.workbook.workbook import Workbook

__all__ = ["MAX_FILE", "MAX_PARTS", "MAX_UNPACKED", "StatsbookInputError", "StatsbookOutputError", "check_output",
           "check_xlsx", "read_igrf", "write_statsbook"]

MAX_FILE: Final = 16 * 1024 * 1024  # a filled statsbook is about 1 MiB
MAX_UNPACKED: Final = 64 * 1024 * 1024  # a blank statsbook unpacks to about 10 MiB
MAX_PARTS: Final = 4096


class StatsbookInputError(HuddleError):
    """A template or IGRF that cannot be read: missing, not an xlsx, too large, no IGRF sheet."""

    exit_status: ClassVar[int] = 4


class StatsbookOutputError(HuddleError):
    """The statsbook cannot be written where asked: a directory, a missing or unwritable folder."""

    exit_status: ClassVar[int] = 5


def check_xlsx(path: Path) -> None:
    """Refuse, in one line, what is not a readable xlsx of sane size (the module docstring)."""
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise StatsbookInputError(f"cannot read {path}: {exc.strerror}") from None
    if not path.is_file():
        raise StatsbookInputError(f"{path} is not a file")
    if size > MAX_FILE:
        raise StatsbookInputError(f"{path} is {size} octets, more than a statsbook's {MAX_FILE}")
    try:
        with zipfile.ZipFile(path) as z:
            parts = z.infolist()
            names = {p.filename for p in parts}
    except (zipfile.BadZipFile, OSError, ValueError):
        raise StatsbookInputError(f"{path} is not an xlsx file (not a zip archive)") from None
    if "xl/workbook.xml" not in names:
        raise StatsbookInputError(f"{path} is not an xlsx file (no xl/workbook.xml)")
    unpacked = sum(p.file_size for p in parts)
    if len(parts) > MAX_PARTS or unpacked > MAX_UNPACKED:
        raise StatsbookInputError(f"{path} unpacks to {len(parts)} parts, {unpacked} octets: more than a statsbook's "
                                  f"{MAX_PARTS} parts, {MAX_UNPACKED} octets")


def _load(path: Path, *, read_only: bool) -> Workbook:
    check_xlsx(path)
    from openpyxl import load_workbook  # noqa: PLC0415 - openpyxl loads with a statsbook, not with the node

    try:
        return load_workbook(path, read_only=read_only, data_only=read_only)
    except Exception as exc:  # openpyxl raises what its parsers raise (KeyError, XML errors, ...)
        raise StatsbookInputError(f"{path} cannot be read as an xlsx workbook: {type(exc).__name__}: {exc}") from None


def check_output(path: Path) -> None:
    """Refuse, in one line, a place no statsbook can be written to: a directory, a missing folder."""
    if path.is_dir():
        raise StatsbookOutputError(f"{path} is a directory: give the statsbook's file name")
    if not path.parent.is_dir():
        raise StatsbookOutputError(f"cannot write {path}: no folder {path.parent}")


def write_statsbook(document: Element | Mapping[str, Any], summary: Mapping[str, Any], path: Path | str,
                    template: Path | str | None = None) -> dict[str, Any]:
    """Write the bout's statsbook to ``path`` (the module docstring): what was written, as JSON."""
    path = Path(path)
    check_output(path)
    skipped: list[str] = []
    if template is None:
        cells = statsbook_cells(document, summary, computed=True)
        wb = _new_workbook(cells)
    else:
        cells = statsbook_cells(document, summary, computed=False)
        wb = _load(Path(template), read_only=False)
        for (sheet, where), value in cells.items():
            if sheet not in wb.sheetnames:
                skipped.append(f"{sheet}!{where}")
                continue
            try:
                wb[sheet][where].value = value
            except AttributeError:  # a merged cell other than the range's first: the blank has none there
                skipped.append(f"{sheet}!{where}")
    _save(wb, path)
    return {"out": str(path), "cells": len(cells) - len(skipped), "template": None if template is None else str(template),
            "skipped": skipped}


def _save(wb: Workbook, path: Path) -> None:
    fd, tmp = -1, ""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "wb") as f:
            fd = -1
            wb.save(f)
        os.replace(tmp, path)
        tmp = ""
    except OSError as exc:
        raise StatsbookOutputError(f"cannot write {path}: {exc.strerror or exc}") from None
    finally:
        if fd >= 0:
            os.close(fd)
        if tmp:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def _new_workbook(cells: Cells) -> Workbook:
    """The seven sheets, labels where the map writes nothing, and the cells."""
    from openpyxl import Workbook  # noqa: PLC0415 - openpyxl loads with a statsbook, not with the node

    wb = Workbook()
    for first in list(wb.worksheets):  # the one a new workbook comes with
        wb.remove(first)
    for name in SHEETS:
        wb.create_sheet(name)
    for (sheet, where), text in _labels().items():
        if (sheet, where) not in cells:
            wb[sheet][where].value = text
    for (sheet, where), value in cells.items():
        wb[sheet][where].value = value
    return wb


def _labels() -> dict[tuple[str, str], str]:
    """What a person needs to read a workbook made from nothing: each block's titles (none is a map cell)."""
    out: dict[tuple[str, str], str] = {
        ("IGRF", "A3"): "Venue", ("IGRF", "H3"): "City", ("IGRF", "A5"): "Event", ("IGRF", "A7"): "Date",
        ("IGRF", "A10"): "League", ("IGRF", "A11"): "Team", ("IGRF", "A12"): "Colour", ("IGRF", "A49"): "Captain",
        ("IGRF", f"A{IGRF.HEAD_NSO_ROW}"): "Head NSO",
        ("Penalties", "A1"): "Penalties", ("Penalties", "L1"): "Penalty tracker",
        ("Game Clock", "A4"): "Period 1", ("Game Clock", "D4"): "Timeouts", ("Game Clock", "G4"): "Reviews",
        ("Game Clock", "A5"): "Home", ("Game Clock", "A7"): "Away", ("Game Clock", "A55"): "Period 2",
        ("Game Clock", "A56"): "Home", ("Game Clock", "A58"): "Away",
        ("Game Clock", "A10"): "Jam", ("Game Clock", "B10"): "Seconds", ("Game Clock", "D10"): "After the jam",
        ("Game Clock", "A61"): "Jam", ("Game Clock", "B61"): "Seconds", ("Game Clock", "D61"): "After the jam",
        ("Penalty Box", "A1"): "Penalty box",
    }
    for side, col in IGRF.TEAM_COL.items():
        out["IGRF", address(9, col)] = side.title()
        out["IGRF", address(13, col)], out["IGRF", address(13, col + 1)] = "Number", "Name"
    for period, top in SCORE.PERIOD_TOP.items():
        out["Score", address(top, 1)] = f"Period {period}"
        out["Lineups", address(top, 1)] = f"Period {period}"
        for side in ("home", "away"):
            s, lc = SCORE.TEAM_COL[side], LINEUPS.TEAM_COL[side]
            out["Score", address(top + 1, s)] = out["Lineups", address(top + 1, lc)] = side.title()
            titles = ["Jam", "Jammer", "Lost", "Lead", "Call", "Inj", "NI", *(f"Trip {n}" for n in range(2, 11)),
                      "Jam total", "Game total"]
            for i, title in enumerate(titles):
                out["Score", address(top + 2, s + i)] = title
            for offset, title in ((LINEUPS.JAM, "Jam"), (LINEUPS.NO_PIVOT, "No pivot"), (LINEUPS.JAMMER, "Jammer"),
                                  (LINEUPS.PIVOT, "Pivot"), *((b, "Blocker") for b in LINEUPS.BLOCKERS)):
                out["Lineups", address(top + 2, lc + offset)] = title
    for (period, side), first in PENALTIES.FIRST.items():
        out["Penalties", address(2, PENALTIES.NUMBER_COL[period, side])] = f"{side.title()}, period {period}"
        out["Penalties", address(3, PENALTIES.NUMBER_COL[period, side])] = "Number"
        for n in range(PENALTIES.PER_SKATER):
            out["Penalties", f"{column(first + n)}3"] = str(n + 1)
    return out


def read_igrf(path: Path | str) -> list[dict[str, Any]]:
    """The operations a filled statsbook's IGRF sheet sets up (:func:`~huddle.statsbook.igrf.igrf_operations`)."""
    path = Path(path)
    wb = _load(path, read_only=True)
    try:
        if "IGRF" not in wb.sheetnames:
            raise StatsbookInputError(f"{path} has no IGRF sheet (its sheets: {', '.join(wb.sheetnames[:10])})")
        sheet = wb["IGRF"]
        rows = {}  # read-only sheets are read row by row: the IGRF's first 90 rows, 12 columns
        for r, values in enumerate(sheet.iter_rows(min_row=1, max_row=90, max_col=12, values_only=True), start=1):
            for c, value in enumerate(values, start=1):
                if value is not None:
                    rows[address(r, c)] = value
        return igrf_operations(rows.get)
    finally:
        wb.close()
