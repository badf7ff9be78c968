"""The watcher: a small detached process that owns one run from start to exit code.

Started by the launcher with ``setsid`` (``python -m backend.runs.watch RUN_DIR``), it is the
parent of the training process (or the client of its container), so it is the one process that
can learn the real exit code and record it, whatever happens to the wizard or the SSH session.
It executes ``launch.json`` (written by the launcher) and nothing else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from backend.runs.resume import run_attempts
from backend.runs.rundir import LAUNCH, LOG, STOP_REQUEST, read_status, update_status


def _log_line(log: IO[bytes], text: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    log.write(f"[trainwiz {stamp}] {text}\n".encode())
    log.flush()


def stop_requested(run_dir: Path) -> bool:
    return (run_dir / STOP_REQUEST).exists()


def _final_state(run_dir: Path, code: int) -> tuple[str, str]:
    if stop_requested(run_dir):
        return "stopped", f"stopped on request (exit code {code})"
    if code == 0:
        return "finished", "finished"
    if code < 0:
        return "failed", f"killed by signal {signal.Signals(-code).name}"
    return "failed", f"exit code {code}"


def run_host_step(run_dir: Path, step: dict[str, Any], log: IO[bytes], *, train: bool) -> int:
    """Run one host command in its own session (stop signals its whole process group)."""
    env = {**os.environ, **step.get("env", {})}
    _log_line(log, f"step {step['id']}: {step.get('display') or ' '.join(step['argv'])}")
    try:
        proc = subprocess.Popen(
            step["argv"],
            env=env,
            cwd=step.get("cwd") or None,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        _log_line(log, f"step {step['id']}: cannot start: {exc}")
        return 127
    changes: dict[str, Any] = {"pid": proc.pid, "pgid": proc.pid, "step": step["id"]}
    if train:
        changes["state"] = "running"
        changes["message"] = "training"
    else:
        changes["message"] = f"step {step['id']}: {step.get('title', '')}".strip()
    update_status(run_dir, **changes)
    if stop_requested(run_dir):  # a stop that raced the start: honour it
        os.killpg(proc.pid, signal.SIGTERM)
    return proc.wait()


def run_docker(run_dir: Path, spec: dict[str, Any], log: IO[bytes]) -> int:
    from backend.runs import docker_runner

    return docker_runner.run_container(run_dir, spec, log, lambda: stop_requested(run_dir))


def watch(run_dir: Path) -> int:
    """Execute the run; always leaves status.json in a final state."""
    spec = json.loads((run_dir / LAUNCH).read_text(encoding="utf-8"))
    update_status(run_dir, watcher_pid=os.getpid(), started_at=time.time())
    with open(run_dir / LOG, "ab", buffering=0) as log:
        for note in spec.get("notes", []):
            _log_line(log, f"note: {note}")
        try:
            for step in spec.get("prepare", []):
                if stop_requested(run_dir):
                    break
                code = run_host_step(run_dir, step, log, train=False)
                if code != 0:
                    state, message = _final_state(run_dir, code)
                    if state == "failed":
                        message = f"step {step['id']} failed ({message})"
                    return _finish(run_dir, log, state, code, message)
            if stop_requested(run_dir):
                return _finish(run_dir, log, "stopped", None, "stopped before training started")
            code = run_attempts(  # resumes after a crash up to launch.max_restarts times
                run_dir,
                spec,
                log,
                lambda s: (
                    run_host_step(run_dir, s["train"], log, train=True)
                    if s["runner"] == "host"
                    else run_docker(run_dir, s, log)
                ),
                lambda c: _final_state(run_dir, c),
            )
            state, message = _final_state(run_dir, code)
            failed_step = read_status(run_dir).step
            if state == "failed" and failed_step not in (None, "train", "container"):
                message = f"step {failed_step} failed ({message})"
            return _finish(run_dir, log, state, code, message)
        except Exception as exc:  # the watcher must record why, whatever broke
            _log_line(log, f"watcher error: {type(exc).__name__}: {exc}")
            return _finish(run_dir, log, "failed", None, f"{type(exc).__name__}: {exc}")


def _finish(run_dir: Path, log: IO[bytes], state: str, code: int | None, message: str) -> int:
    update_status(run_dir, state=state, exit_code=code, ended_at=time.time(), message=message)
    _log_line(log, f"run {state}: {message}")
    return 0 if state == "finished" else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m backend.runs.watch RUN_DIR", file=sys.stderr)
        return 2
    run_dir = Path(args[0]).resolve()
    read_status(run_dir)  # fail fast on a wrong directory
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return watch(run_dir)


if __name__ == "__main__":
    sys.exit(main())
