"""Nothing trainwiz did not create is deleted or overwritten without an explicit --force."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from backend.model.tiny import MARKER
from tests.faults.helpers import ROOT, cli


def _old_tiny(folder: Path) -> Path:
    """A folder an earlier make-tiny filled (other spec), plus a file of the user's."""
    folder.mkdir()
    (folder / MARKER).write_text(json.dumps({"spec": {"hidden_size": 8}, "files": ["config.json"]}))
    (folder / "config.json").write_text("{}")
    (folder / "my-notes.txt").write_text("the user's own\n")
    return folder


def test_make_tiny_keeps_a_users_file_beside_an_old_tiny_model(tmp_path: Path) -> None:
    folder = _old_tiny(tmp_path / "tiny")
    out = cli("model", "make-tiny", str(folder))
    assert out.returncode == 2, out.stderr
    assert "my-notes.txt" in out.stderr and "--force" in out.stderr
    assert (folder / "my-notes.txt").read_text() == "the user's own\n"
    assert (folder / "config.json").read_text() == "{}"


def test_a_launch_prepare_does_not_delete_it_either(tmp_path: Path) -> None:
    folder = _old_tiny(tmp_path / "tiny")
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["model"]["dir"] = str(folder)
    from backend.errors import BadInput
    from backend.model.fetch import ensure_model  # what a run's prepare step calls
    from backend.preset.schema import Preset

    preset = Preset.model_validate(data)
    try:
        ensure_model(preset.model)
    except BadInput as exc:
        assert "my-notes.txt" in str(exc)
    else:
        raise AssertionError("make_tiny replaced a folder holding a user's file")
    assert (folder / "my-notes.txt").exists()


def _tune_preset(tmp_path: Path) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "vicuna-7b-4xa100-40g.yaml").read_text())
    path = tmp_path / "P.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_tune_never_overwrites_a_file_without_force(tmp_path: Path) -> None:
    preset = _tune_preset(tmp_path)
    tuned = tmp_path / "P-tuned.yaml"
    tuned.write_text("# mine\n")
    mine = tmp_path / "F.yaml"
    mine.write_text("# also mine\n")
    for argv in (
        ["tune", str(preset), "--gpu", "a100"],
        ["tune", str(preset), "--gpu", "a100", "--write", str(mine)],
    ):
        out = cli(*argv)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "--force" in out.stderr and "Traceback" not in out.stderr
    assert tuned.read_text() == "# mine\n" and mine.read_text() == "# also mine\n"
    forced = cli("tune", str(preset), "--gpu", "a100", "--write", str(mine), "--force")
    assert forced.returncode == 0, forced.stderr
    assert mine.read_text() != "# also mine\n"
