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

SLEEP = [sys.executable, "-c", "import time; time.sleep(300)"]


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


def fake_serve(run_dir: Path, port: int = 8000, workers: int = 3) -> FakeServe:
    """A supervisor (unmarked, named by the record) and ``workers`` marked processes."""
    marked = {**os.environ, MARK_ENV: str(run_dir.resolve())}
    marked.pop("TRAINWIZ_RUN_DIR", None)
    served = FakeServe(run_dir, f"http://127.0.0.1:{port}/v1")
    served.procs.append(subprocess.Popen(SLEEP, start_new_session=True))
    for _ in range(workers):
        served.procs.append(subprocess.Popen(SLEEP, env=marked, start_new_session=True))
    supervisor = served.procs[0].pid
    record = {"pid": supervisor, "pid_start": start_time(supervisor), "model": run_dir.name,
              "base_url": served.base_url, "host": "127.0.0.1", "port": port,
              "engine": "model_worker", "ready": True}  # fmt: skip
    (run_dir / SERVE_DIR).mkdir(parents=True, exist_ok=True)
    (run_dir / SERVE_DIR / RECORD).write_text(json.dumps(record), encoding="utf-8")
    return served
