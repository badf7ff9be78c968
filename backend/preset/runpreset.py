"""The preset a run directory records, its own paths read in the directory the run is in now.

preset.yaml holds the preset as launched, placeholders resolved: ``@run/output`` is an absolute
path into the run directory. Every reader of a run's preset (resume, the next attempt's spec,
chat, serve, export) loads it here, so a copied run directory resumes into, and loads from, its
own output folder, never the original's (``backend.runpaths``).
"""

from __future__ import annotations

from pathlib import Path

from backend.preset.loader import load_preset
from backend.preset.schema import Preset
from backend.rundir import PRESET, own_paths, own_record


def run_preset(run_dir: Path, source: str | Path | None = None) -> Preset:
    """The run's preset (``source``: the file its own steps read, preset.secret.yaml when it
    has one; else preset.yaml) with every path into the directory the run was launched in
    moved into ``run_dir``, ``source`` included. The loaded preset itself when nothing moves (a
    run never copied)."""
    # Not checked against this host's files again: the launch did (a CA bundle named relative to
    # where it was planned must not make the run's record unreadable elsewhere).
    ref = own_paths(run_dir)(str(source)) if source else run_dir / PRESET
    preset = load_preset(ref, host_files=False)
    data = preset.model_dump(mode="json", by_alias=True, exclude_unset=True)
    moved = own_record(run_dir, data)
    return preset if moved is data else Preset.model_validate(moved)
