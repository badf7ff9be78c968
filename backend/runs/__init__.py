"""Runs: the run directory, the detached runners (host process, Docker container), stop, follow.

The wizard process only writes files and starts a watcher (``backend.runs.watch``); the watcher,
not the wizard, is the parent of the training, so a run outlives the wizard and the SSH session.

Each name loads its module on first use, and the launcher is imported from its own module
(``backend.runs.launch``): listing or stopping runs imports neither it nor the planner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from backend.lazyattrs import lazy_getattr

if TYPE_CHECKING:
    from backend.rundir import FINAL_STATES, RunStatus, read_status
    from backend.runs.control import find_run, follow_log, list_runs, refresh, stop_run, wait_for

__all__ = [
    "FINAL_STATES",
    "RunStatus",
    "find_run",
    "follow_log",
    "list_runs",
    "read_status",
    "refresh",
    "stop_run",
    "wait_for",
]

# Which module defines each name: the package imports it on first use (PEP 562).
_WHERE = {
    "FINAL_STATES": "backend.rundir",
    "RunStatus": "backend.rundir",
    "read_status": "backend.rundir",
    "find_run": "backend.runs.control",
    "follow_log": "backend.runs.control",
    "list_runs": "backend.runs.control",
    "refresh": "backend.runs.control",
    "stop_run": "backend.runs.control",
    "wait_for": "backend.runs.control",
}


__getattr__ = lazy_getattr(__name__, _WHERE)
