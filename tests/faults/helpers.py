"""Shared helpers of the fault-injection suite: the CLI, run files, and the run's processes.

Processes are found the way an operator would, independently of trainwiz's own bookkeeping:
every live process whose /proc/PID/cmdline or /proc/PID/environ mentions the run directory.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import yaml

from tests.trainwiz_cli import cli as run_cli

ROOT = Path(__file__).resolve().parents[2]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`trainwiz ARGS…` whatever it exits with: fault tests assert the exit code themselves."""
    return run_cli(*args, check=False, timeout=timeout)


def runs_json() -> dict[str, dict]:
    proc = cli("runs", "--json")
    assert proc.returncode == 0, proc.stderr
    return {r["run_id"]: r for r in json.loads(proc.stdout)}


def short_preset(tmp_path: Path, max_steps: int, name: str = "tiny-fault", **training) -> Path:
    data = yaml.safe_load((ROOT / "presets" / "tiny-cpu.yaml").read_text())
    data["name"] = name
    data["training"]["max_steps"] = max_steps
    data["training"].update(training)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def launch_detached(preset: Path) -> Path:
    proc = cli("launch", str(preset), "--detach", "--json")
    assert proc.returncode == 0, proc.stderr
    return Path(json.loads(proc.stdout)["run_dir"])


def metric_lines(run_dir: Path) -> list[dict]:
    """Every metrics line must parse as strict JSON (no NaN): the test fails otherwise."""
    path = run_dir / "metrics.jsonl"
    if not path.exists():
        return []
    return [
        json.loads(x, parse_constant=_no_constant)
        for x in path.read_text().splitlines()
        if x.strip()
    ]


def _no_constant(name: str) -> None:
    raise AssertionError(f"metrics.jsonl holds bare {name}: not JSON")


def wait_steps(run_dir: Path, n: int, timeout: float = 300) -> None:
    """Until the run has logged ``n`` steps (fails at once, with the log, if it ended first)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if sum(1 for m in metric_lines(run_dir) if m["kind"] == "step") >= n:
                return
        except json.JSONDecodeError:
            pass  # a line mid-write
        status = json.loads((run_dir / "status.json").read_text())
        if status["state"] in ("finished", "failed", "stopped"):
            tail = (run_dir / "train.log").read_text(errors="replace")[-3000:]
            raise AssertionError(f"run ended before {n} steps: {status}\n{tail}")
        time.sleep(0.2)
    raise AssertionError(f"fewer than {n} metric steps in {run_dir}")


def end_runs(home: Path) -> None:
    """Teardown: whatever a failed test left running in ``home`` is ended (by run dir)."""
    from backend.runs.procs import end_processes

    runs = home / "runs"
    for run_dir in runs.iterdir() if runs.is_dir() else []:
        end_processes(run_dir, 5.0)


def wait_final(run_dir: Path, timeout: float = 180) -> dict:
    deadline = time.monotonic() + timeout
    run = {}
    while time.monotonic() < deadline:
        run = runs_json()[run_dir.name]
        if run["state"] in ("finished", "failed", "stopped"):
            return run
        time.sleep(0.5)
    raise AssertionError(f"run {run_dir.name} never ended: {run}")


def processes_of(run_dir: Path) -> dict[int, str]:
    """pid -> cmdline of every live process that mentions ``run_dir`` in cmdline or environ."""
    needle = str(run_dir).encode()
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and (needle in cmdline or needle in environ):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def role_pid(run_dir: Path, role: str, timeout: float = 60) -> int:
    """The pid of the run's watcher, torchrun or trainer (by its command line)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid, cmd in processes_of(run_dir).items():
            if role == "watcher" and "backend.runs.watch" in cmd:
                return pid
            if role == "torchrun" and "torchrun" in cmd:
                return pid
            if role == "trainer" and "train_entry.py" in cmd and "torchrun" not in cmd:
                return pid
        time.sleep(0.1)
    raise AssertionError(f"no {role} process for {run_dir}: {processes_of(run_dir)}")


def assert_nothing_left(run_dir: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    left = processes_of(run_dir)
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = processes_of(run_dir)
    assert not left, f"processes of the run still alive: {left}"


def metrics_count(run_dir: Path) -> int:
    try:
        return sum(1 for m in metric_lines(run_dir) if m["kind"] == "step")
    except json.JSONDecodeError:
        return -1


def kill(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    os.kill(pid, sig)
