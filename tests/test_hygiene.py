"""The code and the README read as a reference, not as a work log.

A comment or a docstring under src/ or tests/, or a line of README.md, names the behaviour it
is about and the docs/ section that specifies it ("protocol.md 12.5", docs/security.md
"Sealed posts"), never the tracker issue or the work session that brought it: a reader has
the docs, not the history.  The history of the figures is bench/HISTORY.md, and git's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The word (either, any case, plural too), a space or a "#", a number.  Not "session_id 4" or
# "sessions=3" (no space right after the word).
_WORK_LOG = re.compile(r"\b(?:issue|session)s?(?:[ \t]+#?|#)\d", re.IGNORECASE)


def work_log_references(text: str) -> list[tuple[int, str]]:
    """(line number, line) for each line of ``text`` that cites an issue or a session by number."""
    return [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1) if _WORK_LOG.search(line)]


def _checked_files() -> list[Path]:
    """README.md and every .py file under src/ and tests/ (this one too: its examples cite nothing)."""
    files = [ROOT / "README.md"]
    for folder in ("src", "tests"):
        files.extend(sorted((ROOT / folder).rglob("*.py")))
    return files


# The examples spell the two words through placeholders, so that this file cites nothing itself.
_WORDS = {"i": "issue", "I": "Issue", "s": "session", "S": "Session"}


@pytest.mark.parametrize("template", [
    "# The group secret ({i} 22): from --group-key FILE",
    '"""What a node loads before it serves ({I} 20: 63 nodes).',
    "# measured in bench/README.md, \"{S} 14\".",
    "see {i}s 20-22 and {i} #7",
    "# a tree from before {s} 18: reports unsigned",
    "# ({i}#31)",
])
def test_a_reference_to_an_issue_or_a_session_is_found(template: str) -> None:
    line = template.format(**_WORDS)
    assert work_log_references(f"x = 1\n{line}\n") == [(2, line.strip())]


@pytest.mark.parametrize("line", [
    "session_id = 4",
    "sessions=3",
    "# a session with 63 members; the issue of a late tick",
    "t{i} 3".format(**_WORDS),
    'TS = "2026-01-02T03:04:05Z"',
])
def test_a_line_that_only_looks_like_one_is_not(line: str) -> None:
    assert work_log_references(line) == []


def test_no_issue_or_session_numbers_in_the_code_the_tests_or_the_readme() -> None:
    found = [f"  {path.relative_to(ROOT)}:{n}: {line}"
             for path in _checked_files() for n, line in work_log_references(path.read_text(encoding="utf-8"))]
    assert not found, ("these lines cite an issue or a work session by number; name the behaviour and the "
                       "docs/ section that specifies it instead (e.g. 'protocol.md 12.5'):\n" + "\n".join(found))
