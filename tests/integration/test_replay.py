"""Replay end to end: the whole wizard headless, through the real CLI, with real training.

The first replay makes the tiny model and trains; the second finds the model valid and the
training environment present and says so ("skipped"). A preset whose model cannot be fetched
stops at the model step with its exit code, having launched nothing.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.training, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _preset(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["launch"]["master_port"] = _free_port()
    data["training"]["max_steps"] = 12
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data[section][key] = value
    path = tmp_path / "replay.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def replay(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tui.cli", "replay", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        stdin=subprocess.DEVNULL,
    )


@pytest.mark.bare_home  # the first replay on a bare machine makes the tiny model
def test_replay_tiny_cpu_end_to_end_then_skips_satisfied_steps(tmp_path: Path) -> None:
    preset = _preset(tmp_path)
    first = replay(str(preset), "--yes", "--json")
    assert first.returncode == 0, first.stdout + first.stderr
    report = json.loads(first.stdout)
    outcomes = {s["step"]: s["outcome"] for s in report["steps"]}
    assert outcomes["model"] == "done"  # made the tiny model
    assert outcomes["launch"] == "done" and outcomes["follow"] == "done"
    run_dir = Path(os.environ["TRAINWIZ_HOME"]) / "runs" / report["run_id"]
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [s["loss"] for s in steps if s["kind"] == "step" and s["loss"] is not None]
    assert len(losses) == 12 and losses[-1] < losses[0]

    second = replay(str(preset), "--yes", "--json")
    assert second.returncode == 0, second.stdout + second.stderr
    again = {s["step"]: s for s in json.loads(second.stdout)["steps"]}
    assert again["model"]["outcome"] == "skipped"
    assert "model valid" in again["model"]["message"]
    assert again["environment"]["outcome"] == "skipped"
    assert again["follow"]["outcome"] == "done"


def test_replay_stops_at_the_model_step_and_launches_nothing(tmp_path: Path) -> None:
    from tests.backend.hubserver import FakeHub, Repo, write_llama_dir

    # A loopback Hub where the repo exists (the checks pass) but its weights never arrive whole.
    source = tmp_path / "src"
    write_llama_dir(source)
    shard = next(p.name for p in source.glob("*.safetensors"))
    hub = FakeHub()
    hub.repos["acme/broken-llama"] = Repo.from_dir(source)
    hub.faults.truncate[shard] = 1000
    hub.start()
    try:
        preset = _preset(
            tmp_path,
            model__source="hf",
            model__repo="acme/broken-llama",
            model__endpoint=hub.url,
            model__dir=str(tmp_path / "model"),
        )
        result = replay(str(preset), "--yes")
    finally:
        hub.stop()
    assert result.returncode == 1, result.stdout + result.stderr  # a failed stage: 1, named
    text = " ".join((result.stdout + result.stderr).split())
    assert "failed at step model" in text and shard in text and "run fetch again to resume" in text
    runs = Path(os.environ["TRAINWIZ_HOME"]) / "runs"
    assert not runs.exists() or not any(runs.iterdir())


def test_replay_bad_step_names_are_bad_input(tmp_path: Path) -> None:
    result = replay(str(_preset(tmp_path)), "--from", "launch", "--until", "model")
    assert result.returncode == 2
    assert "--from launch comes after --until model" in result.stderr


@pytest.mark.docker
def test_replay_through_docker_then_skips_the_built_image(tmp_path: Path) -> None:
    """tiny-cpu in a container: checks, model, environment image, launch, follow — twice."""
    from tests.integration.test_launch_docker import docker_preset

    home = Path(os.environ["TRAINWIZ_HOME"])
    preset = docker_preset(home, command_preset=False, max_steps=12)
    preset.launch.master_port = _free_port()
    path = tmp_path / "docker.yaml"
    from backend.preset import save_preset

    save_preset(preset, path)
    first = replay(str(path), "--yes", "--json")
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-4000:]
    report = json.loads(first.stdout)
    assert {s["step"]: s["outcome"] for s in report["steps"]}["follow"] == "done"
    run_dir = home / "runs" / report["run_id"]
    steps = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    losses = [s["loss"] for s in steps if s["kind"] == "step" and s["loss"] is not None]
    assert len(losses) == 12 and losses[-1] < losses[0]
    second = replay(str(path), "--yes", "--json")
    assert second.returncode == 0, second.stdout[-4000:] + second.stderr[-4000:]
    again = {s["step"]: s for s in json.loads(second.stdout)["steps"]}
    assert again["model"]["outcome"] == "skipped"
    assert again["environment"]["outcome"] == "skipped"
    assert "environment image present" in again["environment"]["message"]
