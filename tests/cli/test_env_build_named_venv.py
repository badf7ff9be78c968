"""`env build` of a host preset whose ``environment.venv`` names a folder that is not there is
refused before anything is built, in one line naming the field, exit 2.

Before: the venv was built under the trainwiz home (minutes of pip), and only then did the
command fail on the missing folder, exit 2 with the build done and the field named last."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

from backend.preset import load_preset
from tests.trainwiz_cli import ROOT


def test_a_named_venv_that_is_missing_is_refused_before_the_build(tmp_path: Path) -> None:
    preset = load_preset("tiny-cpu").model_dump(mode="json")
    assert preset["launch"]["runner"] == "host"
    missing = tmp_path / "no-such-venv"
    preset["environment"]["venv"] = str(missing)
    path = tmp_path / "named.yaml"
    path.write_text(yaml.safe_dump(preset))
    home = tmp_path / "home"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRAINWIZ_HOME": str(home)}
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "env", "build", str(path)], capture_output=True,
        text=True, timeout=120, stdin=subprocess.DEVNULL, env=env, check=False,
    )  # fmt: skip
    said = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 2 and len(said) == 1, done.stderr
    assert "environment.venv" in said[0] and str(missing) in said[0]
    assert done.stdout == ""
    assert not (home / "envs").exists()  # nothing was built
    assert not missing.exists()
