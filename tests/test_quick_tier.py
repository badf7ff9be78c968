"""The quick tier leaves out what was measured over its per-test budget, and only that."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tests.quick_tier import QUICK_MAX_S, recorded_durations, too_slow_for_quick

ROOT = Path(__file__).resolve().parents[1]


def test_only_tests_recorded_over_the_budget_leave_the_quick_tier() -> None:
    durations = {"t.py::slow": QUICK_MAX_S + 0.1, "t.py::edge": QUICK_MAX_S, "t.py::g": 9.0}
    ids = ["t.py::slow", "t.py::edge", "t.py::new", "t.py::g@snapshots"]
    # An id shown with its xdist group is matched by its plain id; an unrecorded test stays.
    assert too_slow_for_quick(ids, durations) == {"t.py::slow", "t.py::g@snapshots"}


def test_an_absent_file_keeps_every_test(tmp_path: Path) -> None:
    assert recorded_durations(tmp_path / "none.json") == {}


def test_the_committed_file_names_tests_that_exist() -> None:
    """A renamed or deleted test left in the file would silently measure nothing."""
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:randomly"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    collected = {line.strip() for line in out.splitlines() if "::" in line}
    stale = sorted(set(recorded_durations()) - collected)
    assert not stale, f"tests/durations.json names tests that do not exist: {stale[:10]}"


def test_recording_writes_each_tests_time(tmp_path: Path) -> None:
    (tmp_path / "test_two.py").write_text(
        "import time\n"
        "def test_slow():\n    time.sleep(0.6)\n"  # a measured duration, not a wait on an event
        "def test_fast():\n    pass\n",
        encoding="utf-8",
    )
    out = tmp_path / "d.json"
    subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.quick_tier", "-p", "no:randomly",
         "--rootdir", str(tmp_path), "--record-durations", str(out), str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, check=True,
    )  # fmt: skip
    recorded = json.loads(out.read_text(encoding="utf-8"))
    assert list(recorded) == ["test_two.py::test_slow"]
    assert recorded["test_two.py::test_slow"] >= 0.6
