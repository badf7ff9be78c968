"""What the monitor needs from a run directory (layout in docs/run-format.md)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.errors import BadInput
from backend.i18n import _


@dataclass(frozen=True)
class RunFiles:
    run_dir: Path

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def log(self) -> Path:
        return self.run_dir / "train.log"

    @property
    def metrics(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    @property
    def status_path(self) -> Path:
        return self.run_dir / "status.json"

    def status(self) -> dict[str, Any] | None:
        """status.json, or None while it is missing or mid-replace (written atomically)."""
        try:
            data = json.loads(self.status_path.read_text(encoding="utf-8"))
        except (OSError, ValueError):  # ValueError: bad JSON or bytes that are not UTF-8
            return None
        return data if isinstance(data, dict) else None

    def has_metrics(self) -> bool:
        return self.metrics.exists()


def open_run(run_dir: Path | str) -> RunFiles:
    path = Path(run_dir).expanduser()
    if not path.is_dir():
        raise BadInput(
            _("run: {path} is not a run directory (expected $TRAINWIZ_HOME/runs/<id>)").format(
                path=path
            )
        )
    if (
        not (path / "train.log").exists()
        and not (path / "metrics.jsonl").exists()
        and not (path / "status.json").exists()
    ):
        raise BadInput(
            _("run: {path} has no train.log, metrics.jsonl or status.json").format(path=path)
        )
    return RunFiles(path)
