"""The documentation says what the tree holds.

README.md's Layout lists every package and top-level module under src/huddle,
and nothing that is not there; its sections are not repeated; every reference
to a numbered section of docs/protocol.md ("protocol.md section 12",
"docs/protocol.md, sections 9, 9.1 and 9.2", "(docs/protocol.md 4.9)"), in
src/, docs/, tests/, bench/ and README.md, and every "section N" inside
docs/protocol.md itself, names a heading that exists; every file path the
README and docs/*.md name exists.  The failure messages say what to add or fix.
"""

from __future__ import annotations

import bisect
import re
from pathlib import Path

import test_layers  # the layer table it enforces (tests/ is on the path, as for hostile_kit)

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "src" / "huddle"
README = ROOT / "README.md"
PROTOCOL = ROOT / "docs" / "protocol.md"

# A section number: 12, 4.9, 15.5.
_NUM = r"\d+(?:\.\d+)*"
# "protocol.md" then, across line breaks and markup, "section(s)" (optional) and one or
# more numbers joined by commas, "and" or "or".
_REFERENCE = re.compile(
    rf"protocol\.md`?\)?,?\s+(?:sections?\s+)?(?P<nums>{_NUM}(?:(?:\s*,\s*|\s+and\s+|\s+or\s+){_NUM})*)")
# Inside protocol.md its own sections are "section 8.6" / "sections 2, 5 and 8".
_INTERNAL = re.compile(rf"\bsections?\s+(?P<nums>{_NUM}(?:(?:\s*,\s*|\s+and\s+|\s+or\s+){_NUM})*)")
# A line break with what continues a comment or a quote on the next line.
_LINE_BREAK = re.compile(r"\s*\n\s*(?:#+|//|\*|>|;+)?\s*")
_HEADING = re.compile(rf"^#{{2,}}\s+(?P<num>{_NUM})\.?\s", re.MULTILINE)
# Paths the docs name as files of this repository.
_PATH = re.compile(r"(?<![\w/.-])((?:src/huddle|docs|bench|tests|scripts)/[\w/.-]*\w)")
# ... and modules in code spans: `posts/ports.py`, `limits.py`, `huddle/__init__.py`.
_CODE_PATH = re.compile(r"`((?:[a-z_]+/)*[a-z_]+\.py)`")


def protocol_sections(text: str) -> set[str]:
    """The numbers of docs/protocol.md's headings ("## 4. Messages" -> "4", "### 4.9 MEMB" -> "4.9")."""
    return {m["num"] for m in _HEADING.finditer(text)}


def section_references(text: str, internal: bool = False) -> list[tuple[int, str]]:
    """(line, section number) for each reference to a protocol.md section in ``text``; a
    reference may run across line breaks (and the comment marks that continue it)."""
    pieces: list[str] = []
    starts: list[tuple[int, int]] = []  # (offset in the folded text, line of the original)
    flat_len, at, line = 0, 0, 1
    for brk in [*_LINE_BREAK.finditer(text), None]:
        piece = text[at: brk.start() if brk else len(text)]
        starts.append((flat_len, line))
        pieces.append(piece)
        flat_len += len(piece) + 1
        if brk:
            line += text.count("\n", at, brk.end())
            at = brk.end()
    flat = " ".join(pieces)
    out = []
    for m in (_INTERNAL if internal else _REFERENCE).finditer(flat):
        where = bisect.bisect_right([offset for offset, _ in starts], m.start()) - 1
        out.extend((starts[where][1], num) for num in re.findall(_NUM, m["nums"]))
    return out


