"""A container that docker creates but cannot start leaves nothing behind (real dockerd).

``containers.run`` is create + start; a start-time failure (here: the command does not exist in
the image, an OCI runtime error) used to leave the run's container in the "created" state for
ever. The run fails naming docker's reason, and no container of the run is left.
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

import pytest

from backend.runs import wait_for
from backend.runs.docker_runner import LABEL_RUN
from backend.runs.launch import launch
from tests.integration.test_launch_docker import (  # noqa: F401 (fixture)
    BASE,
    _valid_local_model,
    docker_client,
    docker_preset,
)

pytestmark = pytest.mark.docker


def test_a_start_failure_removes_the_created_container(
    docker_client,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    home = Path(os.environ["TRAINWIZ_HOME"])
    _valid_local_model(home / "models" / "tiny-llama")
    preset = docker_preset(home, command_preset=False)
    preset.model.source = "local"
    preset.container.network = "host"
    launch_mod = importlib.import_module("backend.runs.launch")
    original = launch_mod.build_spec  # the one function that decides the spec

    def spec_with_missing_command(*args, **kwargs):
        spec = original(*args, **kwargs)
        spec.docker["image"] = BASE
        spec.docker["command"] = ["/no/such/trainer"]
        return spec

    monkeypatch.setattr(launch_mod, "build_spec", spec_with_missing_command)
    result = launch(preset, prepare=False)
    status = wait_for(result.run_dir, lambda s: s.final, 60)
    assert status.state == "failed"
    assert "docker could not start the container" in status.message
    assert "/no/such/trainer" in status.message
    left = docker_client.containers.list(
        all=True, filters={"label": f"{LABEL_RUN}={result.run_id}"}
    )
    assert left == []
