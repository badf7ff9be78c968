"""Apply a fix to a preset and show the difference, so nothing changes without review."""

from __future__ import annotations

import difflib
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError

from backend.diagnosis.model import Fix
from backend.errors import BadInput
from backend.i18n import _
from backend.paths import PRESET
from backend.preset.loader import preset_to_yaml
from backend.preset.schema import Preset as PresetModel

if TYPE_CHECKING:
    from backend.preset.schema import Preset


def _set_path(data: dict[str, Any], path: str, value: Any) -> None:
    keys = path.split(".")
    node = data
    for key in keys[:-1]:
        child = node.get(key)
        if not isinstance(child, dict):
            child = node[key] = {}
        node = child
    node[keys[-1]] = value


def apply_fixes(preset: Preset, fix: Fix) -> Preset:
    """A new preset with the fix's changes, validated like a loaded one."""
    data = preset.model_dump(mode="json", exclude_unset=True)
    for change in fix.changes:
        _set_path(data, change.path, change.value)
    try:
        return PresetModel.model_validate(data)
    except ValidationError as exc:
        problems = [f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()]
        raise BadInput(
            [
                _("fix '{title}' makes an invalid preset: {problem}").format(
                    title=fix.title, problem=p
                )
                for p in problems
            ]
        ) from exc


def preset_diff(old: Preset, new: Preset) -> list[str]:
    """Unified diff of the two presets' YAML, for review before applying."""
    return list(
        difflib.unified_diff(
            preset_to_yaml(old).splitlines(),
            preset_to_yaml(new).splitlines(),
            PRESET,
            f"{PRESET} (fixed)",
            lineterm="",
        )
    )
