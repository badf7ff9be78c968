"""A CUDA launch that this machine cannot run is refused before anything is written: the
Checks step's driver and GPU verdicts (the wizard disables Launch on the same results).

Before: `trainwiz launch` of a `launch.device: cuda` preset on a machine without the GPUs made
a run that failed in the trainer a minute later."""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from tests.trainwiz_cli import ROOT, cli


def test_more_gpus_than_this_machine_has_is_refused_in_one_line(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-64gpu"
    data["launch"].update(device="cuda", nproc_per_node=64)  # no machine here has 64
    data["training"]["bf16"] = False
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump(data))
    home = tmp_path / "home"
    done = cli("launch", str(preset), "--detach", check=False,
               env={**os.environ, "TRAINWIZ_HOME": str(home)})  # fmt: skip
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert "launch.device: cuda, but " in said[0] and "launch.device: cpu" in said[0]
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    # the printed plan still prints: it may be for another machine
    assert cli("plan", str(preset), env={**os.environ, "TRAINWIZ_HOME": str(home)}).returncode == 0
