"""The WFTDA statsbook (huddle.statsbook; docs/statsbook.md): a bout written into the sheets at
the statsbook's cells and read back with openpyxl; a league's blank filled in place without
changing any cell outside the cell map; the IGRF read back into operations the rules accept;
hostile files refused in one line with the CLI's exit statuses."""

from __future__ import annotations

import datetime
import zipfile
from pathlib import Path
from typing import Any

import openpyxl
import pytest
from openpyxl.styles import Font, PatternFill
from test_bout_rules import BOUT, HOME, OFFICIALS, Log, _bout, add, set_

from huddle.cli import main
from huddle.doc import OperationError, bout_summary, to_json
from huddle.statsbook import StatsbookInputError, StatsbookOutputError, read_igrf, statsbook_cells, write_statsbook
from huddle.statsbook.cellmap import SHEETS
from huddle.statsbook.workbook import MAX_FILE, MAX_PARTS, MAX_UNPACKED

J3, P2J1 = {"period": 1, "jam": 3}, {"period": 2, "jam": 1}


def bout() -> Log:
    """``_bout``'s two jams and a second period's, plus a third jam with every position, a box trip
    of each kind, trips past the ninth; a captain, more officials, the event."""
    log = Log()
    _bout(log)
    log.apply(add(HOME, "person", number="99", name="Cap", role="captain"),
              add(OFFICIALS, "person", name="Jo", role="jam-timer"),
              add(OFFICIALS, "person", name="Pat", role="penalty-tracker"),
              set_(BOUT, "name", "Spring Cup"), set_(BOUT, "date", "2026-04-11"),
              set_({"path": "venue"}, "name", "Hall 1"), set_({"path": "venue"}, "city", "Leeds"))
    log.apply(set_(J3, "start", "1400"),
              *(add(J3, "lineup", team="home", position=p, number=n)
                for p, n in (("jammer", "21"), ("pivot", "3"), ("blocker", "45"), ("blocker", "8"), ("blocker", "12"))),
              *(add(J3, "lineup", team="away", position=p, number=n)
                for p, n in (("jammer", "77"), ("pivot", "4"), ("blocker", "1"), ("blocker", "2"))),
              add(J3, "box", team="home", number="45", **{"in": "1420", "out": "1450"}),  # sat and stood in the jam
              add(J3, "box", team="away", number="77", **{"in": "1380", "out": "1430"}),  # sat before it, stood in it
              add(J3, "box", team="home", number="8", **{"in": "1490", "out": "1530"}),  # sat in it, stood after
              *(add(J3, "points", team="home", points="4", **{"pass": str(n)}) for n in range(2, 10)),
              add(J3, "points", team="home", points="3", **{"pass": "10"}),
              add(J3, "points", team="home", points="2", **{"pass": "11"}),
              set_(J3, "duration", "100"))
    log.apply(add(P2J1, "penalty", team="home", number="12", code="F"))
    return log


def _statsbook(log: Log, tmp_path: Path, template: Path | None = None) -> tuple[Any, dict[str, Any]]:
    root = log.desk.engine.document.root
    out = tmp_path / "bout.xlsx"
    result = write_statsbook(root, bout_summary(root), out, template)
    return openpyxl.load_workbook(out), result


