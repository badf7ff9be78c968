"""The scheduler: ``python -m backend.queue.scheduler``, detached, one per TRAINWIZ_HOME.

Each pass it settles the items that were started (a run that ended is recorded with its
diagnosis; a launch that never made a run is checked, below), starts the queued items whose
GPUs or CPU slot are free (``backend.queue.admit``; an item that runs through Slurm is handed
to sbatch at once, Slurm queueing it, and followed until its job ends), and tells the webhooks
about a sweep whose every variant ended. Then it sleeps: 0.5 s after something changed, growing
to 5 s while nothing does, and back to 0.5 s as soon as another process commits to queue.db or
an active run's status.json changes (both seen by a stat and one PRAGMA, never a busy loop). It
exits when no item waits or runs.

Never twice, also across ``kill -9`` and reboots: an item is claimed (queued -> starting) in one
transaction before its launcher process exists, and its run is found by the token the run's
preset name carries. A restarted scheduler looks at each item left "starting": a run directory
with its token is adopted; a live process carrying its token (the launcher, in its own session)
is waited for; a launcher's result file says how it ended; only when none of these exists did
nothing start, and the item goes back to "queued".
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from backend import nvml, paths, subproc
from backend.procinfo import env_entry, find_processes
from backend.queue import db
from backend.queue.admit import Decision, decide_cpu, decide_gpus, decide_slurm
from backend.queue.launcher import MARKER, result_path
from backend.queue.ranking import notify_finished_sweeps
from backend.queue.service import LOG, Locked, take_lock
from backend.rundir import RunDir
from backend.runs.control import refresh
from backend.runs.diagnose_run import diagnose_run
from backend.runs.procs import PROJECT_ROOT

MIN_SLEEP_S = 0.5
MAX_SLEEP_S = 5.0
MAX_LAUNCHES = 3  # a launcher that dies without a word is retried this often, then failed


def say(line: str) -> None:
    """One line of queue.log (the scheduler's stdout)."""
    print(f"[trainwiz {time.strftime('%Y-%m-%d %H:%M:%S')}] queue: {line}", flush=True)


def marked_processes(token: str) -> list[int]:
    """Live processes whose environment carries this item's token (its launcher, and after it
    the run's watcher and training)."""
    return [p.pid for p in find_processes(env=env_entry(MARKER, token))]


def run_of(token: str) -> str | None:
    """The run whose preset name ends with ``token`` (status.json names it from the moment the
    run directory exists)."""
    for run in RunDir.all():
        status = run.status_dict() or {}
        if str(status.get("preset", "")).endswith(f"-{token}"):
            return run.run_id
    return None


def read_result(item_id: int) -> dict[str, Any] | None:
    try:
        data = json.loads(result_path(item_id).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def gpu_snapshot() -> dict[str, Any]:
    """NVML's answer; a missing binding is an answer too (the item waits, saying why)."""
    try:
        return nvml.snapshot()
    except ImportError as exc:
        return {"error": f"pynvml cannot be imported ({exc})"}


class Scheduler:
    """One pass at a time over queue.db (``tick``); ``run`` loops until nothing is left."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.children: dict[int, subprocess.Popen[Any]] = {}  # launchers to reap

    # ---- the items already started ------------------------------------------------------
    def settle(self, item: db.Item) -> bool:
        """Bring one starting or running item up to date; True when it changed."""
        if item.run_id is None:
            return self._settle_launch(item)
        run_dir = paths.runs_dir() / item.run_id
        if not run_dir.is_dir():
            return self._end(item, "failed", f"run directory {run_dir} is gone")
        status = refresh(run_dir)
        if not status.final:
            if item.state != "running":
                return self._set(item, state="running")
            return False
        return self._end(item, status.state, status.message, run_dir)

    def _settle_launch(self, item: db.Item) -> bool:
        result = read_result(item.id)
        if result is not None and result.get("run_id"):
            return self._adopt(item, str(result["run_id"]))
        run_id = run_of(item.token)
        if run_id is not None:
            return self._adopt(item, run_id)
        if marked_processes(item.token):
            return False  # its launcher is still at work
        run_id = run_of(item.token)  # made between the two looks, by a launcher now gone
        if run_id is not None:
            return self._adopt(item, run_id)
        if result is not None:
            return self._end(item, "failed", str(result.get("error", "launch failed")))
        if item.launches >= MAX_LAUNCHES:
            return self._end(item, "failed", f"the launcher ended {item.launches} times "
                             f"without a word: see {paths.home() / LOG}")  # fmt: skip
        say(f"item {item.id}: nothing was started for it; back in the queue")
        return self._set(item, state="queued", assigned=None, message="")

    def _adopt(self, item: db.Item, run_id: str) -> bool:
        say(f"item {item.id}: run {run_id}")
        return self._set(item, state="running", run_id=run_id)

    def _end(self, item: db.Item, state: str, message: str, run_dir: Path | None = None) -> bool:
        category = title = None
        if state == "failed" and run_dir is not None:
            try:
                top = diagnose_run(run_dir).diagnosis.top
            except Exception as exc:  # a diagnosis bug never stops the queue
                say(f"item {item.id}: no diagnosis ({type(exc).__name__})")
                top = None
            if top is not None:
                category, title = top.category, top.title
        say(f"item {item.id}: {state}" + (f" ({category}: {title})" if category else ""))
        return self._set(item, state=state, message=message, ended_at=time.time(),
                         diagnosis_category=category, diagnosis_title=title)  # fmt: skip

    def _set(self, item: db.Item, **fields: Any) -> bool:
        with db.transaction(self.conn):
            return db.update_item(self.conn, item.id, where_state=item.state, **fields)

    # ---- starting the queued ones -------------------------------------------------------
    def waiting_on(self, item: db.Item) -> str:
        """What ``--after`` still waits for ("" when nothing)."""
        if not item.after:
            return ""
        kind, _sep, ref = item.after.partition(":")
        if kind == "item":
            other = db.item(self.conn, int(ref))
            if other is not None and not other.final:
                return f"waiting for queue item {ref} ({other.state})"
            return ""
        run_dir = paths.runs_dir() / ref
        if run_dir.is_dir() and not refresh(run_dir).final:
            return f"waiting for run {ref}"
        return ""

    def start_ready(self, found: list[db.Item]) -> bool:
        active = [i for i in found if i.state in db.ACTIVE]
        limit = db.max_parallel(self.conn)
        snapshot: dict[str, Any] | None = None
        changed = False
        for item in (i for i in found if i.state == "queued"):
            why = self.waiting_on(item)
            decision = Decision(None, why)
            if not why and item.scheduler == "slurm":
                decision = decide_slurm()
            elif not why and item.device == "cuda":
                snapshot = snapshot if snapshot is not None else gpu_snapshot()
                decision = decide_gpus(item, snapshot, active)
            elif not why:
                decision = decide_cpu(active, limit)
            if not decision.start:
                if item.message != decision.why:
                    self._set(item, message=decision.why)
                continue
            if self.claim(item, decision.gpus or []):
                item.assigned, item.state = decision.gpus, "starting"
                active.append(item)
                changed = True
        return changed

    def claim(self, item: db.Item, gpus: list[int]) -> bool:
        """queued -> starting in one transaction, then the launcher; False when the item left
        the queue meanwhile (``queue rm``)."""
        here = item.device == "cuda" and item.scheduler != "slurm"  # GPUs of this machine
        with db.transaction(self.conn):
            claimed = db.update_item(
                self.conn, item.id, where_state="queued", state="starting", started_at=time.time(),
                assigned=gpus if here else None, launches=item.launches + 1, message="",
            )  # fmt: skip
        if not claimed:
            return False
        result_path(item.id).unlink(missing_ok=True)  # a retried launch's old answer
        env = dict(os.environ)
        env[MARKER] = item.token
        path = env.get("PYTHONPATH", "")  # trainwiz's own modules first, the user's kept
        env["PYTHONPATH"] = f"{PROJECT_ROOT}{os.pathsep}{path}" if path else str(PROJECT_ROOT)
        if here:  # NVML's indexes are the PCI bus order: CUDA's, so told
            env["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, gpus))
        cwd = item.cwd if Path(item.cwd).is_dir() else str(paths.home())
        log = db.queue_dir() / "items" / f"{item.id}.log"
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "ab") as out:
            self.children[item.id] = subproc.spawn(
                [sys.executable, "-m", "backend.queue.launcher", str(item.id)],
                cwd=cwd, env=env, stdout=out, text=False,
            )  # fmt: skip
        where = (
            " through Slurm" if item.scheduler == "slurm" else (f" on GPU {gpus}" if gpus else "")
        )
        say(f"item {item.id}: launching {item.preset_name}{where}")
        return True

    # ---- the loop -----------------------------------------------------------------------
    def tick(self) -> tuple[bool, bool]:
        """One pass: (something changed, something is left to do)."""
        for item_id, proc in list(self.children.items()):
            if proc.poll() is not None:  # reaped: a finished launcher is no zombie
                del self.children[item_id]
        changed = False
        for item in db.items(self.conn):
            if item.state in db.ACTIVE:
                changed |= self.settle(item)
        found = db.items(self.conn)
        if not db.paused(self.conn):
            changed |= self.start_ready(found)
            found = db.items(self.conn)
        changed |= notify_finished_sweeps(self.conn, say)
        active = any(i.state in db.ACTIVE for i in found)
        queued = any(i.state == "queued" for i in found) and not db.paused(self.conn)
        return changed, active or queued

    def fingerprint(self) -> tuple[Any, ...]:
        """What another process changes when there is news: queue.db (its data_version moves
        on another connection's commit) and the active runs' status.json and launch results."""
        marks: list[Any] = [self.conn.execute("PRAGMA data_version").fetchone()[0]]
        for item in db.items(self.conn):
            if item.state not in db.ACTIVE:
                continue
            files = [result_path(item.id)]
            if item.run_id:
                files.append(RunDir(paths.runs_dir() / item.run_id).status_file)
            for path in files:
                try:
                    marks.append(path.stat().st_mtime_ns)
                except OSError:
                    marks.append(None)
        return tuple(marks)

    def run(self) -> None:
        delay = MIN_SLEEP_S
        while True:
            changed, left = self.tick()
            if not left:
                return
            delay = MIN_SLEEP_S if changed else min(delay * 1.6, MAX_SLEEP_S)
            seen = self.fingerprint()
            slept = 0.0
            while slept < delay:  # short naps, each a stat or two: an event cuts the wait
                time.sleep(MIN_SLEEP_S)
                slept += MIN_SLEEP_S
                if self.fingerprint() != seen:
                    delay = MIN_SLEEP_S
                    break


def main() -> int:
    try:
        take_lock()
    except Locked as exc:
        print(f"trainwiz queue: {exc}", file=sys.stderr)
        return 1
    conn = db.connect()
    say(f"scheduler {os.getpid()} started")
    try:
        Scheduler(conn).run()
    finally:
        conn.close()
    say(f"scheduler {os.getpid()} ends: nothing left to start or watch")
    return 0


if __name__ == "__main__":
    sys.exit(main())
