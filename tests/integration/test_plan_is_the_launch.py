"""With the preset's master_port held by another process, the plan printed just before a launch,
the run's plan.json, its launch.json and the live torchrun's /proc/PID/cmdline are one argv.

A real tiny CPU training through the `trainwiz` CLI (the plan's ``<run_dir>`` is the only
difference: the printed plan is made before the run directory exists).
"""

from __future__ import annotations

import json
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tests.trainwiz_cli import cli

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
PLACEHOLDER = re.compile(r"<(?!redacted>)[a-z_ ]+>")


def _train(plan: dict) -> dict:
    return next(s for s in plan["steps"] if s["id"] == "train")


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]


def _displayed(step: dict) -> list[str]:
    """The words of a step's display: its env assignments, then its argv."""
    return [*(f"{k}={v}" for k, v in step["env"].items()), *step["argv"]]


def test_plan_launch_and_process_are_one_argv(tiny_model: Path, tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["training"]["max_steps"] = 5000
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as held:
        held.bind(("", 0))
        held.listen()
        port = held.getsockname()[1]
        data["launch"]["master_port"] = port
        preset = tmp_path / "tiny-held.yaml"
        preset.write_text(yaml.safe_dump(data))

        printed = json.loads(cli("plan", str(preset), "--json").stdout)
        again = json.loads(cli("plan", str(preset), "--json").stdout)
        assert printed["master_port"] == again["master_port"] != port  # same answer twice
        assert f"--master_port={printed['master_port']}" in _train(printed)["argv"]
        started = json.loads(cli("launch", str(preset), "--detach", "--json").stdout)
        run_dir = Path(started["run_dir"])
        try:
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline:
                status = json.loads((run_dir / "status.json").read_text())
                if status.get("step") == "train" and status.get("pid"):
                    break
                assert status["state"] not in ("failed", "finished", "stopped"), status
                time.sleep(0.2)
            plan_json = json.loads((run_dir / "plan.json").read_text())
            launch_json = json.loads((run_dir / "launch.json").read_text())
            cmdline = _cmdline(int(status["pid"]))
        finally:
            subprocess.run(
                [sys.executable, "-m", "tui.cli", "stop", run_dir.name, "--timeout", "20"],
                cwd=ROOT,
                capture_output=True,
                timeout=60,
                check=False,
            )

    shown = [a.replace("<run_dir>", str(run_dir)) for a in _train(printed)["argv"]]
    assert _train(plan_json)["argv"] == shown
    assert launch_json["train"]["argv"] == shown
    # torchrun is a script: the kernel runs its interpreter with the script's own path first.
    assert cmdline[-len(shown) :] == shown
    assert Path(shown[0]).is_absolute() and Path(shown[0]).name == "torchrun"
    assert launch_json["master_port"] == status["master_port"] == printed["master_port"]
    env = {k: v.replace("<run_dir>", str(run_dir)) for k, v in _train(printed)["env"].items()}
    assert launch_json["train"]["env"] == env == _train(plan_json)["env"]
    # Every recorded step's display is its argv (and the env it sets); no placeholder anywhere.
    for step in [*plan_json["steps"], *launch_json["prepare"], launch_json["train"]]:
        words = _displayed(step)
        if step.get("exec_prefix"):
            words = [*step["exec_prefix"], *words]
        assert shlex.split(step["display"]) == words, step["id"]
    for name in ("plan.json", "launch.json", "status.json"):
        assert not PLACEHOLDER.search((run_dir / name).read_text()), name
