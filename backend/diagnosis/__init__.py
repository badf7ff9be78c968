"""Recognise known training failures in logs, explain them, and turn them into preset changes.

Stable API (the monitor, launch and images steps use it)::

    classify_line(line) -> LineFlag | None
    diagnose_file(path, cancel=None, progress=None, preset=None) -> Diagnosis
    diagnose_text(text, preset=None) -> Diagnosis
    apply_fixes(preset, fix) -> Preset        # a new, validated preset
    preset_diff(old, new) -> list[str]        # unified diff of the YAML
"""

from typing import TYPE_CHECKING, Any

from backend.diagnosis.classifier import (
    classify_line,
    classify_lines,
    diagnose_stream,
    diagnose_text,
    sort_findings,
)
from backend.diagnosis.files import diagnose_file
from backend.diagnosis.model import Diagnosis, Finding, Fix, LineFlag, PresetChange

if TYPE_CHECKING:
    from backend.diagnosis.apply import apply_fixes, preset_diff


def __getattr__(name: str) -> Any:
    """``apply_fixes``/``preset_diff`` need pydantic and the preset schema: imported on first
    use, so that reading a log (``trainwiz diagnose FILE``) starts without them."""
    if name in ("apply_fixes", "preset_diff"):
        from backend.diagnosis import apply  # deferred: `diagnose FILE` skips pydantic

        return getattr(apply, name)
    raise AttributeError(name)


__all__ = [
    "Diagnosis",
    "Finding",
    "Fix",
    "LineFlag",
    "PresetChange",
    "apply_fixes",
    "classify_line",
    "classify_lines",
    "diagnose_file",
    "diagnose_stream",
    "diagnose_text",
    "preset_diff",
    "sort_findings",
]
