"""training.output_dir may only be the run dir, a new or empty folder, or one trainwiz made."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.plan.outputs import MARKER, claim_output_dir, output_dir_problem
from backend.preset.schema import Preset, Volume

ROOT = Path(__file__).resolve().parents[2]


def _preset(output_dir: str, **launch: object) -> Preset:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["output_dir"] = output_dir
    data["launch"].update(launch)
    return Preset.model_validate(data)


def _plan(tmp_path: Path, output_dir: str) -> subprocess.CompletedProcess[str]:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["output_dir"] = output_dir
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "plan", str(path)],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


@pytest.mark.parametrize(
    "value",
    [
        "/etc",
        "/",
        "HOME",
        "USERDIR",
        "@run/..",
        "@run/../other",
        "../../x",
        "/usr/local/newdir",
        "/etc/cron.d/x",
    ],
)
def test_plan_refuses_an_output_dir_that_is_not_trainwizs(tmp_path: Path, value: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / ".bashrc").write_text("user's\n")
    user = tmp_path / "mine"
    user.mkdir()
    (user / "notes.txt").write_text("keep me\n")
    value = {"HOME": str(home), "USERDIR": str(user)}.get(value, value)
    done = _plan(tmp_path, value)
    assert done.returncode == 2, done.stdout[-500:] + done.stderr
    assert done.stderr.startswith("trainwiz: training.output_dir: "), done.stderr
    assert "Traceback" not in done.stderr
    assert (user / "notes.txt").read_text() == "keep me\n"


def test_what_is_allowed(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    made = tmp_path / "made"
    made.mkdir()
    (made / MARKER).write_text("")
    (made / "pytorch_model.bin").write_text("old weights")
    for value in ("@run/output", "@run", str(empty), str(made), str(tmp_path / "new" / "out")):
        assert output_dir_problem(_preset(value)) is None, value
    # A docker path that no volume maps lives in the container only; one that a volume maps
    # is checked on the host (the run dir's own volume is inside the run dir).
    assert output_dir_problem(_preset("/etc/out", runner="docker")) is None
    docker = _preset("/out", runner="docker")
    docker.container.volumes = [Volume(host="@run/output", container="/out")]
    assert output_dir_problem(docker) is None
    docker.container.volumes = [Volume(host="/etc", container="/out")]
    assert "holds files trainwiz did not make" in (output_dir_problem(docker) or "")


def test_launch_marks_a_new_output_dir_so_a_second_run_may_reuse_it(tmp_path: Path) -> None:
    target = tmp_path / "new" / "out"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    claim_output_dir(_preset(str(target)), run_dir)
    assert (target / MARKER).is_file()
    (target / "config.json").write_text("{}")
    assert output_dir_problem(_preset(str(target))) is None
    os.remove(target / MARKER)
    assert "holds files trainwiz did not make" in (output_dir_problem(_preset(str(target))) or "")
