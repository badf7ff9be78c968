"""Snapshot isolation: every snapshot test gets a fresh home and a deterministic image list.

The screens print TRAINWIZ_HOME (runs go to …), so it must be the same path on every run; a
path shared by runs and by the agents testing at once let one test's runs, caches or models
leak into another's screen. Here the fixed path is made fresh for each test and held under a
lock for the test's length, the Image step never lists this machine's Docker images, and no
screen sees this machine's GPU.
"""

from __future__ import annotations

import fcntl
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

import backend.images
import backend.images.build
import backend.planner.gpu as planner_gpu
import backend.runs.spec
from screens.image import ImageScreen

SNAPSHOT_HOME = Path("/tmp/trainwiz-snapshot-home")
MODEL_HOME = Path("/tmp/trainwiz-snapshot-model-home")  # test_model_snapshot's fixed home
LOCK = Path("/tmp/trainwiz-snapshot-home.lock")
PINNED_ENV_TAG = "trainwiz-env:0123456789abcdef"


@pytest.fixture(autouse=True)
def _no_local_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pictures never depend on this machine's GPU (the plan's verdict, the form's)."""
    monkeypatch.setattr(planner_gpu, "detect_local", lambda: None)


@pytest.fixture(autouse=True)
def snapshot_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    with open(LOCK, "a", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one snapshot test at a time owns the fixed homes
        try:
            for home in (SNAPSHOT_HOME, MODEL_HOME):
                shutil.rmtree(home, ignore_errors=True)
            SNAPSHOT_HOME.mkdir(parents=True)
            monkeypatch.setenv("TRAINWIZ_HOME", str(SNAPSHOT_HOME))
            yield SNAPSHOT_HOME
        finally:
            for home in (SNAPSHOT_HOME, MODEL_HOME):
                shutil.rmtree(home, ignore_errors=True)
            fcntl.flock(lock, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def deterministic_images(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalog only (never the local daemon's images) and a pinned environment tag."""
    monkeypatch.setattr(ImageScreen, "INCLUDE_LOCAL", False)
    pinned = lambda preset, host=None: PINNED_ENV_TAG  # noqa: E731
    monkeypatch.setattr(backend.images.build, "env_image_tag", pinned)
    monkeypatch.setattr(backend.images, "env_image_tag", pinned, raising=False)


@pytest.fixture(autouse=True)
def pinned_launch_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    """The launch spec's machine lookups (this installation's paths, which ports are free) are
    pinned, so the Launch and Hyperparameters pictures are the same on every machine."""
    monkeypatch.setattr(backend.runs.spec, "trainwiz_command", lambda: ("trainwiz",))
    monkeypatch.setattr(backend.runs.spec, "port_free", lambda port: True)
    monkeypatch.setattr(backend.runs.spec, "decide_torchrun", lambda preset, notes: "torchrun")
