"""Run all from the wizard in a real terminal: afterwards the Launch step names the run.

Run all launches through the same pipeline as the Launch step's ``l``; the Launch step must
then say the run was launched (with its id), never "Not launched". The run is real (tiny-cpu on
CPU, detached) and is stopped at the end with ``trainwiz stop``.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.e2e.conftest import SIZES, trainwiz_script
from tests.e2e.test_launch_terminal import METRICS, _preset, to_launch_step
from tests.e2e.test_wizard_terminal import MARK, _only
from tests.e2e.tmux import trainwiz_env

pytestmark = [
    pytest.mark.training,
    pytest.mark.slow,
    pytest.mark.usefixtures("home_with_tiny_model"),
]
BACK = "C-b"


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_after_run_all_the_launch_step_shows_the_run_launched(  # type: ignore[no-untyped-def]
    start, home: Path, tmp_path: Path, size: tuple[int, int]
) -> None:
    pane = start("--preset", str(_preset(tmp_path)), size=size)
    to_launch_step(pane)
    pane.wait_for("Not launched", timeout=60)  # before: the Launch step has started nothing
    try:
        pane.send("C-r")
        pane.wait_for("Run all (y)", timeout=30)
        pane.send("y")

        def started_or_warned(screen: str) -> bool:
            return "Stopped on warnings" in screen or "Throughput" in screen

        if "Stopped on warnings" in pane.wait_for(started_or_warned, timeout=300):
            pane.send("y")  # this machine's warnings accepted, as the CLI's --yes
        pane.wait_for(lambda s: "Throughput" in s and not MARK["launch"].search(s), timeout=300)
        pane.wait_for(METRICS, timeout=300)  # the run trains
        runs = [p.parent for p in (home / "runs").glob("*/status.json")]
        assert len(runs) == 1, runs

        pane.send(BACK)  # the Launch step again, visited before Run all
        screen = pane.wait_for(_only("launch"))
        screen = pane.wait_for(lambda s: "Launched run" in s or "Not launched" in s)
        assert "Not launched" not in screen, screen
        # its id, as the run directory names it (wrapped at 80 columns: joined before matching)
        joined = re.sub(r"\s+", "", screen)
        assert runs[0].name in joined, screen

        pane.send("C-q")
        pane.wait_for("Quit trainwiz?", timeout=30)
        pane.send("y")
        assert pane.wait_dead(timeout=30) in ("0", "")  # this tmux may never report it
    finally:
        for run in (home / "runs").glob("*/status.json"):
            subprocess.run([trainwiz_script(), "stop", run.parent.name, "--timeout", "5"],
                           env=trainwiz_env(home), capture_output=True, timeout=120,
                           check=False)  # fmt: skip
