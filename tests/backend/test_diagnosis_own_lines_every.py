"""Every informational line trainwiz itself writes into a run's log gives no finding.

The training entry (``[trainwiz-entry] ...``, backend/entry) and the launcher, watcher and node
agents (``[trainwiz <time>] ...``, backend/runs) say what they chose or did; their f-strings
often quote a library's words, a path or an earlier failure, which the signatures match
elsewhere as failures. The lines are collected from the source (every ``log(...)``-like call and
every literal that starts with the prefix) rather than listed here, so a line added later is
checked too. Each placeholder is filled with sample words that name failures of several
categories; the line must still give nothing, neither a known category nor an unrecognised
failure. The deliberate failure reports (``OWN_REPORTS``, backend/diagnosis/loglines.py) stay
findings: the entry's are ``log(str(exc))`` (no literal, not collected), and the launcher's
``sbatch refused the job: {stderr}`` gives ``slurm_error`` only for Slurm's own words, which no
sample here holds.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.diagnosis import diagnose_text

BACKEND = Path(__file__).resolve().parents[2] / "backend"
ENTRY_PREFIX = "[trainwiz-entry] "
STAMP = "2026-12-01 12:00:00"
RUNS_PREFIX = f"[trainwiz {STAMP}] "
# Calls that write one line with the module's prefix: the entry's log(), the watcher's
# _log_line/_note, the node agents' note(), notify's _log() (which adds "notify: ").
ENTRY_CALLS = {"log"}
RUNS_CALLS = {"_log_line": "", "_note": "", "note": "", "_log": "notify: "}
# Words a placeholder may hold at run time: module errors, memory, disks, paths, CUDA, exits.
SAMPLES = (
    "ModuleNotFoundError: No module named 'flash_attn'",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
    "OSError: [Errno 28] No space left on device: '/runs/x/output'",
    "PermissionError: [Errno 13] Permission denied: '/data/cache'",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
    "failed (exitcode: 1) local_rank: 0 (pid: 4242)",
    "KeyError: 'instruction'",
    "/home/ana/runs/20261201-120000-tiny/output/checkpoint-40",
    "12",
)


def _render(node: ast.expr, sample: str) -> str | None:
    """A string literal, f-string or concatenation of them with every placeholder filled."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):  # the prefix helpers' {stamp} is a time, not words
        return "".join(
            part.value
            if isinstance(part, ast.Constant)
            else STAMP
            if isinstance(part, ast.FormattedValue) and ast.unparse(part.value) == "stamp"
            else sample
            for part in node.values
        )
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left, sample), _render(node.right, sample)
        return None if left is None or right is None else left + right
    return None


def _called(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)


def _entry_prefix(tree: ast.Module) -> str:
    """What this entry module's own ``log`` prints first ("[trainwiz-entry] kernels:"); a
    module handed ``log`` by its caller gets the plain prefix."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "log":
            for call in ast.walk(node):
                if isinstance(call, ast.Call) and _called(call) == "print" and call.args:
                    first = _render(call.args[0], "")
                    if first is not None and first.startswith(ENTRY_PREFIX.strip()):
                        return first + " "
    return ENTRY_PREFIX


def _lines(path: Path, sample: str) -> Iterator[tuple[int, str]]:
    """(source line, log line) for each line this module writes with trainwiz's prefix."""
    entry = path.parent.name == "entry"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    prefix = _entry_prefix(tree) if entry else RUNS_PREFIX
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = _called(node)
            if entry and name in ENTRY_CALLS:
                parts = [_render(arg, sample) for arg in node.args]
                if parts and None not in parts:  # log(str(exc)): a failure report, skipped
                    yield node.lineno, prefix + " ".join(p for p in parts if p)
            elif not entry and name in RUNS_CALLS:
                text = _render(node.args[-1], sample) if node.args else None
                if text is not None:
                    yield node.lineno, prefix + RUNS_CALLS[name] + text
        elif isinstance(node, (ast.Constant, ast.JoinedStr)):
            text = _render(node, sample)
            if text is not None and text.startswith("[trainwiz"):
                yield node.lineno, text.rstrip("\n")


def _sources() -> list[Path]:
    return sorted(BACKEND.glob("entry/*.py")) + sorted(BACKEND.glob("runs/**/*.py"))


def test_the_collector_finds_the_lines_of_the_entry_and_the_launcher() -> None:
    """A guard for the collector itself: the lines it must see are among those it collects."""
    found = [text for path in _sources() for _, text in _lines(path, "X")]
    assert len(found) >= 75, len(found)
    for wanted in (
        "[trainwiz-entry] flash_attn unusable (X: X); using sdpa",
        "[trainwiz-entry] model saved to X",
        "[trainwiz-entry] kernels: use_liger_kernel:",
        RUNS_PREFIX + "run X: X",
        RUNS_PREFIX + "attempt X failed (X); restart X of X",
        RUNS_PREFIX + "notify: end of run not sent: X",
        "[trainwiz] removing finished container X of run X",
    ):
        assert any(text.startswith(wanted) for text in found), wanted


@pytest.mark.parametrize("sample", SAMPLES)
def test_no_informational_line_gives_a_finding(sample: str) -> None:
    flagged = []
    for path in _sources():
        for number, text in _lines(path, sample):
            findings = diagnose_text(text + "\n").findings
            if findings:
                where = f"{path.relative_to(BACKEND.parent)}:{number}"
                flagged.append(f"{where}: {text[:140]!r} -> {[f.category for f in findings]}")
    assert not flagged, "\n".join(flagged)


def test_own_lines_around_a_fatal_exception_leave_it_the_only_finding() -> None:
    """The watcher's closing lines after a traceback add nothing and hide nothing."""
    log = (
        "Traceback (most recent call last):\n"
        '  File "/srv/job/prep.py", line 19, in build\n'
        "KeyError: 'text'\n"
        f"{RUNS_PREFIX}attempt 1 failed (exit code 1); no complete checkpoint to resume\n"
        f"{RUNS_PREFIX}run failed: KeyError: 'text' (exit code 1)\n"
    )
    found = diagnose_text(log).findings
    assert [(f.category, f.line) for f in found] == [("unrecognised_failure", 3)]


def test_the_launchers_failure_report_is_still_a_finding() -> None:
    """Slurm's refusal reaches the log only through the launcher's line: it stays slurm_error."""
    line = (
        f"{RUNS_PREFIX}sbatch refused the job: sbatch: error: Batch job submission failed: "
        "Invalid partition name specified\n"
    )
    assert [f.category for f in diagnose_text(line).findings] == ["slurm_error"]
