"""What the labelled log corpora's tests share: reading SOURCES.tsv, the files it must list, the
top category that decides ``diagnose``'s exit, and the table check (tests/fixtures/logcorpus*).

Each corpus is checked by one table test rather than one test per file: it diagnoses every file,
collects every miss and asserts once, so a failing run names all the logs a signature change
broke (file, what was wanted, what diagnose said) in one message instead of hundreds of cases.
"""

from __future__ import annotations

import csv
import math
import re
from collections import defaultdict
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from backend.diagnosis import Diagnosis, Finding, classify_line, diagnose_file

# What one file must satisfy: given its path and its diagnosis, each way it falls short (none
# when it is as expected). The path is there for the checks that read the lines themselves.
Check = Callable[[Path, Diagnosis], list[str]]


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


def _said(finding: Finding) -> str:
    """A finding as a miss line shows it: category, severity and the line it came from."""
    return f"{finding.category} ({finding.severity}, line {finding.line}: {finding.text[:80]!r})"


def top_in(accepted: Collection[str], *, error_only: bool) -> Check:
    """The top finding names an accepted category (at error level when ``error_only``), points
    at a line and carries the text, explanation and fixes the user is shown."""
    want = " or ".join(sorted(accepted)) + (" (error)" if error_only else "")

    def check(_path: Path, diagnosis: Diagnosis) -> list[str]:
        top = diagnosis.top
        if top is None:
            return [f"want {want}; nothing found"]
        if top.category not in accepted or (error_only and top.severity != "error"):
            return [f"want {want}; top is {_said(top)}"]
        empty = [
            part
            for part, present in (
                ("line", top.line >= 1),
                ("text", bool(top.text)),
                ("explanation", bool(top.explanation)),
                ("fixes", bool(top.fixes)),
            )
            if not present
        ]
        return [f"top {top.category} has no {', '.join(empty)}"] if empty else []

    return check


def no_error(*, live_lines: bool, decode_errors: str = "strict", min_lines: int = 0) -> Check:
    """A clean log: no finding at error level and, with ``live_lines``, no line the monitor
    would colour red (classify_line); ``min_lines`` guards against a log read as nearly empty."""

    def check(path: Path, diagnosis: Diagnosis) -> list[str]:
        problems = [
            f"want no error; found {_said(f)}" for f in diagnosis.findings if f.severity == "error"
        ]
        if diagnosis.lines_read <= min_lines:
            problems.append(f"read {diagnosis.lines_read} lines, want more than {min_lines}")
        if live_lines:
            text = path.read_text(encoding="utf-8", errors=decode_errors)
            for number, line in enumerate(text.splitlines(), start=1):
                flag = classify_line(line)
                if flag is not None and flag.severity == "error":
                    problems.append(f"live line {number} flagged {flag.category}: {line[:80]!r}")
        return problems

    return check


def no_wrong_error(label: str) -> Check:
    """A known miss: diagnose may find nothing, but any error it names is the right one."""

    def check(_path: Path, diagnosis: Diagnosis) -> list[str]:
        return [
            f"known miss of {label} names a wrong error: {_said(f)}"
            for f in diagnosis.findings
            if f.category != label and f.severity == "error"
        ]

    return check


def table_misses(
    folder: Path, table: Mapping[str, Check] | Iterable[tuple[str, Check]]
) -> list[str]:
    """Every way every file of the table falls short, one line each, prefixed by the file.

    A file whose diagnosis raises is a miss too, so one broken file does not hide the rest.
    """
    rows = table.items() if isinstance(table, Mapping) else table
    misses: list[str] = []
    for name, check in rows:
        path = folder / name
        try:
            problems = check(path, diagnose_file(path))
        except Exception as exc:  # reported with the other misses, not in their stead
            problems = [f"raised {exc!r}"]
        misses += [f"{name}: {problem}" for problem in problems]
    return misses


