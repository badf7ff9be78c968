"""Recognise known training failures in logs, explain them, and turn them into preset changes.

Stable API (the monitor, launch and images steps use it)::

    classify_line(line) -> LineFlag | None
    diagnose_file(path, cancel=None, progress=None, preset=None) -> Diagnosis
    diagnose_text(text, preset=None) -> Diagnosis
    apply_fixes(preset, fix) -> Preset        # a new, validated preset
    preset_diff(old, new) -> list[str]        # unified diff of the YAML
"""

from backend.diagnosis.apply import apply_fixes, preset_diff
from backend.diagnosis.classifier import (
    classify_line,
    classify_lines,
    diagnose_file,
    diagnose_stream,
    diagnose_text,
)
from backend.diagnosis.model import Diagnosis, Finding, Fix, LineFlag, PresetChange

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
]
