"""The CLI's rough edges as a user meets them in a shell: pipes, no terminal, listings, summaries.

Each test runs the real console entry in a subprocess, the way a shell runs it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from backend.runs.summary import summarize_run

ROOT = Path(__file__).resolve().parents[2]
TRAINWIZ = [sys.executable, "-c", "from tui.cli import entry; entry()"]


def test_plan_into_a_closed_pipe_stops_quietly() -> None:
    """`trainwiz plan P | head`: no BrokenPipeError traceback, the shell's SIGPIPE code."""
    proc = subprocess.Popen(
        [*TRAINWIZ, "plan", "vicuna-13b-v1.3-8xa100", "--json"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader goes away before the first write
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141
    assert "Traceback" not in stderr
    assert "BrokenPipeError" not in stderr


def test_wizard_without_a_terminal_says_so_instead_of_hanging() -> None:
    proc = subprocess.run(
        TRAINWIZ, cwd=ROOT, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=30
    )
    assert proc.returncode == 2
    assert "needs a terminal" in proc.stderr
    assert "trainwiz replay" in proc.stderr


def test_images_without_a_preset_is_a_listing_not_a_verdict() -> None:
    proc = subprocess.run(
        [*TRAINWIZ, "images", "--no-local", "--driver", "535.54.03", "--gpu", "8.0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "schema-defaults" not in proc.stdout
    assert "preset: none" in proc.stdout
    assert "--preset P judges for your job" in proc.stderr


def test_images_with_a_preset_no_image_can_run_exits_1() -> None:
    """A driver older than every catalog CUDA: for a real job that is a failure."""
    old_server = ["--driver", "418.39", "--cuda", "10.1", "--gpu", "8.0"]
    proc = subprocess.run(
        [*TRAINWIZ, "images", "--no-local", "--preset", "vicuna-13b-v1.3-8xa100", *old_server],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 1, proc.stdout
    assert "no compatible image" in proc.stdout


def _write_run(run_dir: Path, steps: int, log: str) -> None:
    run_dir.mkdir(parents=True)
    lines = [{"kind": "start", "world_size": 1}]
    for step in range(1, steps + 1):
        lines.append(
            {
                "kind": "step",
                "step": step,
                "max_steps": steps,
                "loss": 6.0 - step,
                "step_time_s": 0.5,
                "tokens": 4096,
                "tokens_nonpad": 1000 + step,
            }
        )
    lines.append({"kind": "end", "ok": True, "saved_to": str(run_dir / "output")})
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run_dir / "train.log").write_text(log)


def test_summary_line_counts_real_tokens_over_every_step(tmp_path: Path) -> None:
    """Every step counts, the first (warm-up) one too: the run's figure is the one the Monitor
    and `runs compare` show (backend/monitor/figures.py). No step clock: no wall time."""
    run = tmp_path / "run-a"
    _write_run(run, 4, "all good\n")
    summary = summarize_run(run)
    # steps 1..4: (1001 + 1002 + 1003 + 1004) tokens in 2 s
    assert summary.real_tokens_per_s == (1001 + 1002 + 1003 + 1004) / 2.0
    assert summary.line() == (
        f"4/4 steps, loss 5 → 2 (mean 3.5), 2,005 real tokens/s, model in {run / 'output'}"
    )


def test_failed_summary_names_the_likely_cause(tmp_path: Path) -> None:
    run = tmp_path / "run-b"
    oom = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a "
        "total capacity of 79.15 GiB of which 1.2 GiB is free.\n"
    )
    _write_run(run, 1, "step 1\n" + oom)
    summary = summarize_run(run, with_diagnosis=True)
    assert summary.top_finding is not None
    assert summary.top_finding.category == "cuda_oom"
    assert summary.top_finding.line == 2
