"""One run-directory API: a run dir's file names are spelled once (``backend.paths``, re-exported
by ``backend.rundir``) and every reader or writer of a run dir -- the CLI, the monitor, the
troubleshoot screen, the runners -- names them through those constants. A literal
``run_dir / "metrics.jsonl"`` elsewhere is a second definition that drifts the day a file is
renamed: this test parses every module and fails on one."""

from __future__ import annotations

import ast
from pathlib import Path

from backend import paths
from backend.rundir import RunDir

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("backend", "tui", "screens", "widgets")
OWNERS = {Path("backend/paths.py"), Path("backend/rundir.py")}  # where the names are defined
# Modules another change is editing at the same time; each still spells one name (checked below,
# so the entry goes as soon as the file is moved onto the constants).
PENDING: dict[str, set[str]] = {}  # file -> names still spelled there (none left)
NAMES = {
    paths.STATUS,
    paths.PLAN,
    paths.PRESET,
    paths.LOG,
    paths.METRICS,
    paths.LAUNCH,
    paths.STOP_REQUEST,
    paths.ATTEMPTS,
}


def _spelled_names(source: str) -> list[tuple[int, str]]:
    """(line, literal) for each string constant that is a run-dir file name or a path ending in one
    (docstrings and messages that merely mention a name are prose, not a path)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            value = node.value
            if value in NAMES or any(value.endswith("/" + name) for name in NAMES):
                found.append((node.lineno, value))
    return found


def _offenders() -> dict[str, list[tuple[int, str]]]:
    out: dict[str, list[tuple[int, str]]] = {}
    for top in SCANNED:
        for path in sorted((ROOT / top).rglob("*.py")):
            rel = path.relative_to(ROOT)
            if rel in OWNERS:
                continue
            hits = _spelled_names(path.read_text(encoding="utf-8"))
            if hits:
                out[str(rel)] = hits
    return out


def test_no_run_dir_file_name_is_spelled_outside_the_run_dir_api() -> None:
    offenders = _offenders()
    for where, names in PENDING.items():
        assert {value for _, value in offenders.pop(where, [])} == names, f"{where}: update PENDING"
    assert offenders == {}, "use backend.rundir's constants / RunDir instead: " + "; ".join(
        f"{where}:{line} {value!r}" for where, hits in offenders.items() for line, value in hits
    )


def test_the_scan_finds_a_spelled_name() -> None:
    # The check itself: a path built from a literal is found, a sentence naming the file is not.
    assert _spelled_names('p = run_dir / "train.log"\n') == [(1, "train.log")]
    assert _spelled_names('p = Path(f"{root}/runs/x/status.json")\n') == [
        (1, "/runs/x/status.json")
    ]
    assert _spelled_names('"""Reads status.json and train.log."""\n') == []


def test_run_dir_names_its_files_through_the_constants(tmp_path: Path) -> None:
    run = RunDir(tmp_path)
    assert run.log == tmp_path / paths.LOG
    assert run.metrics == tmp_path / paths.METRICS
    assert run.status_file == tmp_path / paths.STATUS
    assert run.launch_file == tmp_path / paths.LAUNCH
    assert run.preset_file == tmp_path / paths.PRESET
    assert not run.is_run()
    run.log.write_text("")
    assert run.is_run()
