"""What the monitor needs from a run directory (layout in docs/run-format.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backend.errors import BadInput
from backend.i18n import _
from backend.rundir import LOG, METRICS, STATUS, RunDir


@dataclass(frozen=True)
class RunFiles:
    """The monitor's view of a run: ``RunDir``'s paths, a status that may be mid-write."""

    run_dir: Path

    @property
    def dir(self) -> RunDir:
        return RunDir(self.run_dir)

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    @property
    def log(self) -> Path:
        return self.dir.log

    @property
    def metrics(self) -> Path:
        return self.dir.metrics

    @property
    def status_path(self) -> Path:
        return self.dir.status_file

    def status(self) -> dict[str, Any] | None:
        """status.json, or None while it is missing or mid-replace (written atomically)."""
        return self.dir.status_dict()

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
    if not any((path / name).exists() for name in (LOG, METRICS, STATUS)):
        raise BadInput(
            _("run: {path} has no train.log, metrics.jsonl or status.json").format(path=path)
        )
    return RunFiles(path)
