"""A served run's processes without a model: what `trainwiz serve RUN --detach` leaves running.

A real serve is a supervisor (named by ``serve/serve.json``: its pid and start time, the URL)
and its controller, model worker and API server (each with the run's serve marker in its
environment). Here each is a sleeping python of its own session, so tests of what stops or
lists a serve run in a second; ``end`` reaps whatever is left.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from backend.procinfo import start_time
from backend.results.serve import MARK_ENV, RECORD, SERVE_DIR

# Says "up" once running: a process Popen has just returned is past exec but may not yet show
# its environment in /proc/PID/environ (seen once on a loaded machine: `trainwiz stop` found
# three of the four and counted three), so fake_serve returns only when each has said it.
SLEEP = [sys.executable, "-c", "import time; print('up', flush=True); time.sleep(300)"]


@dataclass
class FakeServe:
    run_dir: Path
    base_url: str
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def end(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
            if proc.stdout is not None:
                proc.stdout.close()


def fake_serve(run_dir: Path, port: int = 8000, workers: int = 3) -> FakeServe:
    """A supervisor (unmarked, named by the record) and ``workers`` marked processes."""
    marked = {**os.environ, MARK_ENV: str(run_dir.resolve())}
    marked.pop("TRAINWIZ_RUN_DIR", None)
    served = FakeServe(run_dir, f"http://127.0.0.1:{port}/v1")
    served.procs.append(subprocess.Popen(SLEEP, stdout=subprocess.PIPE, start_new_session=True))
    for _ in range(workers):
        served.procs.append(
            subprocess.Popen(SLEEP, env=marked, stdout=subprocess.PIPE, start_new_session=True)
        )
    for proc in served.procs:
        assert proc.stdout is not None and proc.stdout.readline() == b"up\n"
    supervisor = served.procs[0].pid
    record = {"pid": supervisor, "pid_start": start_time(supervisor), "model": run_dir.name,
              "base_url": served.base_url, "host": "127.0.0.1", "port": port,
              "engine": "model_worker", "ready": True}  # fmt: skip
    (run_dir / SERVE_DIR).mkdir(parents=True, exist_ok=True)
    (run_dir / SERVE_DIR / RECORD).write_text(json.dumps(record), encoding="utf-8")
    return served
