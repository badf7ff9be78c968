"""The one way tests run the `trainwiz` CLI as a user does: a child process from the repo root, its
output captured, with a time limit so a hang fails the test instead of the session."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Mapping
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

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


def runs_records() -> dict[str, dict[str, Any]]:
    """``trainwiz runs --json`` by run id, printed by the same ``main`` in this process.

    For the tests that only read where their runs stand (not tests of `runs` itself, which run
    the command as a child like ``cli``): a child process per read cost ~0.4 s of CPU, taken
    from the trainings beside it, some 200 times a suite. The language ``--json`` switches to
    is set back afterwards, so the worker's next test sees its own."""
    from backend.i18n import current_language, set_language
    from tui.cli import main

    out, err = io.StringIO(), io.StringIO()
    language = current_language()
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main(["runs", "--json"])
    finally:
        set_language(language)
    assert code == 0, err.getvalue()[-3000:]
    return {r["run_id"]: r for r in json.loads(out.getvalue())}
