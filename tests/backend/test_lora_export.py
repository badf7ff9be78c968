"""`trainwiz export --merge` refusals (docs/lora.md): a full run, a LoRA run without an adapter,
a base that is not on this host. Each exits 2 with the reason, well before any model is loaded, and
writes nothing. (The merge itself runs on a real LoRA training: test_lora_replay_export.py.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from backend.rundir import RunStatus, write_status

ROOT = Path(__file__).resolve().parents[2]


def make_run(home: Path, training: dict, *, adapter_base: str | None = None) -> Path:
    run_dir = home / "runs" / "20261201-000000-t"
    run_dir.mkdir(parents=True)
    write_status(run_dir, RunStatus(run_id=run_dir.name, preset="t", runner="host",
                                    state="finished"))  # fmt: skip
    out = home / "out"
    out.mkdir()
    preset = {
        "schema": 1,
        "name": "t",
        "model": {"source": "local", "dir": str(home / "m")},
        "launch": {"runner": "host", "device": "cpu"},
        "training": {"data_path": "d.json", "output_dir": str(out), **training},
    }
    (run_dir / "preset.yaml").write_text(yaml.safe_dump(preset))
    (run_dir / "launch.json").write_text(json.dumps({"runner": "host", "train": {"cwd": "/"}}))
    if adapter_base is not None:  # what peft's save_pretrained writes for the adapter
        (out / "adapter_config.json").write_text(
            json.dumps({"base_model_name_or_path": adapter_base, "r": 8, "peft_type": "LORA"})
        )
        (out / "adapter_model.safetensors").write_bytes(b"\0")
    return run_dir


def export(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    import os

    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "export", *args],
        cwd=ROOT, capture_output=True, text=True, timeout=60,
        env={**os.environ, "TRAINWIZ_HOME": str(home)},
    )  # fmt: skip


def test_merge_of_a_full_run_is_refused_naming_the_method(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, {})
    target = tmp_path / "x"
    proc = export(tmp_path, run_dir.name, "--to", str(target), "--merge")
    assert proc.returncode == 2, proc.stderr
    assert "--merge" in proc.stderr and "full fine-tune (training.method: full)" in proc.stderr
    assert "leave out --merge" in proc.stderr
    assert not target.exists()


def test_lora_run_without_an_adapter_says_to_let_it_finish(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, {"method": "lora"})
    proc = export(tmp_path, run_dir.name, "--to", str(tmp_path / "x"))
    assert proc.returncode == 2
    assert "no LoRA adapter (adapter_config.json)" in proc.stderr and "resume" in proc.stderr
    proc = export(tmp_path, run_dir.name, "--to", str(tmp_path / "x"), "--checkpoint", "5")
    assert proc.returncode == 2 and "--checkpoint 5" in proc.stderr


def test_merge_whose_base_is_not_here_is_refused_before_loading(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path, {"method": "lora"}, adapter_base=str(tmp_path / "gone"))
    target = tmp_path / "x"
    proc = export(tmp_path, run_dir.name, "--to", str(target), "--merge")
    assert proc.returncode == 2
    assert "base_model_name_or_path" in proc.stderr and "without --merge" in proc.stderr
    assert not target.exists() and not list(tmp_path.glob(".x.trainwiz-export-*"))
