"""Faults in the run record itself: a reused pid, a launcher that died, each run file corrupted.

Real processes (the real detached watcher running a small python "training", a real launcher
process, an unrelated ``setsid sleep``), no training stack needed: these run in seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from backend.rundir import LAUNCH, create_run_dir, update_status, write_json
from backend.runs.launch import start_watcher
from tests.faults.helpers import ROOT, assert_nothing_left, cli, runs_json, wait_state
from tests.waiting import pilot_until, wait_until

SLEEPER = (
    "import json, os, time\n"
    "m = open(os.environ['TRAINWIZ_METRICS'], 'a')\n"
    "for i in range(1, 100000):\n"
    "    m.write(json.dumps({'kind': 'step', 'step': i, 'loss': 1.0}) + '\\n'); m.flush()\n"
    "    print('step', i, flush=True); time.sleep(0.2)\n"
)


def _run(code: str = SLEEPER, name: str = "unit") -> Path:
    run_dir = create_run_dir(name, "host")
    train = {
        "id": "train",
        "title": "t",
        "argv": [sys.executable, "-c", code],
        "env": {"TRAINWIZ_METRICS": str(run_dir / "metrics.jsonl")},
    }
    write_json(run_dir / LAUNCH, {"runner": "host", "prepare": [], "train": train})
    start_watcher(run_dir)
    return run_dir


def _wait(run_dir: Path, states: tuple[str, ...], timeout: float = 30) -> dict:
    return wait_state(run_dir, states, timeout)


def _proc_state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


@pytest.fixture
def stranger() -> Iterator[subprocess.Popen[bytes]]:
    """An unrelated process group (``setsid sleep 600``) that nothing may signal."""
    proc = subprocess.Popen(["setsid", "sleep", "600"])
    # Ready once setsid made its own session and exec'd sleep: before that its pgid is ours,
    # and the record below would name this test's own process group.
    wait_until(
        lambda: (
            os.getsid(proc.pid) == proc.pid
            and Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
        ),
        what=f"pid {proc.pid} to be `sleep 600` leading its own session",
        timeout=20,
        seen=lambda: (proc.poll(), Path(f"/proc/{proc.pid}/cmdline").read_bytes()),
    )
    yield proc
    proc.kill()
    proc.wait()


@pytest.mark.parametrize("with_start", [False, True], ids=["no-start-times", "wrong-start-times"])
def test_a_reused_pid_is_never_signalled_nor_shown_running(
    stranger: subprocess.Popen[bytes], with_start: bool
) -> None:
    run_dir = create_run_dir("reused", "host")
    pid = stranger.pid
    pgid = os.getpgid(pid)
    fields: dict = {"state": "running", "pid": pid, "pgid": pgid, "watcher_pid": pid}
    if with_start:
        fields.update(pid_start=1, watcher_start=1)  # what the old processes' start times were
    update_status(run_dir, started_at=time.time(), **fields)
    run = runs_json()[run_dir.name]
    assert run["state"] == "failed"  # the recorded processes are gone: not "running"
    assert "exit code unknown" in run["message"]
    update_status(run_dir, state="running", message="")
    out = cli("stop", run_dir.name, "--timeout", "1")
    assert out.returncode == 0, out.stderr
    assert stranger.poll() is None and _proc_state(pid) in ("S", "R")
    assert runs_json()[run_dir.name]["state"] in ("failed", "stopped")


def test_a_launcher_that_died_before_the_watcher_leaves_a_failed_record() -> None:
    # A real launcher process that dies right after making the run dir (as a SIGKILL between
    # create_run_dir and start_watcher would leave it).
    code = (
        "import os, signal\n"
        "from backend.runs.procs import start_time\n"
        "from backend.rundir import create_run_dir\n"
        "d = create_run_dir('orphan', 'host', launcher_pid=os.getpid(),"
        " launcher_start=start_time(os.getpid()))\n"
        "print(d, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == -signal.SIGKILL
    run_dir = Path(proc.stdout.strip())
    run = runs_json()[run_dir.name]
    assert run["state"] == "failed" and run["cause"] == "launcher_died"
    assert "launcher died" in run["message"]
    started = time.monotonic()
    logs = cli("logs", "-f", run_dir.name, timeout=30)
    assert logs.returncode == 0 and time.monotonic() - started < 20
    assert "launcher died" in logs.stderr
    assert cli("stop", run_dir.name).returncode == 0


GARBAGE = {
    "garbage": b"{not json at all",
    "truncated": b"",
    "non-utf8": b"\xff\xfe\x00\x80 status \xc3\x28\n",
}
RUN_FILES = ("status.json", "metrics.jsonl", "launch.json", "preset.yaml", "plan.json", "train.log")


def _orphaned_run(tmp_path: Path) -> Path:
    """A run whose watcher was SIGKILLed mid-training and whose training then ended: its
    record still says "running", so every reader has to rebuild the truth from the files."""
    go = tmp_path / "go"
    code = (
        "import json, os, time\n"
        "m = open(os.environ['TRAINWIZ_METRICS'], 'a')\n"
        "m.write(json.dumps({'kind': 'step', 'step': 1, 'loss': 1.0}) + '\\n'); m.flush()\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        "m.write(json.dumps({'kind': 'end', 'ok': True}) + '\\n'); m.flush()\n"
    )
    run_dir = _run(code, name="bad")
    _wait(run_dir, ("running",))
    watcher = json.loads((run_dir / "status.json").read_text())["watcher_pid"]
    os.kill(watcher, signal.SIGKILL)
    go.touch()
    assert_nothing_left(run_dir)
    assert json.loads((run_dir / "status.json").read_text())["state"] == "running"
    return run_dir


@pytest.mark.slow
@pytest.mark.parametrize("how", sorted(GARBAGE))
@pytest.mark.parametrize("name", RUN_FILES)
def test_each_corrupt_run_file_is_reported_never_fatal(name: str, how: str, tmp_path: Path) -> None:
    healthy = _run("print('done')", name="healthy")
    _wait(healthy, ("finished",))
    bad = _orphaned_run(tmp_path)
    (bad / name).write_bytes(GARBAGE[how])
    listing = cli("runs")
    assert listing.returncode == 0, listing.stderr
    assert "Traceback" not in listing.stderr
    assert healthy.name in listing.stdout and bad.name in listing.stdout
    runs = runs_json()
    assert runs[healthy.name]["state"] == "finished"
    expected = "failed" if name == "metrics.jsonl" else "finished"
    assert runs[bad.name]["state"] == expected, runs[bad.name]
    if name == "status.json":
        assert "status.json was unreadable" in runs[bad.name]["message"]
        assert (bad / "status.json.garbled").read_bytes() == GARBAGE[how]
    for args in (("logs", bad.name), ("logs", "-f", bad.name), ("stop", bad.name)):
        out = cli(*args, timeout=30)
        assert out.returncode == 0, (args, out.stderr)
        assert "Traceback" not in out.stderr


def test_status_corrupted_under_a_live_run_then_stop_still_ends_it() -> None:
    run_dir = _run()
    _wait(run_dir, ("running",))
    (run_dir / "status.json").write_bytes(b"\x00garbage")
    run = runs_json()[run_dir.name]
    assert run["state"] == "running" and "status.json was unreadable" in run["message"]
    out = cli("stop", run_dir.name, "--timeout", "5")
    assert out.returncode == 0, out.stdout + out.stderr
    assert runs_json()[run_dir.name]["state"] == "stopped"
    assert_nothing_left(run_dir, timeout=2)


def test_non_utf8_metrics_under_a_live_run_do_not_break_anything() -> None:
    run_dir = _run()
    _wait(run_dir, ("running",))
    with open(run_dir / "metrics.jsonl", "ab") as handle:
        handle.write(b'\xff\xfe{"kind": "end", \xc3\x28\n')
    assert runs_json()[run_dir.name]["state"] == "running"
    assert cli("stop", run_dir.name, "--timeout", "5").returncode == 0
    assert_nothing_left(run_dir, timeout=2)


async def test_attach_opens_the_monitor_on_a_corrupt_run() -> None:
    from screens.monitor import MonitorScreen
    from tui.app import TrainwizApp
    from tui.commands.runs import attach_preset
    from widgets.throughput import ThroughputMeter

    run_dir = _run("print('done')")
    _wait(run_dir, ("finished",))
    (run_dir / "status.json").write_bytes(GARBAGE["non-utf8"])
    (run_dir / "metrics.jsonl").write_bytes(GARBAGE["non-utf8"])
    (run_dir / "preset.yaml").write_bytes(GARBAGE["garbage"])
    preset, notes = attach_preset(run_dir)
    assert preset is None and "unusable" in notes[-1]
    from backend.preset import load_preset

    app = TrainwizApp(load_preset("tiny-cpu"), "tiny-cpu", start_step="monitor", attach_run=run_dir)
    async with app.run_test(size=(100, 30)) as pilot:

        def shown() -> str:
            """The run state the monitor shows: set once its worker has read the corrupt files
            and the screen has handled what it posted (not merely once the screen mounted)."""
            assert isinstance(app.screen, MonitorScreen) and app.screen.run is not None
            return app.screen.query_one(ThroughputMeter).state

        await pilot_until(
            pilot,
            shown,
            what="the monitor attached to the corrupt run, showing its state",
            timeout=30,
            seen=lambda: (type(app.screen).__name__, getattr(app.screen, "run", None)),
        )
        assert isinstance(app.screen, MonitorScreen) and app.screen.run is not None
        assert app.screen.run.run_dir == run_dir


def test_run_files_are_private() -> None:
    run_dir = _run("print('done')")
    _wait(run_dir, ("finished",))
    assert (run_dir.stat().st_mode & 0o777) == 0o700
    assert (run_dir.parent.stat().st_mode & 0o777) == 0o700
    for path in run_dir.rglob("*"):
        mode = path.stat().st_mode & 0o777
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
