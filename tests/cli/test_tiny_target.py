"""`model make-tiny` replaces its target folder whole: an empty DIR (an unset shell variable),
the folder the user stands in or one above it is refused before anything runs, in one line.

Before: `trainwiz model make-tiny ''` went to '.', emptied it (it held nothing trainwiz did not
make, so the guard let it through) and failed on rmdir('.') with seven lines of traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.trainwiz_cli import ROOT


def _in(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINWIZ_HOME": str(folder / "home")}
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args], cwd=folder, capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL, env=env, check=False,
    )  # fmt: skip


@pytest.mark.parametrize("target", ["", ".", "..", "/"])
def test_the_current_folder_or_above_is_never_a_tiny_models_folder(
    tmp_path: Path, target: str
) -> None:
    here = tmp_path / "work"
    here.mkdir()
    done = _in(here, "model", "make-tiny", target)
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert ("empty" if not target else "this folder or one above it") in said[0]
    assert sorted(p.name for p in here.iterdir()) == []  # nothing made here (not even home/)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["work"]


def test_an_empty_dir_to_validate_is_refused_not_read_as_this_folder(tmp_path: Path) -> None:
    done = _in(tmp_path, "model", "validate", "")
    assert done.returncode == 2 and "DIR: empty" in done.stderr and done.stdout == ""
