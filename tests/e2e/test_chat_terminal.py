"""A finished run's Chat view in a real terminal: attach, press ``a``, ask, read the reply, close.

A real (tiny, CPU) training finishes first through the CLI; then ``trainwiz attach RUN`` runs in
tmux at 120x40 and at 80x24, the Chat view loads the run's model in its worker process (the
training side's python), answers a typed prompt, and Escape closes it without leaving the worker
running.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.conftest import SIZES, trainwiz_script
from tests.e2e.test_launch_terminal import _preset
from tests.e2e.tmux import trainwiz_env
from tests.tui.test_run_actions import chat_workers

pytestmark = [
    pytest.mark.training,
    pytest.mark.slow,
    pytest.mark.usefixtures("home_with_tiny_model"),
]


def finished_run(home: Path, tmp_path: Path) -> Path:
    done = subprocess.run(
        [trainwiz_script(), "launch", str(_preset(tmp_path, max_steps=12)), "--detach", "--json"],
        env=trainwiz_env(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    run_dir = Path(json.loads(done.stdout)["run_dir"])
    deadline = time.monotonic() + 400
    while time.monotonic() < deadline:
        state = json.loads((run_dir / "status.json").read_text()).get("state")
        if state in ("finished", "failed", "stopped"):
            assert state == "finished", (run_dir / "train.log").read_text()[-2000:]
            return run_dir
        time.sleep(0.5)
    raise AssertionError(f"{run_dir} did not finish")


def test_chat_view_on_a_finished_run_replies(start, home: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    run_dir = finished_run(home, tmp_path)
    for size in SIZES:
        pane = start("attach", run_dir.name, size=size)
        pane.wait_for("Chat (a)", timeout=90)
        pane.wait_for("✓ Chat", timeout=90)
        pane.send("a")
        pane.wait_for("loading model", timeout=30)
        pane.wait_for("model loaded", timeout=300)
        pane.type("Hello, who are you?")
        pane.send("Enter")
        screen = pane.wait_for("model> ", timeout=300)
        assert "you> Hello, who are you?" in screen
        reply = screen.split("model> ", 1)[1].split("\n", 1)[0].strip(" │")
        assert reply, screen
        pane.send("Escape")
        pane.wait_for(lambda s: "Throughput" in s and "model> " not in s, timeout=30)
        deadline = time.monotonic() + 10
        while chat_workers(run_dir):
            assert time.monotonic() < deadline, "the chat worker outlived its view"
            time.sleep(0.1)
        pane.send("C-q")
        pane.wait_dead(timeout=30)
