"""Dangerous container options are found once (backend) and shown by check, plan and launch."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from backend.preset.safety import container_risks
from backend.preset.schema import Preset
from tui.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _data(tmp_path: Path, **container: object) -> dict[str, object]:
    return {
        "schema": 1,
        "name": "risky",
        "model": {"source": "local", "dir": str(tmp_path / "m")},
        "container": container,
        "launch": {"env": {"LD_PRELOAD": "/tmp/evil.so"}},
        "training": {"data_path": "d.json", "output_dir": "out"},
    }


RISKY = {
    "privileged": True,
    "cap_add": ["SYS_ADMIN", "ALL", "SYS_PTRACE", "NET_BIND_SERVICE"],
    "volumes": [
        {"host": "/", "container": "/host"},
        {"host": "/var/run/docker.sock", "container": "/var/run/docker.sock"},
        {"host": "//etc/", "container": "/e", "mode": "ro"},
        {"host": "/data/models", "container": "/models"},
    ],
    "env": {"LD_LIBRARY_PATH": "/x"},
}
FIELDS = [
    "container.privileged",
    "container.cap_add[0]",
    "container.cap_add[1]",
    "container.cap_add[2]",
    "container.volumes[0].host",
    "container.volumes[1].host",
    "container.volumes[2].host",
    "launch.env.LD_PRELOAD",
    "container.env.LD_LIBRARY_PATH",
]


def test_container_risks_names_each_field(tmp_path: Path) -> None:
    risks = container_risks(Preset.model_validate(_data(tmp_path, **RISKY)))
    assert sorted(r.field for r in risks) == sorted(FIELDS)
    assert all(r.message and r.fix for r in risks)
    plain = _data(tmp_path, volumes=[{"host": "/data", "container": "/data"}])
    plain["launch"] = {}
    assert container_risks(Preset.model_validate(plain)) == []


def _write(tmp_path: Path) -> Path:
    path = tmp_path / "risky.yaml"
    path.write_text(yaml.safe_dump(_data(tmp_path, **RISKY)))
    return path


def test_plan_prints_the_warning(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(_write(tmp_path))]) == 0
    out, err = capsys.readouterr()
    assert "# WARNING container.privileged" in out and "warning: container.privileged" in err
    assert main(["plan", str(_write(tmp_path)), "--json"]) == 0
    assert '"field": "container.volumes[1].host"' in capsys.readouterr().out


def test_check_flags_them(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["check", "--preset", str(_write(tmp_path)), "--only", "git"])
    out = capsys.readouterr().out
    assert "dangerous option container.privileged" in out
    assert "dangerous option launch.env.LD_PRELOAD" in out


@pytest.mark.parametrize("command", ["launch", "replay"])
def test_launch_and_replay_need_an_explicit_yes(tmp_path: Path, command: str) -> None:
    """Without a terminal and without --yes: exit 2 naming the fields, and no run is made."""
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", command, str(_write(tmp_path))],
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert "pass --yes" in done.stderr
    for field in ("container.privileged", "container.volumes[1].host", "launch.env.LD_PRELOAD"):
        assert field in done.stderr
    runs = Path(os.environ["TRAINWIZ_HOME"]) / "runs"
    assert not runs.exists() or not any(runs.iterdir())
