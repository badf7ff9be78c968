"""The one answer to "is the model ready?", used by the step table, launch and replay.

Ready means training can load it: a tiny model made from exactly the preset's spec, or a
directory with a config.json that validates with no problems. Launch, replay and the Model
step used to answer this three ways (config.json exists / full validation / the screen's own
report) and disagreed; they all call ``model_ready`` now.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from backend.errors import BadInput
from backend.model.fetch import model_dir
from backend.model.tiny import tiny_is_current
from backend.model.validate import validate_model_dir
from backend.preset.schema import Preset


@dataclass(frozen=True)
class ModelReadiness:
    ready: bool
    path: Path | None
    reason: str


def model_ready(preset: Preset) -> ModelReadiness:
    """Whether the preset's model is there and usable, and in words why not."""
    source = preset.model
    try:
        target = model_dir(source)
    except BadInput as exc:  # a placeholder that only a run can resolve
        return ModelReadiness(False, None, str(exc))
    if source.source == "tiny" and source.tiny is not None:
        if tiny_is_current(target, source.tiny):
            return ModelReadiness(True, target, f"tiny model at {target} matches the preset")
        return ModelReadiness(False, target, f"no tiny model made from this spec at {target}")
    if not target.is_dir():
        return ModelReadiness(False, target, f"{target} does not exist yet")
    if not (target / "config.json").is_file():
        return ModelReadiness(False, target, f"{target} has no config.json")

    try:
        report = validate_model_dir(target)
    except BadInput as exc:
        return ModelReadiness(False, target, str(exc))
    if report.problems:
        return ModelReadiness(False, target, f"{target}: " + "; ".join(report.problems[:3]))
    return ModelReadiness(True, target, f"model valid at {target}")
