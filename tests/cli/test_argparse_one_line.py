"""argparse's own refusals (a missing argument, an unknown option or command, a bad number)
are bad input like any other: one line on stderr, exit 2, no usage block."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "argv",
    [
        ["plan"],
        ["plan", "tiny-cpu", "--no-such-option"],
        ["no-such-command"],
        ["runs", "compare"],
        ["tune", "tiny-cpu", "--top", "many"],
        ["chat", "last", "--max-new-tokens", "-1"],
        ["--lang", "zh", "plan"],
    ],
)
def test_a_refused_command_line_is_one_line_and_exit_2(argv: list[str]) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", *argv],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "usage:" not in proc.stderr and "Traceback" not in proc.stderr
    assert lines[0].startswith("trainwiz")
