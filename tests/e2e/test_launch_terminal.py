"""Launch tiny-cpu from the wizard in a real terminal, watch the Monitor fill, quit, attach.

A real (tiny, CPU) training: the run is detached, so quitting the wizard while it trains leaves
it running, and ``trainwiz attach RUN`` shows the same run's metrics.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from backend.preset import load_preset, save_preset
from tests.backend.test_subproc import _alive
from tests.e2e.conftest import SIZES, trainwiz_script
from tests.e2e.test_wizard_terminal import MARK, NEXT, _only
from tests.e2e.tmux import Pane, trainwiz_env

pytestmark = [
    pytest.mark.training,
    pytest.mark.slow,
    pytest.mark.usefixtures("home_with_tiny_model"),
]
METRICS = re.compile(r"step [1-9]\d*/\d+")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _preset(tmp_path: Path, max_steps: int = 100000) -> Path:
    """tiny-cpu on a port nobody holds; by default long enough to still train when the wizard
    quits (a test that needs the run to end passes its own ``max_steps``)."""
    preset = load_preset("tiny-cpu")
    training = preset.training.model_copy(update={"max_steps": max_steps})
    launch = preset.launch.model_copy(update={"master_port": _free_port()})
    preset = preset.model_copy(update={"training": training, "launch": launch})
    return save_preset(preset, tmp_path / "tiny-e2e.yaml")


def to_launch_step(pane: Pane) -> None:
    """From the Checks step, once nothing blocks, Next through every step to Launch."""
    pane.wait_for(_only("checks"), timeout=60)
    pane.wait_for("Nothing blocks the next steps", timeout=90)
    for step in ("model", "image", "hyperparams", "launch"):
        pane.send(NEXT)
        pane.wait_for(_only(step))


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_launch_from_the_wizard_then_quit_while_training_then_attach(  # type: ignore[no-untyped-def]
    start, home: Path, tmp_path: Path, size: tuple[int, int]
) -> None:
    pane = start("--preset", str(_preset(tmp_path)), size=size)
    to_launch_step(pane)
    pane.wait_for(re.compile(r"1\. \[\w+\]"), timeout=60)  # the plan is built
    pane.send("l")
    dialog = pane.wait_for("Launch (y)")
    assert "What runs" in dialog and "Where" in dialog
    assert not list((home / "runs").glob("*/status.json"))  # nothing runs before the yes
    pane.send("y")
    pane.wait_for(lambda s: "Throughput" in s and not MARK["launch"].search(s), timeout=60)
    pane.wait_for(METRICS, timeout=300)  # real steps from metrics.jsonl
    runs = [p.parent for p in (home / "runs").glob("*/status.json")]
    assert len(runs) == 1, runs
    run_dir = runs[0]

    pane.send("C-q")  # while it trains: asked, the run named as going on
    quit_dialog = pane.wait_for("Quit trainwiz?", timeout=30)
    assert "keeps going" in quit_dialog, quit_dialog
    pane.send("y")
    assert pane.wait_dead(timeout=30) in ("0", "")  # this tmux may never report a clean exit

    status = json.loads((run_dir / "status.json").read_text())
    assert status["state"] == "running", status  # detached: quitting the wizard stops nothing
    assert status.get("pid") and _alive(int(status["pid"])), status
    env = trainwiz_env(home)
    try:
        attached = start("attach", run_dir.name, size=size)
        attached.wait_for(METRICS, timeout=60)
        attached.wait_for(re.compile(r"Throughput[^\n]*\n?[^\n]*\brunning\b"), timeout=120)
        attached.send("C-q")
        attached.wait_for("Quit trainwiz?", timeout=30)
        attached.send("y")
        assert attached.wait_dead(timeout=30) in ("0", "")
    finally:
        stopped = subprocess.run(
            [trainwiz_script(), "stop", run_dir.name, "--timeout", "5"],
            env=env, capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert stopped.returncode == 0, stopped.stderr
    assert not _alive(int(status["pid"]))