def test_the_statsbook_holds_the_score_penalties_and_lineups_at_the_statsbooks_cells(tmp_path: Path) -> None:
    wb, _ = _statsbook(bout(), tmp_path)
    assert wb.sheetnames == list(SHEETS)
    score, pen, lineups, igrf, clock = wb["Score"], wb["Penalties"], wb["Lineups"], wb["IGRF"], wb["Game Clock"]
    # Score: jam 1 on row 4 (home from A, away from T): jammer, lead and call, trips 2 and 3
    assert [score[c].value for c in ("A4", "B4", "C4", "D4", "E4", "H4", "I4")] == [1, "12", None, "X", "X", 4, 3]
    assert [score[c].value for c in ("T4", "U4", "W4", "AA4")] == [1, "5", None, 2]
    # jam 2 has a star pass (home's, in trip 2): two rows; the pivot takes the star, trip 2 on the star pass row
    assert [score[c].value for c in ("A5", "C5", "A6", "B6", "H5", "H6", "T6", "Z5")] == [2, "X", "SP", "7", None, 4,
                                                                                          "SP*", "X"]
    # jam 3 on row 7: trips 2..9 in H..O, trips 10 and 11 added up in P as the statsbook shows them
    assert [score.cell(7, c).value for c in range(8, 16)] == [4] * 8 and score["P7"].value == "=3+2"
    assert (score["Q7"].value, score["R7"].value) == (37, 11 + 37)  # jam and game totals (no formulas here)
    # period 2 starts on row 46: away's unnumbered trip is trip 2
    assert (score["A46"].value, score["AA46"].value, score["AK46"].value) == (1, 1, 3)
    # Penalties: a skater per two rows in IGRF order (home: 12 21 3 45 7 8 99; away: 1 2 4 5 77 9)
    assert (pen["A4"].value, pen["AD4"].value, pen["AD5"].value, pen["B4"].value) == ("12", "F", 1, None)
    assert [pen[c].value for c in ("P14", "Q14", "Q15", "R14", "R15")] == ["9", "B", 1, "X", 1]
    assert pen["N1"].value == "Pat"
    # Lineups: number and three box cells a position; no pivot marked X; box marks -, +, $
    assert [lineups[c].value for c in ("C4", "G4", "AB4", "AC4")] == ["12", "7", "X", "5"]
    assert [lineups[c].value for c in ("C7", "G7", "K7", "L7", "O7", "P7", "S7")] == ["21", "3", "45", "+", "8", "-",
                                                                                     "12"]
    assert [lineups[c].value for c in ("AC7", "AD7", "AG7", "AK7", "AO7", "AB7")] == ["77", "$", "4", "1", "2", None]
    # IGRF: the event, teams, rosters sorted as text, captain, officials
    assert [igrf[c].value for c in ("B3", "I3", "B5", "B10", "B11", "B12", "I11", "I12")] == [
        "Hall 1", "Leeds", "Spring Cup", "Derby City", "Rollers", "black", "Skaters", "white"]
    assert igrf["B7"].value == datetime.datetime(2026, 4, 11)
    assert [igrf[c].value for c in ("B14", "C14", "B20", "C20", "I14", "J19", "B49")] == [
        "12", "home 12", "99", "Cap", "1", "away 9", "Cap"]
    assert [igrf[c].value for c in ("C60", "A61", "C61", "A62", "C62", "A80", "C80")] == [
        "Nia", "Jam Timer", "Jo", "Penalty Tracker", "Pat", "Head Referee", "Ray"]
    # Game Clock: jam lengths, what followed jam 1, the period clock at the timeout and the review
    assert [clock[c].value for c in ("B11", "B12", "B13", "D11", "E11")] == [95, 120, 100, "TO; OR; OFF",
                                                                            "white; black; 28:25"]
    assert (clock["D7"].value, clock["G5"].value, clock["D58"].value, clock["B5"].value) == ("28:25", "28:25", "X", "Cap")
    # huddle's own tables: the box trips and the reviews
    assert [c.value for c in wb["Penalty Box"][4]][:7] == [1, 1, "away", "9", "1030", "1060", 30]
    assert [c.value for c in wb["Official Reviews"][2]][:4] == [1, 1, "home", "retained"]


def test_the_writer_takes_the_document_as_its_json_tree_too() -> None:
    root = bout().desk.engine.document.root
    summary = bout_summary(root)
    cells = statsbook_cells(root, summary)
    assert statsbook_cells(to_json(root, eids=False), summary) == cells and cells["Score", "P7"] == "=3+2"
    assert statsbook_cells({"document": to_json(root), "events": 9}, summary) == cells  # the API's answer
    with pytest.raises(ValueError, match="not a bout document"):
        statsbook_cells({"events": 9}, summary)


def _template(path: Path) -> None:
    """A league's blank as far as a test can make one: the sheets (one more than the map's, one less),
    labels, formulas and styles everywhere, in and around the map's cells."""
    wb = openpyxl.Workbook()
    wb.active.title = "Read Me"  # type: ignore[union-attr]
    wb["Read Me"]["A1"] = "How to fill this statsbook"
    for name in SHEETS[:-1]:  # no Official Reviews sheet: the statsbook keeps reviews on Game Clock
        ws = wb.create_sheet(name)
        for r in range(1, 91):
            for c in range(1, 55):
                if (r + c) % 5 == 0:
                    ws.cell(r, c, f"{name} label {r}.{c}")
                elif (r * c) % 7 == 0:
                    ws.cell(r, c, f"=SUM(A{r}:C{r})+{c}")
                if r % 3 == 0:
                    ws.cell(r, c).font = Font(bold=True, color="FF0000")
                if c % 4 == 0:
                    ws.cell(r, c).fill = PatternFill("solid", fgColor="DDEEFF")
                    ws.cell(r, c).number_format = "0.00"
    wb.save(path)


