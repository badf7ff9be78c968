"""The log pane's data: a bounded window of lines with their diagnosis flags.

Flags come from ``backend.diagnosis.classify_line`` (the one classifier the project has; the
monitor adds no failure patterns of its own). Counts per category cover the whole log, even the
lines that have scrolled out of the bounded window.
"""

from __future__ import annotations

import importlib
from collections import Counter, deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from backend.monitor.logfollow import LogBatch, is_progress

Classifier = Callable[[str], Any]


def load_classifier() -> Classifier | None:
    """``classify_line`` when backend.diagnosis provides it, else None (the pane says so)."""
    try:
        module = importlib.import_module("backend.diagnosis")
    except ImportError:
        return None
    fn: Classifier | None = getattr(module, "classify_line", None)
    return fn


@dataclass(frozen=True)
class Flag:
    category: str
    severity: str
    title: str


@dataclass(frozen=True)
class LogLine:
    no: int  # 1-based physical line number in the log (as diagnosis and editors count)
    text: str
    flag: Flag | None = None


@dataclass(frozen=True)
class ClassifiedBatch:
    """A LogBatch after classification (done in the worker thread, not the UI thread)."""

    lines: list[LogLine]
    progress: str | None  # the latest tqdm redraw seen in this batch
    reset: bool = False
    eof: bool = False


def classify_batch(batch: LogBatch, classifier: Classifier | None) -> ClassifiedBatch:
    out: list[LogLine] = []
    progress = None
    for text, no in zip(batch.lines, batch.numbers, strict=True):
        if is_progress(text):
            progress = text.strip()
            continue
        flag = None
        if classifier is not None:
            found = classifier(text)
            if found is not None:
                flag = Flag(str(found.category), str(found.severity), str(found.title))
        out.append(LogLine(no, text, flag))
    return ClassifiedBatch(out, progress, batch.reset, batch.eof)


@dataclass
class LogModel:
    max_lines: int = 10_000
    lines: deque[LogLine] = field(default_factory=deque)
    counts: Counter[str] = field(default_factory=Counter)
    severities: dict[str, str] = field(default_factory=dict)
    titles: dict[str, str] = field(default_factory=dict)
    total: int = 0
    dropped: int = 0
    progress: str | None = None
    max_width: int = 0

    def __post_init__(self) -> None:
        self.lines = deque(maxlen=self.max_lines)

    def add(self, batch: ClassifiedBatch) -> int:
        """Appends a batch; returns how many lines fell off the front (for scroll fix-ups)."""
        if batch.reset:
            self.clear()
        before = len(self.lines)
        for line in batch.lines:
            if line.flag is not None:
                self.counts[line.flag.category] += 1
                self.severities[line.flag.category] = line.flag.severity
                self.titles[line.flag.category] = line.flag.title
            if len(line.text) > self.max_width:
                self.max_width = len(line.text)
        self.lines.extend(batch.lines)
        self.total += len(batch.lines)
        if batch.progress:
            self.progress = batch.progress
        fell = before + len(batch.lines) - len(self.lines)
        self.dropped += fell
        return fell

    def clear(self) -> None:
        self.lines.clear()
        self.counts.clear()
        self.total = 0
        self.dropped = 0
        self.progress = None

    def next_flagged(self, after: int, backwards: bool = False) -> int | None:
        """Index (into ``lines``) of the next flagged line after index ``after``, wrapping."""
        return self._next(after, lambda ln: ln.flag is not None, backwards)

    def next_match(self, needle: str, after: int, backwards: bool = False) -> int | None:
        low = needle.lower()
        return self._next(after, lambda ln: low in ln.text.lower(), backwards)

    def _next(self, after: int, pred: Callable[[LogLine], bool], backwards: bool) -> int | None:
        n = len(self.lines)
        if n == 0:
            return None
        order: Iterable[int]
        if backwards:
            order = [(after - k) % n for k in range(1, n + 1)]
        else:
            order = [(after + k) % n for k in range(1, n + 1)]
        for i in order:
            if pred(self.lines[i]):
                return i
        return None

    def first_error(self) -> LogLine | None:
        for line in self.lines:
            if line.flag is not None and line.flag.severity == "error":
                return line
        return None
