"""Secrets a preset holds are redacted in plans, the run's preset.yaml, train.log and messages."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from backend.preset.redacted import redact_preset
from backend.preset.schema import Preset
from backend.redact import REDACTED, redact_env, redact_text, redact_url
from tui.cli import main

ROOT = Path(__file__).resolve().parents[2]
ENV_SECRET = "wandb-SECRET-value-0001"
OTHER_SECRET = "container-SECRET-0002"
GIT_PASSWORD = "gitPASSWORD0003"
PIP_PASSWORD = "pipPASSWORD0004"
SECRETS = (ENV_SECRET, OTHER_SECRET, GIT_PASSWORD, PIP_PASSWORD)


def _secret_preset(tmp_path: Path, runner: str = "docker") -> dict[str, object]:
    model_dir = tmp_path / "model"
    model_dir.mkdir(exist_ok=True)
    (model_dir / "config.json").write_text("{}")
    data = tmp_path / "d.json"
    data.write_text("[]")
    return {
        "schema": 1,
        "name": "secretive",
        "model": {
            "source": "local",
            "dir": str(model_dir),
            "git_url": f"https://alice:{GIT_PASSWORD}@git.example.com/acme/m",
        },
        "environment": {
            "pip_index_url": f"https://bob:{PIP_PASSWORD}@pypi.example.com/simple",
            "mode": "in_container" if runner == "docker" else "image",
        },
        "container": {"env": {"MY_SERVICE": OTHER_SECRET, "NCCL_DEBUG": "INFO"}},
        "launch": {
            "runner": runner,
            "device": "cpu",
            "env": {"WANDB_API_KEY": ENV_SECRET, "NCCL_DEBUG": "WARN"},
        },
        "training": {"data_path": str(data), "output_dir": str(tmp_path / "out"), "max_steps": 1},
    }


def _no_secret(text: str) -> None:
    for secret in SECRETS:
        assert secret not in text


def test_rules() -> None:
    assert redact_url("https://a:pw@h/x") == f"https://a:{REDACTED}@h/x"
    assert redact_url("https://tok@h/x") == f"https://{REDACTED}@h/x"
    assert redact_url("git@github.com:a/b.git") == "git@github.com:a/b.git"  # no secret there
    env = redact_env({"NCCL_DEBUG": "INFO", "SOMETHING": "x", "CUDA_API_KEY": "k"})
    assert env == {"NCCL_DEBUG": "INFO", "SOMETHING": REDACTED, "CUDA_API_KEY": REDACTED}
    text = redact_text("Authorization: Bearer hf_abcdefghijklmnopqrstuvwx and token hf_" + "z" * 30)
    assert "hf_abc" not in text and "hf_zzz" not in text
    assert redact_text("does not look like a token variable") == (
        "does not look like a token variable"
    )


def test_process_token_is_scrubbed_from_messages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_HF_TOKEN", "plainvalue1234")
    assert "plainvalue1234" not in redact_text("the server said plainvalue1234 is wrong")


def test_printed_plan_and_json_hide_every_secret(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(_secret_preset(tmp_path)))
    assert main(["plan", str(path)]) == 0
    script = capsys.readouterr().out
    _no_secret(script)
    assert "NCCL_DEBUG=WARN" in script and "NCCL_DEBUG=INFO" in script  # kept: diagnosable
    assert f"WANDB_API_KEY={REDACTED}" in script.replace("'", "")
    assert main(["plan", str(path), "--json"]) == 0
    _no_secret(capsys.readouterr().out)


def test_redacted_preset_keeps_its_shape(tmp_path: Path) -> None:
    preset = Preset.model_validate(_secret_preset(tmp_path))
    safe = redact_preset(preset)
    assert safe.model_fields_set == preset.model_fields_set
    assert safe.launch.env["NCCL_DEBUG"] == "WARN"
    _no_secret(safe.model_dump_json())


def test_bad_input_messages_hide_url_passwords(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _secret_preset(tmp_path)
    data["environment"] = {"pip_index_url": f"ftp://bob:{PIP_PASSWORD}@pypi.example.com/ x"}
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["plan", str(path)]) == 2
    err = capsys.readouterr().err
    assert "pip_index_url" in err
    _no_secret(err)


@pytest.mark.slow
def test_run_files_hold_no_secret(tmp_path: Path) -> None:
    """A real host launch (a valid tiny model; the trainer fails fast on the empty data): the
    run's record is clean, and the unredacted copy its own steps read is 0600."""
    from backend.model.tiny import make_tiny
    from backend.preset.schema import TinyModelSpec

    path = tmp_path / "p.yaml"
    data = _secret_preset(tmp_path, runner="host")
    shutil.rmtree(tmp_path / "model")
    make_tiny(tmp_path / "model", TinyModelSpec())
    path.write_text(yaml.safe_dump(data))
    done = subprocess.run(
        [sys.executable, "-m", "tui.cli", "launch", str(path), "--detach"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    _no_secret(done.stdout + done.stderr)
    run_dir = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / done.stdout.strip()
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        if json.loads((run_dir / "status.json").read_text())["state"] in ("failed", "finished"):
            break
        time.sleep(0.3)
    log = (run_dir / "train.log").read_text()
    assert "WANDB_API_KEY=" in log  # the step line is there, its value is not
    for name in ("train.log", "preset.yaml", "plan.json", "status.json"):
        _no_secret((run_dir / name).read_text())
    secret_copy = run_dir / "preset.secret.yaml"
    assert stat.S_IMODE(secret_copy.stat().st_mode) == 0o600
    assert GIT_PASSWORD in secret_copy.read_text()
