"""What the labelled log corpora's tests share: reading SOURCES.tsv, the files it must list,
and the top category that decides ``diagnose``'s exit (tests/fixtures/logcorpus3, logcorpus4)."""

from __future__ import annotations

import csv
from pathlib import Path

from backend.diagnosis import diagnose_file


def sources(corpus: Path) -> list[dict[str, str]]:
    """The rows of a corpus's SOURCES.tsv (file, label, url, note, and a split where it has one)."""
    with (corpus / "SOURCES.tsv").open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle, delimiter="\t"))


def assert_sources_list_every_file_once(corpus: Path, rows: list[dict[str, str]]) -> None:
    """Each log once, each from a GitHub thread, each in the folder of its label."""
    assert len({r["file"] for r in rows}) == len(rows)
    assert {r["file"] for r in rows} == {str(p.relative_to(corpus)) for p in corpus.glob("*/*.log")}
    for row in rows:
        assert row["url"].startswith("https://github.com/"), row
        assert row["file"].split("/")[0] == row["label"], row


def top_error_category(path: Path) -> str | None:
    """The top finding's category when it is an error (what makes diagnose exit 1), else None."""
    top = diagnose_file(path).top
    return top.category if top is not None and top.severity == "error" else None
