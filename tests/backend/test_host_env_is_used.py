"""A host run's plan builds only the environment the run trains in, and trains in it.

Before: every host plan held ``trainwiz env build PRESET``, which makes a venv under the
trainwiz home that no launch ever used (training ran with trainwiz's own torchrun); with
``prepare: all`` a launch spent minutes on pip for nothing. Now the plan holds that step only
when the run will train in that venv (no ``environment.venv``, no torchrun beside trainwiz or
on PATH), and its train step names that venv's torchrun.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from backend.errors import BadInput
from backend.images.ready import built_venv, environment_ready, training_bin
from backend.images.venv import MARKER
from backend.plan.resolve import resolve_preset
from backend.preset import load_preset
from backend.runs.launch import preflight
from backend.runs.spec import build_spec, missing, plan_spec


def test_in_trainwizs_own_environment_the_plan_builds_no_venv() -> None:
    preset = load_preset("tiny-cpu")
    own = Path(sys.executable).parent / "torchrun"
    assert own.is_file(), "the dev install has the training extra"
    spec = plan_spec(preset)
    assert [s.id for s in spec.plan.steps] == ["model", "train"]
    assert spec.torchrun == str(own) == spec.plan.step("train").argv[0]
    assert " env build " not in spec.plan.as_script()  # nowhere in the printed plan


@pytest.fixture()
def bare_python(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """trainwiz as installed without its training extra: no torchrun beside its Python, none
    on PATH (the same interpreter, through a folder that holds only it)."""
    bin_dir = tmp_path / "bare" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(os.path.realpath(sys.executable))
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("PATH", str(empty))
    return bin_dir


def _finish_build(venv: Path) -> Path:
    """What a finished ``trainwiz env build`` leaves there: its marker and the venv's
    torchrun (a real build pip-installs torch, minutes; tests/backend/test_images_venv.py)."""
    (venv / "bin").mkdir(parents=True)
    torchrun = venv / "bin" / "torchrun"
    torchrun.write_text("#!/bin/sh\nexit 0\n", encoding="utf-8")
    torchrun.chmod(0o755)
    (venv / MARKER).write_text(json.dumps({"preset": "tiny-cpu", "versions": {}}), "utf-8")
    return torchrun


def test_without_an_environment_the_plan_builds_the_one_the_run_trains_in(
    bare_python: Path,
) -> None:
    preset = load_preset("tiny-cpu")
    venv, complete = built_venv(preset)
    assert not complete and venv.parent == Path(os.environ["TRAINWIZ_HOME"]) / "envs"
    spec = plan_spec(preset)
    assert [s.id for s in spec.plan.steps] == ["model", "environment", "train"]
    assert spec.plan.step("environment").argv[-3:] == ["env", "build", "tiny-cpu"]
    assert spec.plan.step("train").argv[0] == str(venv / "bin" / "torchrun") == spec.torchrun
    # a launch that prepares builds it first; one that does not is refused, naming the fix
    launched = build_spec(preset, prepare="missing")
    assert "environment" in [s.id for s in launched.prepare]
    preflight(resolve_preset(preset, None), prepare=True)
    with pytest.raises(BadInput, match="trainwiz env build tiny-cpu"):
        preflight(resolve_preset(preset, None), prepare=False)

    torchrun = _finish_build(venv)
    assert training_bin(preset) == torchrun and environment_ready(preset)
    assert not missing(preset, "environment")
    again = build_spec(preset, prepare="missing")
    assert "environment" not in [s.id for s in again.prepare]  # built: not rebuilt
    assert again.plan.step("train").argv[0] == str(torchrun)


def test_a_half_built_venv_is_never_trained_in(bare_python: Path) -> None:
    preset = load_preset("tiny-cpu")
    venv, _complete = built_venv(preset)
    _finish_build(venv)
    (venv / MARKER).unlink()  # a build cut off before its end
    with pytest.raises(BadInput, match="no training environment here"):
        training_bin(preset)
    assert missing(preset, "environment")