def assert_no_misses(what: str, misses: list[str]) -> None:
    """One assertion for a whole table, its message every miss on a line of its own."""
    assert not misses, f"{len(misses)} misses in {what}:\n" + "\n".join(misses)


def thread_key(url: str) -> str | None:
    """owner/repo#number, case- and punctuation-folded, DeepSpeed's two owners as one.

    None for a source that is no GitHub thread (the first corpus has one locally captured log).
    """
    match = re.match(r"https://github\.com/([^/]+)/([^/]+)/(?:issues|pull|discussions)/(\d+)", url)
    if match is None:
        return None
    owner, repo, number = match.groups()
    if repo.lower() == "deepspeed" and owner.lower() in ("microsoft", "deepspeedai"):
        owner = "deepspeedai"
    owner, repo = (re.sub(r"[-_.]", "", part.lower()) for part in (owner, repo))
    return f"{owner}/{repo}#{number}"


@dataclass
class HeldOut:
    """A held-out corpus scored strictly, as corpora 5 and 6 are: every failure's label must be
    the top error-level finding, every benign log must have none; ``known_misses`` are the
    files that do not yet (file -> what diagnose says instead)."""

    corpus: Path
    known_misses: Mapping[str, str]
    rows: list[dict[str, str]] = field(init=False)

    def __post_init__(self) -> None:
        self.rows = sources(self.corpus)

    @property
    def failures(self) -> list[tuple[str, str]]:
        return [(r["file"], r["label"]) for r in self.rows if r["label"] != "benign"]

    @property
    def benign(self) -> list[str]:
        return [r["file"] for r in self.rows if r["label"] == "benign"]

    def assert_sources(self, earlier: Iterable[str]) -> None:
        """SOURCES.tsv lists every file once with a note, no thread of an ``earlier`` corpus
        (folder names beside this one) is reused, and every known miss is one of its files."""
        assert_sources_list_every_file_once(self.corpus, self.rows)
        assert all(row["note"].strip() for row in self.rows)
        fixtures = self.corpus.parent
        used = {thread_key(r["url"]) for name in earlier for r in sources(fixtures / name)}
        used.discard(None)
        keys = {r["file"]: thread_key(r["url"]) for r in self.rows}
        assert None not in keys.values(), keys
        assert not sorted(name for name, key in keys.items() if key in used)
        assert set(self.known_misses) <= {name for name, _ in self.failures}

    def assert_top_errors(self) -> None:
        """Failure logs: their label on top at error level (``unrecognised_failure`` for kinds
        no category knows), with line, text, explanation and fixes; benign logs: nothing at
        error. The known misses are left out; every other miss is listed in one failure."""
        table = {name: top_in({label}, error_only=True) for name, label in self.failures}
        table |= {name: no_error(live_lines=False) for name in self.benign}
        checked = {name: check for name, check in table.items() if name not in self.known_misses}
        assert_no_misses(self.corpus.name, table_misses(self.corpus, checked))

    def right(self) -> int:
        """How many logs diagnose gets right, strictly."""
        hits = sum(top_error_category(self.corpus / n) == label for n, label in self.failures)
        return hits + sum(top_error_category(self.corpus / n) is None for n in self.benign)

    def assert_rate(self, floor: float) -> None:
        right = self.right()
        assert right / len(self.rows) >= math.floor(100 * floor) / 100, (right, len(self.rows))

    def print_table(self, held_out_rate: float) -> None:
        """Per label: right / logs; then the whole corpus beside its held-out measurement."""
        table: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for name, label in [*self.failures, *((b, "benign") for b in self.benign)]:
            got = top_error_category(self.corpus / name)
            table[label][0] += got == (None if label == "benign" else label)
            table[label][1] += 1
        for label in sorted(table):
            print(f"{label:24} {table[label][0]}/{table[label][1]}")
        right = sum(hit for hit, _ in table.values())
        print(f"all: {right}/{len(self.rows)} ({100 * right / len(self.rows):.1f} %); held out "
              f"first: {100 * held_out_rate:.1f} %")  # fmt: skip
