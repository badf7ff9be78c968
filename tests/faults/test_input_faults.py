"""Bad input to the run commands: refused with exit 2 before anything exists, nothing deleted."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from backend import paths
from backend.errors import BadInput
from backend.model.placeholders import resolve_placeholders
from backend.rundir import create_run_dir, new_run_id
from tests.faults.helpers import ROOT, cli


@pytest.mark.parametrize("value", ["nan", "-1", "inf", "abc"])
def test_stop_timeout_must_be_a_finite_non_negative_number(value: str) -> None:
    run_dir = create_run_dir("p", "host")
    out = cli("stop", run_dir.name, "--timeout", value)
    assert out.returncode == 2
    assert "--timeout" in out.stderr and "Traceback" not in out.stderr
    assert not (run_dir / "stop_requested").exists()


def _preset(tmp_path: Path, base: str, **changes: dict) -> Path:
    data = yaml.safe_load((ROOT / "presets" / f"{base}.yaml").read_text())
    for section, values in changes.items():
        if isinstance(values, dict):
            data.setdefault(section, {}).update(values)
        else:
            data[section] = values
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_bad_ulimit_starts_nothing(tmp_path: Path) -> None:
    preset = _preset(
        tmp_path,
        "vicuna-7b-4xa100-40g",
        name="bad-ulimit",
        container={"ulimits": [{"name": "memlock", "value": "abc"}]},
    )
    out = cli("launch", str(preset), "--detach")
    assert out.returncode == 2, out.stderr
    assert "abc" in out.stderr and "Traceback" not in out.stderr
    runs = paths.runs_dir()
    assert not runs.exists() or not [p for p in runs.iterdir() if p.name[0] != "."]


def test_run_ids_are_bounded_and_stay_inside_runs(tmp_path: Path) -> None:
    long_id = new_run_id("x" * 300, tmp_path, now=1_700_000_000)
    assert len(long_id) <= 100
    for name in ("../../etc", "a/b", "..", "\n\x00;$(id)", ""):
        run_id = new_run_id(name, tmp_path)
        assert "/" not in run_id and "\x00" not in run_id and "\n" not in run_id
        assert (tmp_path / run_id).resolve().parent == tmp_path.resolve()
    run_dir = create_run_dir("y" * 300, "host")
    assert run_dir.parent == paths.runs_dir() and len(run_dir.name) <= 100


def test_a_300_character_preset_name_launches_or_is_refused_cleanly(tmp_path: Path) -> None:
    preset = _preset(tmp_path, "tiny-cpu", name="n" * 300, training={"max_steps": 1})
    out = cli("launch", str(preset), "--detach", "--no-prepare")
    assert "Traceback" not in out.stderr and "File name too long" not in out.stderr
    runs = paths.runs_dir()
    made = [p for p in runs.iterdir() if p.name[0] != "."] if runs.exists() else []
    if out.returncode == 0:
        (run_dir,) = made
        assert len(run_dir.name) <= 100
        cli("stop", run_dir.name, "--timeout", "5")
    else:
        assert out.returncode == 2 and made == []


def test_make_tiny_refuses_a_directory_it_did_not_make(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.mkdir()
    (target / "thesis.tex").write_text("years of work")
    out = cli("model", "make-tiny", str(target))
    assert out.returncode == 2, out.stderr
    assert "not made by trainwiz" in out.stderr
    assert (target / "thesis.tex").read_text() == "years of work"


def test_make_tiny_refuses_a_symlink_and_a_file(tmp_path: Path) -> None:
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "link").symlink_to(real)
    (tmp_path / "file").write_text("x")
    for name in ("link", "file"):
        out = cli("model", "make-tiny", str(tmp_path / name))
        assert out.returncode == 2, out.stderr
    assert (tmp_path / "file").read_text() == "x" and real.is_dir()


@pytest.mark.parametrize("value", ["@home", "@home/", "@home/.", "@home/runs", "@home/runs/.."])
def test_home_placeholder_never_names_home_or_a_parent_of_runs(value: str) -> None:
    with pytest.raises(BadInput, match="state directory"):
        resolve_placeholders(value, None)


def test_home_placeholder_inside_home_is_fine() -> None:
    assert resolve_placeholders("@home/models/x", None) == str(paths.home() / "models" / "x")


def test_a_preset_with_model_dir_at_home_deletes_nothing(tmp_path: Path) -> None:
    home = paths.home()
    earlier = create_run_dir("earlier", "host")
    (home / "keep.txt").write_text("mine")
    preset = _preset(tmp_path, "tiny-cpu", name="wipe", model={"dir": "@home"})
    for args in (("model", "make-tiny", str(preset)), ("launch", str(preset), "--detach")):
        out = cli(*args)
        assert out.returncode == 2, (args, out.stdout, out.stderr)
        assert "Traceback" not in out.stderr
    assert (home / "keep.txt").read_text() == "mine"
    assert (earlier / "status.json").is_file()
