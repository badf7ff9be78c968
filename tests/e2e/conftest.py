"""Fixtures for the real-terminal tests: a tmux pane running ``trainwiz`` with its own home.

tmux is a system tool (``apt-get install tmux``; scripts/test.sh installs it when it can). Only
its absence skips these tests, and the skip says so.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.e2e.tmux import Pane, trainwiz_env

SIZES = [(120, 40), (80, 24)]


def trainwiz_script() -> str:
    beside = Path(sys.executable).parent / "trainwiz"
    found = str(beside) if beside.is_file() else shutil.which("trainwiz")
    assert found, "the trainwiz console script is not installed (pip install -e .)"
    return found


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def home_with_tiny_model(home: Path, tiny_model: Path) -> Path:
    """The test's home holding the embedded default's tiny model already, as on a machine where
    the quick start ran once: a test that launches then trains at once instead of making the
    same model again in its prepare step (~7 CPU-seconds, torch and transformers loaded for it).
    The wizard's first-time path keeps the bare ``home``."""
    shutil.copytree(tiny_model, home / "models" / "tiny-llama")
    return home


@pytest.fixture
def start(home: Path, tmp_path: Path) -> Iterator[Callable[..., Pane]]:
    """``start(*args, size=(w, h))`` runs ``trainwiz *args`` in a fresh tmux server."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (system package 'tmux'; scripts/test.sh installs it)")
    panes: list[Pane] = []

    def _start(
        *args: str, size: tuple[int, int] = (120, 40), env: dict[str, str] | None = None
    ) -> Pane:
        pane = Pane(
            [trainwiz_script(), *args],
            width=size[0],
            height=size[1],
            env=env or trainwiz_env(home),
            cwd=tmp_path,
        )
        panes.append(pane)
        return pane

    yield _start
    for pane in panes:
        pane.close()
