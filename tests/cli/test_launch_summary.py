"""A followed launch ends on a one-line summary from the run's own record (real CPU training)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def test_followed_launch_prints_steps_loss_real_tokens_and_output(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["max_steps"] = 3
    short = tmp_path / "short.yaml"
    short.write_text(yaml.safe_dump(data))
    proc = subprocess.run(
        [sys.executable, "-m", "tui.cli", "launch", str(short)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("trainwiz: 3/3 steps, loss ")
    assert " real tokens/s, wall time " in last and ", model in " in last
