"""TensorBoard for the entry: event files in the run directory, or a clear line why not.

A sibling of ``train_entry.py`` (imported there as ``tbreport``; not named ``tensorboard`` so it
never shadows the real package). With ``report_to: tensorboard`` the Trainer's own
TensorBoardCallback writes the events; this only points ``logging_dir`` at
``<run_dir>/tensorboard`` (next to metrics.jsonl, so ``tensorboard --logdir RUN_DIR`` finds every
attempt of a run) and drops the reporter when neither tensorboard nor tensorboardX is installed,
because the Trainer would otherwise refuse to start a training over a missing chart.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any


def tensorboard_available() -> bool:
    return any(importlib.util.find_spec(name) for name in ("tensorboard", "tensorboardX"))


def configure(training_args: Any, metrics_path: str | None, log: Any) -> str | None:
    """Returns the event folder, or None when TensorBoard is not reported to."""
    report = list(getattr(training_args, "report_to", None) or [])
    if "tensorboard" not in report and "all" not in report:
        return None
    if not tensorboard_available():
        training_args.report_to = [r for r in report if r not in ("tensorboard", "all")]
        log(
            "report_to tensorboard: neither tensorboard nor tensorboardX is installed; not reported"
        )
        return None
    if metrics_path:
        training_args.logging_dir = os.path.join(os.path.dirname(metrics_path), "tensorboard")
    return str(training_args.logging_dir)
