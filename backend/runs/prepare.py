"""Steps the watcher runs before training when their result is missing: model, environment image.

``python -m backend.runs.prepare model|environment PRESET_YAML`` calls the same backend the
wizard's Model and Images steps call (``ensure_model``, ``ensure_env_image``), printing progress
as plain lines into the run's train.log. The preset is the run's resolved ``preset.yaml``.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from backend.diagnosis.build_log import ensure_env_image
from backend.errors import TrainwizError
from backend.model.fetch import ensure_model
from backend.preset.loader import load_preset


def _model(preset_path: str) -> int:
    preset = load_preset(preset_path, host_files=False)  # the run's own record: launch checked it
    last = [0.0]

    def progress(event: Any) -> None:
        now = time.monotonic()
        if now - last[0] >= 5:  # a line every few seconds is enough for a log file
            last[0] = now
            print(f"model: {event.bytes}/{event.total} bytes, file {event.file}", flush=True)

    result = ensure_model(preset.model, progress=progress)
    print(f"model: {result.action} {result.dir}", flush=True)
    if not result.report.ok:
        print("model: does not validate: " + "; ".join(result.report.problems), flush=True)
        return 1
    return 0


def _environment(preset_path: str) -> int:
    preset = load_preset(preset_path, host_files=False)

    def progress(event: Any) -> None:
        text = getattr(event, "text", None)
        if text:
            print(text, flush=True)

    tag = ensure_env_image(preset, progress=progress)
    print(f"environment image: {tag}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 2 or args[0] not in ("model", "environment"):
        print(
            "usage: python -m backend.runs.prepare model|environment PRESET_YAML", file=sys.stderr
        )
        return 2
    try:
        return _model(args[1]) if args[0] == "model" else _environment(args[1])
    except TrainwizError as exc:
        print(f"{args[0]}: {exc}", flush=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
