"""Every pointer to a BENCHMARKS section leads to its text.

A pointer is a BENCHMARKS file's name and a quoted section title after it: ``FILE "Title"``,
``FILE, "Title"`` or ``FILE ("Title")``, with FILE ``benchmarks/BENCHMARKS-<area>.md``; a comment may
break it over lines. Its file must exist and hold a ``#`` heading or a bold paragraph title
(``**Title.**`` at a line's start) that contains the title, backticks aside. A Markdown link to a
BENCHMARKS file must name an existing file and, with ``#anchor``, one of its headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# The files whose pointers are checked: the source, the tests, the docs, the benchmarks and scripts
# (their docstrings and READMEs), and the top-level Markdown.
SCANNED = (
    sorted((ROOT / "src").rglob("*.py"))
    + sorted((ROOT / "tests").glob("*.py"))
    + sorted((ROOT / "docs").glob("*.md"))
    + sorted((ROOT / "benchmarks").rglob("*.py"))
    + sorted((ROOT / "benchmarks").rglob("*.md"))
    + sorted((ROOT / "scripts").glob("*"))
    + sorted(ROOT.glob("*.md"))
)
SCANNED.remove(Path(__file__).resolve())  # its own examples point nowhere on purpose

_FILE = r"(?:benchmarks/)?BENCHMARKS(?:-[\w-]+)?\.md"
# FILE, an optional comma, space (a line break and a comment's "#" too), an optional parenthesis, then
# the quoted title, which may go on over one line break.
POINTER = re.compile(rf'(?P<file>{_FILE}),?\s+(?:#\s*)?\(?"(?P<title>[^"\n]+(?:\n[^"\n]+)?)"')
LINK = re.compile(rf"\]\((?P<path>[^)#\s]*{_FILE})(?:#(?P<anchor>[^)\s]+))?\)")
HEADING = re.compile(r"^#+\s+(.*?)\s*$", re.MULTILINE)
BOLD_TITLE = re.compile(r"^\*\*(.+?)\*\*", re.MULTILINE)


def _plain(text: str) -> str:
    """The words of a title: a comment's line breaks and backticks out, spaces collapsed."""
    text = re.sub(r"\s*\n\s*(?:#\s*)?", " ", text)
    return " ".join(text.replace("`", "").split())


def titles(markdown: str) -> list[str]:
    """The headings and bold paragraph titles of a Markdown file, as plain words."""
    return [_plain(t) for t in HEADING.findall(markdown) + BOLD_TITLE.findall(markdown)]


def anchor(heading: str) -> str:
    """A heading's anchor as GitHub makes it: lower case, punctuation out, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def pointers(text: str) -> list[tuple[int, str, str]]:
    """(line, file, title) of each pointer in TEXT."""
    return [
        (text.count("\n", 0, m.start()) + 1, m.group("file"), _plain(m.group("title")))
        for m in POINTER.finditer(text)
    ]


def broken_pointers(text: str, root: Path) -> list[str]:
    """Each pointer in TEXT whose file is missing or holds no title containing its title."""
    bad = []
    for line, file, title in pointers(text):
        target = root / file
        if not target.is_file():
            bad.append(f"{line}: {file} does not exist")
        elif not any(title in t for t in titles(target.read_text(encoding="utf-8"))):
            bad.append(f'{line}: {file} has no heading or bold title containing "{title}"')
    return bad


def broken_links(text: str, folder: Path) -> list[str]:
    """Each Markdown link in TEXT to a BENCHMARKS file that is missing or lacks the anchor."""
    bad = []
    for m in LINK.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        target = (folder / m.group("path")).resolve()
        if not target.is_file():
            bad.append(f"{line}: {m.group('path')} does not exist")
        elif m.group("anchor") and m.group("anchor") not in {
            anchor(h) for h in HEADING.findall(target.read_text(encoding="utf-8"))
        }:
            bad.append(
                f"{line}: {m.group('path')} has no heading with the anchor #{m.group('anchor')}"
            )
    return bad


def test_every_pointer_leads_to_its_section() -> None:
    bad = []
    for path in SCANNED:
        if not path.is_file():
            continue
        text = path.read_text(encoding="utf-8", errors="replace")
        rel = path.relative_to(ROOT).as_posix()
        bad += [f"{rel}:{b}" for b in broken_pointers(text, ROOT)]
        if path.suffix == ".md":
            bad += [f"{rel}:{b}" for b in broken_links(text, path.parent)]
    where = "BENCHMARKS.md is an index; the sections are in benchmarks/BENCHMARKS-<area>.md"
    assert not bad, f"pointers that lead nowhere ({where}):\n" + "\n".join(bad)


def test_the_pointers_are_found() -> None:
    """The scan sees the pointers it should: at least one in each of src/, tests/ and docs/."""
    found = {
        p.relative_to(ROOT).parts[0]
        for p in SCANNED
        if p.is_file() and pointers(p.read_text(encoding="utf-8", errors="replace"))
    }
    assert {"src", "tests", "docs"} <= found


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('# BENCHMARKS-replay.md "Replay"', [(1, "BENCHMARKS-replay.md", "Replay")]),
        (
            '(benchmarks/BENCHMARKS-lab.md, "The lab")',
            [(1, "benchmarks/BENCHMARKS-lab.md", "The lab")],
        ),
        (
            'see BENCHMARKS-x.md ("`gpudoctor.kernels`")',
            [(1, "BENCHMARKS-x.md", "gpudoctor.kernels")],
        ),
        ('print("see BENCHMARKS.md", "and")', []),
        (
            '# a (benchmarks/BENCHMARKS-c.md "Evidence moved\n# from the source: capture").',
            [(1, "benchmarks/BENCHMARKS-c.md", "Evidence moved from the source: capture")],
        ),
        (
            '    BENCHMARKS.md\n    "Evidence moved from the source: memory")',
            [(1, "BENCHMARKS.md", "Evidence moved from the source: memory")],
        ),
        ("the tables BENCHMARKS.md carries", []),
    ],
)
def test_pointers_are_read_in_every_form(text: str, expected: list) -> None:
    assert pointers(text) == expected


def test_a_wrong_pointer_is_reported(tmp_path: Path) -> None:
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "BENCHMARKS-replay.md").write_text(
        "# Benchmarks: replay\n\n## Replay: the step's graph\n\n**Knob trials on a GPU** (H200).\n"
    )
    text = "\n".join(
        [
            '# benchmarks/BENCHMARKS-replay.md "Replay"',  # a heading
            '# benchmarks/BENCHMARKS-replay.md "Knob trials on a GPU"',  # a bold title
            '# benchmarks/BENCHMARKS-replay.md "Capture overhead"',  # in no title
            '# BENCHMARKS.md "Replay"',  # no such file
        ]
    )
    assert broken_pointers(text, tmp_path) == [
        '3: benchmarks/BENCHMARKS-replay.md has no heading or bold title containing "Capture overhead"',
        "4: BENCHMARKS.md does not exist",
    ]
    links = "[a](benchmarks/BENCHMARKS-replay.md#replay-the-steps-graph), [b](benchmarks/BENCHMARKS-replay.md#replay)"
    assert broken_links(links, tmp_path) == [
        "1: benchmarks/BENCHMARKS-replay.md has no heading with the anchor #replay"
    ]
