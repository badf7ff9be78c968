"""`trainwiz diagnose` as a user runs it: a real subprocess, real files, exit codes and JSON."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "logcorpus"
H200 = Path(__file__).resolve().parents[1] / "fixtures" / "h200"
REPO = Path(__file__).resolve().parents[2]


def _trainwiz(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "diagnose", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=dict(os.environ),
        timeout=60,
        check=False,
    )


def test_json_shape_and_exit_1_on_error() -> None:
    proc = _trainwiz(str(CORPUS / "cuda_oom/fastchat-1781-vicuna7b-a100-40g.log"), "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    finding = data["findings"][0]
    for key in ("category", "severity", "line", "text", "title", "explanation", "fixes"):
        assert key in finding
    assert (
        finding["category"] == "cuda_oom"
        and finding["severity"] == "error"
        and finding["line"] == 1
    )
    assert all({"title", "reason", "changes"} <= set(fix) for fix in finding["fixes"])


def test_clean_log_exits_0() -> None:
    proc = _trainwiz(str(H200 / "train-log-noofl_bs4_nogc_2g.txt"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no known failure" in proc.stdout


def test_missing_file_exits_2() -> None:
    proc = _trainwiz("/nonexistent/train.log", "--json")
    assert proc.returncode == 2
    assert "neither a log file nor a run" in proc.stderr


def test_run_id_uses_its_log_and_preset(tmp_path: Path) -> None:
    run = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / "20261130-040000-vicuna"
    run.mkdir(parents=True)
    shutil.copy(
        CORPUS / "port_in_use/dlrover-443-init-process-group-server-socket.log", run / "train.log"
    )
    shutil.copy(REPO / "presets" / "vicuna-7b-4xa100-40g.yaml", run / "preset.yaml")
    proc = _trainwiz(run.name, "--json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["log"].endswith("train.log") and data["preset"].endswith("preset.yaml")
    top = data["findings"][0]
    assert top["category"] == "port_in_use"
    assert top["fixes"][0]["changes"][0]["path"] == "launch.master_port"


def test_human_output_lists_fixes_with_preset() -> None:
    proc = _trainwiz(
        str(CORPUS / "shm_bus_error/colossalai-3556-elastic-exitcode-7.log"),
        "--preset",
        str(REPO / "presets" / "tiny-cpu.yaml"),
    )
    assert proc.returncode == 1
    assert "ERROR   shm  line 3" in proc.stdout
    assert "fix 1:" in proc.stdout


def test_diagnose_file_starts_without_the_launcher_planner_pydantic_or_textual(
    tmp_path: Path,
) -> None:
    # Start-up is mostly imports: reading a log must not pull in the rest of trainwiz.
    log = tmp_path / "x.log"
    log.write_text(
        "slurmstepd: error: *** JOB 5 ON n1 CANCELLED AT 2026-01-01T00:00:00 DUE TO TIME LIMIT ***\n"
    )
    code = (
        "import sys; from tui.cli import main; rc = main(['diagnose', sys.argv[1]]); "
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'textual') or m == 'rich.console'"
        " or m.startswith(('backend.runs', 'backend.planner', 'backend.preset', 'backend.images')));"
        " print('HEAVY', heavy, rc)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(log)], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert "slurm_time_limit" in proc.stdout, proc.stderr
    assert proc.stdout.strip().endswith("HEAVY [] 1"), proc.stdout[-400:]


def test_every_subcommand_is_still_listed_and_reachable() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0
    for name in ("check", "plan", "launch", "diagnose", "replay", "presets"):
        assert name in proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "--lang", "en", "plan", "--help"],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and "usage: trainwiz plan" in proc.stdout
