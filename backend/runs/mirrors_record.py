"""mirrors.json in a run directory: which mirror each download used, and every probe's timing.

The same record travels inside the run's preset.yaml (``mirrors.resolved``); the separate file
is for people and scripts that want it without parsing the preset (docs/run-format.md).
"""

from __future__ import annotations

from pathlib import Path

from backend.preset.schema import Preset
from backend.rundir import write_json

MIRRORS = "mirrors.json"


def write_mirrors_json(run_dir: Path, preset: Preset) -> Path | None:
    """Write ``run_dir/mirrors.json`` for a resolved preset; nothing for ``mirrors: none``."""
    if preset.mirrors.resolved is None:
        return None
    target = run_dir / MIRRORS
    write_json(target, preset.mirrors.resolved)
    return target
