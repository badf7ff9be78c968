"""A big log's parts scanned in parallel processes, merged into the one sequential answer.

The scan is CPU-bound (a line-shape pass per 4 MiB block, ~2-3 CPU-s per GiB), so a
multi-GiB log on a many-core GPU server is split at line boundaries into one part per worker. Each worker first reads the MiB
before its part in *quiet* mode (phase markers only: a save traceback, pip building, a TCPStore
frame), so a signature that needs context from just before the cut still sees it, then scans
its part with the usual scanner. The parent merges the per-category state in file order with
the same rules a single scan applies (first most severe line wins, counts add up, line numbers
shifted by the lines of the parts before), so the findings equal a sequential scan's except for
what straddles a cut: a hard-wrapped message in the last three lines of a part, or a deferred
match (``Signature.near``) whose context comes in the next part.

Workers are spawned, not forked: Troubleshoot scans from a thread, and forking a threaded
process is unsafe. The workers are the CPUs idle now (CPUs minus the load average);
``TRAINWIZ_DIAGNOSE_JOBS`` sets their number instead (1: never split).
"""

from __future__ import annotations

import math
import multiprocessing
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from backend.diagnosis.classifier import (
    MAX_LINES,
    MAX_TEXTS,
    _Acc,
    _Scanner,
    feed,
    findings_of,
)
from backend.diagnosis.model import SEVERITY_RANK, Diagnosis
from backend.diagnosis.unrecognised import TAIL_BYTES, add_unrecognised

if TYPE_CHECKING:
    from backend.preset.schema import Preset

# A spawned worker costs ~0.15 CPU-s to start (the interpreter and backend.diagnosis), what the
# line-shape scan needs for ~60 MiB of a training log: below these, workers cost what they save.
PARALLEL_MIN = 512 << 20
PART_MIN = 256 << 20
MAX_JOBS = 8
CONTEXT = 1 << 20  # read before each part for its phase markers


def _idle_cpus() -> int:
    """CPUs this process may use that are not busy now (a loaded box gains nothing from more
    processes: they only take turns, and starting them costs)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, round((cpus or 1) - os.getloadavg()[0]))


def jobs_for(size: int) -> int:
    """How many workers a log of ``size`` bytes gets (1: scan it in this process)."""
    if size < PARALLEL_MIN:
        return 1
    wanted = os.environ.get("TRAINWIZ_DIAGNOSE_JOBS", "")
    cpus = int(wanted) if wanted.isdigit() and int(wanted) > 0 else _idle_cpus()
    return max(1, min(cpus, MAX_JOBS, math.ceil(size / PART_MIN)))


class _Range:
    """A file read from its current position up to ``left`` bytes (a part)."""

    def __init__(self, handle: object, left: int) -> None:
        self.handle, self.left = handle, left

    def read(self, size: int = -1) -> bytes:
        want = self.left if size < 0 else min(size, self.left)
        data: bytes = self.handle.read(want)  # type: ignore[attr-defined]
        self.left -= len(data)
        return data


def cuts(path: Path, size: int, parts: int) -> list[tuple[int, int]]:
    """``parts`` byte ranges of the file, each starting at a line's start."""
    starts = [0]
    with path.open("rb") as handle:
        for index in range(1, parts):
            handle.seek(size * index // parts)
            handle.readline()  # to the start of the next line
            position = handle.tell()
            if starts[-1] < position < size:
                starts.append(position)
    return list(zip(starts, [*starts[1:], size], strict=True))


def scan_part(job: tuple[str, int, int]) -> tuple[dict[str, _Acc], int, bytes]:
    """One worker: (per-category state with part-relative line numbers, newlines, last byte)."""
    path, start, end = job
    scanner = _Scanner()
    with open(path, "rb") as handle:
        if start > 0:
            begin = max(0, start - CONTEXT)
            handle.seek(begin)
            context = handle.read(start - begin)
            if begin > 0:  # from a line's start
                context = context[context.find(b"\n") + 1 :]
            scanner.quiet = True
            scanner.scan(context, len(context))
            shift = scanner.line - 1  # the context's lines come before the part's first
            scanner.markers = {name: line - shift for name, line in scanner.markers.items()}
            scanner.line, scanner.pos, scanner.quiet, scanner.pending = 1, 0, False, []
        handle.seek(start)
        _done, last = feed(_Range(handle, end - start), scanner)  # type: ignore[arg-type]
    return scanner.acc, scanner.line - 1, last


def merge(parts: list[tuple[dict[str, _Acc], int, bytes]]) -> tuple[dict[str, _Acc], int]:
    """The parts' state as one scan would have left it; and the file's newline count."""
    merged: dict[str, _Acc] = {}
    offset = 0
    for accs, newlines, _last in parts:
        for category, acc in accs.items():
            acc.line += offset
            acc.lines = [line + offset for line in acc.lines]
            have = merged.get(category)
            if have is None:
                merged[category] = acc
                continue
            if SEVERITY_RANK[acc.severity] < SEVERITY_RANK[have.severity]:
                have.severity, have.line, have.text = acc.severity, acc.line, acc.text
                have.title, have.node = acc.title, acc.node
                have.groups = {**acc.groups, "all": have.groups.get("all", "")}
            have.count += acc.count
            have.nodes += [n for n in acc.nodes if n not in have.nodes]
            have.lines = (have.lines + [n for n in acc.lines if n not in have.lines])[:MAX_LINES]
            for text in acc.texts:
                if len(have.texts) < MAX_TEXTS and text not in have.texts:
                    have.texts.append(text)
            have.groups["all"] = "\n".join(have.texts)
            for key, value in acc.groups.items():
                have.groups.setdefault(key, value)
        offset += newlines
    return merged, offset


def diagnose_parallel(
    path: Path,
    size: int,
    preset: Preset | None,
    cancel: threading.Event | None,
    progress: Callable[..., None] | None,
) -> Diagnosis:
    ranges = cuts(path, size, jobs_for(size))
    jobs = [(str(path), start, end) for start, end in ranges]
    results = []
    done = 0
    with multiprocessing.get_context("spawn").Pool(len(jobs)) as pool:
        for (start, end), result in zip(ranges, pool.imap(scan_part, jobs), strict=True):
            if cancel is not None and cancel.is_set():
                pool.terminate()
                break
            results.append(result)
            done += end - start
            if progress is not None:
                progress(done, size)
    accs, newlines = merge(results)
    last = results[-1][2] if results else b""
    findings = findings_of(accs, preset)
    if cancel is None or not cancel.is_set():  # the log's end, as a sequential scan reads it
        with path.open("rb") as handle:
            handle.seek(max(0, size - TAIL_BYTES))
            add_unrecognised(findings, handle.read(), newlines, whole=size <= TAIL_BYTES)
    return Diagnosis(
        findings=findings,
        lines_read=newlines + (1 if last not in (b"", b"\n") else 0),
        bytes_read=done,
    )
