"""Resolve a preset's placeholders (``@home``, ``@sample``, ``@run``) into real paths.

Done on a copy when the preset is used, never when it is saved, so one preset file serves every
machine. At a launch, ``notify.ca_file`` is made absolute too (the watcher reads it elsewhere). Without a run directory (``trainwiz plan``), ``@run`` is shown as ``<run_dir>``.
"""

from __future__ import annotations

import os
from pathlib import Path

from backend.model.placeholders import resolve_placeholders
from backend.preset.schema import Preset

_PATH_FIELDS = {
    "model": ("dir",),
    "training": ("model_name_or_path", "data_path", "eval_data_path", "output_dir", "cache_dir"),
}


def _resolve(value: str, run_dir: Path | None) -> str:
    if run_dir is None and (value == "@run" or value.startswith("@run/")):
        return "<run_dir>" + value[len("@run") :]
    return resolve_placeholders(value, run_dir)


def resolve_preset(preset: Preset, run_dir: Path | None) -> Preset:
    """A copy of ``preset`` with placeholders replaced; fields-set bookkeeping is kept."""
    updates: dict[str, object] = {}
    for section, names in _PATH_FIELDS.items():
        sub = getattr(preset, section)
        changed = {
            name: _resolve(getattr(sub, name), run_dir)
            for name in names
            if isinstance(getattr(sub, name), str)
        }
        changed = {k: v for k, v in changed.items() if v != getattr(sub, k)}
        if changed:
            new_sub = sub.model_copy(update=changed)
            # model_copy(update=) does not validate; keep fields_set as it was.
            object.__setattr__(new_sub, "__pydantic_fields_set__", set(sub.model_fields_set))
            updates[section] = new_sub
    if preset.environment.venv:
        env = preset.environment.model_copy(
            update={"venv": _resolve(preset.environment.venv, run_dir)}
        )
        object.__setattr__(env, "__pydantic_fields_set__", set(preset.environment.model_fields_set))
        updates["environment"] = env
    ca_file = preset.notify.ca_file
    if ca_file and run_dir is not None:
        # Read by the watcher when the run ends, from another working directory: a bundle named
        # relative to where the run was launched is recorded as the file it named then.
        absolute = os.path.abspath(os.path.expanduser(_resolve(ca_file, run_dir)))
        if absolute != ca_file:
            notify = preset.notify.model_copy(update={"ca_file": absolute})
            object.__setattr__(
                notify, "__pydantic_fields_set__", set(preset.notify.model_fields_set)
            )
            updates["notify"] = notify
    volumes = [
        v.model_copy(update={"host": _resolve(v.host, run_dir)}) for v in preset.container.volumes
    ]
    if any(a.host != b.host for a, b in zip(volumes, preset.container.volumes)):
        container = preset.container.model_copy(update={"volumes": volumes})
        object.__setattr__(
            container, "__pydantic_fields_set__", set(preset.container.model_fields_set)
        )
        updates["container"] = container
    if not updates:
        return preset
    out = preset.model_copy(update=updates)
    object.__setattr__(out, "__pydantic_fields_set__", set(preset.model_fields_set))
    return out
