"""The Docker runner against a real daemon (CI starts one with scripts/ci-docker.sh).

First with the locally imported base image and a plain python command (labels, log streaming,
exit status, stop), then a real tiny training in the environment image built by the Images code.
"""

from __future__ import annotations

import importlib
import json
import os
import shutil
import time
from pathlib import Path

import docker
import pytest
import yaml

from backend.preset.loader import parse_preset_text
from backend.runs import stop_run, wait_for
from backend.runs.docker_runner import LABEL_PRESET, LABEL_RUN, client, labelled_containers
from backend.runs.launch import launch
from tests.one_thread import one_thread

pytestmark = pytest.mark.docker

ROOT = Path(__file__).resolve().parents[2]
BASE = os.environ.get("TRAINWIZ_BASE_IMAGE", "trainwiz-base:bookworm")
WHEELS = os.environ.get("TRAINWIZ_WHEELS", "/opt/wheels")


@pytest.fixture(scope="module")
def docker_client():
    handle = client()  # raises (test error, not skip) when CI forgot to start the daemon
    handle.images.get(BASE)
    return handle


def docker_preset(home: Path, *, command_preset: bool, **training: object):
    """tiny-cpu moved into a container: model and data mounted read-only, no GPUs."""
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = "tiny-docker"
    data["launch"]["runner"] = "docker"
    one_thread(data["launch"])  # a container's environment is the preset's
    data["environment"] = {
        "mode": "in_container" if command_preset else "image",
        "image": BASE,
        # CPU torch from the machine's local wheel, not a multi-GB CUDA build from PyPI.
        "torch_spec": "torch==2.13.0",
        "find_links": [WHEELS],
    }
    data["container"] = {
        "gpus": None,
        "interactive": False,
        "tty": False,
        "volumes": [
            {"host": str(home / "models"), "container": "/models", "mode": "ro"},
            {"host": str(ROOT / "presets" / "data"), "container": "/data", "mode": "ro"},
        ],
    }
    data["training"]["data_path"] = "/data/sample_conversations.json"
    data["training"].update(training)
    return parse_preset_text(yaml.safe_dump(data))


def _valid_local_model(target: Path) -> None:
    """A real (tiny) model: launch validates a local model before anything starts."""
    from backend.model.tiny import make_tiny
    from backend.preset.schema import TinyModelSpec

    make_tiny(target, TinyModelSpec())


def test_in_container_steps_labels_logs_and_failed_step(docker_client, tmp_path: Path) -> None:
    """in_container mode (the seed's way): setup steps are exec'd into the idle container."""
    home = Path(os.environ["TRAINWIZ_HOME"])
    _valid_local_model(home / "models" / "tiny-llama")  # launch refuses an invalid model
    preset = docker_preset(home, command_preset=True)
    preset.model.source = "local"
    preset.environment.apt_packages = []
    preset.container.tty = True
    preset.container.interactive = True
    result = launch(preset, prepare=False)
    status = wait_for(result.run_dir, lambda s: s.final, 120)
    assert status.container_id
    container = docker_client.containers.get(status.container_id)
    assert container.labels[LABEL_RUN] == result.run_id
    assert container.labels[LABEL_PRESET] == "tiny-docker"
    assert any(c["run_id"] == result.run_id for c in labelled_containers())
    log = (result.run_dir / "train.log").read_text()
    # Debian's python refuses a system-wide pip install (PEP 668): the first setup step fails,
    # the run records which step, and the training is never started.
    assert "step setup-fastchat (in container): pip install fschat==0.2.36" in log
    assert "externally-managed-environment" in log
    assert "step train" not in log
    assert status.state == "failed" and status.exit_code not in (0, None)
    assert "setup-fastchat" in status.message
    container.reload()
    assert container.status == "exited"
    container.remove(force=True)


def test_image_mode_container_streams_and_stops(
    docker_client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """image mode: the container's command is the training; stop -> docker stop -> 'stopped'."""
    home = Path(os.environ["TRAINWIZ_HOME"])
    _valid_local_model(home / "models" / "tiny-llama")  # launch refuses an invalid model
    preset = docker_preset(home, command_preset=False)
    preset.model.source = "local"
    preset.container.remove = True  # --rm: removed once the exit status is recorded
    launch_mod = importlib.import_module("backend.runs.launch")

    # Use the base image itself as the "environment image" and a python loop as the training,
    # so this test needs no image build: it checks the runner, not the training.
    script = (
        "import json, os, time\n"
        "print('container up', flush=True)\n"
        "p = os.environ['TRAINWIZ_METRICS']\n"
        "for i in range(1, 100000):\n"
        "    open(p, 'a').write(json.dumps({'kind': 'step', 'step': i}) + '\\n')\n"
        "    time.sleep(0.2)\n"
    )
    original = launch_mod.build_spec  # the one function that decides the spec

    def spec_with_probe(*args, **kwargs):
        spec = original(*args, **kwargs)
        spec.docker["image"] = BASE
        spec.docker["command"] = ["python3", "-c", script]
        return spec

    monkeypatch.setattr(launch_mod, "build_spec", spec_with_probe)
    result = launch(preset, prepare=False)
    run_dir = result.run_dir
    status = wait_for(run_dir, lambda s: s.state == "running", 60)
    deadline = time.monotonic() + 60
    while "container up" not in (run_dir / "train.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "container up" in (run_dir / "train.log").read_text()
    container = docker_client.containers.get(status.container_id)
    mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
    assert mounts["/models"]["RW"] is False
    assert str(run_dir) in mounts  # the run dir at the same path: metrics land on the host
    assert (run_dir / "metrics.jsonl").read_text().count("\n") >= 1
    stopped = stop_run(run_dir, timeout=2)
    assert stopped.state == "stopped"
    assert stopped.exit_code is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            docker_client.containers.get(status.container_id)
        except docker.errors.NotFound:
            break
        time.sleep(0.2)
    with pytest.raises(docker.errors.NotFound):
        docker_client.containers.get(status.container_id)
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == list(range(1, len(lines) + 1))


@pytest.mark.training
@pytest.mark.slow
def test_tiny_training_in_the_environment_image(docker_client, tmp_path: Path) -> None:
    """The embedded default through the Docker runner, in the env image (built when missing)."""
    from backend.diagnosis.build_log import ensure_env_image
    from backend.model.tiny import make_tiny

    home = Path(os.environ["TRAINWIZ_HOME"])
    preset = docker_preset(home, command_preset=False, max_steps=30)
    make_tiny(home / "models" / "tiny-llama", preset.model.tiny)
    ensure_env_image(preset)
    result = launch(preset)
    status = wait_for(result.run_dir, lambda s: s.final, 900)
    log = (result.run_dir / "train.log").read_text()
    assert status.state == "finished", log[-3000:]
    lines = [json.loads(x) for x in (result.run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x["kind"] == "step"]
    assert [s["step"] for s in steps] == list(range(1, 31))
    assert steps[-1]["loss"] < steps[0]["loss"]
    assert (result.run_dir / "output" / "model.safetensors").is_file()
    docker_client.containers.get(status.container_id).remove(force=True)
    shutil.rmtree(result.run_dir / "output", ignore_errors=True)  # written as root in the container
