"""Inputs that used to be taken for something else: an empty run id, a FIFO as data, a
workdir that does not exist, numbers past any sane bound."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from backend.rundir import create_run_dir
from tests.faults.helpers import ROOT, cli


@pytest.mark.parametrize("command", ["stop", "logs", "resume", "attach", "export", "chat"])
@pytest.mark.parametrize("ref", ["", " ", "\t"])
def test_an_empty_run_id_never_picks_the_only_run(tmp_path: Path, command: str, ref: str) -> None:
    run_dir = create_run_dir("p", "host")
    extra = ["--to", str(tmp_path / "out")] if command == "export" else []
    out = cli(command, ref, *extra)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "give a run id" in out.stderr and "Traceback" not in out.stderr
    assert not (run_dir / "stop_requested").exists()
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("length", [300, 100_000])
def test_a_very_long_run_id_is_bad_input(length: int) -> None:
    out = cli("stop", "a" * length)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr) < 400


def _data_cases(tmp_path: Path) -> dict[str, tuple[str, str]]:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    empty = tmp_path / "empty.json"
    empty.write_bytes(b"")
    return {
        "dev_zero": ("/dev/zero", "is a device"),
        "fifo": (str(fifo), "is a FIFO"),
        "root": ("/", "is a directory"),
        "empty": (str(empty), "is empty (0 bytes)"),
        "missing": (str(tmp_path / "nope.json"), "does not exist"),
    }


@pytest.mark.parametrize("case", ["dev_zero", "fifo", "root", "empty", "missing"])
def test_data_files_are_named_for_what_they_are(tmp_path: Path, case: str) -> None:
    path, words = _data_cases(tmp_path)[case]
    out = cli("data", "check", path)
    assert out.returncode == 2, out.stderr
    assert words in out.stderr and "training.data_path" in out.stderr
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["data_path"] = path
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump(data))
    launched = cli("launch", str(preset), "--detach")
    assert launched.returncode == 2, launched.stderr
    assert "training.data_path" in launched.stderr and words in launched.stderr


def test_a_workdir_that_does_not_exist_is_exit_2(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["workdir"] = str(tmp_path / "no-such-dir")
    preset = tmp_path / "p.yaml"
    preset.write_text(yaml.safe_dump(data))
    out = cli("launch", str(preset), "--detach")
    assert out.returncode == 2, out.stderr
    assert "launch.workdir" in out.stderr and "not a directory" in out.stderr


@pytest.mark.parametrize(
    "argv",
    [
        ["chat", "last", "--max-new-tokens", "-1"],
        ["tune", "tiny-cpu", "--host-ram", "nan"],
        ["tune", "tiny-cpu", "--host-ram", "1e309"],
        ["tune", "tiny-cpu", "--top", "1000000000"],
        ["data", "check", "x.json", "--max-length", "99999999999"],
        ["images", "--driver", "abc", "--cuda", "xyz", "--gpu", "zz"],
    ],
)
def test_numbers_are_bounded_before_any_work(argv: list[str]) -> None:
    out = cli(*argv)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "error: argument" in out.stderr


def test_a_home_that_cannot_hold_runs_is_named() -> None:
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "launch", "tiny-cpu", "--detach"],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "TRAINWIZ_HOME": "/proc/self"},
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("trainwiz: TRAINWIZ_HOME: cannot make /proc/self/runs")
    assert len(done.stderr.strip().splitlines()) == 1
