"""``model.dir`` is where a download, a clone or the tiny model is written: a system directory or
a home folder itself is refused when the preset is loaded (exit 2, ``file:line:col model.dir``
and the fix), not at the prepare step of a run that has already started."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest
import yaml

from backend.preset.loader import load_preset
from tui.cli import main

ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINWIZ_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("TRAINWIZ_LANG", "en")
    monkeypatch.setenv("TRAINWIZ_NO_NETWORK", "1")
    monkeypatch.setenv("HOME", "/home/alice")


def preset_file(tmp_path: Path, model_dir: str, source: str = "tiny") -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["model"]["dir"] = model_dir
    if source != "tiny":
        data["model"] = {"source": source, "dir": model_dir, "repo": "acme/m"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


SYSTEM = [
    "/etc",
    "/",
    "/usr",
    "/bin",
    "/usr/local/bin",
    "/proc/self",
    "/sys/kernel",
    "/dev/shm/m",
    "/boot",
    "/var",
    "/home",
    "/root",
    "/home/alice",
    "~",
    "/data/../etc",
    "/etc/",
    "//etc",
    "@home/../../../../../../etc",
]


@pytest.mark.parametrize("value", SYSTEM)
@pytest.mark.parametrize("source", ["tiny", "hf"])
def test_plan_refuses_a_system_or_home_directory(tmp_path: Path, value: str, source: str) -> None:
    path = preset_file(tmp_path, value, source)
    code, out, err = cli("plan", str(path))
    assert code == 2, (out, err)
    said = err.strip().splitlines()
    assert len(said) == 1, said
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "dir:" in t)
    assert f"{path}:{line}:" in said[0] and " model.dir: " in said[0], said
    assert "@home/models/NAME" in said[0] and "Traceback" not in err, said
    assert not out and not (tmp_path / "home" / "runs").exists()


@pytest.mark.parametrize(
    "value",
    [
        "/data/models/x",
        "/mnt/nfs/models/llama",
        "/home/alice/models/x",
        "~/models/x",
        "/opt/models/x",
        "/srv/models/x",
        "/m",
        "@home/models/tiny-llama",
        "models/x",
    ],
)
def test_an_ordinary_model_folder_is_accepted(tmp_path: Path, value: str) -> None:
    assert load_preset(preset_file(tmp_path, value, "hf")).model.dir == value


def test_a_symlink_to_a_system_directory_is_refused(tmp_path: Path) -> None:
    os.symlink("/etc", tmp_path / "models")
    code, _out, err = cli("plan", str(preset_file(tmp_path, str(tmp_path / "models"), "hf")))
    assert code == 2 and "model.dir" in err and "/etc" in err, err


@pytest.mark.parametrize("value", ["/etc", "/usr/local/bin", "~", "/home/alice", "//etc"])
def test_model_fetch_dir_on_the_command_line_follows_the_same_rule(value: str) -> None:
    """``trainwiz model fetch acme/m --dir /etc`` would have written the model's files there:
    the flag is refused by the rule model.dir follows, before any download."""
    code, out, err = cli("model", "fetch", "acme/m", "--dir", value)
    said = err.strip().splitlines()
    assert code == 2 and not out, (out, err)
    assert len(said) == 1 and "--dir" in said[0] and "@home/models/NAME" in said[0], said
