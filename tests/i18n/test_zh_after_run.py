"""Under --lang zh the texts a user meets after a run are Chinese, with one prefix: the
multi-node plan's steps, diagnose's run-record finding, "stopped on request", the CLI's
``trainwiz：`` lines (never a mix of ``trainwiz:`` and ``trainwiz：``)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from backend.rundir import RunStatus, write_status
from tests.trainwiz_cli import cli as trainwiz

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return trainwiz("--lang", "zh", *args, check=False, timeout=60)


def test_multinode_plan_steps_are_translated(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"].update(scheduler="ssh", nnodes=2, nodes=["gpu-a", "gpu-b"])
    preset = tmp_path / "ssh.yaml"
    preset.write_text(yaml.safe_dump(data))
    proc = cli("plan", str(preset))
    assert proc.returncode == 0, proc.stderr
    titles = [line for line in proc.stdout.splitlines() if line.startswith("# [")]
    assert titles and not any("GPU sampler on" in t for t in titles), titles
    assert sum("GPU 采样器" in t for t in titles) == 2


def stopped_run(tmp_path: Path, message: str, state: str = "failed") -> Path:
    run_dir = tmp_path / "runs" / "20261201-000000-z"
    run_dir.mkdir(parents=True)
    status = RunStatus(run_id=run_dir.name, preset="z", runner="host", state=state, message=message)
    write_status(run_dir, status.model_copy(update={"cause": "exit_code", "exit_code": 1}))
    (run_dir / "train.log").write_text("nothing the classifier knows\n")
    return run_dir


def test_diagnose_run_record_finding_is_translated(tmp_path: Path) -> None:
    run_dir = stopped_run(tmp_path, "stopped on request (exit code -15)")
    proc = cli("diagnose", str(run_dir))
    out = proc.stdout
    assert "The run record says" not in out and "运行记录显示它失败了" in out, out
    assert "stopped on request" not in out and "已按请求停止（退出码 -15）" in out, out
    machine = json.loads(trainwiz("diagnose", str(run_dir), "--json", check=False).stdout)
    assert machine["run"]["message"] == "stopped on request (exit code -15)"  # the record: English


def test_one_prefix_for_every_cli_line(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["zero"] = {"stage": 2}
    preset = tmp_path / "zero.yaml"
    preset.write_text(yaml.safe_dump(data))
    proc = cli("plan", str(preset))  # a BadInput line: printed by the CLI's own handler
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert lines and all(line.startswith("trainwiz：") for line in lines), lines
    assert "需要 CUDA GPU" in proc.stderr