def _every_cell(wb: Any) -> dict[tuple[str, str], tuple[object, ...]]:
    return {(ws.title, cell.coordinate): (cell.value, cell.font.b, cell.font.color and cell.font.color.rgb,
                                          cell.fill.fgColor.rgb, cell.number_format)
            for ws in wb.worksheets for row in ws.iter_rows(min_row=1, max_row=100, min_col=1, max_col=60)
            for cell in row}


def test_a_template_is_filled_in_place_and_nothing_outside_the_map_changes(tmp_path: Path) -> None:
    blank = tmp_path / "blank.xlsx"
    _template(blank)
    log = bout()
    wb, result = _statsbook(log, tmp_path, blank)
    before, after = _every_cell(openpyxl.load_workbook(blank)), _every_cell(wb)
    root = log.desk.engine.document.root
    written = statsbook_cells(root, bout_summary(root), computed=False)
    assert wb.sheetnames == ["Read Me", *SHEETS[:-1]] and before.keys() == after.keys()
    assert result["skipped"] == [] and result["cells"] == len(written) > 100
    changed = {k for k in before if before[k] != after[k]}
    assert changed - written.keys() == set(), "cells outside the map changed"
    # in the map: the bout's values, the blank's styles kept
    assert wb["IGRF"]["B11"].value == "Rollers" and wb["Score"]["H4"].value == 4 and wb["Score"]["P7"].value == "=3+2"
    assert wb["Penalties"]["AD4"].value == "F" and wb["Lineups"]["L7"].value == "+"
    assert wb["Score"]["D6"].font.b and wb["Score"]["D6"].value == "Score label 6.4"  # not in the map: as it was
    assert wb["Score"]["L4"].fill.fgColor.rgb == before["Score", "L4"][3]
    # the cells a blank computes keep its formulas: jam total, the jammer copied to Lineups, a skater's number
    for sheet, cell in (("Score", "Q7"), ("Lineups", "C4"), ("Penalties", "A4")):
        assert wb[sheet][cell].value == before[sheet, cell][0]


def test_a_template_without_a_sheet_of_the_map_says_which_cells_it_left(tmp_path: Path) -> None:
    blank = tmp_path / "blank.xlsx"
    wb = openpyxl.Workbook()
    wb.active.title = "IGRF"  # type: ignore[union-attr]
    wb.save(blank)
    _, result = _statsbook(bout(), tmp_path, blank)
    assert "Score!H4" in result["skipped"] and not any(s.startswith("IGRF!") for s in result["skipped"])


def test_the_igrf_sets_a_fresh_bout_up_with_the_same_teams_rosters_and_officials(tmp_path: Path) -> None:
    log = bout()
    _statsbook(log, tmp_path)
    fresh = Log()
    fresh.apply(*read_igrf(tmp_path / "bout.xlsx"))  # one batch, through the rules
    want, got = bout_summary(log.desk.engine.document.root), bout_summary(fresh.desk.engine.document.root)
    for side in ("home", "away"):
        for key in ("name", "league", "color"):
            assert got["teams"][side][key] == want["teams"][side][key]
        assert sorted(got["teams"][side]["skaters"], key=lambda s: s["number"]) == sorted(
            ({"role": "skater", **s} for s in want["teams"][side]["skaters"]), key=lambda s: s["number"])
    assert sorted(got["officials"], key=str) == sorted(want["officials"], key=str)  # the IGRF orders them by role
    root = fresh.desk.engine.document.root
    assert (root.attrs["name"], root.attrs["date"]) == ("Spring Cup", "2026-04-11")
    assert root.find("venue").attrs == {"name": "Hall 1", "city": "Leeds"}  # type: ignore[union-attr]


def test_an_igrf_with_nonsense_is_refused_whole_by_the_rules(tmp_path: Path) -> None:
    wb = openpyxl.Workbook()
    igrf = wb.active
    igrf.title = "IGRF"  # type: ignore[union-attr]
    igrf["B11"], igrf["B14"], igrf["C14"], igrf["B15"] = "Rollers", 123456, "too long a number", 7  # type: ignore[index]
    igrf["A61"], igrf["C61"] = "Tea Maker", "Sam"  # type: ignore[index]
    wb.save(tmp_path / "bad.xlsx")
    log = Log()
    with pytest.raises(OperationError) as refused:
        log.apply(*read_igrf(tmp_path / "bad.xlsx"))
    assert "the number is up to four digits, not '123456'" in str(refused.value)
    assert log.records == []  # nothing recorded


