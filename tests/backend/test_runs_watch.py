"""The watcher and host runner with real processes (plain python commands instead of training).

Each test writes a launch.json by hand, starts the real detached watcher, and checks what lands
in status.json and train.log: exit codes, signals, stop, failed preparation, a killed watcher.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from pathlib import Path

from backend.rundir import (
    LAUNCH,
    LOG,
    METRICS,
    create_run_dir,
    read_status,
    update_status,
    write_json,
)
from backend.runs.control import pid_alive, refresh, stop_run, wait_for
from backend.runs.launch import start_watcher


def _py(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _start(spec: dict) -> Path:
    run_dir = create_run_dir("unit", "host")
    write_json(run_dir / LAUNCH, {"runner": "host", "prepare": [], **spec})
    start_watcher(run_dir)
    return run_dir


def _train(code: str, **extra) -> dict:
    return {"id": "train", "title": "t", "argv": _py(code), "env": {}, **extra}


def _final(run_dir: Path, timeout: float = 30):
    return wait_for(run_dir, lambda s: s.final, timeout)


def test_success_records_exit_code_and_log() -> None:
    run_dir = _start({"train": _train("print('hello from training')")})
    status = _final(run_dir)
    assert status.state == "finished"
    assert status.exit_code == 0
    assert status.pid and status.pgid == status.pid
    assert status.ended_at and status.started_at and status.ended_at >= status.started_at
    log = (run_dir / LOG).read_text()
    assert "hello from training" in log
    assert "run finished" in log


def test_failure_exit_code_is_recorded() -> None:
    run_dir = _start({"train": _train("import sys; print('boom'); sys.exit(3)")})
    status = _final(run_dir)
    assert (status.state, status.exit_code) == ("failed", 3)
    assert "exit code 3" in status.message


def test_killed_by_signal_is_named() -> None:
    run_dir = _start({"train": _train("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")})
    status = _final(run_dir)
    assert status.state == "failed"
    assert status.exit_code == -signal.SIGSEGV
    assert "SIGSEGV" in status.message


def test_env_and_cwd_reach_the_process(tmp_path: Path) -> None:
    out = tmp_path / "seen.json"
    code = (
        "import json, os; json.dump({'v': os.environ['TW_X'], 'cwd': os.getcwd()}, "
        f"open({str(out)!r}, 'w'))"
    )
    run_dir = _start({"train": _train(code, env={"TW_X": "42"}, cwd=str(tmp_path))})
    assert _final(run_dir).state == "finished"
    seen = json.loads(out.read_text())
    assert seen == {"v": "42", "cwd": str(tmp_path)}


def test_failed_prepare_step_never_starts_training(tmp_path: Path) -> None:
    marker = tmp_path / "trained"
    run_dir = create_run_dir("unit", "host")
    write_json(
        run_dir / LAUNCH,
        {
            "runner": "host",
            "prepare": [
                {"id": "model", "title": "m", "argv": _py("raise SystemExit(4)"), "env": {}}
            ],
            "train": _train(f"open({str(marker)!r}, 'w')"),
        },
    )
    start_watcher(run_dir)
    status = _final(run_dir)
    assert status.state == "failed"
    assert status.exit_code == 4
    assert "step model failed" in status.message
    assert not marker.exists()


def test_stop_terminates_the_whole_group_and_records_stopped(tmp_path: Path) -> None:
    child_pid = tmp_path / "child.pid"
    # The training spawns a grandchild (as torchrun spawns workers); both must end.
    code = (
        "import subprocess, sys, time\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
        f"open({str(child_pid)!r}, 'w').write(str(p.pid))\n"
        "print('running', flush=True)\n"
        "time.sleep(600)\n"
    )
    run_dir = _start({"train": _train(code)})
    wait_for(run_dir, lambda s: s.state == "running", 20)
    deadline = time.monotonic() + 20
    while not child_pid.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    grandchild = int(child_pid.read_text())
    status = stop_run(run_dir, timeout=5)
    assert status.state == "stopped"
    assert "stopped on request" in status.message
    deadline = time.monotonic() + 10
    while pid_alive(grandchild) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not pid_alive(grandchild)


def test_stop_escalates_to_sigkill_when_sigterm_is_ignored() -> None:
    code = (
        "import signal, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ignoring', 'TERM', flush=True)\n"
        "time.sleep(600)\n"
    )
    run_dir = _start({"train": _train(code)})
    wait_for(run_dir, lambda s: s.state == "running", 20)
    deadline = time.monotonic() + 10
    # (the watcher's own step line quotes the code, so look for the printed form only)
    while "\nignoring TERM" not in (run_dir / LOG).read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    status = stop_run(run_dir, timeout=1)
    assert status.state == "stopped"
    assert status.exit_code == -signal.SIGKILL


def test_stop_of_a_finished_run_changes_nothing() -> None:
    run_dir = _start({"train": _train("pass")})
    before = _final(run_dir)
    after = stop_run(run_dir, timeout=1)
    assert after.state == before.state == "finished"
    assert not (run_dir / "stop_requested").exists()


def test_watcher_killed_training_continues_and_refresh_repairs_state(tmp_path: Path) -> None:
    go = tmp_path / "go"
    code = (
        "import json, os, time\n"
        f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
        f"open(os.environ['TRAINWIZ_METRICS'], 'a').write(json.dumps({{'kind': 'end', 'ok': True}}) + '\\n')\n"
    )
    run_dir = create_run_dir("unit", "host")
    env = {"TRAINWIZ_METRICS": str(run_dir / METRICS)}
    write_json(run_dir / LAUNCH, {"runner": "host", "prepare": [], "train": _train(code, env=env)})
    start_watcher(run_dir)
    status = wait_for(run_dir, lambda s: s.state == "running", 20)
    assert status.watcher_pid
    os.kill(status.watcher_pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while pid_alive(status.watcher_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    # Training still alive without its watcher: the state stays running.
    assert pid_alive(status.pid)
    assert refresh(run_dir).state == "running"
    go.touch()
    deadline = time.monotonic() + 10
    while pid_alive(status.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    repaired = refresh(run_dir)
    assert repaired.state == "finished"
    assert "watcher gone" in repaired.message
    assert read_status(run_dir).state == "finished"  # saved, not only computed


def test_refresh_without_end_line_marks_failed_unknown_code() -> None:
    run_dir = create_run_dir("unit", "host")
    # A dead pid/pgid and a dead watcher pid: what a reboot leaves behind.
    update_status(run_dir, state="running", pid=2**22 - 3, pgid=2**22 - 3, watcher_pid=2**22 - 5)
    status = refresh(run_dir)
    assert status.state == "failed"
    assert "exit code unknown" in status.message
