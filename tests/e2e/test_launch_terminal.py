"""Launch tiny-cpu from the wizard in a real terminal, watch the Monitor fill, quit, attach.

A real (tiny, CPU) training: the run is detached, so quitting the wizard leaves it running and
``trainwiz attach RUN`` shows the same run's metrics.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path

import pytest

from backend.preset import load_preset, save_preset
from tests.e2e.test_wizard_terminal import MARK, NEXT, _only

pytestmark = [pytest.mark.training, pytest.mark.slow]
METRICS = re.compile(r"step [1-9]\d*/\d+")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _preset(tmp_path: Path) -> Path:
    """tiny-cpu, 12 steps, on a port nobody holds (the machine may be shared)."""
    preset = load_preset("tiny-cpu")
    training = preset.training.model_copy(update={"max_steps": 12})
    launch = preset.launch.model_copy(update={"master_port": _free_port()})
    preset = preset.model_copy(update={"training": training, "launch": launch})
    return save_preset(preset, tmp_path / "tiny-e2e.yaml")


def test_launch_from_the_wizard_then_monitor_then_attach(start, home: Path, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    pane = start("--preset", str(_preset(tmp_path)), size=(120, 40))
    pane.wait_for(_only("checks"), timeout=60)
    pane.wait_for("Nothing blocks the next steps", timeout=90)
    for step in ("model", "image", "hyperparams", "launch"):
        pane.send(NEXT)
        pane.wait_for(_only(step))
    pane.wait_for(re.compile(r"1\. \[\w+\]"), timeout=60)  # the plan is built
    pane.send("l")
    dialog = pane.wait_for("Launch (y)")
    assert "What runs" in dialog and "Where" in dialog and "run directory" in dialog
    assert not list((home / "runs").glob("*/status.json"))  # nothing runs before the yes
    pane.send("y")
    pane.wait_for(lambda s: "Throughput" in s and not MARK["launch"].search(s), timeout=60)
    pane.wait_for(METRICS, timeout=300)  # real steps from metrics.jsonl
    pane.send("C-q")
    pane.wait_dead(timeout=30)
    runs = [p.parent for p in (home / "runs").glob("*/status.json")]
    assert len(runs) == 1, runs
    attached = start("attach", runs[0].name, size=(80, 24))
    attached.wait_for(METRICS, timeout=60)
    attached.wait_for(re.compile(r"Throughput[^\n]*\n?[^\n]*\b(running|finished)\b"), timeout=300)
    attached.send("C-q")
    attached.wait_dead(timeout=30)
