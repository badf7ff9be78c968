"""The wizard knows its runs, in a real terminal: a live run of the preset is found on start.

A run keeps training after the wizard quits (it is detached). Opening the wizard again on the
same preset must show that run on the Monitor and say so; its master_port is the user's own
run, not a blocker; Run all asks first; the Runs view lists it; Chat refuses a running run the
way the Monitor's dimmed `a` does; quitting says the run keeps going.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.preset import load_preset, save_preset
from tests.e2e.conftest import SIZES, trainwiz_script
from tests.e2e.tmux import trainwiz_env
from tests.training_side import on_first_use

torch = on_first_use("torch")

pytestmark = [
    pytest.mark.training,
    pytest.mark.slow,
    pytest.mark.usefixtures("home_with_tiny_model"),
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _env(home: Path) -> dict[str, str]:
    """The test's home; torchrun on PATH (the venv that has torch)."""
    env = trainwiz_env(home)
    bins = [Path(sys.executable).parent, Path(torch.__file__).resolve().parents[4] / "bin"]
    found = [str(b) for b in bins if (b / "torchrun").is_file()]
    assert found, f"torchrun is in none of {bins}"
    env["PATH"] = os.pathsep.join([*found, env["PATH"]])
    return env


@pytest.fixture
def live_run(home: Path, tmp_path: Path) -> Iterator[tuple[Path, str, dict[str, str]]]:
    """tiny-cpu (long enough to stay live), launched detached; stopped afterwards."""
    preset = load_preset("tiny-cpu")
    training = preset.training.model_copy(update={"max_steps": 100000})
    launch = preset.launch.model_copy(update={"master_port": _free_port()})
    path = save_preset(
        preset.model_copy(update={"training": training, "launch": launch}), tmp_path / "t.yaml"
    )
    env = _env(home)
    done = subprocess.run(
        [trainwiz_script(), "launch", str(path), "--detach"],
        env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    run_id = done.stdout.strip().splitlines()[0]
    yield path, run_id, env
    subprocess.run([trainwiz_script(), "stop", run_id, "--timeout", "5"], env=env,
                   capture_output=True, timeout=120, check=False)  # fmt: skip


# The help line of every palette command but Chat (tui/app.py's StepCommands, Textual's own)
OTHER_COMMANDS_HELP = (
    "open the ", "load a shipped preset", "write it as YAML", "diagnose a failure",
    "state, preset, step and loss", "loss curves, costs", "queued runs and sweeps", "asks first",
    "switch the wizard", "Ring the bell", "current theme", "Quit the application", "help panel",
    "available keys", "Minimize the widget", "Maximize the focused", "'screenshot'",
)  # fmt: skip


def only_chat_listed(screen: str) -> bool:
    """The command palette lists the Chat command, refused, and nothing else."""
    return (
        "Chat with the run's model" in screen
        and "not available" in screen
        and not any(other in screen for other in OTHER_COMMANDS_HELP)
    )


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_reopening_the_wizard_finds_the_live_run(start, live_run, size) -> None:  # type: ignore[no-untyped-def]
    path, run_id, env = live_run
    pane = start("--preset", str(path), size=size, env=env)
    pane.wait_for(re.compile(r"\d+ ok\b"), timeout=60)
    pane.wait_for("Live run found", timeout=30)  # said, not silent
    pane.wait_for("Nothing blocks the next steps", timeout=90)  # its port blocks nothing
    pane.send(*["Down"] * 10)  # the master_port row's detail
    # "master_port P is in use by your run RUN; the next launch uses N" (wrapped in the pane)
    pane.wait_for(lambda s: "your run" in s and re.search(r"\buses \d+", s) is not None,
                  timeout=20)  # fmt: skip

    pane.send("C-r")  # Run all while this preset trains: asked, with the run named
    dialog = pane.wait_for("Run all (y)", timeout=30)
    assert "already training" in dialog, dialog
    pane.send("n")
    pane.wait_for(lambda s: "Run all (y)" not in s)

    for _ in range(5):
        pane.send("C-n")
    pane.wait_for(lambda s: "Throughput" in s and "No run to monitor" not in s, timeout=60)
    # The throughput panel's "step N/MAX" (a real step): a bare "step N" also matches the log
    # pane's launch line ("--max_steps 100000"), seen long before the first step under load.
    pane.wait_for(re.compile(r"\bstep [1-9]\d*/100000"), timeout=120)

    pane.send("u")  # the Runs view
    pane.wait_for("Runs on this machine")
    # its row: state, preset, step and loss as the run's own files say
    pane.wait_for(re.compile(rf"{re.escape(run_id)}\s+running\s+tiny-cpu\s+\d+/100000\s+\d"))
    pane.send("Escape")
    pane.wait_for(lambda s: "Runs on this machine" not in s)

    pane.send("C-p")  # Chat from the palette: refused like the dimmed `a`
    pane.wait_for("Search for commands")
    pane.type("Chat with")
    # Enter runs the highlighted hit: wait until Chat is the only one listed. The palette lists
    # every command (Chat's "not available" among them) before the query is applied, and a
    # partial query ("Cha") lists others too: Enter there once ran another command.
    pane.wait_for(only_chat_listed)
    pane.send("Enter")
    pane.wait_for("Chat not available")
    assert "you>" not in pane.capture()

    pane.send("C-q")  # asked: the run keeps going
    quit_dialog = pane.wait_for("Quit trainwiz?")
    assert "keeps going" in quit_dialog and run_id[:20] in quit_dialog
    pane.send("y")
    pane.wait_dead(timeout=30)
