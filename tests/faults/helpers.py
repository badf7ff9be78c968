"""Shared helpers of the fault-injection suite: the CLI, run files, and the run's processes.

Processes are found the way an operator would, independently of trainwiz's own bookkeeping:
every live process whose /proc/PID/cmdline or /proc/PID/environ mentions the run directory.
Every wait here goes through ``tests.waiting.wait_until``: it polls the event against a
deadline and, on time-out, says what it waited for and what it saw (the run's state and the
end of its train.log), so a failure explains itself without a re-run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import yaml

from backend.runs.control import refresh
from tests.trainwiz_cli import cli as run_cli
from tests.trainwiz_cli import runs_records
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]
ENDED = ("finished", "failed", "stopped")
LOG_LINES = 15  # of train.log in a time-out's message: the lines that say why, not the run


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """`trainwiz ARGS…` whatever it exits with: fault tests assert the exit code themselves."""
    return run_cli(*args, check=False, timeout=timeout)


def runs_json() -> dict[str, dict]:
    return runs_records()


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


def log_tail(run_dir: Path, lines: int = LOG_LINES) -> list[str]:
    """The last ``lines`` lines of the run's train.log (none yet: an empty list)."""
    try:
        text = (run_dir / "train.log").read_text(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:]


def run_seen(run_dir: Path) -> dict[str, Any]:
    """What a wait on a run saw when it gave up: status.json's state and message as written
    (no CLI: the record may be the broken thing), the metric steps, the end of train.log."""
    seen: dict[str, Any] = {"run": run_dir.name}
    try:
        status = json.loads((run_dir / "status.json").read_text())
        seen["state"], seen["message"] = status.get("state"), status.get("message")
    except (OSError, ValueError, AttributeError) as exc:
        seen["status.json"] = f"unreadable: {type(exc).__name__}: {exc}"
    try:
        seen["steps"] = metrics_count(run_dir)
    except AssertionError as bad:  # a bare NaN: say so instead of hiding the rest
        seen["steps"] = str(bad)
    seen["train.log"] = log_tail(run_dir)
    return seen


def _state(run_dir: Path) -> dict:
    return json.loads((run_dir / "status.json").read_text())


def wait_steps(run_dir: Path, n: int, timeout: float = 300) -> None:
    """Until the run has logged ``n`` steps (fails at once, with the log, if it ended first)."""

    def reached_or_ended() -> str | AssertionError | None:
        try:
            count = metrics_count(run_dir)  # -1 while a line is mid-write: not yet
        except AssertionError as bad:  # a bare NaN (metric_lines): fails now, not at the deadline
            return bad
        if count >= n:
            return "reached"
        return "ended" if _state(run_dir)["state"] in ENDED else None

    why = wait_until(
        reached_or_ended,
        what=f"{n} metric steps in {run_dir}",
        timeout=timeout,
        seen=lambda: run_seen(run_dir),
        interval=0.1,
    )
    if isinstance(why, AssertionError):
        raise why
    # The run may have logged its last steps between the two reads above: count once more now
    # that nothing writes any more.
    if why == "ended" and metrics_count(run_dir) < n:
        tail = (run_dir / "train.log").read_text(errors="replace")[-3000:]
        raise AssertionError(f"run ended before {n} steps: {_state(run_dir)}\n{tail}")


def end_runs(home: Path) -> None:
    """Teardown: whatever a failed test left running in ``home`` is ended (by run dir)."""
    from backend.runs.procs import end_processes

    runs = home / "runs"
    for run_dir in runs.iterdir() if runs.is_dir() else []:
        end_processes(run_dir, 5.0)


def wait_state(
    run_dir: Path, states: tuple[str, ...], timeout: float = 30, interval: float = 0.2
) -> dict:
    """The run's record from ``trainwiz runs --json`` once its state is one of ``states`` (as a
    user reads it). The wait itself reads the state in this process, through the same backend
    call `runs` makes (``refresh``): a CLI process per poll cost ~0.5 s of CPU, taken from the
    run being waited for. Once reached, one `trainwiz runs --json` gives the record."""
    last: dict[str, object] = {}

    def reached() -> bool:
        last["state"] = refresh(run_dir).state
        return last["state"] in states

    wait_until(
        reached,
        what=f"run {run_dir.name} in state {'/'.join(states)}",
        timeout=timeout,
        seen=lambda: {"state": last.get("state"), "train.log": log_tail(run_dir)},
        interval=interval,
    )
    record = runs_json()[run_dir.name]
    assert record["state"] in states, record  # the CLI says what the backend said
    return record


def wait_final(run_dir: Path, timeout: float = 180) -> dict:
    """The run's record once it has ended."""
    return wait_state(run_dir, ENDED, timeout, interval=0.5)


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


def _role_of(cmd: str) -> str | None:
    if "backend.runs.watch" in cmd:
        return "watcher"
    if "torchrun" in cmd:
        return "torchrun"
    if "train_entry.py" in cmd:
        return "trainer"
    return None


def role_pid(run_dir: Path, role: str, timeout: float = 60) -> int:
    """The pid of the run's watcher, torchrun or trainer (by its command line)."""

    def found() -> int | None:
        pids = [pid for pid, cmd in processes_of(run_dir).items() if _role_of(cmd) == role]
        return pids[0] if pids else None

    pid = wait_until(
        found,
        what=f"a {role} process of {run_dir}",
        timeout=timeout,
        seen=lambda: {"processes": processes_of(run_dir), **run_seen(run_dir)},
        interval=0.1,
    )
    assert pid is not None  # wait_until returns only a truthy value
    return pid


def assert_nothing_left(run_dir: Path, timeout: float = 20) -> None:
    """Until no process of the run is alive (by /proc, not by trainwiz's record)."""
    wait_until(
        lambda: not processes_of(run_dir),
        what=f"no process of the run {run_dir.name} left alive",
        timeout=timeout,
        seen=lambda: {"processes of the run still alive": processes_of(run_dir)},
        interval=0.1,
    )


def holders(path: Path) -> dict[int, str]:
    """pid -> cmdline of every live process with ``path`` open (by /proc/PID/fd)."""
    target = str(path.resolve())
    found = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            links = [os.readlink(fd) for fd in (entry / "fd").iterdir()]
            if target in links:
                cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
                found[int(entry.name)] = cmd.decode(errors="replace")
        except OSError:  # gone meanwhile, or not ours to read
            continue
    return found


def metrics_count(run_dir: Path) -> int:
    try:
        return sum(1 for m in metric_lines(run_dir) if m["kind"] == "step")
    except json.JSONDecodeError:
        return -1


def kill(pid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    os.kill(pid, sig)
