"""A preset made safe to save or show (secrets hidden), and the 0600 copy a run's own steps read.

Above ``backend.redact`` (the rules) and beside the loader: saving a preset needs both.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from backend.errors import TrainwizError
from backend.i18n import _
from backend.preset.loader import preset_to_yaml
from backend.preset.schema import Preset
from backend.redact import redact_data
from backend.rundir import PRESET


def redact_preset(preset: Any) -> Any:
    """A copy of the preset safe to save beside a run or show: same fields set, secrets hidden."""
    data = preset.model_dump(mode="json", by_alias=True, exclude_unset=True)
    try:
        return Preset.model_validate(redact_data(data))
    except ValidationError as exc:  # a redacted value no longer validates: never save it clear
        raise TrainwizError(
            _("cannot redact the preset's secrets for saving: {exc}").format(exc=exc)
        ) from exc


SECRET_PRESET = "preset.secret.yaml"


def write_secret_preset(run_dir: Any, preset: Any) -> Any:
    """The preset file a run's own steps read: ``preset.yaml`` when redaction hides nothing,
    else the unredacted ``preset.secret.yaml``, created 0600 (never readable by others)."""
    run_dir = Path(run_dir)
    text = preset_to_yaml(preset)
    if text == preset_to_yaml(redact_preset(preset)):
        return run_dir / PRESET
    target = run_dir / SECRET_PRESET
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(text)
    return target
