"""No issue-tracker numbers in code, comments, docstrings, tests, presets, scripts or catalogs.

A number from the tracker says nothing to a reader of the code: the text says what it means
instead, or points at the docs page that explains it. This walks the tracked files (git ls-files)
and lists every file:line that cites one, by word ("issue" and a number) or in an identifier or
path (the word glued to a number).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("backend", "screens", "widgets", "tui", "presets", "scripts", "benchmarks", "tests")
SUFFIXES = (".py", ".yaml", ".yml", ".sh", ".toml", ".po")
ROOT_FILES = ("README.md",)

# Built from pieces so that these lines do not match themselves.
WORD = "issue"
CITATION = re.compile(rf"\b{WORD}s?\s*#?\d+|\b{WORD}\d+", re.IGNORECASE)


def tracked_files() -> list[Path]:
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *FOLDERS, *ROOT_FILES],
        cwd=ROOT,
        capture_output=True,
        check=True,
    ).stdout.decode()
    names = [name for name in out.split("\0") if name]
    return [
        ROOT / name
        for name in names
        if (ROOT / name).is_file() and (Path(name).suffix in SUFFIXES or name in ROOT_FILES)
    ]


def citations(path: Path) -> list[str]:
    text = path.read_text(encoding="utf-8", errors="replace")
    rel = path.relative_to(ROOT)
    return [
        f"{rel}:{number}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), start=1)
        if CITATION.search(line)
    ]


def test_the_pattern_catches_what_it_should() -> None:
    for cited in (f"({WORD} 21)", f"# {WORD.title()} 16: x", f"{WORD}s 18, 19", f"{WORD}21-rows"):
        assert CITATION.search(cited), cited
    for fine in ("issues kept in the report", "DataIssue(index=3)", "the issue's 800 rows"):
        assert not CITATION.search(fine), fine


def test_no_issue_numbers_in_tracked_files() -> None:
    files = tracked_files()
    assert files, "no tracked files found"
    found = [hit for path in files for hit in citations(path)]
    assert not found, "issue-tracker numbers cited:\n" + "\n".join(found)
