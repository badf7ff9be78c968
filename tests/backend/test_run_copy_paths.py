"""A copied run directory is a run of its own (docs/checkpoints.md): its records name the
original's folder (preset.yaml holds the output folder as an absolute path, launch.json the run
dir, the preset file and the trainer's argv), yet resume, chat, serve and export of the copy read
and write only the copy. Built by hand the way a launch leaves a run; nothing is trained."""

from __future__ import annotations

import json
import shutil
import struct
from pathlib import Path

import pytest

from backend.entry.checkpoints import write_marker
from backend.plan.resolve import resolve_preset
from backend.preset.loader import load_preset, preset_to_yaml
from backend.preset.redacted import redact_preset
from backend.results.weights import weights
from backend.rundir import LAUNCH, PRESET, RunDir, RunStatus, write_status
from backend.runs.resume import latest_checkpoint, output_dir
from backend.runs.spec import build_spec, next_attempt_spec

ROOT = Path(__file__).resolve().parents[2]
RUN_ID = "20261201-000000-tiny-cpu"


def launched_run(home: Path) -> Path:
    """A failed run as launch leaves it: preset.yaml with ``@run/output`` resolved to an
    absolute path, launch.json from the launch spec, checkpoint-2 and a saved model."""
    preset = load_preset(ROOT / "presets" / "tiny-cpu.yaml")
    run_dir = home / "runs" / RUN_ID
    run_dir.mkdir(parents=True)
    write_status(
        run_dir, RunStatus(run_id=RUN_ID, preset=preset.name, runner="host", state="failed")
    )
    (run_dir / PRESET).write_text(preset_to_yaml(redact_preset(resolve_preset(preset, run_dir))))
    spec = build_spec(preset, run_dir=run_dir, prepare="none", preset_ref=str(run_dir / PRESET))
    (run_dir / LAUNCH).write_text(json.dumps(spec.launch_json()))
    out = run_dir / "output"
    checkpoint = out / "checkpoint-2"
    checkpoint.mkdir(parents=True)
    (checkpoint / "trainer_state.json").write_text('{"global_step": 2}')
    for folder in (checkpoint, out):  # config and (empty, whole) weights
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(struct.pack("<Q", 2) + b"{}")
    write_marker(checkpoint, {"step": 2})
    return run_dir


def _names(data: object, folder: Path) -> list[str]:
    """The strings of a record that lead into ``folder``."""
    text = json.dumps(data)
    return [part for part in text.split('"') if part == str(folder) or f"{folder}/" in part]


@pytest.mark.parametrize("where", ["another home", "renamed beside it"])
def test_a_copied_run_reads_and_writes_only_itself(where: str, tmp_path: Path) -> None:
    original = launched_run(tmp_path / "home")
    if where == "another home":
        copy = tmp_path / "elsewhere" / "runs" / RUN_ID
    else:
        copy = original.with_name(RUN_ID + "-copy")
    shutil.copytree(original, copy)
    assert str(original / "output") in (copy / PRESET).read_text()  # the record names it

    out = copy / "output"
    assert output_dir(copy) == out
    assert latest_checkpoint(copy) == (2, out / "checkpoint-2")
    assert weights(copy).path == out  # chat, serve and export load the copy's model
    assert weights(copy, checkpoint=2).path.parent == out
    run = RunDir(copy)
    assert run.own_path(str(original / "output" / "x")) == str(out / "x")
    assert run.own_path("/data/shared-out") == "/data/shared-out"  # not the run's own: kept
    assert _names(run.launch_spec(), original) == []

    before = (original / LAUNCH).read_text()
    spec = next_attempt_spec(copy, json.loads((copy / LAUNCH).read_text()), 2, "resume")
    assert _names(spec, original) == [], _names(spec, original)
    assert str(out) in spec["train"]["argv"]
    assert spec["preset_file"] == str(copy / PRESET)
    assert (original / LAUNCH).read_text() == before
    assert not (original / "launch.2.json").exists()

    # once the copy has resumed (its launch.json names the copy), its paths stay its own
    assert output_dir(copy) == out
    again = next_attempt_spec(copy, spec, 3, "auto")
    assert _names(again, original) == [] and str(out) in again["train"]["argv"]
