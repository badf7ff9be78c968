"""The fast scan (line shapes, then the literal prefilter) finds what trying every signature on
every line finds.

Three modes of one scanner: ``shapes`` (the default: each distinct line shape searched once),
``direct`` (the prefilter over every byte) and ``exhaustive`` (every signature and marker on
every line, anchors not consulted: the reference). They must give the same findings, to the
line numbers, texts, explanations and fixes, on every corpus file and on big synthetic logs
with failures at the start, in the middle, at the end and across a block boundary.
"""

from __future__ import annotations

import io
import json
import random
import re
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from backend.diagnosis import classifier, scan
from backend.diagnosis.classifier import diagnose_stream
from backend.diagnosis.scan import SHAPE_RETRY, ShapeFilter
from tests.backend.logcorpora import assert_no_misses

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
CORPUS_FILES = sorted(FIXTURES.glob("logcorpus*/*/*.log")) + sorted(
    FIXTURES.glob("h200/train-log-*.txt")
)
MODES = ("shapes", "direct", "exhaustive")


def _findings(data: bytes, mode: str) -> tuple[list[dict], int]:  # type: ignore[type-arg]
    diagnosis = diagnose_stream(io.BytesIO(data), total=len(data), mode=mode)  # type: ignore[arg-type]
    found = [asdict(f) for f in diagnosis.findings]
    for finding in found:  # a fix may name a port the kernel called free just now
        finding["fixes"] = re.sub(r"\b\d{4,5}\b", "PORT", json.dumps(finding["fixes"]))
    return found, diagnosis.lines_read


def _gist(result: tuple[list[dict[str, Any]], int]) -> str:
    """A mode's result as a miss line shows it: lines read, each finding's (category, line)."""
    found, lines_read = result
    return f"{lines_read} lines, {[(f['category'], f['line']) for f in found]}"


def _disagreements(
    data: bytes, modes: tuple[str, ...] = MODES
) -> tuple[list[dict[str, Any]], list[str]]:
    """The reference findings (the last mode's) and, for each mode that differs, how."""
    results = {mode: _findings(data, mode) for mode in modes}
    reference = results[modes[-1]]
    differing: list[str] = []
    for mode, result in results.items():
        if result != reference:
            shown, wanted = _gist(result), _gist(reference)
            detail = f"{shown} vs {wanted}" if shown != wanted else "other texts or fixes"
            differing.append(f"{mode} differs from {modes[-1]}: {detail}")
    return reference[0], differing


def _same_in_every_mode(data: bytes, modes: tuple[str, ...] = MODES) -> list[dict]:  # type: ignore[type-arg]
    findings, differing = _disagreements(data, modes)
    assert not differing, differing
    return findings


def test_the_corpora_are_all_there() -> None:
    assert len(CORPUS_FILES) >= 230


