"""`trainwiz tune` as a user runs it: predicted only where the preset's GPU is absent (said so),
and the real probe path on the CPU (tiny model, launch.device: cpu): real launches through
backend.runs, measured rows in the report, the winner written, the calibration file for the
machine kind ("cpu") under TRAINWIZ_HOME."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
PERF = ROOT / "tests" / "fixtures" / "perf"
CONFIG_3B = {"hidden_size": 3072, "intermediate_size": 8192, "num_hidden_layers": 28,
             "num_attention_heads": 24, "vocab_size": 32000}  # fmt: skip


def _env() -> dict[str, str]:
    """The tests' environment with torch's torchrun on PATH (a helper venv may lack the script)."""
    env = dict(os.environ)
    spec = importlib.util.find_spec("torch")
    assert spec is not None and spec.origin
    site = Path(spec.origin).resolve().parents[1]  # .../lib/pythonX/site-packages
    bins = [Path(sys.executable).parent, site.parents[2] / "bin"]
    env["PATH"] = os.pathsep.join([*(str(b) for b in bins), env.get("PATH", "")])
    return env


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tui.cli", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=timeout, env=_env())  # fmt: skip


def test_no_gpu_here_predicts_and_says_so(tmp_path: Path) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG_3B))
    out = tmp_path / "tuned.yaml"
    proc = cli("tune", str(PERF / "3b-base.yaml"), "--gpu", "h200", "--config", str(config),
               "--lengths", str(PERF / "lengths-sharegpt-1500.json"), "--host-ram", "128",
               "--write", str(out), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["probed"] is False and data["probe"] == []
    assert (
        "no GPU on this machine" in data["predicted_only"]
        or "this machine has" in (data["predicted_only"])
    )
    assert "optimizer step: 1 rows of 8192" in data["batch"]
    assert "pack_tokens: 8192" in out.read_text()
    text = cli(
        "tune",
        str(PERF / "3b-base.yaml"),
        "--gpu",
        "h200",
        "--config",
        str(config),
        "--write",
        str(out),
        "--force",
    )  # fmt: skip  (its own file of a moment ago)
    assert text.returncode == 0 and "predicted only" in text.stdout
    assert "optimizer step:" in text.stdout
    both = cli("tune", str(PERF / "3b-base.yaml"), "--gpu", "h200", "--config", str(config),
               "--probe", "--no-probe")  # fmt: skip
    assert both.returncode == 2 and "--no-probe" in both.stderr and "Traceback" not in both.stderr
    bad = cli("tune", str(PERF / "3b-base.yaml"), "--gpu", "h200", "--config", str(config),
              "--compile-budget", "0")  # fmt: skip
    assert bad.returncode == 2 and "--compile-budget" in bad.stderr


def test_multi_gpu_preset_is_predicted_only(tmp_path: Path) -> None:
    data = yaml.safe_load((PERF / "3b-base.yaml").read_text())
    data["launch"]["nproc_per_node"] = 8
    preset = tmp_path / "8gpu.yaml"
    preset.write_text(yaml.safe_dump(data))
    config = tmp_path / "config.json"
    config.write_text(json.dumps(CONFIG_3B))
    proc = cli("tune", str(preset), "--gpu", "h200", "--config", str(config),
               "--write", str(tmp_path / "t.yaml"), "--json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    reason = json.loads(proc.stdout)["predicted_only"]
    assert reason.startswith("predicted only")  # no 8-GPU machine here: never measured


@pytest.mark.slow
def test_probe_runs_for_real_on_the_cpu_and_records_the_machine(
    tmp_path: Path, _trainwiz_home: Path
) -> None:
    assert (_trainwiz_home / "models" / "tiny-llama").is_dir()  # the full tier's home has it
    out = tmp_path / "tuned.yaml"
    proc = cli("tune", "tiny-cpu", "--probe", "--gpu", "h200", "--top", "1", "--steps", "3",
               "--write", str(out), "--json", timeout=400)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["probed"] is True
    (row,) = [r for r in data["probe"] if r["measured_real_tokens_per_s"]]
    assert row["source"] == "measured" and row["steps"] == 3 and row["state"] == "finished"
    assert data["winner"] == row["label"]
    run_dir = Path(row["run_dir"])
    assert (run_dir / "metrics.jsonl").is_file() and not (run_dir / "output").exists()
    rows = [json.loads(x) for x in
            (_trainwiz_home / "calibration" / "cpu.jsonl").read_text().splitlines()]  # fmt: skip
    assert [r["label"] for r in rows] == [row["label"]]
    assert rows[0]["measured_real_tokens_per_s"] == round(row["measured_real_tokens_per_s"], 1)
    assert "device: cpu" in out.read_text()  # the winner as the user's preset, still on the CPU
