"""`trainwiz diagnose RUN` reads the run record too: a run SIGKILLed by the OOM killer leaves no
log line, but its status.json says why it ended, and diagnose must not report "no known failure"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backend.rundir import RunStatus, write_status
from backend.runs.diagnose_run import diagnose_run

REPO = Path(__file__).resolve().parents[2]
BENIGN_LOG = "{'loss': 2.31, 'learning_rate': 2e-05, 'epoch': 0.1}\n" * 5


def _make_run(home: Path, state: str, cause: str | None, message: str) -> Path:
    run_dir = home / "runs" / "20261201-120000-tiny-cpu"
    run_dir.mkdir(parents=True)
    (run_dir / "train.log").write_text(BENIGN_LOG)
    write_status(
        run_dir,
        RunStatus(
            run_id=run_dir.name,
            preset="tiny-cpu",
            runner="host",
            state=state,  # type: ignore[arg-type]
            cause=cause,
            exit_code=-9 if state == "failed" else None,
            message=message,
        ),
    )
    return run_dir


def _diagnose(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, "TRAINWIZ_HOME": str(home)},
        timeout=60,
        check=False,
    )


def test_a_killed_run_with_a_silent_log_is_an_error_from_its_record(tmp_path: Path) -> None:
    run_dir = _make_run(tmp_path, "failed", "host_oom", "a training process was killed (SIGKILL)")
    proc = _diagnose(tmp_path, run_dir.name, "--json")
    assert proc.returncode == 1, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["run"]["state"] == "failed" and data["run"]["cause"] == "host_oom"
    first = data["findings"][0]
    assert first["category"] == "run_record" and first["severity"] == "error"
    assert "host_oom" in first["title"] and "SIGKILL" in first["explanation"]

    human = _diagnose(tmp_path, run_dir.name)
    assert human.returncode == 1
    assert human.stdout.splitlines()[0].startswith(f"run {run_dir.name}: failed, cause host_oom")
    assert "no known failure" not in human.stdout


def test_a_stopped_run_is_not_an_error(tmp_path: Path) -> None:
    run_dir = _make_run(tmp_path, "stopped", "stopped", "stopped by the user")
    proc = _diagnose(tmp_path, run_dir.name, "--json")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads(proc.stdout)
    assert data["run"]["state"] == "stopped" and data["findings"] == []


def test_a_bare_log_has_no_run_fields(tmp_path: Path) -> None:
    log = tmp_path / "some.log"
    log.write_text(BENIGN_LOG)
    data = json.loads(_diagnose(tmp_path, str(log), "--json").stdout)
    assert data["run"] is None


def test_the_log_s_own_error_comes_first_and_the_record_adds_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path))
    run_dir = _make_run(tmp_path, "failed", "exit", "trainer exited with code 1")
    (run_dir / "train.log").write_text(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.2 GiB is free.\n"
    )
    result = diagnose_run(run_dir)
    categories = [f.category for f in result.diagnosis.findings]
    assert categories[0] == "cuda_oom" and "run_record" not in categories
    assert result.status is not None and result.status.cause == "exit"
