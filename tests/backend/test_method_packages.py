"""A method's packages in a host run's training environment: ZeRO without deepspeed (QLoRA
without bitsandbytes) is said by the plan and refused by the launch before anything is written,
instead of failing once torchrun has started the trainer; and the trainer's own error, when it
happens anyway (another environment), is named with its fix.

The environment is a real Python: a venv folder whose ``bin/python`` runs this interpreter, so
``find_spec`` answers for the packages installed with the tests (deepspeed is not one of them:
it is an optional GPU extra, see pyproject).
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import pytest
import yaml

import backend.images.ready as ready
from backend.diagnosis import diagnose_text
from backend.errors import BadInput
from backend.preset import parse_preset_text
from backend.runs.spec import build_spec
from tests.trainwiz_cli import cli

SHIPPED = Path(__file__).resolve().parents[2] / "presets" / "tiny-cpu.yaml"


def _env(tmp_path: Path) -> Path:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    python = venv / "bin" / "python"
    python.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    torchrun = venv / "bin" / "torchrun"
    torchrun.write_text("#!/bin/sh\nexit 0\n")
    for tool in (python, torchrun):
        tool.chmod(0o755)
    return venv


def _zero_preset(tmp_path: Path) -> Path:
    data = yaml.safe_load(SHIPPED.read_text())
    data["launch"]["device"] = "cuda"
    data["training"].update(bf16=False, zero={"stage": 2})
    data.setdefault("environment", {})["venv"] = str(_env(tmp_path))
    path = tmp_path / "zero.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_the_environment_under_test_has_no_deepspeed() -> None:
    assert importlib.util.find_spec("deepspeed") is None  # the cases below rely on it


def test_a_zero_launch_without_deepspeed_is_refused_before_anything_is_written(
    tmp_path: Path,
) -> None:
    preset_file = _zero_preset(tmp_path)
    home = tmp_path / "home"
    env = {**os.environ, "TRAINWIZ_HOME": str(home)}
    proc = cli("launch", str(preset_file), "--detach", check=False, env=env)
    assert proc.returncode == 2
    said = proc.stderr.strip().splitlines()
    assert len(said) == 1 and "training.zero needs deepspeed" in said[0]
    assert str(tmp_path / "venv" / "bin" / "python") + " -m pip install deepspeed" in said[0]
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
    # The printed plan says the same, and still prints (it may be for another machine).
    plan = cli("plan", str(preset_file), env=env)
    assert "# training.zero needs deepspeed in the training environment" in plan.stdout


def test_a_package_that_is_there_passes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    preset = parse_preset_text(_zero_preset(tmp_path).read_text())
    monkeypatch.setattr(ready, "method_packages", lambda _preset: ["json", "yaml"])
    assert ready.missing_method_packages(preset) == (str(tmp_path / "venv/bin/python"), [])
    ready.refuse_missing_method_packages(preset)  # nothing to refuse
    monkeypatch.setattr(ready, "method_packages", lambda _preset: ["yaml", "no_such_pkg_xyz"])
    with pytest.raises(BadInput, match=r"training\.method needs no_such_pkg_xyz"):
        ready.refuse_missing_method_packages(preset)
    spec = build_spec(preset)
    assert any("no_such_pkg_xyz" in note for note in spec.notes)


def test_the_trainers_missing_package_error_is_named_with_its_fix() -> None:
    # The shape importlib.metadata and transformers' dependency check print (seen when the
    # trainer started without deepspeed); package names other than the one seen.
    log = (
        '[rank0]:   File "/x/site-packages/transformers/utils/versions.py", line 102\n'
        "[rank0]: importlib.metadata.PackageNotFoundError: No package metadata was found for "
        "bitsandbytes\n"
        "[rank1]: importlib.metadata.PackageNotFoundError: No package metadata was found for The "
        "'peft>=0.10' distribution was not found and is required by this application. \n"
    )
    top = diagnose_text(log).top
    assert top is not None and top.category == "version_mismatch"
    assert "not installed" in top.title
    assert top.fixes[0].title == "Install bitsandbytes in the training environment"
    alone = diagnose_text(
        "pkg_resources.DistributionNotFound: The 'peft>=0.10' distribution was not found and is "
        "required by this application\n"
    ).top
    assert alone is not None and alone.fixes[0].title == "Install peft in the training environment"
