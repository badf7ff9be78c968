"""Runs: the run directory, the detached runners (host process, Docker container), stop, follow.

The wizard process only writes files and starts a watcher (``backend.runs.watch``); the watcher,
not the wizard, is the parent of the training, so a run outlives the wizard and the SSH session.
"""

from backend.rundir import FINAL_STATES, RunStatus, read_status
from backend.runs.control import find_run, follow_log, list_runs, refresh, stop_run, wait_for
from backend.runs.launch import LaunchResult, launch

__all__ = [
    "FINAL_STATES",
    "LaunchResult",
    "RunStatus",
    "find_run",
    "follow_log",
    "launch",
    "list_runs",
    "read_status",
    "refresh",
    "stop_run",
    "wait_for",
]
