"""A serve that outlives the command: the supervisor, its record, and how it is stopped.

``trainwiz serve --detach`` (and the Monitor's Serve key) start ``python -m
backend.results.serve_run RUN_DIR ...`` in a session of its own; it starts the processes
(``backend.results.serve.start``), writes ``serve/serve.json`` (its pid and start time, the
URL, whether a key is required or was waived with ``--allow-no-key``) once the model answers,
and holds them until SIGTERM; its children die with it, ``kill -9`` included. ``trainwiz stop
RUN`` signals it and then ends anything with the run's serve marker that is still alive, so no
worker is left.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend import ports, subproc
from backend.errors import BadInput, TrainwizError
from backend.i18n import _
from backend.results.serve import (
    RECORD,
    SERVE_DIR,
    ServePlan,
    Serving,
    end_leftovers,
    plan_serve,
    serve_processes,
    start,
)
from backend.runs.procs import same_process, start_time


def write_record(plan: ServePlan, pid: int, **more: Any) -> None:
    record = {"pid": pid, "pid_start": start_time(pid), "model": plan.model_name,
              "base_url": plan.base_url, "host": plan.host, "port": plan.port,
              "engine": plan.engine, "model_path": str(plan.model_path),
              "api_key": plan.api_key is not None, "allow_no_key": plan.allow_no_key,
              **more}  # fmt: skip
    path = plan.run_dir / SERVE_DIR / RECORD
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2), encoding="utf-8")
    os.replace(tmp, path)


def read_record(run_dir: Path) -> dict[str, Any] | None:
    try:
        data = json.loads((run_dir / SERVE_DIR / RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def live_serve(run_dir: Path) -> dict[str, Any] | None:
    """The record of ``run_dir``'s serve while its supervisor is up (None: not served now)."""
    record = read_record(run_dir)
    if record and same_process(record.get("pid"), record.get("pid_start")):
        return record
    return None


@dataclass(frozen=True)
class ServeStopped:
    """What ``stop_serving`` ended: ``trainwiz stop`` adds it to the training's own count, so
    a served run's answer counts its servers (the supervisor and each process it started)."""

    ended: int
    left: list[int]


def stop_serving(run_dir: Path, timeout: float = 20.0) -> ServeStopped | None:
    """End a serve of ``run_dir`` (its supervisor, then anything left); None if none ran."""
    record = read_record(run_dir)
    live = serve_processes(run_dir)
    if record is None and not live:
        return None
    seen = {p: start_time(p) for p in live}  # pid + start time: a reused pid is not ours
    pid = record.get("pid") if record else None
    if record and same_process(pid, record.get("pid_start")):
        seen[int(pid)] = record.get("pid_start")  # type: ignore[arg-type]
        os.kill(int(pid), signal.SIGTERM)  # type: ignore[arg-type]
        deadline = time.monotonic() + timeout
        while same_process(pid, record.get("pid_start")) and time.monotonic() < deadline:
            time.sleep(0.1)
    seen.update({p: start_time(p) for p in serve_processes(run_dir) if p not in seen})
    end_leftovers(run_dir)
    (run_dir / SERVE_DIR / RECORD).unlink(missing_ok=True)
    ended = sum(1 for p, start in seen.items() if start is not None and not same_process(p, start))
    return ServeStopped(ended, serve_processes(run_dir))


def supervise(plan: ServePlan, serving: Serving, on_ready: Any = None) -> int:
    """Hold the serve until SIGTERM/SIGINT or a process dies; always ends all of them."""
    stop = threading.Event()
    old = {s: signal.signal(s, lambda *_a: stop.set()) for s in (signal.SIGTERM, signal.SIGINT)}
    write_record(plan, os.getpid(), ready=True, started_at=time.time())
    if on_ready is not None:
        on_ready()
    try:
        while not stop.wait(0.5):
            if serving.dead() is not None:
                return 1
        return 0
    finally:
        serving.stop()
        (plan.run_dir / SERVE_DIR / RECORD).unlink(missing_ok=True)
        for sig, handler in old.items():
            signal.signal(sig, handler)


def start_detached(run_dir: Path, args: list[str], timeout: float = 900.0) -> dict[str, Any]:
    """``--detach``: a supervisor in its own session (``python -m backend.results.serve``);
    returns its record once the model is served, or raises with its log's last lines."""
    logs = run_dir / SERVE_DIR
    logs.mkdir(parents=True, exist_ok=True)
    (logs / RECORD).unlink(missing_ok=True)
    failure = logs / "failed.txt"
    failure.unlink(missing_ok=True)
    with open(logs / "supervisor.log", "ab") as log:
        proc = subproc.spawn(
            [sys.executable, "-m", "backend.results.serve_run", str(run_dir), *args],
            stdout=log,
            cwd=Path(__file__).resolve().parents[2],
            text=False,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        record = read_record(run_dir)
        if record and record.get("ready"):
            return record
        if proc.poll() is not None:
            why = failure.read_text(encoding="utf-8").strip() if failure.is_file() else ""
            raise (BadInput if proc.returncode == 2 else TrainwizError)(
                why
                or _("the serve supervisor exited: see {log}").format(log=logs / "supervisor.log")
            )
        time.sleep(0.2)
    stop_serving(run_dir)
    raise TrainwizError(_("the model was not served within {s:.0f} s").format(s=timeout))


def serve_in_background(run_dir: Path, port: int = 8000) -> tuple[str, str]:
    """The Monitor's Serve key: a detached serve on 127.0.0.1 (port 8000, else a free one),
    or the one already running; (notification severity, text with the URL or the reason)."""
    record = live_serve(run_dir)
    if record is not None:
        return "information", _("already served at {url} (trainwiz stop {name} ends it)").format(
            url=record.get("base_url"), name=run_dir.name
        )
    if ports.listen_problem("127.0.0.1", port) is not None:
        port = ports.any_free_port()
    args = ["--host", "127.0.0.1", "--port", str(port)]
    try:
        plan_serve(run_dir, port=port)  # the CLI's refusals, said before anything starts
        record = start_detached(run_dir, args)
    except TrainwizError as exc:
        return "error", str(exc)
    return "information", _(
        "serving {model} at {url} (OpenAI API; trainwiz stop {name} ends it)"
    ).format(model=record.get("model"), url=record.get("base_url"), name=run_dir.name)


def main(argv: list[str] | None = None) -> int:
    """The detached supervisor: plan, start, hold (``trainwiz stop RUN`` ends it)."""
    parser = argparse.ArgumentParser(prog="trainwiz-serve-supervisor")
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--checkpoint", type=int)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--api-key-env")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--allow-no-key", action="store_true")
    args = parser.parse_args(argv)
    failure = args.run_dir / SERVE_DIR / "failed.txt"
    failure.parent.mkdir(parents=True, exist_ok=True)
    try:
        plan = plan_serve(args.run_dir, checkpoint=args.checkpoint, host=args.host,
                          port=args.port, api_key_env=args.api_key_env, device=args.device,
                          allow_no_key=args.allow_no_key)  # fmt: skip
        serving = start(plan)
    except TrainwizError as exc:
        failure.write_text(str(exc), encoding="utf-8")
        return 2 if isinstance(exc, BadInput) else 1
    return supervise(plan, serving)


if __name__ == "__main__":
    sys.exit(main())
