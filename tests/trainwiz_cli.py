"""The one way tests run the `trainwiz` CLI as a user does: a child process from the repo root, its
output captured, with a time limit so a hang fails the test instead of the session."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def cli(
    *args: str,
    check: bool = True,
    timeout: float = 240,
    env: Mapping[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    """`trainwiz ARGS…` with nothing on stdin (a CLI that would ask answers as in a script); with
    ``check`` a non-zero exit fails the test with the end of the command's output."""
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
    )
    if check:
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def cli_bytes(
    *args: str, timeout: float = 240, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """`cli` with stdout and stderr as the bytes a terminal would receive: a test of what reaches
    the terminal must not look at text a decoder has already replaced or rejected."""
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", *args],
        cwd=ROOT,
        capture_output=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=dict(env) if env is not None else None,
    )
