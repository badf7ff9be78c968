"""Where trainwiz keeps its state: runs, caches, built environments.

``TRAINWIZ_HOME`` wins (tests point it at a temp dir); otherwise ``$XDG_STATE_HOME/trainwiz``,
falling back to ``~/.local/state/trainwiz`` as the XDG spec says.
"""

from __future__ import annotations

import os
from pathlib import Path

# The files of a run directory (backend/rundir.py reads and writes them).
STATUS = "status.json"
PLAN = "plan.json"  # the plan of the launch spec, as `trainwiz plan --json` prints it
PRESET = "preset.yaml"
LOG = "train.log"
METRICS = "metrics.jsonl"
LAUNCH = "launch.json"  # what the watcher executes (the launch spec), no secrets
STOP_REQUEST = "stop_requested"  # created by `trainwiz stop` so the watcher records "stopped"
ATTEMPTS = "attempts.json"  # every start of the training (backend/runs/resume.py)
NODES = "nodes"  # a multi-node run's per-node logs (node<i>-<host>.log) and GPU samples


def attempt_launch(attempt: int) -> str:
    """The launch spec a later attempt ran (launch.json is always the latest one)."""
    return f"launch.{attempt}.json"


def home() -> Path:
    """The trainwiz state directory (not created here: callers create what they write)."""
    explicit = os.environ.get("TRAINWIZ_HOME")
    if explicit:
        return Path(explicit).expanduser()
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state).expanduser() / "trainwiz"


def runs_dir() -> Path:
    return home() / "runs"


def cache_dir() -> Path:
    return home() / "cache"


def models_dir() -> Path:
    """Default place for models trainwiz creates or downloads when a preset names no directory."""
    return home() / "models"


def envs_dir() -> Path:
    """Host training environments (venvs) built by the Images/Environment step."""
    return home() / "envs"
