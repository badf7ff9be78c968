"""`trainwiz runs compare`: two recorded runs (one resumed, one on 2 GPUs) side by side: loss
curves from the continued series, preset fields that differ, final/min loss, real tok/s, wall
time (each attempt's first step to its last: backend/monitor/figures.py), GPU-hours; refusals
exit 2."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path

import pytest
import yaml

from backend.rundir import RunStatus, write_status
from tests.trainwiz_cli import cli as run_cli

ROOT = Path(__file__).resolve().parents[2]
cli = functools.partial(run_cli, check=False)  # these tests assert the exit code themselves


def make_run(name: str, lr: float, device: str, lines: list[dict], attempts: list[dict]) -> Path:
    run_dir = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / name
    run_dir.mkdir(parents=True)
    write_status(
        run_dir,
        RunStatus(
            run_id=name, preset="p", runner="host", state="finished",
            started_at=1000.0, ended_at=90_000.0,
        ),
    )  # fmt: skip
    preset = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    preset["training"]["learning_rate"] = lr
    preset["launch"]["device"] = device
    preset["description"] = f"run {name}"
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(preset))
    (run_dir / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    (run_dir / "attempts.json").write_text(json.dumps(attempts))
    return run_dir


def step(n: int, loss: float, attempt: int = 1, *, spent: float, begin: float) -> dict:
    """Step ``n`` of an attempt whose first step (``first``) started at ``begin``."""
    first = 1 if attempt == 1 else 6
    return {"kind": "step", "step": n, "max_steps": 10, "loss": loss, "step_time_s": spent,
            "tokens_nonpad": 500, "attempt": attempt,
            "time": begin + (n - first + 1) * spent}  # fmt: skip


@pytest.fixture
def two_runs() -> tuple[Path, Path]:
    # a: 7 steps of 75 s, then (a day later) steps 6-10 again from checkpoint 5: 12 x 75 s
    a_lines = [{"kind": "start", "world_size": 1}]
    a_lines += [step(n, 5 - n * 0.3, spent=75.0, begin=1000.0) for n in range(1, 8)]
    a_lines += [{"kind": "start", "world_size": 1, "resumed_from": 5, "attempt": 2}]
    a_lines += [step(n, 4 - n * 0.3, 2, spent=75.0, begin=80_000.0) for n in range(6, 11)]
    a_lines += [{"kind": "eval", "step": 10, "eval_loss": 1.5}]
    a = make_run(
        "20261201-000001-a", 0.003, "cpu", a_lines,
        [{"attempt": 1, "started_at": 1000.0, "ended_at": 1600.0},
         {"attempt": 2, "started_at": 80_000.0, "ended_at": 80_300.0}],
    )  # fmt: skip
    b_lines = [{"kind": "start", "world_size": 2, "gpu_name": "NVIDIA H200"}]
    b_lines += [step(n, 5 - n * 0.2, spent=360.0, begin=1000.0) for n in range(1, 11)]
    b = make_run(
        "20261201-000002-b", 0.001, "cuda", b_lines,
        [{"attempt": 1, "started_at": 1000.0, "ended_at": 4600.0}],
    )  # fmt: skip
    return a, b


def test_compare_json_has_curves_differences_and_costs(two_runs: tuple[Path, Path]) -> None:
    a, b = two_runs
    proc = cli("runs", "compare", a.name, b.name, "--json")
    assert proc.returncode == 0, proc.stderr
    found = json.loads(proc.stdout)
    ra, rb = found["runs"]
    assert ra["run_id"] == a.name and rb["run_id"] == b.name
    assert ra["loss"][0] == list(range(1, 11))  # the resumed run's steps once each
    assert ra["final_loss"] == pytest.approx(4 - 10 * 0.3)
    assert ra["min_loss"] == pytest.approx(1.0) and ra["min_loss_step"] == 10
    assert ra["eval_loss"] == [[10], [1.5]] and ra["min_eval_loss"] == 1.5
    assert ra["real_tokens_per_s"] == pytest.approx(500 / 75)  # the 10 steps counted
    assert ra["wall_s"] == pytest.approx(900.0)  # the two attempts' steps, not the day between
    assert ra["gpus"] == 0 and ra["gpu_hours"] == 0
    assert rb["gpus"] == 2 and rb["gpu_hours"] == pytest.approx(2.0)
    assert found["differences"]["training.learning_rate"] == [0.003, 0.001]
    assert found["differences"]["launch.device"] == ["cpu", "cuda"]
    assert not any(k.startswith("description") for k in found["differences"])
    assert "training.per_device_train_batch_size" not in found["differences"]


def test_compare_table_names_the_runs_and_the_fields(two_runs: tuple[Path, Path]) -> None:
    a, b = two_runs
    proc = cli("runs", "compare", a.name, b.name)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout
    assert a.name in out.splitlines()[0] and b.name in out.splitlines()[0]
    rows = {line.split("  ")[0]: line for line in out.splitlines()}
    assert "15m00s" in rows["wall time"] and "1h00m" in rows["wall time"]
    assert "2.00 (2 GPU)" in rows["GPU-hours"] and "(CPU)" in rows["GPU-hours"]
    lr = next(line for line in out.splitlines() if line.startswith("training.learning_rate"))
    assert "0.003" in lr and "0.001" in lr
    assert cli("runs").returncode == 0  # the list still works without a subcommand


def test_compare_refuses_one_run_or_the_same_twice(two_runs: tuple[Path, Path]) -> None:
    a, _b = two_runs
    for args in ((a.name,), (a.name, a.name)):
        proc = cli("runs", "compare", *args)
        assert proc.returncode == 2, proc.stdout
        assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
