"""The checks resolve preset paths with launch's one placeholder resolver (no second, looser one)."""

from __future__ import annotations

from pathlib import Path

import pytest

from backend import paths
from backend.checks.context import host_path
from backend.errors import BadInput
from backend.model.placeholders import SAMPLE_CONVERSATIONS


@pytest.fixture(autouse=True)
def _home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "tw"))


def test_a_name_that_only_starts_like_home_is_not_the_placeholder() -> None:
    # The old check-time resolver turned '@homework/x' into <home>/work/x.
    assert host_path("@homework/x") == Path("@homework/x")


def test_home_itself_is_refused_as_at_launch() -> None:
    with pytest.raises(BadInput, match="state directory"):
        host_path("@home")
    with pytest.raises(BadInput, match="state directory"):
        host_path("@home/runs")


def test_placeholders_resolve_like_launch() -> None:
    assert host_path("@home/models/m") == paths.home() / "models" / "m"
    assert host_path("@sample") == SAMPLE_CONVERSATIONS
    assert host_path("@run/output") == paths.runs_dir() / "output"
    assert host_path("~/x") == Path.home() / "x"


def test_check_names_the_field_and_exits_2(tmp_path: Path) -> None:
    import subprocess
    import sys

    source = Path(__file__).resolve().parents[2] / "presets" / "tiny-cpu.yaml"
    text = source.read_text()
    preset = tmp_path / "p.yaml"
    preset.write_text(text.replace('dir: "@home/models/tiny-llama"', "dir: '@home'", 1))
    assert "dir: '@home'" in preset.read_text()
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from tui.cli import main; sys.exit(main())",
            "check",
            "--preset",
            str(preset),
        ],
        capture_output=True,
        text=True,
        env={**__import__("os").environ, "TRAINWIZ_HOME": str(tmp_path / "tw")},
    )
    assert done.returncode == 2
    assert "model.dir: '@home' resolves to" in done.stderr