@pytest.mark.parametrize("folder", sorted({p.relative_to(FIXTURES).parts[0] for p in CORPUS_FILES}))
def test_every_file_of_a_corpus_gives_the_same_findings_in_every_mode(
    folder: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One test per corpus folder, every file of it scanned in every mode; the message lists
    each file and mode that disagree, so a scanner change shows all it broke at once."""
    # the shapes even for a small file of distinct lines (where they would step aside)
    monkeypatch.setattr(scan, "SHAPE_MIN", 0)
    monkeypatch.setattr(scan, "SHAPE_MAX_SHARE", 2.0)
    misses: list[str] = []
    for path in (p for p in CORPUS_FILES if p.relative_to(FIXTURES).parts[0] == folder):
        try:
            differing = _disagreements(path.read_bytes())[1]
        except Exception as exc:  # reported with the other misses, not in their stead
            differing = [f"raised {exc!r}"]
        misses += [f"{path.relative_to(FIXTURES)}: {line}" for line in differing]
    assert_no_misses(folder, misses)


def _benign(rng: random.Random) -> str:
    """A healthy line with other numbers each time (as a real run prints them)."""
    step, total = rng.randint(1, 9999), rng.randint(10000, 99999)
    choices = [
        f"{{'loss': {rng.uniform(0, 3):.4f}, 'grad_norm': {rng.uniform(0, 9):.3f}, "
        f"'learning_rate': {rng.uniform(0, 1e-4):.6e}, 'epoch': {rng.uniform(0, 3):.2f}}}\n",
        f" {step * 100 // total:2d}%|###       | {step}/{total} [{rng.randint(0, 59):02d}:"
        f"{rng.randint(0, 59):02d}<01:10,  {rng.uniform(1, 3):.2f}s/it]\r"
        f" {step * 100 // total:2d}%|###       | {step + 1}/{total} [00:02<01:09]\n",
        f"node{rng.randint(1, 16)}:{rng.randint(10, 999)}:{rng.randint(10, 999)} "
        f"[{rng.randint(0, 7)}] NCCL INFO Channel {rng.randint(0, 31):02d}/32 : 0 1 2 3\n",
        f"[rank{rng.randint(0, 63)}]:[W1130 03:32:{rng.randint(10, 59)}.242422870 "
        f"ProcessGroupNCCL.cpp:1575] Warning: destroy_process_group() was not called\n",
        f"Epoch {rng.randint(1, 5)}, Step {step}, Loss: {rng.uniform(0, 3):.4f}:  "
        f"31%|███       | {step}/{total} [07:01<15:32,  1.36s/it]\n",
    ]
    return rng.choice(choices)


FAILURES = [
    "Traceback (most recent call last):\n"
    '  File "/app/train.py", line 88, in <module>\n'
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 3 has a total "
    "capacity of 79.10 GiB of which 1.20 GiB is free.\n",
    "OSError: [Errno 28] No space left on device: '/data/output/checkpoint-1200'\n",
    "OSError: [Errno 12] Cannot allocate memory\n",
    "RuntimeError: The server socket has failed to listen on any local network\naddress. "
    "(errno: 98 - Address\nalready in use).\n",
    "WARNING: tokenization mismatch: 903 vs. 902. #turn = 3. (ignored)\n",
    "slurmstepd: error: *** STEP 77.0 ON gpu-b CANCELLED AT 2026-12-01T13:00:00 DUE TO TIME "
    "LIMIT ***\n",
]


def _big_log(size: int, places: list[float], seed: int = 5, straddle: int | None = None) -> bytes:
    """``size`` bytes of varied healthy lines with every failure inserted at each fraction of
    ``places``; with ``straddle``, one more failure excerpt is laid across that byte offset."""
    rng = random.Random(seed)
    parts: list[str] = []
    written = 0
    marks = sorted(int(p * size) for p in places)
    while marks:
        while marks and written >= marks[0]:
            marks.pop(0)
            for failure in FAILURES:
                parts.append(failure)
                written += len(failure.encode())
        if written < size:
            line = _benign(rng)
            parts.append(line)
            written += len(line.encode())
    data = "".join(parts).encode()
    if straddle is not None:
        cut = data.rfind(b"\n", 0, straddle - 40) + 1
        data = data[:cut] + FAILURES[0].encode() + FAILURES[3].encode() + data[cut:]
    return data


def test_failures_at_start_middle_end_and_across_blocks_of_a_big_log() -> None:
    """~10 MiB: three 4 MiB blocks, the failures at the start, the middle and the end, and an
    excerpt laid across the first block boundary (the prefilter reads the 4 MiB blocks)."""
    data = _big_log(10 << 20, [0.0, 0.5, 1.0], straddle=classifier.BLOCK)
    findings = _same_in_every_mode(data, ("shapes", "direct"))
    counts = {f["category"]: f["count"] for f in findings}
    assert counts["cuda_oom"] == 4 and counts["disk_full"] == 3 and counts["port_in_use"] >= 3
    assert {"host_oom", "tokenization_mismatch", "slurm_time_limit"} <= set(counts)
    assert findings[0]["line"] == 3  # the first OOM message: line 3 of the file


@pytest.mark.parametrize("block", [4 << 10, 64 << 10])
def test_small_blocks_match_the_exhaustive_reference(
    monkeypatch: pytest.MonkeyPatch, block: int
) -> None:
    """Small blocks put many boundaries through the failures; the exhaustive reference, slow,
    reads every line of it."""
    monkeypatch.setattr(classifier, "BLOCK", block)
    data = _big_log(200 << 10, [0.0, 0.33, 0.5, 0.9, 1.0], seed=block, straddle=3 * block)
    findings = _same_in_every_mode(data)
    assert {f["category"] for f in findings} >= {"cuda_oom", "disk_full", "port_in_use"}


def test_lines_of_one_shape_with_different_numbers_keep_their_own_categories() -> None:
    """Lines "[Errno 28]" and "[Errno 12]" have one shape: the shape is a candidate, and each line is
    then classified as it is (disk full, out of host memory)."""
    rng = random.Random(3)
    healthy = "".join(_benign(rng) for _ in range(20000))
    data = (healthy + FAILURES[1] + healthy + FAILURES[2] + healthy).encode()
    findings = _same_in_every_mode(data, ("shapes", "direct"))
    assert {f["category"] for f in findings} == {"disk_full", "host_oom"}


def test_a_log_of_distinct_lines_is_searched_directly_and_gives_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where nearly every line is different the shapes save nothing: the filter steps aside
    for a few blocks, then tries again (here the log turns repetitive half way)."""
    rng = random.Random(11)
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    distinct = "".join(
        " ".join(rng.choice(words) + rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
        + "\n"
        for _ in range(60000)
    )
    repetitive = "".join(_benign(rng) for _ in range(40000))
    data = (distinct + FAILURES[4] + distinct + repetitive + FAILURES[1] + repetitive).encode()
    monkeypatch.setattr(classifier, "BLOCK", 256 << 10)
    calls: list[bool] = []
    original = ShapeFilter.hot_lines

    def spy(self: ShapeFilter, data: bytes, limit: int) -> object:
        result = original(self, data, limit)
        calls.append(result is not None)
        return result

    monkeypatch.setattr(ShapeFilter, "hot_lines", spy)
    findings = _same_in_every_mode(data, ("shapes", "direct"))
    assert {f["category"] for f in findings} == {"tokenization_mismatch", "disk_full"}
    half = len(calls) // 2
    assert not any(calls[:half]) and sum(calls[half:]) >= half // 2  # aside, then back
    assert SHAPE_RETRY >= 2


def test_the_shape_filter_names_only_the_lines_that_may_hold_a_key() -> None:
    rng = random.Random(1)
    healthy = "".join(_benign(rng) for _ in range(3000))
    failure = "OSError: [Errno 28] No space left on device: '/x'\n"
    data = (healthy + failure + healthy).encode()
    assert len(data) >= scan.SHAPE_MIN
    newlines, ranges = ShapeFilter(classifier._KEYS).hot_lines(data, len(data)) or (0, [])
    assert newlines == data.count(b"\n")
    assert [data[a:b] for a, b in ranges] == [failure.rstrip("\n").encode()]
    quiet = (healthy * 2).encode()
    assert ShapeFilter(classifier._KEYS).hot_lines(quiet, len(quiet)) == (quiet.count(b"\n"), [])


def test_tqdm_redraws_joined_by_carriage_returns_are_shapes_of_their_own(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A bar redrawn with '\\r' thousands of times per '\\n' (stdout sent to a file): each redraw
    is a shape, so the filter still pays; a failure glued to a redraw and one between redraws
    are found where the direct scan finds them, and the '\\n' are counted as lines."""
    rng = random.Random(2)

    def epoch(total: int) -> str:
        draws = []
        for step in range(1, total + 1):
            cells = step * 10 // total
            draws.append(
                f" {step * 100 // total:3d}%|{'█' * cells}{' ' * (10 - cells)}| {step}/{total} "
                f"[00:{rng.randint(10, 59)}<01:{rng.randint(10, 59)}, {rng.uniform(1, 3):.2f}s/it]"
            )
        return "\r".join(draws) + "\n"

    glued = "\r 50%|█████     | 1/2 [00:01<00:01]OSError: [Errno 28] No space left on device\n"
    between = "\rtorch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\r"
    data = (epoch(20000) + _benign(rng) + epoch(20000)[:-1] + glued + epoch(9000)).encode()
    data = data.replace(b"\r", between.encode(), 1)
    monkeypatch.setattr(classifier, "BLOCK", 512 << 10)
    used: list[bool] = []
    original = ShapeFilter.hot_lines

    def spy(self: ShapeFilter, data: bytes, limit: int) -> object:
        result = original(self, data, limit)
        used.append(result is not None)
        return result

    monkeypatch.setattr(ShapeFilter, "hot_lines", spy)
    findings = _same_in_every_mode(data, ("shapes", "direct"))
    assert [(f["category"], f["line"]) for f in findings] == [("cuda_oom", 1), ("disk_full", 3)]
    assert sum(used) >= len(used) - 1  # every full block through the shapes