def _documented_files() -> list[Path]:
    files = [README, ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for folder in ("src", "tests", "bench"):
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    return [f for f in files if f != Path(__file__).resolve()]


def layout_entries(readme: str) -> list[str]:
    """The names README's Layout lists under src/huddle/ ("wire/", "node.py"): the lines of its
    code block indented by exactly two spaces after the ``src/huddle/`` line."""
    match = re.search(r"^## Layout\n(?P<body>.*?)(?=^## |\Z)", readme, re.MULTILINE | re.DOTALL)
    assert match, "README.md has no '## Layout' section"
    block = re.search(r"```\n(?P<code>.*?)```", match["body"], re.DOTALL)
    assert block, "README.md's Layout has no code block"
    entries = []
    inside = False
    for line in block["code"].splitlines():
        if line.startswith("src/huddle/"):
            inside = True
            continue
        if inside and line and not line.startswith(" "):
            inside = False
        if inside and re.match(r"  \S", line):
            entries.append(line.split()[0])
    return entries


def tree_entries() -> set[str]:
    """Every package (as "name/") and top-level module (as "name.py") under src/huddle,
    the package's own ``__init__.py`` aside."""
    out = {p.parent.relative_to(PACKAGE).as_posix() + "/" for p in PACKAGE.rglob("__init__.py") if p.parent != PACKAGE}
    out |= {p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py"}
    return out


# ---------------------------------------------------------------- the checks


def test_readme_layout_lists_every_package_and_module_and_nothing_else() -> None:
    listed = layout_entries(README.read_text())
    tree = tree_entries()
    missing = sorted(tree - set(listed))
    stale = sorted(set(listed) - tree)
    twice = sorted({e for e in listed if listed.count(e) > 1})
    problems = [f"  {name}: in src/huddle but not in README.md's Layout; add a line '  {name}  <what it holds>'"
                for name in missing]
    problems += [f"  {name}: in README.md's Layout but not in src/huddle; remove or rename its line" for name in stale]
    problems += [f"  {name}: listed more than once in README.md's Layout" for name in twice]
    assert not problems, "README.md's Layout does not match src/huddle:\n" + "\n".join(problems)


def test_readme_has_no_section_twice() -> None:
    prose = re.sub(r"^```.*?^```", "", README.read_text(), flags=re.MULTILINE | re.DOTALL)  # not shell comments
    headings = [h.strip().lower() for h in re.findall(r"^#{2,}\s+(.*)$", prose, re.MULTILINE)]
    twice = sorted({h for h in headings if headings.count(h) > 1})
    assert not twice, f"README.md has these headings more than once: {twice}"


def test_every_protocol_section_reference_names_a_real_section() -> None:
    text = PROTOCOL.read_text()
    sections = protocol_sections(text)
    assert {"4.9", "12", "15.5"} <= sections, f"headings not parsed from docs/protocol.md: {sorted(sections)}"
    bad = [f"  {PROTOCOL.relative_to(ROOT)}:{line}: 'section {num}'"
           for line, num in section_references(text, internal=True) if num not in sections]
    for path in _documented_files():
        bad += [f"  {path.relative_to(ROOT)}:{line}: 'protocol.md {num}'"
                for line, num in section_references(path.read_text()) if num not in sections]
    assert not bad, ("references to sections docs/protocol.md does not have (its headings: "
                     + ", ".join(sorted(sections, key=lambda s: [int(n) for n in s.split(".")])) + "):\n"
                     + "\n".join(bad))


def _exists(path: str) -> bool:
    """A path as the docs write it: from the repository's root, from src/huddle (``posts/ports.py``),
    or a bare module name (``limits.py``) found anywhere under src/huddle, tests or bench."""
    path = path.rstrip("/.")
    if (ROOT / path).exists() or (PACKAGE / path).exists() or (PACKAGE.parent / path).exists():
        return True
    return "/" not in path and any(any(ROOT.glob(f"{top}/**/{path}")) for top in ("src", "tests", "bench"))


def test_every_file_the_docs_name_exists() -> None:
    bad = []
    for doc in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for number, line in enumerate(doc.read_text().splitlines(), 1):
            named = set(_PATH.findall(line)) | set(_CODE_PATH.findall(line))
            bad += [f"  {doc.relative_to(ROOT)}:{number}: {path}" for path in sorted(named) if not _exists(path)]
    assert not bad, "the docs name files that do not exist:\n" + "\n".join(bad)


def architecture_table(text: str) -> tuple[dict[str, str], dict[str, set[str]]]:
    """docs/architecture.md's layer table as (module -> layer, layer -> layers it may import).
    Modules are written `wire/`, `posts/cli`, `huddle/__init__.py`; "may import" is a list,
    "—", or "everything above but X, Y" (the layers of the rows above, less those)."""
    layer_of: dict[str, str] = {}
    allowed: dict[str, set[str]] = {}
    rows = re.findall(r"^\| (?P<layer>[a-z]+) \| (?P<mods>.*?) \| (?P<may>.*?) \|$", text, re.MULTILINE)
    for layer, mods, may in rows:
        if layer == "layer":
            continue
        for mod in re.findall(r"`([^`]+)`", re.sub(r"\([^)]*\)", "", mods)):
            name = "huddle" if mod == "huddle/__init__.py" else "huddle." + mod.rstrip("/").replace("/", ".")
            layer_of[name] = layer
        above = re.fullmatch(r"everything above but (.*)", may)
        if above:
            allowed[layer] = set(allowed) - {x.strip() for x in above[1].split(",")}
        else:
            allowed[layer] = {x.strip() for x in may.split(" — ")[0].split(",")} - {"—", "-", ""}
    return layer_of, allowed


def test_architecture_md_shows_the_layer_table_test_layers_enforces() -> None:
    layer_of, allowed = architecture_table((ROOT / "docs" / "architecture.md").read_text())
    problems = [f"  {m}: layer {test_layers.LAYER_OF[m]} in tests/test_layers.py, "
                f"{layer_of.get(m, 'absent')} in docs/architecture.md"
                for m in sorted(set(test_layers.LAYER_OF) | set(layer_of))
                if layer_of.get(m) != test_layers.LAYER_OF.get(m, "absent")]
    problems += [f"  layer {layer}: may import {sorted(test_layers.ALLOWED.get(layer, set()))} in tests/test_layers.py, "
                 f"{sorted(allowed.get(layer, set()))} in docs/architecture.md"
                 for layer in sorted(set(test_layers.ALLOWED) | set(allowed))
                 if allowed.get(layer) != test_layers.ALLOWED.get(layer)]
    assert not problems, "docs/architecture.md's layer table differs from the test's:\n" + "\n".join(problems)


# ---------------------------------------------------------------- the parsers themselves


def test_references_are_found_in_every_form_and_across_lines() -> None:
    text = ("a (docs/protocol.md 4.9) b\n"
            "# see docs/protocol.md section 12\n"
            "Details: `docs/protocol.md`, sections 9, 9.1\n"
            "  # and 9.2. Also protocol.md,\n"
            "  # section 77.\n"
            "unrelated: section 3, and protocol.md is a file.\n")
    assert section_references(text) == [(1, "4.9"), (2, "12"), (3, "9"), (3, "9.1"), (3, "9.2"), (4, "77")]
    assert section_references("as said (section 8.6) and sections 2 and 5", internal=True) == [
        (1, "8.6"), (1, "2"), (1, "5")]


def test_headings_are_parsed_with_and_without_a_dot() -> None:
    assert protocol_sections("# Title\n## 4. Messages\n### 4.9 MEMB: lists\n## Appendix A. x\n") == {"4", "4.9"}


def test_layout_entries_are_the_two_space_lines_under_src_huddle() -> None:
    readme = ("## Layout\n\n```\nsrc/huddle/\n  wire/        the codec\n               continued: not an entry\n"
              "  node.py      the root\ntests/         tests\n```\n\n## Next\n")
    assert layout_entries(readme) == ["wire/", "node.py"]