# ------------------------------------------------------------------ hostile files, and the CLI's exit statuses

def _zip(path: Path, parts: dict[str, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in parts.items():
            z.writestr(name, data)
    return path


def test_files_that_are_no_statsbook_are_refused_in_one_line(tmp_path: Path) -> None:
    text = tmp_path / "notes.xlsx"
    text.write_text("not a spreadsheet")
    with pytest.raises(StatsbookInputError, match="not an xlsx file"):
        read_igrf(text)
    with pytest.raises(StatsbookInputError, match=r"no xl/workbook\.xml"):
        read_igrf(_zip(tmp_path / "other.xlsx", {"hello.txt": b"hi"}))
    with pytest.raises(StatsbookInputError, match="cannot be read as an xlsx"):
        read_igrf(_zip(tmp_path / "broken.xlsx", {"xl/workbook.xml": b"<not<xml", "[Content_Types].xml": b"?"}))
    huge = tmp_path / "huge.xlsx"
    with huge.open("wb") as f:
        f.truncate(MAX_FILE + 1)  # sparse: costs no disk
    with pytest.raises(StatsbookInputError, match="more than a statsbook's"):
        read_igrf(huge)
    bomb = tmp_path / "bomb.xlsx"  # a few hundred kilobytes that unpack past the cap
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("xl/workbook.xml", b"<workbook/>")
        with z.open("xl/worksheets/sheet1.xml", "w") as member:
            block = b"\0" * (1 << 20)
            for _ in range(MAX_UNPACKED // len(block) + 1):
                member.write(block)
    assert bomb.stat().st_size < MAX_FILE
    with pytest.raises(StatsbookInputError, match="unpacks to"):
        read_igrf(bomb)
    many = {"xl/workbook.xml": b"<workbook/>", **{f"xl/media/{i}.bin": b"" for i in range(MAX_PARTS)}}
    with pytest.raises(StatsbookInputError, match=f"unpacks to {MAX_PARTS + 1} parts"):
        read_igrf(_zip(tmp_path / "many.xlsx", many))
    no_igrf = tmp_path / "score-only.xlsx"
    wb = openpyxl.Workbook()
    wb.active.title = "Score"  # type: ignore[union-attr]
    wb.save(no_igrf)
    with pytest.raises(StatsbookInputError, match="has no IGRF sheet"):
        read_igrf(no_igrf)
    root = bout().desk.engine.document.root
    with pytest.raises(StatsbookInputError, match="not an xlsx"):
        write_statsbook(root, bout_summary(root), tmp_path / "out.xlsx", template=text)
    with pytest.raises(StatsbookOutputError, match="is a directory"):
        write_statsbook(root, bout_summary(root), tmp_path)
    with pytest.raises(StatsbookOutputError, match="no folder"):
        write_statsbook(root, bout_summary(root), tmp_path / "missing" / "out.xlsx")
    assert not (tmp_path / "out.xlsx").exists()


def test_the_command_says_one_line_with_the_exit_status_of_its_kind(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                                                    ) -> None:
    text = tmp_path / "notes.xlsx"
    text.write_text("not a spreadsheet")
    nowhere = ["--api", "127.0.0.1:9"]  # each is refused before a node is asked
    cases = [(["bout", "import", "--igrf", str(text)], 4, "is not an xlsx file"),
             (["bout", "export", "--statsbook", str(tmp_path)], 5, "is a directory"),
             (["bout", "export", "--statsbook", str(tmp_path / "no" / "b.xlsx")], 5, "no folder"),
             (["bout", "export", "--statsbook", str(tmp_path / "b.xlsx"), "--template", str(text)], 4, "not an xlsx")]
    for argv, status, said in cases:
        assert main([*argv, *nowhere]) == status, argv
        err = capsys.readouterr().err
        assert said in err and err.count("\n") == 1 and err.startswith("huddle bout: "), err
    with pytest.raises(SystemExit) as usage:
        main(["bout", "export", *nowhere])  # no format
    assert usage.value.code == 2
